"""Microbenchmarks of the op families of dense and sparse aggregation: GEMM, sum (spmm) and max aggregation,
elementwise bandwidth.

Every family is timed on one thread on several shapes with the op patterns the engine uses, the sparse ones
through the engine's own entry points (:meth:`sarlab.core.shards.Shard.spmm`,
:class:`sarlab.core.aggregators.Aggregation`: the C++ kernels, or their torch fallback where the extension is
unavailable), in place where the engine works in place, under the engine's malloc settings so that large outputs are
fresh pages, then fitted (:func:`sarlab.simulator.calibration.fitting.fit_op`); its thread efficiency comes from its
slowest shape timed on one thread and on all cores (:func:`parallel_eff`).
"""

from __future__ import annotations

import statistics
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from sarlab import kernels
from sarlab.core.aggregators import Aggregation
from sarlab.real.calibration.harness import set_threads, time_call
from sarlab.real.calibration.ranks import random_shard
from sarlab.simulator.calibration.calibration import Calibration, Findings
from sarlab.simulator.calibration.fitting import fit_cache, fit_nonnegative, fit_op, rate_from, thread_eta
from sarlab.simulator.hardware.profile import OpCost
from sarlab.simulator.workload.ops import spmm_passes


def bench_gemm(cal: Calibration, found: Findings, cores: int) -> OpCost:
    """Dense ``x @ W`` over several shapes: FLOP/s and per-call overhead, fitted on ``x @ W`` as the engine calls it
    (its ``m x n`` result on fresh pages under the engine's malloc settings).

    Each shape is also timed writing into a touched ``out`` (``torch.matmul(x, W, out=c)``), kept in the raw timings
    with the bytes of result per second of the difference (``fresh_Bps``, shapes with results of 1M+ elements, 256k
    in ``--quick``): what the page faults of a fresh result cost (7.4 ms of a 15.3 ms GEMM of 20000 x 64 x 128 on the
    2-core EPYC VM, 2026-11-28), a record for a cost model that prices them apart; not priced."""
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
    rows, secs, touched, fresh = [], [], [], []
    for n, k, m in shapes:
        a, w, out = torch.randn(n, k), torch.randn(k, m), torch.zeros(n, m)
        t = time_call(lambda a=a, w=w: a @ w, cal.repeats)
        t_out = time_call(lambda a=a, w=w, c=out: torch.matmul(a, w, out=c), cal.repeats)
        if n * m >= (250_000 if cal.quick else 1_000_000) and t > t_out:
            fresh.append(n * m * 4 / (t - t_out))
        rows.append([1.0, 2.0 * n * k * m])
        secs.append(t)
        touched.append(t_out)
    coef = fit_nonnegative(np.array(rows), np.array(secs))
    n, k, m = max(shapes, key=lambda s: s[0] * s[1] * s[2])
    a, w = torch.randn(n, k), torch.randn(k, m)
    eff = parallel_eff(cal, found, cores, lambda: a @ w, "gemm")
    found.raw["gemm"] = {"shapes": shapes, "seconds": secs, "seconds_touched_out": touched, "fresh_Bps": fresh}
    return OpCost(rate=rate_from(coef[1], 1e10), overhead_s=float(coef[0]), bwd_ratio=1.0, parallel_eff=eff)


def thread_counts(cores: int) -> list[int]:
    """The thread counts runs use and calibration times: 1, 2, 4, ... below ``cores``, and ``cores`` itself
    (``log2 C + 1`` of them: the time grows with the logarithm of the cores, not with them)."""
    counts, t = [1], 2
    while t < cores:
        counts.append(t)
        t *= 2
    return counts + ([cores] if cores > 1 else [])


#: timed calls of one family's thread speed-ups in a full calibration, rounds x (one thread + each count): the 2-core
#: VM's 3 rounds of 2. A host with more counts (``log2 C + 1``) gets fewer rounds, at least one, so that the step does
#: not grow with the cores (16 cores: 1 round of 5 counts, ~50 s less than 3 rounds by :mod:`budget`'s per-count cost)
THREAD_POINTS = 6


