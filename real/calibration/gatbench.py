"""Microbenchmarks of GAT attention over one shard, in the engine's three forms, each through the engine's own
entry points (:class:`sarlab.nn.gat.AttentionAggregation` ``accumulate`` / ``finalize`` / ``shard_vjp``), so
that they time what the engine runs today: the fused kernels (C++, or their torch fallback where the extension is
unavailable), the streamed unfused form of ``sar`` (plain torch in chunks of edges, no autograd, a backward that
recomputes the attention) and the unfused form under torch autograd (``sa``, ``oneshot``, one worker). Work
unit: edge*head*channel; per shape of ``n`` rows, degree ``d``, ``H`` heads and ``C`` channels the forward time
is fitted as

.. math:: t = o + \\frac{n d H C}{r} + \\frac{n H C}{r_{row}} + \\frac{n d H}{r_e}

(:func:`sarlab.simulator.calibration.fitting.fit_op`). Each edge-head's score, softmax and weight cost the same
whatever ``C``: on the fused kernels they were ~80 % of an edge's forward at 32 channels (2026-11-28), so a price per
edge-head-channel alone made 8-channel heads 4x too cheap and 128-channel heads 2-4x too dear.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import replace

import torch

from sarlab import kernels
from sarlab.core.shards import Shard
from sarlab.nn.gat import AttentionAggregation
from sarlab.real.calibration.harness import time_call
from sarlab.real.calibration.opbench import parallel_eff
from sarlab.real.calibration.ranks import random_shard
from sarlab.simulator.calibration.calibration import Calibration, Findings
from sarlab.simulator.calibration.fitting import fit_gather_rates, fit_op
from sarlab.simulator.hardware.profile import OpCost
from sarlab.simulator.workload.ops import active_rows

SLOPE = 0.2


def gat_shapes(cal: Calibration) -> list[tuple[int, int, int, int]]:
    """(nodes, degree, heads, channels)."""
    tiny = [(64, 2, 1, 8)]  # pins the per-call overhead
    if cal.quick:
        return [(2000, 4, 2, 16), (2000, 16, 2, 16), (6000, 4, 1, 16)] + tiny
    shapes = [(20000, 4, 4, 32), (20000, 16, 4, 32), (40000, 8, 1, 32), (10000, 32, 2, 32), (40000, 2, 4, 16),
              (20000, 8, 4, 8), (4000, 16, 4, 128)]  # narrow and wide heads: the per-edge-head cost apart
    return shapes + tiny


#: shapes of :func:`gat_shapes` the unfused forms (``gat_unfused``, ``gat_autograd``) leave out of their one-thread
#: fit: 20,000 rows of degree 16 at 4 x 32 is 1.3 M edges whose ``E x H x C`` tensors (164 MB each) made it the
#: slowest shape of both (12 s of a calibration); without it their fitted rates, row rates, overheads and backward
#: ratios moved less than calibrations differ from each other (results/host_model/budget/trims/README.md). Their
#: thread speed-ups are still timed on it: on the next-slowest shape both forms measured lower efficiencies (unfused
#: 0.14 against 0.31, autograd 0.56 against 0.68: medians of alternating runs). The fused form keeps it in its fit:
#: its backward ratio moves without it.
UNFUSED_LEFT_OUT = frozenset({(20000, 16, 4, 32), (4000, 16, 4, 128)})


def form_shapes(cal: Calibration, fused: bool) -> list[tuple[int, int, int, int]]:
    """The shapes one form is timed on: :func:`gat_shapes`, less :data:`UNFUSED_LEFT_OUT` for the unfused forms."""
    return [s for s in gat_shapes(cal) if fused or tuple(s) not in UNFUSED_LEFT_OUT]


def gat_inputs(n: int, deg: int, heads: int, ch: int, gen: torch.Generator) -> tuple[Shard, torch.Tensor, torch.Tensor]:
    """A shard and the engine's row layouts: exchanged rows ``[z (H*C), s_src (H)]`` and destination rows
    ``[z, s_src, s_dst]`` (:class:`sarlab.nn.gat.AttentionAggregation`)."""
    shard = random_shard(n, deg, gen)
    rows = torch.randn(n, heads * ch + heads, generator=gen)
    dst_x = torch.cat([rows, torch.randn(n, heads, generator=gen)], 1)
    return shard, rows, dst_x


def gat_calls(att: AttentionAggregation, shard: Shard, rows: torch.Tensor, dst_x: torch.Tensor
              ) -> tuple[Callable[[], object], Callable[[], object]]:
    """(forward, backward) of one shard through ``att``'s engine entry points, without autograd: the forward
    streams the shard into a running state in place, the backward is ``shard_vjp`` from the final state."""
    state = kernels.empty_state(shard.num_dst, att.heads, att.channels, dst_x)
    with torch.no_grad():
        state = att.accumulate(list(state), shard, rows, dst_x, ())
        out, saved = att.finalize(None, [t.clone() for t in state], dst_x, ())
    grad = torch.randn_like(out)

    def forward() -> object:
        with torch.no_grad():
            return att.accumulate(state, shard, rows, dst_x, ())

    def backward() -> object:
        with torch.no_grad():
            return att.shard_vjp(None, saved, out, shard, rows, dst_x, (), grad)

    return forward, backward


def autograd_calls(att: AttentionAggregation, shard: Shard, rows: torch.Tensor, dst_x: torch.Tensor
                   ) -> tuple[Callable[[], object], Callable[[], object]]:
    """(forward, forward + backward) of one shard under torch autograd, as the engine's ``sa``/``oneshot``
    run the unfused layer: ``accumulate`` with the graph recorded from an empty state, ``finalize``, then
    ``autograd.grad`` to the rows."""
    leaves = rows.detach().requires_grad_(True), dst_x.detach().requires_grad_(True)

    def forward() -> torch.Tensor:
        state = list(kernels.empty_state(shard.num_dst, att.heads, att.channels, dst_x))
        return att.finalize(None, att.accumulate(state, shard, *leaves, ()), leaves[1], ())[0]

    def both() -> object:
        out = forward()
        return torch.autograd.grad(out, leaves, torch.ones_like(out))

    return forward, both


def _bench(cal: Calibration, found: Findings, cores: int, gen: torch.Generator, name: str, fused: bool,
           autograd: bool) -> OpCost:
    """Time one form over :func:`form_shapes` and fit it (module docstring)."""
    rows_fit, fwd, bwd = [], [], []
    last = None
    shapes = form_shapes(cal, fused)
    for n, deg, heads, ch in shapes:
        att = AttentionAggregation(heads, ch, SLOPE, self_loops=False, fused=fused, backend=None)
        shard, rows, dst_x = gat_inputs(n, deg, heads, ch, gen)
        forward, backward = (autograd_calls if autograd else gat_calls)(att, shard, rows, dst_x)
        tf = time_call(forward, cal.repeats)
        tb = time_call(backward, cal.repeats)
        if autograd:  # the timed backward ran the forward too
            tb = max(tb - tf, 0.1 * tf)
        rows_fit.append([1.0, n * deg * heads * ch, n * heads * ch, n * deg * heads])
        fwd.append(tf)
        bwd.append(tb)
        if last is None or tf > last[0]:
            last = (tf, forward)
    left_out = [s for s in gat_shapes(cal) if s not in shapes]
    if left_out and cores > 1:  # the thread speed-ups of the largest shape, left out of the fit (UNFUSED_LEFT_OUT)
        n, deg, heads, ch = max(left_out, key=lambda s: s[0] * s[1] * s[2] * s[3])
        att = AttentionAggregation(heads, ch, SLOPE, self_loops=False, fused=fused, backend=None)
        last = (0.0, (autograd_calls if autograd else gat_calls)(att, *gat_inputs(n, deg, heads, ch, gen))[0])
    eff = parallel_eff(cal, found, cores, last[1], name)
    fit = fit_op(rows_fit, fwd, bwd, 2e8 if fused else 5e7)
    found.raw[name] = {"shapes": shapes, "fwd": fwd, "bwd": bwd,
                       "entry": "sarlab.nn.gat.AttentionAggregation"}
    return OpCost(**fit._asdict(), parallel_eff=eff)


def bench_gat_autograd(cal: Calibration, found: Findings, cores: int, gen: torch.Generator) -> OpCost:
    """Unfused GAT under torch autograd (``sa``/``oneshot``/one worker): forward with the graph recorded,
    then ``autograd.grad`` through it."""
    return _bench(cal, found, cores, gen, "gat_autograd", fused=False, autograd=True)


def bench_gat_unfused(cal: Calibration, found: Findings, cores: int, gen: torch.Generator) -> OpCost:
    """Unfused GAT as ``sar`` streams it: the layer's torch forward (no autograd) and its torch backward, which
    recomputes the attention of the shard first."""
    return _bench(cal, found, cores, gen, "gat_unfused", fused=False, autograd=False)


def bench_gat_fused(cal: Calibration, found: Findings, cores: int, gen: torch.Generator) -> OpCost | None:
    """The fused kernels (``kernels.gat_forward_shard`` / ``gat_backward_shard`` as the layer calls them), on
    the backend ``kernels.backend()`` resolves (recorded in the notes and ``raw``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the one-line fallback warning: the note below says it
        backend = kernels.backend()
    try:
        cost = _bench(cal, found, cores, gen, "gat_fused", fused=True, autograd=False)
    except Exception as err:  # noqa: BLE001 - a failing kernel must not sink the whole calibration
        found.notes.append(f"fused GAT not measured: calling the kernels failed ({type(err).__name__}: {err})")
        return None
    found.notes.append(f"fused GAT measured with kernels backend {backend!r}")
    found.raw["gat_fused"]["backend"] = backend
    return _with_cache(cal, found, gen, cost)


#: the fused kernels' cache sweep (full calibrations): (heads, channels, degree) and the rows, so that the gathered
#: source rows (``rows x (H C + H) x 4`` bytes: 2.6-42 MB) straddle a last-level cache of a few to tens of MB
CACHE_SWEEP = (4, 32, 8)
CACHE_ROWS = (5_000, 20_000, 80_000)


def _with_cache(cal: Calibration, found: Findings, gen: torch.Generator, cost: OpCost) -> OpCost:
    """``cost`` with an in-cache and an out-of-cache rate (``rate``, ``mem_rate``) fitted on :data:`CACHE_ROWS`
    (:func:`sarlab.simulator.calibration.fitting.fit_gather_rates`) against the SpMM step's cache (``llc_bytes``);
    as it is in ``--quick``, without that cache, or where the sweep does not tell the rates apart. One rate for every
    shard had priced two workers' halves of a 20,000-row shard at 19 % more than the whole, where they ran 12 %
    faster (results/host_model/families)."""
    llc = float(found.raw.get("llc_bytes", 0.0))
    if cal.quick or llc <= 0:
        return cost
    heads, ch, deg = CACHE_SWEEP
    att = AttentionAggregation(heads, ch, SLOPE, self_loops=False, fused=True, backend=None)
    edge_s, work, gathered = [], [], []
    for n in CACHE_ROWS:
        forward, backward = gat_calls(att, *gat_inputs(n, deg, heads, ch, gen))
        both = time_call(forward, cal.repeats) + time_call(backward, cal.repeats)
        rows_s = active_rows(n * deg, n) * heads * ch / cost.row_rate if cost.row_rate else 0.0
        visits = n * deg * heads / cost.edge_rate if cost.edge_rate else 0.0  # each edge-head's own cost
        edge_s.append((both - (1.0 + cost.edge_ratio) * visits) / (1.0 + cost.bwd_ratio) - cost.overhead_s - rows_s)
        work.append(float(n * deg * heads * ch))
        gathered.append(n * (heads * ch + heads) * 4.0)
    found.raw["gat_fused"]["cache_sweep"] = {"rows": list(CACHE_ROWS), "shape": list(CACHE_SWEEP), "edge_s": edge_s}
    rates = fit_gather_rates(edge_s, work, gathered, llc)
    if rates is None:
        found.notes.append("gat_fused: its cache sweep did not tell an out-of-cache rate apart; one rate kept")
        return cost
    rate, mem_rate = rates
    found.notes.append(f"gat_fused: {rate:.3g} per s in cache, {mem_rate:.3g} beyond it ({llc / 2**20:.1f} MB), "
                       f"from {len(CACHE_ROWS)} shapes of {CACHE_ROWS[0]:,d}-{CACHE_ROWS[-1]:,d} rows")
    return replace(cost, rate=rate, mem_rate=mem_rate)
