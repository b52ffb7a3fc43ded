"""GAT's self-loop work (``AttentionAggregation.init`` / ``self_vjp``) in the simulator, counted by hand.

Byte counts are reads + writes of every op the engine runs (``sarlab/nn/gat.py``), listed op by op below in
elements per destination row (``b = 4``, float32; the two ``torch.where`` masks are 1-byte bools), so that the
expected numbers do not come from the code under test.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from test_simulator_fixtures import hand_profile, two_parts

from sarlab.simulator.hardware.profile import OpCost
from sarlab.simulator.system.epoch import simulate_epoch
from sarlab.simulator.system.pricing import EpochPricing
from sarlab.simulator.system.replay import model_for
from sarlab.simulator.system.runspec import RunSpec, resolve_placement
from sarlab.simulator.workload.layers import LayerPlan, layer_plans
from sarlab.simulator.workload.model import ModelSpec, parse_model
from sarlab.simulator.workload.ops import Op

B = 4
INF = float("inf")
RATE = 1e8  # elementwise bytes per second of the test profile; every other family is free

# layer 0 of a 2-head GAT with 3 channels per head (H = 2, C = 3, HC = 6) on n = 10 rows
N_ROWS, H, C = 10, 2, 3
HC = H * C
# init: s_dst + s_src (2 reads, 1 write), leaky, clone of m, e - m, exp, w z (reads z and w, writes HC)
INIT_ELEMS = [3 * H, 2 * H, 2 * H, 3 * H, 2 * H, HC + H + HC]
# self_vjp, float elements: p, leaky, - m, exp, (l > 0) read, ones_like, where (2 reads, 1 write), division,
# g * out, its sum (read HC, write H), g * z, its sum, - delta, alpha *, (p > 0) read, ones_like, full_like,
# where, * leaky', g_z (reads g and alpha), cat (reads g_z and d_e twice, writes HC + 2H), grad_dst += (3 passes)
SELF_VJP_ELEMS = [3 * H, 2 * H, 3 * H, 2 * H, H, H, 3 * H, 3 * H, 3 * HC, HC + H, 3 * HC, HC + H, 3 * H, 3 * H,
                  H, H, H, 3 * H, 3 * H, HC + H + HC, (HC + 2 * H) * 2, 3 * (HC + 2 * H)]
SELF_VJP_BOOL_BYTES = 4 * H  # two bool masks written, each read once by its where
# autograd's backward of init's graph: acc * scale (g * scale), l * scale, g * z and its sum, g * w, the two
# gradients of w added, exp' and leaky' (3 passes each), three slice backwards of the [n, HC + 2H] destination rows
# (zeros at 2.3 passes, the slice copied in: z, s_src, s_dst) and their three adds into the rows' gradient
SLICES = 3 * 2.3 * (HC + 2 * H) + 2 * HC + 2 * H + 2 * H + 3 * 3 * (HC + 2 * H)
AUTOGRAD_ELEMS = [HC + H + HC, 3 * H, 3 * HC, HC + H, HC + H + HC, 3 * H, 3 * H, 3 * H, SLICES]


def _layer0(self_loops: bool, fused: bool = True, autograd: bool = False) -> LayerPlan:
    spec = ModelSpec("gat", layers=2, hidden=HC, heads=H, fused=fused, batchnorm=False, dropout=0.0,
                     self_loops=self_loops)
    plan = layer_plans(spec, feature_dim=5, num_classes=3)[0]
    assert (plan.heads, plan.channels, plan.bytes_per_element) == (H, C, B)
    return replace(plan, autograd=autograd)


def _all_ops(plan: LayerPlan, n: float, edges: float = 25.0) -> list[Op]:
    """Every op the layer prices, forward and backward."""
    ops = plan.pre_fwd(n) + plan.agg_init(n) + plan.self_init(n) + plan.shard_fwd(edges, n, n) + plan.finalize(n)
    ops += plan.post_fwd(n) + [o for part in plan.tail_fwd(n) for o in part]
    ops += [o for part in plan.tail_bwd(n) for o in part] + plan.post_bwd(n) + plan.agg_bwd_setup(n)
    ops += plan.self_bwd(n) + plan.shard_bwd(edges, n, n) + plan.pre_bwd(n)
    return ops + plan.accumulate_grad(n) + plan.gather_rows(n) + plan.copy_rows(n)


def _extra(plan_with: LayerPlan, plan_without: LayerPlan, n: float) -> list[Op]:
    """Ops priced with self loops and not without (as a multiset)."""
    return list((Counter(_all_ops(plan_with, n)) - Counter(_all_ops(plan_without, n))).elements())


@pytest.mark.parametrize("fused", [True, False])
def test_self_loop_ops_are_the_hand_count(fused):
    """With self loops: the init (6 calls) and the self-loop VJP (22 calls, backward) and nothing else."""
    extra = _extra(_layer0(True, fused), _layer0(False, fused), N_ROWS)
    init_bytes = N_ROWS * sum(INIT_ELEMS) * B
    vjp_bytes = N_ROWS * (sum(SELF_VJP_ELEMS) * B + SELF_VJP_BOOL_BYTES)
    assert (init_bytes, vjp_bytes) == (1520, 7360)  # added up on paper: 38 and 184 elements a row
    assert sorted(extra, key=lambda o: o.calls) == [
        Op("elementwise", pytest.approx(init_bytes), calls=6),
        Op("elementwise", pytest.approx(vjp_bytes), calls=22, backward=True),
    ]
    assert len(INIT_ELEMS) == 6 and len(SELF_VJP_ELEMS) == 22


def test_self_loop_ops_under_autograd_are_the_hand_count():
    """Unfused GAT under autograd: the same init, then the backward of init's graph (17 calls)."""
    extra = _extra(_layer0(True, False, autograd=True), _layer0(False, False, autograd=True), N_ROWS)
    backward = N_ROWS * sum(AUTOGRAD_ELEMS) * B
    assert backward == pytest.approx(10280.0)  # 257 elements a row, on paper
    assert sorted(extra, key=lambda o: o.calls) == [
        Op("elementwise", pytest.approx(N_ROWS * sum(INIT_ELEMS) * B), calls=6),
        Op("elementwise", pytest.approx(backward), calls=17, backward=True),
    ]


