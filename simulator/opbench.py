"""Microbenchmarks of the op families of dense and sparse aggregation: GEMM, sum (spmm) and max aggregation,
elementwise bandwidth.

Every family is timed on one thread on several shapes with the op patterns the engine uses (in place where
the engine works in place, under the engine's malloc settings so that large outputs are fresh pages), then
fitted (:func:`simulator.fitting.fit_op`); its thread efficiency comes from its slowest shape timed on one
thread and on all cores (:func:`parallel_eff`).
"""

from __future__ import annotations

import statistics
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from simulator.calibration import Calibration, Findings
from simulator.fitting import fit_cache, fit_nonnegative, fit_op, rate_from, thread_eta
from simulator.harness import set_threads, time_call
from simulator.profile import OpCost


def random_csr(num_dst: int, num_src: int, degree: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A random CSR (rowptr, col) with ``degree`` in-edges per destination, sources uniform."""
    col = torch.randint(0, num_src, (num_dst * degree,), generator=gen)
    col = col.view(num_dst, degree).sort(dim=1).values.reshape(-1)
    rowptr = torch.arange(0, num_dst * degree + 1, degree, dtype=torch.long)
    return rowptr, col



def bench_gemm(cal: Calibration, found: Findings, cores: int) -> OpCost:
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
    eff = parallel_eff(cal, found, cores, lambda: a @ w, "gemm")
    found.raw["gemm"] = {"shapes": shapes, "seconds": secs}
    return OpCost(rate=rate_from(coef[1], 1e10), overhead_s=float(coef[0]), bwd_ratio=1.0, parallel_eff=eff)




def parallel_eff(cal: Calibration, found: Findings, cores: int, fn: Callable[[], Any], name: str) -> float:
    """:math:`\\eta` of ``fn``: the median over :attr:`Calibration.thread_rounds` alternating one-thread /
    all-core rounds, so that a shared machine's speed swings between rounds do not decide it from a single
    pair of timings; clipped to [0, 1]."""
    if cores <= 1:
        return 1.0
    etas = []
    for _ in range(1 if cal.quick else cal.thread_rounds):
        one = time_call(fn, cal.repeats)
        set_threads(cores)
        try:
            etas.append(thread_eta(one, time_call(fn, cal.repeats), cores))
        finally:
            set_threads(1)
    found.raw.setdefault("thread_eta_rounds", {})[name] = etas
    return float(np.clip(statistics.median(etas), 0.0, 1.0))


def sparse_shapes(cal: Calibration, scale: float = 1.0) -> list[tuple[int, int, int]]:
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


def cache_sweep(cal: Calibration) -> list[tuple[int, int, int]]:
    """Shapes whose gathered matrix grows from 16 MB to 1 GB (256 features, degree 8)."""
    if cal.quick:
        return []
    return [(16000, 8, 256), (64000, 8, 256), (256000, 8, 256), (1000000, 8, 256)]




def bench_spmm(cal: Calibration, found: Findings, cores: int, gen: torch.Generator) -> OpCost:
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
        for n, deg, f in sparse_shapes(cal):
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
        eff = parallel_eff(cal, found, cores, lambda: state.addmm_(a, x), "spmm")
        rate, overhead, row_rate, ratio = fit_op(rows, fwd, bwd, 1e9)
        # past the cache: the same product on growing matrices; what the in-cache fit leaves unexplained
        # is the cost of gathering rows from memory
        work, edge_s, gathered = [], [], []
        for n, deg, f in cache_sweep(cal):
            rowptr, col = random_csr(n, n, deg, gen)
            big = torch.sparse_csr_tensor(rowptr, col, torch.ones(col.numel()), size=(n, n))
            src, acc = torch.randn(n, f), torch.zeros(n, f)
            t = time_call(lambda m=big, x=src, s=acc: s.addmm_(m, x), 2)
            work.append(float(n * deg * f))
            edge_s.append(max(t - overhead - (n * f / row_rate if row_rate else 0.0), 1e-9))
            gathered.append(float(n * f * 4))
            del big, src, acc
    llc, mem_rate = fit_cache(work, edge_s, gathered, rate) if work else (0.0, rate)
    found.raw["spmm"] = {"shapes": sparse_shapes(cal), "fwd": fwd, "bwd": bwd, "fresh_Bps": fresh,
                       "cache_sweep": {"shapes": cache_sweep(cal), "edge_s": edge_s, "gathered_bytes": gathered}}
    found.raw["llc_bytes"] = llc
    return OpCost(rate=rate, overhead_s=overhead, bwd_ratio=ratio, parallel_eff=eff, row_rate=row_rate,
                  mem_rate=mem_rate if llc > 0 else None,
                  fresh_rate=float(statistics.median(fresh)) if fresh else None)


def max_forward(
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


def max_backward(
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


def bench_max(cal: Calibration, found: Findings, cores: int, gen: torch.Generator) -> OpCost:
    """Max aggregation of one shard (gather + scatter_reduce amax + tie counts) and its rebuilt VJP."""
    rows, fwd, bwd = [], [], []
    last = None
    shapes = sparse_shapes(cal, scale=0.4)
    for n, deg, f in shapes:
        rowptr, col = random_csr(n, n, deg, gen)
        dst = torch.repeat_interleave(torch.arange(n), deg)
        x = torch.randn(n, f)
        best, count = torch.full((n, f), -torch.inf), torch.zeros(n, f)
        tf = time_call(lambda x=x, c=col, d=dst, b=best, k=count: max_forward(x, c, d, b, k), cal.repeats)
        fb, fc = max_forward(x, col, dst, best, count)
        g = torch.randn(n, f)
        tb = time_call(lambda x=x, c=col, d=dst, b=fb, k=fc, g=g: max_backward(x, c, d, b, k, g), cal.repeats)
        rows.append([1.0, n * deg * f, n * f])
        fwd.append(tf)
        bwd.append(tb)
        if last is None or tf > last[0]:
            last = (tf, (x, col, dst, best, count))
    x, col, dst, best, count = last[1]
    eff = parallel_eff(cal, found, cores, lambda: max_forward(x, col, dst, best, count), "max_aggr")
    rate, overhead, row_rate, ratio = fit_op(rows, fwd, bwd, 1e8)
    found.raw["max_aggr"] = {"shapes": shapes, "fwd": fwd, "bwd": bwd}
    return OpCost(rate=rate, overhead_s=overhead, bwd_ratio=ratio, parallel_eff=eff, row_rate=row_rate)



def bench_elementwise(cal: Calibration, found: Findings, cores: int) -> OpCost:
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
    eff = parallel_eff(cal, found, cores, lambda: a + b, "elementwise")
    found.raw["elementwise"] = {"sizes": sizes, "seconds": secs}
    return OpCost(rate=rate_from(coef[1], 5e9), overhead_s=float(coef[0]), bwd_ratio=1.0, parallel_eff=eff)
