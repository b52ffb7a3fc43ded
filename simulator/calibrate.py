"""Calibration: microbenchmarks of this machine, fitted into a :class:`~simulator.profile.Profile`.

Every op family is timed on several shapes with the op patterns the engine uses, then fitted by
non-negative least squares to

.. math::
    t = o + \\frac{w}{r} + \\frac{v}{r_{row}}

(``w`` the family's work, ``v`` its dense-output row*feature work); the backward ratio is the median
of backward over forward time on the same shapes; the parallel efficiency comes from the largest shape
timed with one thread and with all cores, :math:`\\eta = (t_1 / t_C - 1) / (C - 1)`; the efficiency of
co-located single-thread processes (``share_eff``) comes from running a representative op of each family in
one and in ``C`` concurrent processes (:mod:`simulator.sharebench`). The network is
two local gloo processes: ping-pong of several sizes fitted to :math:`\\alpha + b / B`, and a stream of
back-to-back small messages giving the per-message channel time ``g`` (so ``L = alpha - g``).
Last, short single-worker epochs of the real engine on calibration graphs of several sizes give
``compute_scale_curve``, the factor by which whole epochs run slower than their microbenchmarked ops, as a
power law of the worker's predicted peak memory (:func:`bench_engine`, :func:`fit_scale_curve`).
"""

from __future__ import annotations

import ctypes
import datetime
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from simulator.profile import Link, OpCost, Profile

if TYPE_CHECKING:
    import pandas as pd

Printer = Callable[[str], None]


@dataclass
class Calibration:
    """Settings of one calibration run.

    Args:
        quick: small shapes and few repeats (< 20 s), for tests and smoke runs.
        network: run the two-process gloo benchmark.
        fused: time the fused GAT kernels when ``kernels`` provides them.
        threads: thread count for the "all cores" measurement (default: usable cores).
        seed: random graphs' seed.
        quiet_tries: runs of a timing step at most, while other processes keep using the cores during it
            (see :func:`quiet_step`); 1 = no retry.
        quiet_wait_s: seconds to wait for an idle machine before each try.
        engine: fit :attr:`Profile.compute_scale` from real engine epochs (:func:`bench_engine`).
        scale_key: what the fitted curve is keyed by (:attr:`Profile.compute_scale_key`): ``"peak"`` (the
            default) or ``"activation"``.
        share_rounds: alternating solo / co-located rounds of :func:`bench_share` (median taken).
        thread_rounds: alternating one-thread / all-core rounds of each op's thread efficiency (median taken).
        log: progress printer.
    """

    quick: bool = False
    network: bool = True
    fused: bool = True
    threads: int | None = None
    seed: int = 0
    quiet_tries: int = 3
    quiet_wait_s: float = 120.0
    engine: bool = True
    scale_key: str = "peak"
    share_rounds: int = 3
    thread_rounds: int = 5
    log: Printer = print
    notes: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def repeats(self) -> int:
        return 3 if self.quick else 5


def usable_cores() -> int:
    """Cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def time_call(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> float:
    """Median time of ``fn()`` over ``repeats`` runs after ``warmup`` runs.

    With one intra-op thread (how every op family is timed) the time is the calling thread's CPU time,
    kernel time included (page faults): on a shared machine other tenants that time-slice the core stretch
    the wall clock but not the op's own cost. With more threads it is the wall time (the best of the runs,
    which other tenants can only lengthen).
    """
    single = torch.get_num_threads() == 1
    clock = time.thread_time if single else time.perf_counter
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return statistics.median(times) if single else min(times)


def fit_nonnegative(features: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """Non-negative least squares of ``seconds ~ features @ coef``, in relative error.

    Rows are weighted by ``1/seconds`` so small and large shapes count alike.
    """
    from scipy.optimize import nnls

    w = 1.0 / np.maximum(seconds, 1e-9)
    coef, _ = nnls(features * w[:, None], seconds * w)
    return coef


def _rate(coef: float, fallback: float) -> float:
    """Units per second from a fitted seconds-per-unit coefficient."""
    return 1.0 / coef if coef > 0 else fallback


def random_csr(num_dst: int, num_src: int, degree: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A random CSR (rowptr, col) with ``degree`` in-edges per destination, sources uniform."""
    col = torch.randint(0, num_src, (num_dst * degree,), generator=gen)
    col = col.view(num_dst, degree).sort(dim=1).values.reshape(-1)
    rowptr = torch.arange(0, num_dst * degree + 1, degree, dtype=torch.long)
    return rowptr, col


def _set_threads(n: int) -> None:
    torch.set_num_threads(max(1, n))


# ------------------------------------------------------------------------------------------- ops
def bench_gemm(cal: Calibration, cores: int) -> OpCost:
    """Dense ``x @ W`` over several shapes: FLOP/s and per-call overhead."""
    shapes = (
        [(2000, 64, 64), (4000, 128, 64), (2000, 256, 256), (500, 32, 32)]
        if cal.quick
        else [
            (4000, 64, 64),
            (10000, 128, 128),
            (5000, 256, 256),
            (20000, 100, 256),
            (50000, 256, 256),
            (1000, 32, 32),
            (200, 16, 16),
        ]
    )
    rows, secs = [], []
    for n, k, m in shapes:
        a, w = torch.randn(n, k), torch.randn(k, m)
        t = time_call(lambda a=a, w=w: a @ w, cal.repeats)
        rows.append([1.0, 2.0 * n * k * m])
        secs.append(t)
    coef = fit_nonnegative(np.array(rows), np.array(secs))
    n, k, m = max(shapes, key=lambda s: s[0] * s[1] * s[2])
    a, w = torch.randn(n, k), torch.randn(k, m)
    eff = _parallel_eff(cal, cores, lambda: a @ w, "gemm")
    cal.raw["gemm"] = {"shapes": shapes, "seconds": secs}
    return OpCost(rate=_rate(coef[1], 1e10), overhead_s=float(coef[0]), bwd_ratio=1.0, parallel_eff=eff)


def thread_eta(one: float, all_cores: float, cores: int) -> float:
    """Efficiency of each extra thread from one-thread and all-core times of the same call (unclipped)."""
    return (one / max(all_cores, 1e-12) - 1.0) / (cores - 1)


def _parallel_eff(cal: Calibration, cores: int, fn: Callable[[], Any], name: str) -> float:
    """:math:`\\eta` of ``fn``: the median over :attr:`Calibration.thread_rounds` alternating one-thread /
    all-core rounds, so that the VM's speed swings (2-thread GEMM speedups of 1.2-1.95x seconds apart here)
    do not decide it from a single pair of timings; clipped to [0, 1]."""
    if cores <= 1:
        return 1.0
    etas = []
    for _ in range(1 if cal.quick else cal.thread_rounds):
        one = time_call(fn, cal.repeats)
        _set_threads(cores)
        try:
            etas.append(thread_eta(one, time_call(fn, cal.repeats), cores))
        finally:
            _set_threads(1)
    cal.raw.setdefault("thread_eta_rounds", {})[name] = etas
    return float(np.clip(statistics.median(etas), 0.0, 1.0))