def test_without_self_loops_or_for_other_models_nothing_is_added():
    for plan in (_layer0(False), _layer0(False, False, autograd=True)):
        assert plan.self_init(N_ROWS) == [] and plan.self_bwd(N_ROWS) == []
    gcn = layer_plans(ModelSpec("gcn", layers=2, hidden=8), feature_dim=5, num_classes=3)[0]
    assert gcn.self_loops and gcn.self_init(N_ROWS) == [] and gcn.self_bwd(N_ROWS) == []


def _profile():
    free = OpCost(rate=INF, overhead_s=0.0, bwd_ratio=1.0, parallel_eff=1.0)
    ops = {name: free for name in ("gemm", "spmm", "max_aggr", "gat_unfused", "gat_fused", "gat_autograd")}
    ops["elementwise"] = OpCost(rate=RATE, overhead_s=0.0, bwd_ratio=1.0, parallel_eff=1.0)
    return replace(hand_profile(), ops=ops)


def _per_layer_compute(result) -> np.ndarray:
    """Compute seconds of each layer's segments, per rank: rows ranks, columns layers 0 and 1."""
    out = np.zeros((len(result.intervals), 2))
    for rank, bars in enumerate(result.intervals):
        for bar in bars:
            if bar.kind == "compute" and isinstance(bar.what[0], int):
                out[rank, bar.what[0]] += bar.end - bar.start
    return out


# per destination row, layer 0 (H = 2, C = 3) and layer 1 (the output layer: H = 1, C = 4 classes), on paper:
# init 38 and 21 elements; self_vjp 182 and 106 float elements + 4 H bool bytes; autograd 257 and 154.4 elements
PER_ROW = {"vjp": np.array([38 * B + 182 * B + 8, 21 * B + 106 * B + 4]),
           "autograd": np.array([38 * B + 257 * B, 21 * B + 154.4 * B])}