def speedup_rounds(cal: Calibration, cores: int) -> int:
    """Rounds of :func:`parallel_eff` on ``cores`` cores: :attr:`Calibration.thread_rounds`, fewer where its rounds of
    :func:`thread_counts` would exceed :data:`THREAD_POINTS` timed calls (at least one; one in ``--quick``)."""
    if cal.quick:
        return 1
    return max(1, min(cal.thread_rounds, THREAD_POINTS // len(thread_counts(cores))))


def parallel_eff(cal: Calibration, found: Findings, cores: int, fn: Callable[[], Any], name: str) -> float:
    """:math:`\\eta` of ``fn`` at all cores: the median over :func:`speedup_rounds` rounds, each timing
    one thread and then every count of :func:`thread_counts`, so that a shared machine's speed swings between
    rounds do not decide it from a single pair of timings; clipped to [0, 1]. Each count's median speed-up over
    the rounds goes to ``found.raw["thread_speedups"][name]`` (``[[T, s(T)], ...]``,
    :attr:`sarlab.simulator.hardware.opcost.OpCost.speedups`)."""
    if cores <= 1:
        return 1.0
    counts = thread_counts(cores)
    per_count: dict[int, list[float]] = {t: [] for t in counts[1:]}
    for _ in range(speedup_rounds(cal, cores)):
        one = time_call(fn, cal.repeats, wall=True)
        try:
            for t in counts[1:]:
                set_threads(t)
                per_count[t].append(one / max(time_call(fn, cal.repeats, wall=True), 1e-12))
        finally:
            set_threads(1)
    etas = [thread_eta(1.0, 1.0 / s, cores) for s in per_count[cores]]
    found.raw.setdefault("thread_eta_rounds", {})[name] = etas
    found.raw.setdefault("thread_speedups", {})[name] = [[t, float(statistics.median(v))]
                                                        for t, v in per_count.items()]
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
            (40000, 16, 16),  # narrow and wide rows over the same edges: the per-edge cost apart from the per-feature
            (10000, 24, 128),
        ]
    return [(max(64, int(n * scale)), d, f) for n, d, f in shapes] + [(64, 2, 8)]


def cache_sweep(cal: Calibration) -> list[tuple[int, int, int]]:
    """Shapes whose gathered matrix grows from 16 MB to 1 GB (256 features, degree 8)."""
    if cal.quick:
        return []
    return [(16000, 8, 256), (64000, 8, 256), (256000, 8, 256), (1000000, 8, 256)]


def spmm_backend(found: Findings) -> str:
    """The kernels backend :meth:`sarlab.core.shards.Shard.spmm` runs here ('cpp', or 'torch' when the C++ extension
    is unavailable), written into ``found.notes`` with the reason of a fallback."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the one-line fallback warning: the note below says it
        backend = kernels.backend()
    why = "" if backend == "cpp" else f" (C++ extension unavailable: {kernels.extension_error()})"
    found.notes.append(f"spmm measured through sarlab.core.shards.Shard.spmm on kernels backend {backend!r}{why}")
    return backend


def bench_spmm(cal: Calibration, found: Findings, cores: int, gen: torch.Generator) -> OpCost:
    r"""Sum aggregation of one shard through the engine's own entry point, :meth:`sarlab.core.shards.Shard.spmm`
    (the C++ SpMM, or ``torch.sparse`` CSR ``addmm_`` where the extension is unavailable; which one is
    recorded): ``A X`` added in place into a running state whose pages are already touched (the state's zero
    fill is priced apart, :meth:`sarlab.simulator.workload.layers.LayerPlan.agg_init`); backward ``A^T G`` the same way
    over the shard's cached transposed index (the ring modes' local shard). Per shape of ``n`` rows, degree ``d``
    and ``f`` features the forward time is fitted as

    .. math:: t = o + \frac{n d f}{r} + \frac{n f}{r_{row}} + \frac{n d\,p(f)}{r_e}

    with :math:`p(f)` the kernel's passes over a row's edges (:func:`sarlab.simulator.workload.ops.spmm_passes`)
    (:func:`sarlab.simulator.calibration.fitting.fit_op`, which fits the backward's ratios too).
    The engine's other backward calls return ``A^T G`` as a fresh result (send buffers, oneshot): what that costs
    beyond the in-place product, per output byte, is ``fresh_rate`` (median over the shapes with outputs of
    1M+ elements whose out-of-place call took longer; none where no such shape did)."""
    rows, fwd, bwd, fresh, excess = [], [], [], [], []
    last = None
    backend = spmm_backend(found)
    for n, deg, f in sparse_shapes(cal):
        shard = random_shard(n, deg, gen)
        x, state, grad = torch.randn(n, f), torch.zeros(n, f), torch.zeros(n, f)
        tf = time_call(lambda sh=shard, x=x, s=state: sh.spmm(x, out=s), cal.repeats)
        tb = time_call(lambda sh=shard, x=x, g=grad: sh.spmm(x, transpose=True, out=g), cal.repeats)
        if n * f >= (100_000 if cal.quick else 1_000_000):
            out_of_place = time_call(lambda sh=shard, x=x: sh.spmm(x, transpose=True), cal.repeats)
            excess.append(out_of_place - tb)
            if out_of_place > tb:  # an overwrite may beat the in-place add: then no fresh-page cost to see
                fresh.append(n * f * 4 / (out_of_place - tb))
        rows.append([1.0, n * deg * f, n * f, n * deg * spmm_passes(f)])
        fwd.append(tf)
        bwd.append(tb)
        if last is None or tf > last[0]:  # the slowest shape measures the thread efficiency
            last = (tf, (shard, x, state))
    shard, x, state = last[1]
    eff = parallel_eff(cal, found, cores, lambda: shard.spmm(x, out=state), "spmm")
    fit = fit_op(rows, fwd, bwd, 1e9)
    rate, overhead, row_rate = fit.rate, fit.overhead_s, fit.row_rate
    # past the cache: the same product on growing matrices; what the in-cache fit leaves unexplained
    # is the cost of gathering rows from memory
    work, edge_s, gathered = [], [], []
    for n, deg, f in cache_sweep(cal):  # forward only, on constant rows: no transposed index, no 1 GB of randn
        big = random_shard(n, deg, gen, transpose=False)
        src, acc = torch.ones(n, f), torch.zeros(n, f)
        t = time_call(lambda sh=big, x=src, s=acc: sh.spmm(x, out=s), 2)
        work.append(float(n * deg * f))
        per_edge = n * deg * spmm_passes(f) / fit.edge_rate if fit.edge_rate else 0.0
        edge_s.append(max(t - overhead - (n * f / row_rate if row_rate else 0.0) - per_edge, 1e-9))
        gathered.append(float(n * f * 4))
        del big, src, acc
    llc, mem_rate = fit_cache(work, edge_s, gathered, rate) if work else (0.0, rate)
    found.raw["spmm"] = {"shapes": sparse_shapes(cal), "fwd": fwd, "bwd": bwd, "fresh_Bps": fresh,
                         "fresh_excess_s": excess, "backend": backend, "entry": "sarlab.core.shards.Shard.spmm",
                         "cache_sweep": {"shapes": cache_sweep(cal), "edge_s": edge_s, "gathered_bytes": gathered}}
    found.raw["llc_bytes"] = llc
    return OpCost(**fit._asdict(), parallel_eff=eff, mem_rate=mem_rate if llc > 0 else None,
                  fresh_rate=float(statistics.median(fresh)) if fresh else None)


def bench_max(cal: Calibration, found: Findings, cores: int, gen: torch.Generator) -> OpCost:
    """Max aggregation of one shard through the engine's entry points, :class:`sarlab.core.aggregators.Aggregation`
    ``("max")``: ``accumulate`` (the running max and tie counts, in place, ``kernels.csr_max_shard``) and
    ``shard_vjp`` (``kernels.csr_max_backward`` over the shard's cached transpose); C++ or the torch fallback
    as :func:`spmm_backend` records. Fitted as :func:`bench_spmm`'s forward."""
    rows, fwd, bwd = [], [], []
    last = None
    agg = Aggregation("max")
    shapes = sparse_shapes(cal, scale=0.4)
    for n, deg, f in shapes:
        shard = random_shard(n, deg, gen)
        x = torch.randn(n, f)
        state = agg.init(n, x, None, (), shard)
        tf = time_call(lambda sh=shard, x=x, st=state: agg.accumulate(st, sh, x, None, ()), cal.repeats)
        out, saved = agg.finalize(None, state, None, ())
        g = torch.randn(n, f)
        tb = time_call(lambda sh=shard, x=x, sv=saved, o=out, g=g: agg.shard_vjp(None, sv, o, sh, x, None, (), g),
                       cal.repeats)
        rows.append([1.0, n * deg * f, n * f, n * deg])
        fwd.append(tf)
        bwd.append(tb)
        if last is None or tf > last[0]:
            last = (tf, (shard, x, state))
    shard, x, state = last[1]
    eff = parallel_eff(cal, found, cores, lambda: agg.accumulate(state, shard, x, None, ()), "max_aggr")
    fit = fit_op(rows, fwd, bwd, 1e8)
    found.raw["max_aggr"] = {"shapes": shapes, "fwd": fwd, "bwd": bwd, "entry": "sarlab.core.aggregators.Aggregation"}
    return OpCost(**fit._asdict(), parallel_eff=eff)


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