def _sparse_shapes(cal: Calibration, scale: float = 1.0) -> list[tuple[int, int, int]]:
    """(nodes, degree, features) shapes: varied degree at fixed rows and varied rows, to separate the
    per-edge and per-row terms, plus a tiny shape that pins the per-call overhead. ``scale`` shrinks
    the row counts for slow families."""
    if cal.quick:
        shapes = [(4000, 2, 32), (4000, 16, 32), (12000, 4, 16), (2000, 32, 64)]
    else:  # source matrices of 2-8 MB (cache-resident); :func:`bench_spmm` adds a sweep past the cache
        shapes = [
            (20000, 2, 64),
            (20000, 10, 64),
            (20000, 40, 64),
            (60000, 4, 32),
            (8000, 16, 256),
            (16000, 64, 64),
        ]
    return [(max(64, int(n * scale)), d, f) for n, d, f in shapes] + [(64, 2, 8)]


def _cache_sweep(cal: Calibration) -> list[tuple[int, int, int]]:
    """Shapes whose gathered matrix grows from 16 MB to 1 GB (256 features, degree 8)."""
    if cal.quick:
        return []
    return [(16000, 8, 256), (64000, 8, 256), (256000, 8, 256), (1000000, 8, 256)]


def fit_cache(work: list[float], edge_s: list[float], gathered: list[float], rate: float) -> tuple[float, float]:
    """Last-level cache ``L`` and out-of-cache rate ``r_mem`` from the edge time of shapes of growing size.

    Each shape's edge work ``w`` (its time less the overhead and row terms) is modelled as
    :math:`w (h / r + (1 - h) / r_{mem})` with :math:`h = \\min(1, L / G)` for a gathered matrix of ``G``
    bytes; ``L`` is searched on a geometric grid (1 MB - 4 GB), ``1/r_mem`` fitted by least squares in
    relative error for each. Returns ``(L, r_mem)``; ``(0, rate)`` when nothing runs slower than ``r``.
    """
    w, t, g = np.asarray(work, float), np.asarray(edge_s, float), np.asarray(gathered, float)
    best = (np.inf, 0.0, rate)
    for llc in np.geomspace(1e6, 4e9, 97):
        miss = 1.0 - np.minimum(1.0, llc / g)
        if not np.any(miss > 0):
            continue
        # t / w - 1/r = miss * (1/r_mem - 1/r), relative weights 1 / t
        a, y, wt = miss * w, t - w / rate, 1.0 / t
        excess = float(np.sum(wt**2 * a * y) / max(np.sum(wt**2 * a * a), 1e-30))
        inv_mem = max(1.0 / rate + excess, 1.0 / rate)
        pred = w * ((1.0 - miss) / rate + miss * inv_mem)
        err = float(np.sum(((pred - t) / t) ** 2))
        if err < best[0]:
            best = (err, float(llc), 1.0 / inv_mem)
    _, llc, mem_rate = best
    return (llc, mem_rate) if mem_rate < rate * 0.99 else (0.0, rate)


def _fit_sparse(
    rows: list[list[float]], fwd: list[float], bwd: list[float], fallback_rate: float
) -> tuple[float, float, float | None, float]:
    coef = fit_nonnegative(np.array(rows), np.array(fwd))
    row_rate = 1.0 / coef[2] if coef[2] > 0 else None
    ratio = statistics.median(b / f for b, f in zip(bwd, fwd, strict=True)) if bwd else 2.0
    return _rate(coef[1], fallback_rate), float(coef[0]), row_rate, float(ratio)


def bench_spmm(cal: Calibration, cores: int, gen: torch.Generator) -> OpCost:
    """Sum aggregation of one shard as the engine runs it: ``state.addmm_(A, X)`` with a CSR ``A``, in place
    into a running state whose pages are already touched (the state's zero fill is priced apart,
    :meth:`simulator.layers.LayerPlan.agg_init`); backward ``A^T G`` the same way (the ring modes' local
    shard). The engine's other backward calls return ``A^T G`` as a fresh result (send buffers, oneshot):
    what that costs beyond the in-place product, per output byte, is ``fresh_rate`` (median over the
    shapes with outputs of 1M+ elements)."""
    rows, fwd, bwd, fresh = [], [], [], []
    last = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sparse CSR support is in beta
        for n, deg, f in _sparse_shapes(cal):
            rowptr, col = random_csr(n, n, deg, gen)
            vals = torch.ones(col.numel())
            a = torch.sparse_csr_tensor(rowptr, col, vals, size=(n, n))
            at = a.t().to_sparse_csr()
            x, state, grad = torch.randn(n, f), torch.zeros(n, f), torch.zeros(n, f)
            tf = time_call(lambda a=a, x=x, s=state: s.addmm_(a, x), cal.repeats)
            tb = time_call(lambda at=at, x=x, g=grad: g.addmm_(at, x), cal.repeats)
            if n * f >= (100_000 if cal.quick else 1_000_000):
                out_of_place = time_call(lambda at=at, x=x: at @ x, cal.repeats)
                fresh.append(n * f * 4 / max(out_of_place - tb, 1e-9))
            rows.append([1.0, n * deg * f, n * f])
            fwd.append(tf)
            bwd.append(tb)
            if last is None or tf > last[0]:  # the slowest shape measures the thread efficiency
                last = (tf, (a, x, state))
        a, x, state = last[1]
        eff = _parallel_eff(cal, cores, lambda: state.addmm_(a, x), "spmm")
        rate, overhead, row_rate, ratio = _fit_sparse(rows, fwd, bwd, 1e9)
        # past the cache: the same product on growing matrices; what the in-cache fit leaves unexplained
        # is the cost of gathering rows from memory
        work, edge_s, gathered = [], [], []
        for n, deg, f in _cache_sweep(cal):
            rowptr, col = random_csr(n, n, deg, gen)
            big = torch.sparse_csr_tensor(rowptr, col, torch.ones(col.numel()), size=(n, n))
            src, acc = torch.randn(n, f), torch.zeros(n, f)
            t = time_call(lambda m=big, x=src, s=acc: s.addmm_(m, x), 2)
            work.append(float(n * deg * f))
            edge_s.append(max(t - overhead - (n * f / row_rate if row_rate else 0.0), 1e-9))
            gathered.append(float(n * f * 4))
            del big, src, acc
    llc, mem_rate = fit_cache(work, edge_s, gathered, rate) if work else (0.0, rate)
    cal.raw["spmm"] = {"shapes": _sparse_shapes(cal), "fwd": fwd, "bwd": bwd, "fresh_Bps": fresh,
                       "cache_sweep": {"shapes": _cache_sweep(cal), "edge_s": edge_s, "gathered_bytes": gathered}}
    cal.raw["llc_bytes"] = llc
    return OpCost(rate=rate, overhead_s=overhead, bwd_ratio=ratio, parallel_eff=eff, row_rate=row_rate,
                  mem_rate=mem_rate if llc > 0 else None,
                  fresh_rate=float(statistics.median(fresh)) if fresh else None)