@pytest.mark.parametrize("mode,fused", [("sar", True), ("sar", False), ("sa", True), ("sa", False),
                                        ("oneshot", True), ("oneshot", False)])
def test_simulated_epoch_adds_the_hand_seconds_per_layer(mode, fused):
    """Two workers (100 and 60 rows): each layer's compute grows by n (init + VJP bytes) / rate, on both
    executors; unfused ``sa``/``oneshot`` run under autograd."""
    stats, profile = two_parts(), _profile()
    backward = "autograd" if not fused and mode != "sar" else "vjp"
    rows = np.array([100.0, 60.0])
    expected = rows[:, None] * PER_ROW[backward][None, :] / RATE
    traced, totals = {}, {}
    for loops in (True, False):
        model = ModelSpec("gat", layers=2, hidden=HC, heads=H, fused=fused, batchnorm=False, dropout=0.0,
                          self_loops=loops)
        run = RunSpec(mode=mode, threads=1)
        traced[loops] = _per_layer_compute(simulate_epoch(stats, model, replace(run, trace=True), profile))
        totals[loops] = simulate_epoch(stats, model, replace(run, executor="lockstep"), profile).compute_s
    assert traced[True] - traced[False] == pytest.approx(expected, rel=1e-9)
    assert totals[True] - totals[False] == pytest.approx(expected.sum(axis=1), rel=1e-9)


def test_without_self_loops_the_aggregation_segments_price_what_they_did():
    """sar, fused, no self loops, only elementwise work costing: the local shard's forward and backward segments
    hold no elementwise op; finalize ``acc / l`` is 3 passes of n HC; the backward's setup zeroes the source
    gradient (1 pass of n w) and zero-fills the destination gradient (2.3 passes of n (w + H))."""
    model = ModelSpec("gat", layers=2, hidden=HC, heads=H, fused=True, batchnorm=False, dropout=0.0,
                      self_loops=False)
    result = simulate_epoch(two_parts(), model, RunSpec(mode="sar", threads=1, trace=True), _profile())
    for rank, n in enumerate((100, 60)):
        seconds = {bar.what: bar.end - bar.start for bar in result.intervals[rank] if bar.kind == "compute"}
        for li, (hc, heads) in enumerate(((HC, H), (4, 1))):
            w = hc + heads
            assert seconds.get((li, "agg", 0), 0.0) == 0.0 and seconds.get((li, "agg-bwd", 0), 0.0) == 0.0
            assert seconds[(li, "finalize")] == pytest.approx(3 * n * hc * B / RATE)
            assert seconds[(li, "bwd-setup")] == pytest.approx((n * w + 2.3 * n * (w + heads)) * B / RATE)


def test_self_loop_vjp_transient_only_with_self_loops():
    """The local shard's backward temporaries (fused, layer 0, rank 0: n = 100, its own 100 source rows): the VJP's
    zeroed destination gradient n (HC + 2H), delta n H, the score copies 2 n H, the kernel's outputs n (HC + H) and
    n H; with self loops at least the self-loop VJP's n (3 HC + 9 H); beside either the row gradient n (HC + H) (the
    kernel's outputs concatenated), which the ring modes add into the source gradient after the self-loop VJP."""
    stats, profile = two_parts(), _profile()
    n = 100
    vjp = (n * (HC + 2 * H) + n * H + 2 * n * H + n * (HC + H) + n * H) * B
    row_grad = n * (HC + H) * B
    with_loops = max(vjp, n * (3 * HC + 9 * H) * B) + row_grad
    assert (vjp, row_grad, with_loops) == (10400, 3200, 17600)
    for loops, expected in ((False, vjp + row_grad), (True, with_loops)):
        model = ModelSpec("gat", layers=2, hidden=HC, heads=H, fused=True, batchnorm=False, self_loops=loops)
        run = RunSpec(mode="sar", threads=1)
        pricing = EpochPricing(stats, model, run, profile, resolve_placement(profile, 2, run))
        assert pricing.layers[0].shard_bwd_transient[0][0] == pytest.approx(expected)


def _record(**extra) -> pd.Series:
    row = {"model": "gat", "mode": "sar+fused", "layers": 3, "hidden": 96, "heads": 4, "batchnorm": True,
           "dropout": 0.0, "dtype": "float32"}
    return pd.Series({**row, **extra})


def test_model_for_reads_self_loops_from_a_record():
    assert model_for(_record(self_loops=False)).self_loops is False
    assert model_for(_record(self_loops=True)).self_loops is True
    assert model_for(_record(self_loops="False")).self_loops is False  # a CSV column read as text
    assert model_for(_record()).self_loops is True  # records older than the column: the engine's default
    assert model_for(_record(self_loops=np.nan)).self_loops is True
    spec = model_for(_record(self_loops=False))
    assert (spec.model, spec.fused, spec.heads) == ("gat", True, 4)


def test_parse_model_keeps_self_loops_of_the_base():
    base = ModelSpec(hidden=8, heads=2, self_loops=False)
    assert parse_model("gat-fused", base).self_loops is False
    assert parse_model("gat", ModelSpec(hidden=8, heads=2)).self_loops is True


def test_sampled_steps_price_the_self_loops_on_each_blocks_destination_rows():
    """`--mode sampling` prices GAT's self-loop terms per sampled block: with self loops, one step's elementwise
    bytes grow by the hand counts above on each layer's destination rows (fused GAT: the plain self_vjp)."""
    from sarlab.simulator.strategies.sampling_model import step_ops
    from sarlab.simulator.workload.sampled_sizes import SampledSizes
    from sarlab.simulator.workload.workload import estimate_partition

    stats = estimate_partition(1000, 8000, 2, 5, 3)
    sizes = SampledSizes(rows=np.array([400.0, 120.0, 30.0]), edges=np.array([900.0, 200.0]),
                         local=np.array([0.6, 0.7, 1.0]))
    spec = ModelSpec("gat", layers=2, hidden=HC, heads=H, fused=True, batchnorm=False, dropout=0.0)

    def elementwise_bytes(self_loops: bool) -> float:
        ops = step_ops(replace(spec, self_loops=self_loops), stats, sizes)
        return sum(op.work for op in ops if op.family == "elementwise")

    # layer 0: H heads of C channels; layer 1 (last): one head of num_classes = 3 channels, averaged
    per_row = [(sum(INIT_ELEMS) * B) + sum(SELF_VJP_ELEMS) * B + SELF_VJP_BOOL_BYTES,
               (2 * 3 + 13 * 1) * B + 15 * 3 * B + (46 * B + 4) * 1]
    want = per_row[0] * 120.0 + per_row[1] * 30.0
    assert elementwise_bytes(True) - elementwise_bytes(False) == pytest.approx(want)


def test_validation_keeps_the_records_self_loops_apart():
    """Records of the same GAT configuration with and without self loops are two configurations after
    summarize_measured, each priced with its own flag; records without the column mean the engine's default."""
    from sarlab.simulator.calibration.measured import summarize_measured, with_defaults

    base = dict(mode="sar", model="gat", workers=1, rank=0, epoch_time_s=1.0, compute_s=1.0, comm_wait_s=0.0,
                peak_mem_bytes=2e6, baseline_mem_bytes=1e6, num_nodes=100, num_edges=400, feature_dim=5,
                num_classes=3, layers=2, hidden=6, heads=2, fused=True)
    records = pd.DataFrame([dict(base, epoch=e, self_loops=flag) for flag in (True, False) for e in (0, 1)])
    table = summarize_measured(with_defaults(records), warmup=1)
    assert sorted(table["self_loops"]) == [False, True]
    assert sorted(model_for(row).self_loops for _, row in table.iterrows()) == [False, True]
    old = summarize_measured(with_defaults(records[records.self_loops].drop(columns="self_loops")), warmup=1)
    assert list(old["self_loops"]) == [True] and model_for(old.iloc[0]).self_loops