def _max_forward(
    x: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, best: torch.Tensor, count: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One shard of a streamed max: gather, scatter amax, count ties, merge into (best, count)."""
    msg = x[src]
    index = dst.view(-1, 1).expand_as(msg)
    shard_max = torch.full_like(best, -torch.inf).scatter_reduce(0, index, msg, "amax")
    ties = torch.zeros_like(count).index_add_(0, dst, (msg == shard_max[dst]).to(count.dtype))
    new = torch.maximum(best, shard_max)
    count = torch.where(best == new, count, 0) + torch.where(shard_max == new, ties, 0)
    return new, count


def _max_backward(
    x: torch.Tensor,
    src: torch.Tensor,
    dst: torch.Tensor,
    best: torch.Tensor,
    count: torch.Tensor,
    grad: torch.Tensor,
) -> torch.Tensor:
    """One shard's max-aggregation VJP rebuilt from its rows and the final (best, count)."""
    with torch.enable_grad():
        leaf = x.detach().requires_grad_(True)
        msg = leaf[src]
        hit = (msg.detach() == best[dst]) & (count[dst] > 0)
        weight = hit.to(msg.dtype) / count[dst].clamp(min=1)
        acc = torch.zeros_like(best).index_add(0, dst, msg * weight)
        (g,) = torch.autograd.grad(acc, leaf, grad)
    return g


def bench_max(cal: Calibration, cores: int, gen: torch.Generator) -> OpCost:
    """Max aggregation of one shard (gather + scatter_reduce amax + tie counts) and its rebuilt VJP."""
    rows, fwd, bwd = [], [], []
    last = None
    shapes = _sparse_shapes(cal, scale=0.4)
    for n, deg, f in shapes:
        rowptr, col = random_csr(n, n, deg, gen)
        dst = torch.repeat_interleave(torch.arange(n), deg)
        x = torch.randn(n, f)
        best, count = torch.full((n, f), -torch.inf), torch.zeros(n, f)
        tf = time_call(lambda x=x, c=col, d=dst, b=best, k=count: _max_forward(x, c, d, b, k), cal.repeats)
        fb, fc = _max_forward(x, col, dst, best, count)
        g = torch.randn(n, f)
        tb = time_call(lambda x=x, c=col, d=dst, b=fb, k=fc, g=g: _max_backward(x, c, d, b, k, g), cal.repeats)
        rows.append([1.0, n * deg * f, n * f])
        fwd.append(tf)
        bwd.append(tb)
        if last is None or tf > last[0]:
            last = (tf, (x, col, dst, best, count))
    x, col, dst, best, count = last[1]
    eff = _parallel_eff(cal, cores, lambda: _max_forward(x, col, dst, best, count), "max_aggr")
    rate, overhead, row_rate, ratio = _fit_sparse(rows, fwd, bwd, 1e8)
    cal.raw["max_aggr"] = {"shapes": shapes, "fwd": fwd, "bwd": bwd}
    return OpCost(rate=rate, overhead_s=overhead, bwd_ratio=ratio, parallel_eff=eff, row_rate=row_rate)


def _gat_shapes(cal: Calibration) -> list[tuple[int, int, int, int]]:
    """(nodes, degree, heads, channels)."""
    tiny = [(64, 2, 1, 8)]  # pins the per-call overhead
    if cal.quick:
        return [(2000, 4, 2, 16), (2000, 16, 2, 16), (6000, 4, 1, 16)] + tiny
    shapes = [(20000, 4, 4, 32), (20000, 16, 4, 32), (40000, 8, 1, 32), (10000, 32, 2, 32), (40000, 2, 4, 16)]
    return shapes + tiny


def _gat_inputs(n: int, deg: int, heads: int, ch: int, gen: torch.Generator, grad: bool) -> tuple:
    rowptr, col = random_csr(n, n, deg, gen)
    z = torch.randn(n, heads, ch, generator=gen).requires_grad_(grad)
    s_src = torch.randn(n, heads, generator=gen).requires_grad_(grad)
    s_dst = torch.randn(n, heads, generator=gen).requires_grad_(grad)
    return rowptr, col, s_dst, s_src, z


def _gat_autograd_shard(
    dst: torch.Tensor, col: torch.Tensor, s_dst: torch.Tensor, s_src: torch.Tensor, z: torch.Tensor
) -> torch.Tensor:
    """One shard of unfused GAT under autograd, as the engine's ``_accumulate_autograd`` runs it (online
    softmax: running max, rescaled normaliser and numerator), from an empty state."""
    n, heads, ch = s_dst.shape[0], s_dst.shape[1], z.shape[2]
    m_old = torch.full((n, heads), -torch.inf)
    l_old, acc_old = torch.zeros(n, heads), torch.zeros(n, heads, ch)
    e = torch.nn.functional.leaky_relu(s_dst[dst] + s_src[col], 0.2)
    idx = dst.view(-1, 1).expand_as(e)
    m_new = torch.maximum(m_old, torch.full_like(m_old, -torch.inf).scatter_reduce(0, idx, e.detach(), "amax"))
    scale = torch.where(torch.isinf(m_old), torch.zeros_like(m_old), torch.exp(m_old - m_new))
    p = torch.exp(e - m_new[dst])
    l_new = l_old * scale + torch.zeros_like(l_old).index_add(0, dst, p)
    acc = acc_old * scale.unsqueeze(-1) + torch.zeros_like(acc_old).index_add(0, dst, p.unsqueeze(-1) * z[col])
    return acc / torch.where(l_new > 0, l_new, torch.ones_like(l_new)).unsqueeze(-1)


def bench_gat_autograd(cal: Calibration, cores: int, gen: torch.Generator) -> OpCost:
    """Unfused GAT under torch autograd (``sa``/``oneshot``/one worker): forward with the graph recorded,
    then ``autograd.grad`` through it."""
    rows, fwd, bwd = [], [], []
    last = None
    for n, deg, heads, ch in _gat_shapes(cal):
        rowptr, col, s_dst, s_src, z = _gat_inputs(n, deg, heads, ch, gen, grad=True)
        dst = torch.repeat_interleave(torch.arange(n), deg)
        args = (dst, col, s_dst, s_src, z)
        tf = time_call(lambda a=args: _gat_autograd_shard(*a), cal.repeats)

        def backward(a=args) -> None:
            out = _gat_autograd_shard(*a)
            torch.autograd.grad(out, a[2:], torch.ones_like(out))

        tb = time_call(backward, cal.repeats)
        rows.append([1.0, n * deg * heads * ch, n * heads * ch])
        fwd.append(tf)
        bwd.append(max(tb - tf, 0.1 * tf))  # backward() ran the forward too
        if last is None or tf > last[0]:
            last = (tf, args)
    eff = _parallel_eff(cal, cores, lambda: _gat_autograd_shard(*last[1]), "gat_autograd")
    rate, overhead, row_rate, ratio = _fit_sparse(rows, fwd, bwd, 5e7)
    cal.raw["gat_autograd"] = {"shapes": _gat_shapes(cal), "fwd": fwd, "bwd": bwd}
    return OpCost(rate=rate, overhead_s=overhead, bwd_ratio=ratio, parallel_eff=eff, row_rate=row_rate)


def bench_gat_unfused(cal: Calibration, cores: int, gen: torch.Generator) -> OpCost:
    """Unfused GAT as ``sar`` streams it: the kernels' torch forward (no autograd) and their torch backward,
    which recomputes the attention of the shard first. Without the kernels package the autograd
    formulation stands in."""
    try:
        import kernels

        fwd_fn, bwd_fn = kernels.gat_forward_shard, kernels.gat_backward_shard
    except Exception as err:  # noqa: BLE001
        cal.notes.append(f"gat_unfused: import kernels failed ({type(err).__name__}); timed the autograd form")
        return bench_gat_autograd(cal, cores, gen)
    rows, fwd, bwd = [], [], []
    last = None
    for n, deg, heads, ch in _gat_shapes(cal):
        rowptr, col, s_dst, s_src, z = _gat_inputs(n, deg, heads, ch, gen, grad=False)
        args = (rowptr, col, s_dst, s_src, z, 0.2)
        tf = time_call(lambda a=args: fwd_fn(*a, backend="torch"), cal.repeats)
        m, l, acc = fwd_fn(*args, backend="torch")
        out = acc / torch.where(l > 0, l, torch.ones_like(l))[..., None]
        g = torch.randn_like(out)
        state = (m, l, g, (g * out).sum(-1))
        tb = time_call(lambda a=args, st=state: bwd_fn(*a, *st, backend="torch"), cal.repeats)
        rows.append([1.0, n * deg * heads * ch, n * heads * ch])
        fwd.append(tf)
        bwd.append(tb)
        if last is None or tf > last[0]:
            last = (tf, args)
    eff = _parallel_eff(cal, cores, lambda: fwd_fn(*last[1], backend="torch"), "gat_unfused")
    rate, overhead, row_rate, ratio = _fit_sparse(rows, fwd, bwd, 5e7)
    cal.raw["gat_unfused"] = {"shapes": _gat_shapes(cal), "fwd": fwd, "bwd": bwd}
    return OpCost(rate=rate, overhead_s=overhead, bwd_ratio=ratio, parallel_eff=eff, row_rate=row_rate)


def bench_gat_fused(cal: Calibration, cores: int, gen: torch.Generator) -> OpCost | None:
    """``kernels.gat_forward_shard`` / ``gat_backward_shard`` when ``import kernels`` provides them."""
    try:
        import kernels
    except Exception as err:  # noqa: BLE001 - any import failure means "not available"
        cal.notes.append(f"fused GAT not measured: import kernels failed ({type(err).__name__}: {err})")
        return None
    fwd_fn = getattr(kernels, "gat_forward_shard", None)
    bwd_fn = getattr(kernels, "gat_backward_shard", None)
    if fwd_fn is None or bwd_fn is None:
        cal.notes.append("fused GAT not measured: kernels lacks gat_forward_shard/gat_backward_shard")
        return None
    backend = "torch"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            backend = kernels.backend() if hasattr(kernels, "backend") else "unknown"
    except Exception as err:  # noqa: BLE001
        cal.notes.append(f"kernels.backend() failed ({err}); timing whatever gat_forward_shard runs")
    rows, fwd, bwd = [], [], []
    last = None
    try:
        for n, deg, heads, ch in _gat_shapes(cal):
            rowptr, col, s_dst, s_src, z = _gat_inputs(n, deg, heads, ch, gen, grad=False)
            transpose = kernels.csr_transpose(rowptr, col, n) if hasattr(kernels, "csr_transpose") else None
            tf = time_call(lambda a=(rowptr, col, s_dst, s_src, z): fwd_fn(*a, 0.2), cal.repeats)
            m, l, acc = fwd_fn(rowptr, col, s_dst, s_src, z, 0.2)
            out = acc / torch.where(l > 0, l, torch.ones_like(l))[..., None]
            g = torch.randn_like(out)
            delta = (g * out).sum(-1)
            args = (rowptr, col, s_dst, s_src, z, 0.2, m, l, g, delta)
            tb = time_call(lambda a=args, t=transpose: bwd_fn(*a, transpose=t), cal.repeats)
            rows.append([1.0, n * deg * heads * ch, n * heads * ch])
            fwd.append(tf)
            bwd.append(tb)
            if last is None or tf > last[0]:
                last = (tf, (rowptr, col, s_dst, s_src, z))
        eff = _parallel_eff(cal, cores, lambda: fwd_fn(*last[1], 0.2), "gat_fused")
    except Exception as err:  # noqa: BLE001 - an API mismatch must not sink the whole calibration
        cal.notes.append(f"fused GAT not measured: calling the kernels failed ({type(err).__name__}: {err})")
        return None
    cal.notes.append(f"fused GAT measured with kernels backend {backend!r}")
    rate, overhead, row_rate, ratio = _fit_sparse(rows, fwd, bwd, 2e8)
    cal.raw["gat_fused"] = {"shapes": _gat_shapes(cal), "fwd": fwd, "bwd": bwd, "backend": backend}
    return OpCost(rate=rate, overhead_s=overhead, bwd_ratio=ratio, parallel_eff=eff, row_rate=row_rate)


def bench_elementwise(cal: Calibration, cores: int) -> OpCost:
    """``c = a + b`` over several sizes: bytes moved (2 reads + 1 write) per second and per-call overhead.

    The rate comes from tensors of 4-128 MB (the simulator prices whole-graph rows), whose outputs are fresh
    pages under the engine's malloc settings; mid-sized tensors that fit the caches and reuse heap memory
    run several times faster and would only blur the fit. The tiny size pins the per-call overhead.
    """
    sizes = [100, 1_000_000, 4_000_000] if cal.quick else [100, 1_000_000, 4_000_000, 16_000_000, 32_000_000]
    rows, secs = [], []
    for size in sizes:
        a, b = torch.randn(size), torch.randn(size)
        t = time_call(lambda a=a, b=b: a + b, cal.repeats * 2)
        rows.append([1.0, 12.0 * size])
        secs.append(t)
    coef = fit_nonnegative(np.array(rows), np.array(secs))
    a, b = torch.randn(sizes[-1]), torch.randn(sizes[-1])
    eff = _parallel_eff(cal, cores, lambda: a + b, "elementwise")
    cal.raw["elementwise"] = {"sizes": sizes, "seconds": secs}
    return OpCost(rate=_rate(coef[1], 5e9), overhead_s=float(coef[0]), bwd_ratio=1.0, parallel_eff=eff)


def _busy_and_own() -> tuple[float, float] | None:
    """(CPU seconds the whole machine has been busy, CPU seconds of this process and its waited-for
    children); None where /proc/stat is missing."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    busy = (sum(fields) - fields[3] - fields[4]) / tick  # all but idle and iowait
    t = os.times()
    return busy, t.user + t.system + t.children_user + t.children_system


def _wait_idle(max_s: float, share: float = 0.1, quiet_for_s: float = 6.0) -> bool:
    """Wait (up to ``max_s``) until other processes have used at most ``share`` of the cores for
    ``quiet_for_s`` seconds in a row. True when that happened."""
    cores = max(usable_cores(), 1)
    deadline = time.monotonic() + max_s
    calm = 0.0
    while time.monotonic() < deadline:
        a = _busy_and_own()
        if a is None:
            return True
        time.sleep(2.0)
        b = _busy_and_own()
        assert b is not None
        others = max((b[0] - a[0]) - (b[1] - a[1]), 0.0) / (2.0 * cores)
        calm = calm + 2.0 if others <= share else 0.0
        if calm >= quiet_for_s:
            return True
    return False


def quiet_step(cal: Calibration, name: str, fn: Callable[[], Any]) -> Any:
    """Run a timing step while the machine is otherwise idle, as far as that can be had.

    On a shared machine other processes distort timings (SMT siblings and shared caches stretch even CPU
    time). Before each try this waits for an idle spell; during the try it measures the CPU time the rest
    of the machine used (busy time from /proc/stat less this process's own). A try during which others
    used more than 15 % of the cores is repeated (``cal.quiet_tries`` in all), and the least disturbed
    result is kept; the disturbance is recorded in ``cal.raw["disturbance"]``.
    """
    best: tuple[float, Any] | None = None
    cores = max(usable_cores(), 1)
    for _ in range(max(cal.quiet_tries, 1)):
        _wait_idle(0.0 if cal.quick else cal.quiet_wait_s)
        a, t0 = _busy_and_own(), time.perf_counter()
        result = fn()
        b, wall = _busy_and_own(), time.perf_counter() - t0
        others = 0.0 if a is None or b is None else max((b[0] - a[0]) - (b[1] - a[1]), 0.0) / (wall * cores)
        if best is None or others < best[0]:
            best = (others, result)
        if others <= 0.15:
            break
        cal.log(f"    other processes used {others:.0%} of the cores during {name}: measuring it again")
    assert best is not None
    cal.raw.setdefault("disturbance", {})[name] = round(best[0], 3)
    if best[0] > 0.15:
        cal.notes.append(f"{name}: measured while other processes used {best[0]:.0%} of the cores")
    return best[1]


def engine_malloc(cal: Calibration) -> None:
    """glibc settings of the engine's workers (``sarlab.memory.tune_malloc``): blocks over 128 KiB are
    mapped fresh and returned at once, so every large tensor is new pages whose first-touch faults are part
    of the time of the op that writes it. The op benchmarks run with them for that reason."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 17)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 1 << 17)  # M_TRIM_THRESHOLD
    except OSError:
        cal.notes.append("allocator: glibc mallopt unavailable; measured with default malloc settings")


def bench_allocator(cal: Calibration) -> float:
    """Resident bytes per tensor byte for large tensors (page rounding, allocator headers)."""

    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    if not os.path.exists("/proc/self/statm"):
        cal.notes.append("allocator: /proc not available; factor 1.0 assumed")
        return 1.0
    sizes = [300_000, 1_000_000, 3_000_000]  # float32 elements: 1.2, 4 and 12 MB tensors
    ratios = []
    for size in sizes:
        before = rss()
        held = [torch.ones(size) for _ in range(8)]
        grown = rss() - before
        ratios.append(grown / (8 * size * 4))
        del held
    factor = float(np.clip(statistics.median(ratios), 1.0, 1.5))
    cal.raw["allocator"] = {"sizes": sizes, "ratios": ratios}
    return factor


def bench_first_use(cal: Calibration) -> tuple[dict[str, float], dict[str, float]]:
    """Resident bytes per op family on first use, and the sparse products' temporaries, from a fresh
    process (:mod:`simulator.memprobe`)."""
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    out = subprocess.run(
        [sys.executable, "-m", "simulator.memprobe"],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=120,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    cal.raw["first_use"] = result["first_use"]
    cal.raw["transients"] = result["transients"]
    return (
        {k: float(v) for k, v in result["first_use"].items()},
        {k: float(v) for k, v in result["transients"].items()},
    )


def share_eta(solo: dict[str, float], shared: list[dict[str, float]]) -> dict[str, float]:
    r"""Per family, the efficiency of each extra co-located process from one solo and one co-located window:
    with rates ``r_1`` alone and ``r_C`` (mean of the ``C`` copies), :math:`\eta = (C r_C / r_1 - 1)/(C - 1)`
    (unclipped)."""
    cores = len(shared)
    if cores < 2:
        raise ValueError("share_eta needs at least two co-located processes")
    return {
        name: (cores * statistics.mean(out[name] for out in shared) / rate - 1.0) / (cores - 1)
        for name, rate in solo.items()
    }


def bench_share(cal: Calibration, cores: int) -> dict[str, float]:
    r"""``share_eff`` per family: :mod:`simulator.sharebench` alone, then as ``cores`` concurrent processes.

    With per-process rates ``r_1`` (alone) and ``r_C`` (``C`` at once), ``C`` processes together do
    ``C r_C / r_1`` times the work of one, so :math:`\eta = (C r_C / r_1 - 1) / (C - 1)`.
    """
    if cores <= 1:
        return {}
    seconds = 0.6 if cal.quick else 1.5
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    env["OMP_NUM_THREADS"] = "1"

    def launch(procs: int) -> list[dict[str, float]]:
        start_at = time.time() + 8.0  # interpreter start and input set-up happen before the first window
        cmd = [sys.executable, "-m", "simulator.sharebench", "--start-at", repr(start_at), "--seconds", str(seconds)]
        if cal.quick:
            cmd.append("--quick")
        running = [
            subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=root)
            for _ in range(procs)
        ]
        outputs = []
        try:
            for proc in running:
                out, err = proc.communicate(timeout=180)
                if proc.returncode != 0:
                    raise RuntimeError(f"sharebench exited with {proc.returncode}: {err.strip()[-300:]}")
                outputs.append(json.loads(out.strip().splitlines()[-1]))
        finally:
            for proc in running:
                if proc.poll() is None:
                    proc.kill()
        return outputs

    # A shared VM's speed drifts within minutes (one solo gemm window once ran slower than either of two
    # co-running copies), so solo and shared windows alternate and each family's eta is the median over
    # rounds of the ratio of adjacent solo and shared rates.
    rounds = 1 if cal.quick else cal.share_rounds
    per_round: dict[str, list[float]] = {}
    raw_rounds = []
    for _ in range(max(rounds, 1)):
        solo = launch(1)[0]
        shared = launch(cores)
        raw_rounds.append({"solo_calls_per_s": solo, "shared_calls_per_s": shared})
        for name, eta in share_eta(solo, shared).items():
            per_round.setdefault(name, []).append(eta)
    result = {name: float(np.clip(statistics.median(v), 0.0, 1.0)) for name, v in per_round.items()}
    cal.raw["share"] = {"rounds": raw_rounds, "eta_per_round": per_round, "processes": cores}
    return result


# ---------------------------------------------------------------------------------------- network
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bench_network(cal: Calibration) -> tuple[Link, float, float]:
    """gloo point-to-point between two local processes (:mod:`simulator.netbench`): (link, post time, CPU
    seconds per byte sent or received)."""
    sizes = [4, 4096, 65536, 1 << 20, 4 << 20] if cal.quick else [4, 1024, 16384, 131072, 1 << 20, 4 << 20, 16 << 20]
    repeats = 5 if cal.quick else 15
    stream = 64 if cal.quick else 256
    port = _free_port()
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    cmd = [
        sys.executable,
        "-m",
        "simulator.netbench",
        "--port",
        str(port),
        "--sizes",
        ",".join(map(str, sizes)),
        "--repeats",
        str(repeats),
        "--stream",
        str(stream),
        "--bulk",
        str((8 << 20) if cal.quick else (64 << 20)),
    ]
    procs = [
        subprocess.Popen(
            cmd + ["--rank", str(r)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=root,
        )
        for r in (0, 1)
    ]
    outputs = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            if proc.returncode != 0:
                raise RuntimeError(f"netbench rank exited with {proc.returncode}: {err.strip()[-300:]}")
            outputs.append(out)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    result = json.loads(outputs[0].strip().splitlines()[-1])
    one_way = np.array([result["one_way_s"][str(s)] for s in sizes])
    coef = fit_nonnegative(np.array([[1.0, float(s)] for s in sizes]), one_way)
    alpha = float(coef[0]) if coef[0] > 0 else float(one_way.min())
    bandwidth = 1.0 / coef[1] if coef[1] > 0 else float(sizes[-1] / one_way[-1])
    gap = float(min(result["stream_s"], alpha))
    if result.get("bulk_exchange_s"):
        # the engine's halo messages are tens to hundreds of MB, exchanged both ways at once into fresh
        # buffers: their sustained bandwidth, not the ping-pong's of reused <= 16 MB buffers, prices them
        bulk_bw = result["bulk_bytes"] / max(result["bulk_exchange_s"] - alpha, 1e-9)
        result["pingpong_bandwidth_Bps"] = bandwidth
        bandwidth = min(bandwidth, bulk_bw)
    cal.raw["network"] = {"sizes": sizes, **result}
    link = Link(latency_s=alpha - gap, bandwidth_Bps=bandwidth, gap_s=gap)
    return link, float(result["call_s"]), float(result.get("cpu_s_per_byte", 0.0))


# ------------------------------------------------------------------------------- engine epochs
#: graphs of :func:`bench_engine`, ``nodes`` from :data:`ENGINE_SIZES` or the quick sizes (not graphs any
#: benchmark or validation uses)
ENGINE_GRAPH = "synthetic:nodes={nodes},degree=30,features=128,classes=16,seed=7"
ENGINE_SIZES = (12_500, 25_000, 50_000, 100_000, 200_000)
ENGINE_SIZES_QUICK = (1_500, 3_000)


def engine_epoch(
    spec: str, model: str, layers: int, hidden: int, epochs: int, partition_dir: str | Path, threads: int = 1
) -> pd.Series:
    """One real single-worker ``sarlab train`` run (a subprocess: the engine's own launcher and malloc
    settings) of ``model`` (sar, mean aggregation) on graph ``spec`` with ``threads`` threads (0: the
    engine's default, all cores); returns its
    :func:`simulator.validate.summarize_measured` row (median epoch time of the epochs after the first).
    ``partition_dir`` is reused when it already holds the partition.

    One thread by default: the compute scale fitted from these runs then holds no error of the measured
    thread efficiencies, which the simulator applies on its own. (With both cores, a calibration whose
    2-thread efficiencies came out low, spmm 0.10 in all five rounds, fitted a scale of 0.8 that made every
    1-thread worker of the runs after it 30 % too fast: campaign 7, ``results/validation_c7_plan.md``.)"""
    import tempfile

    from simulator.validate import read_records, summarize_measured

    root = Path(__file__).resolve().parent.parent
    reuse = (Path(partition_dir) / "manifest.json").exists()
    graph = ["--graph", str(partition_dir)] if reuse else ["--graph", spec, "--partition-dir", str(partition_dir)]
    with tempfile.TemporaryDirectory(prefix="sarlab-engine-epoch-") as tmp:
        out = Path(tmp) / f"{model}.json"
        cmd = [
            sys.executable, "-m", "real.cli", "train", *graph, "--workers", "1", "--mode", "sar",
            "--model", model, "--layers", str(layers), "--hidden", str(hidden), "--epochs", str(epochs),
            "--threads", str(threads), "--eval-every", "0", "--json", str(out),
        ]  # fmt: skip
        proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            raise RuntimeError(f"sarlab train ({model}) exited with {proc.returncode}: {proc.stderr[-400:]}")
        return summarize_measured(read_records(out), warmup=1).iloc[0]


def bench_engine(cal: Calibration, profile: Profile) -> tuple[float, tuple[tuple[float, float], ...], dict[str, Any]]:
    """Fit :attr:`Profile.compute_scale_curve`: real single-worker epochs of the engine over what the
    simulator predicts for them from the microbenchmark profile, at several graph sizes.

    Runs :func:`engine_epoch` for GCN and GraphSAGE-mean, 3 layers, hidden 256, one worker with one thread, on graphs of
    :data:`ENGINE_SIZES` nodes (degree 30, 128 features; graphs no benchmark or validation uses): whole-graph
    activations of 13-205 MB, the range of one worker's shard in the validation runs. One worker keeps
    communication out of the fit. Each run gives a ratio measured / predicted (median of the epochs after
    the first) at its key (``cal.scale_key``): its predicted peak memory (``"peak"``) or its activation
    bytes (``"activation"``, :func:`simulator.layers.activation_bytes`); both are kept in the raw runs.
    The curve is the power law through all runs (:func:`fit_scale_curve`). Returns the geometric mean of
    the ratios (the profile's single ``compute_scale``), the curve and the raw numbers.
    """
    import tempfile

    from simulator.validate import simulate_row

    one = profile.with_scale(1.0)
    sizes = ENGINE_SIZES_QUICK if cal.quick else ENGINE_SIZES
    layers, hidden, epochs = (2, 32, 2) if cal.quick else (3, 256, 3)
    raw: dict[str, Any] = {"graphs": [ENGINE_GRAPH.format(nodes=n) for n in sizes], "layers": layers,
                           "hidden": hidden, "runs": []}  # fmt: skip
    all_keys, all_ratios = [], []
    with tempfile.TemporaryDirectory(prefix="sarlab-cal-engine-") as tmp:
        for nodes in sizes:
            spec = ENGINE_GRAPH.format(nodes=nodes)
            ratios, keys = [], []
            for model in ("gcn", "sage"):
                row = engine_epoch(spec, model, layers, hidden, epochs, Path(tmp) / f"parts-{nodes}")
                result = simulate_row(row, one)
                predicted, peak = float(result.epoch_time_s.max()), float(result.peak_above_baseline_bytes.max())
                measured = float(row["measured_epoch_time_s"])
                ratios.append(measured / predicted)
                keys.append(peak if cal.scale_key == "peak" else result.activation_bytes)
                raw["runs"].append({"model": model, "nodes": nodes, "activation_bytes": result.activation_bytes,
                                    "predicted_peak_bytes": peak, "measured_peak_bytes":
                                    float(row["measured_peak_above_baseline_bytes"]), "measured_s": measured,
                                    "predicted_s": predicted})  # fmt: skip
            all_keys.extend(keys)
            all_ratios.extend(ratios)
            cal.log(f"    {nodes:>7,d} nodes ({keys[0] / 2**20:6.1f} / {keys[1] / 2**20:6.1f} MB {cal.scale_key}): "
                    f"engine / microbenchmarks GCN {ratios[0]:.2f}, SAGE {ratios[1]:.2f}")  # fmt: skip
    overall = float(np.exp(np.mean(np.log(all_ratios))))
    curve = fit_scale_curve(all_keys, all_ratios)
    cal.log("    power law: " + ", ".join(f"{v:.3f} at {b / 2**20:.0f} MB" for b, v in curve))
    raw["compute_scale"], raw["compute_scale_curve"], raw["compute_scale_key"] = overall, curve, cal.scale_key
    return overall, curve, raw


def fit_scale_curve(keys: list[float], ratios: list[float]) -> tuple[tuple[float, float], ...]:
    """The compute scale as a power law of the key: the least-squares line of log(ratio) on log(key) over
    all runs, as its two end points (smallest and largest key; :meth:`Profile.scale_at` interpolates
    log-linearly between them and holds the ends beyond). A line rather than a node per graph size:
    neighbouring sizes of one calibration differed by up to 25 % in both directions on the EPYC VM, and a
    node follows each such swing. One distinct key: the geometric mean, as one point."""
    x, y = np.log(np.asarray(keys, dtype=float)), np.log(np.asarray(ratios, dtype=float))
    if len(x) == 0:
        raise ValueError("fit_scale_curve needs at least one run")
    if np.ptp(x) <= 0:
        return ((float(np.exp(x[0])), float(np.exp(y.mean()))),)
    slope, icept = np.polyfit(x, y, 1)
    ends = (float(x.min()), float(x.max()))
    return tuple((float(np.exp(e)), float(np.exp(icept + slope * e))) for e in ends)


#: the speed probe of :func:`speed_probe`: one worker, GCN, 3 layers, hidden 256, 3 epochs (~10-20 s here)
PROBE_GRAPH = "synthetic:nodes=100000,degree=30,features=128,classes=16,seed=11"
PROBE_MODEL = {"model": "gcn", "layers": 3, "hidden": 256, "epochs": 3}


def speed_probe(partition_dir: str | Path, spec: str = PROBE_GRAPH) -> dict[str, Any]:
    """Measure the machine's current speed with a fixed real workload (:data:`PROBE_MODEL` on ``spec``,
    one worker; a graph no benchmark uses).

    A shared VM's speed drifts (identical engine epochs here took 3.8 s and 6.8 s 20 minutes apart), so
    ``sarlab bench engine --probe`` runs this between configurations; the validation divides each
    configuration's adjacent probe epoch time by the simulator's prediction of the probe to get the
    ``compute_scale`` that held while it ran (:func:`simulator.validate.probe_scale`). Returns the probe's
    epoch time and the configuration columns the prediction needs. The probe runs on all cores (the
    engine's default), as it always has; its prediction uses the threads it ran with.
    """
    row = engine_epoch(spec, PROBE_MODEL["model"], PROBE_MODEL["layers"], PROBE_MODEL["hidden"],
                       PROBE_MODEL["epochs"], partition_dir, threads=0)  # fmt: skip
    return {
        "probe_epoch_s": float(row["measured_epoch_time_s"]),
        "probe_graph": spec,
        "probe_num_nodes": int(row["num_nodes"]),
        "probe_num_edges": int(row["num_edges"]),
        "probe_feature_dim": int(row["feature_dim"]),
        "probe_num_classes": int(row["num_classes"]),
        "probe_partition_dir": str(partition_dir),
        "probe_threads": int(row["threads"]),
        "probe_time": time.time(),
    }


# ------------------------------------------------------------------------------------------- main
def cpu_model() -> str:
    """The CPU model string from /proc/cpuinfo (or platform)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def calibrate(cal: Calibration | None = None, name: str = "local") -> Profile:
    """Measure this machine and return its :class:`Profile` (see the module docstring)."""
    cal = cal or Calibration()
    log = cal.log
    cores = cal.threads or usable_cores()
    start = time.perf_counter()
    old_threads = torch.get_num_threads()
    engine_malloc(cal)
    _set_threads(1)
    gen = torch.Generator().manual_seed(cal.seed)
    ops: dict[str, OpCost] = {}
    try:
        steps: list[tuple[str, Callable[[], OpCost | None]]] = [
            ("gemm", lambda: bench_gemm(cal, cores)),
            ("spmm", lambda: bench_spmm(cal, cores, gen)),
            ("max_aggr", lambda: bench_max(cal, cores, gen)),
            ("gat_unfused", lambda: bench_gat_unfused(cal, cores, gen)),
            ("gat_autograd", lambda: bench_gat_autograd(cal, cores, gen)),
            ("elementwise", lambda: bench_elementwise(cal, cores)),
        ]
        if cal.fused:
            steps.append(("gat_fused", lambda: bench_gat_fused(cal, cores, gen)))
        else:
            cal.notes.append("fused GAT not measured (disabled); the simulator falls back to the unfused costs")
        for i, (op_name, fn) in enumerate(steps, start=1):
            t0 = time.perf_counter()
            log(f"[calibrate {i}/{len(steps) + 2}] {op_name} ...")
            cost = quiet_step(cal, op_name, fn)
            if cost is not None:
                ops[op_name] = cost
                row = f", row {cost.row_rate:.3g}/s" if cost.row_rate else ""
                log(
                    f"    rate {cost.rate:.3g}/s{row}, overhead {cost.overhead_s * 1e6:.1f} us, "
                    f"bwd x{cost.bwd_ratio:.2f}, thread eff {cost.parallel_eff:.2f} "
                    f"({time.perf_counter() - t0:.1f}s)"
                )
        if cal.quick or cores <= 1:
            cal.notes.append("share_eff not measured (quick or one core): co-located processes use parallel_eff")
        else:
            log(f"    co-located processes: sharebench alone, then {cores} at once ...")
            try:
                shares = quiet_step(cal, "share", lambda: bench_share(cal, cores))
            except (subprocess.SubprocessError, OSError, ValueError, RuntimeError, KeyError) as err:
                shares = {}
                cal.notes.append(f"share_eff not measured ({type(err).__name__}: {err})")
            for family, eta in shares.items():
                if family in ops:
                    ops[family] = replace(ops[family], share_eff=eta)
            log("    share_eff " + ", ".join(f"{k} {v:.2f}" for k, v in shares.items()))
        log(f"[calibrate {len(steps) + 1}/{len(steps) + 2}] allocator and first-use memory ...")
        factor = bench_allocator(cal)
        first_use: dict[str, float] = {}
        transients: dict[str, float] = {}
        if cal.quick:
            cal.notes.append("first-use memory not measured (--quick); run a full calibration for it")
        else:
            try:
                first_use, transients = bench_first_use(cal)
            except (subprocess.SubprocessError, OSError, ValueError, IndexError, KeyError) as err:
                cal.notes.append(f"first-use memory not measured ({type(err).__name__}: {err})")
            if not transients:
                cal.notes.append("sparse-product temporaries not measured (VmHWM cannot be reset here)")
        log(
            f"    resident bytes per tensor byte {factor:.3f}; first use (MiB): "
            + ", ".join(f"{k} {v / 2**20:.1f}" for k, v in first_use.items())
        )
        if transients:
            log("    sparse-product temporaries: " + ", ".join(f"{k} {v:.3g}" for k, v in transients.items()))
    finally:
        _set_threads(old_threads)
    log(f"[calibrate {len(steps) + 2}/{len(steps) + 2}] gloo point-to-point (2 local processes) ...")
    call_s = cpu_per_byte = 0.0
    if cal.network:
        try:
            link, call_s, cpu_per_byte = quiet_step(cal, "network", lambda: bench_network(cal))
            log(
                f"    alpha {link.alpha_s * 1e6:.1f} us (gap {link.gap_s * 1e6:.1f} us), "
                f"bandwidth {link.bandwidth_Bps / 1e9:.2f} GB/s, post {call_s * 1e6:.1f} us, "
                f"CPU {cpu_per_byte * 1e9:.3f} s/GB moved"
            )
        except Exception as err:  # noqa: BLE001 - keep the compute calibration if gloo fails
            cal.notes.append(f"network not measured ({type(err).__name__}: {err}); 50 us / 1 GB/s assumed")
            link = Link(latency_s=50e-6, bandwidth_Bps=1e9)
    else:
        cal.notes.append("network not measured (disabled); 50 us / 1 GB/s assumed")
        link = Link(latency_s=50e-6, bandwidth_Bps=1e9)
    notes = [
        "rates are per thread at 1 thread; parallel_eff from the same op at all usable cores",
        "inter_host = intra_host: measured on one machine (loopback gloo)",
    ]
    profile = Profile(
        name=name,
        ops=ops,
        inter_host=link,
        intra_host=link,
        cores_per_host=usable_cores(),
        workers_per_host=0,
        p2p_call_s=call_s,
        p2p_cpu_s_per_byte=cpu_per_byte,
        mem_overhead_factor=factor,
        first_use_bytes=first_use,
        transient_bytes=transients,
        llc_bytes=float(cal.raw.get("llc_bytes", 0.0)),
        notes=tuple(notes),
    )
    if cal.engine:
        log("[calibrate] engine epochs (sarlab train, 1 worker) vs the microbenchmark prediction ...")
        try:
            scale, curve, raw = quiet_step(cal, "engine", lambda: bench_engine(cal, profile))
            cal.raw["engine"] = raw
            profile = replace(profile, compute_scale=scale, compute_scale_curve=curve, compute_scale_key=cal.scale_key)
            what = "predicted peak memory" if cal.scale_key == "peak" else "activations"
            notes.append(
                f"compute_scale_curve: engine epoch / microbenchmark prediction (GCN and SAGE, 1 worker, "
                f"{len(raw['runs'])} runs) as a power law of {what}: "
                f"{', '.join(f'{v:.2f} at {b / 2**20:.0f} MB' for b, v in curve)}; compute_scale "
                f"{scale:.3f} is the runs' geometric mean"
            )
            log(f"    compute_scale {scale:.3f}")
        except (subprocess.SubprocessError, OSError, ValueError, RuntimeError, KeyError, IndexError) as err:
            cal.notes.append(f"compute_scale not fitted ({type(err).__name__}: {err}); 1.0 used")
    else:
        cal.notes.append("compute_scale not fitted (disabled): microbenchmarks alone")
    elapsed = time.perf_counter() - start
    log(f"calibration done in {elapsed:.1f}s")
    return replace(
        profile,
        notes=tuple(notes + cal.notes),
        meta={
            "machine": cpu_model(),
            "torch": torch.__version__,
            "date": datetime.date.today().isoformat(),
            "threads_measured": [1, cores],
            "quick": cal.quick,
            "seconds": round(elapsed, 2),
            "raw": _jsonable(cal.raw),
        },
    )


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    return obj


def default_profile_path() -> Path:
    """The profile calibrate writes and simulate reads by default: results/simulator_profile.json."""
    return Path(__file__).resolve().parent.parent / "results" / "simulator_profile.json"
