"""The per-edge cost of the sparse families (``OpCost.edge_rate``, ``Op.edges``): what the workload counts, how the
cost model prices it and how the calibration's fit recovers it. References are numbers worked out by hand or
timings generated from known coefficients, never the code under test."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_simulator_fixtures import hand_profile

from sarlab.simulator.calibration.fitting import FREE_RATE, fit_op
from sarlab.simulator.hardware.opcost import OpCost
from sarlab.simulator.system.costs import CostModel
from sarlab.simulator.workload.layers import layer_plans
from sarlab.simulator.workload.model import ModelSpec
from sarlab.simulator.workload.ops import Op, spmm_passes

# the calibration's full SpMM shapes (nodes, degree, features) with the per-edge ones, and the tiny one
SHAPES = [(20000, 2, 64), (20000, 10, 64), (20000, 40, 64), (60000, 4, 32), (8000, 16, 256), (16000, 64, 64),
          (40000, 16, 16), (10000, 24, 128), (64, 2, 8)]
O, R, R_ROW, R_EDGE, RHO, RHO_E = 2e-5, 2.0e10, 3.0e9, 2.5e9, 1.1, 0.8


def _timings(shapes, passes):
    rows, fwd, bwd = [], [], []
    for n, d, f in shapes:
        e = n * d * passes(f)
        main = O + n * d * f / R + n * f / R_ROW
        rows.append([1.0, n * d * f, n * f, e])
        fwd.append(main + e / R_EDGE)
        bwd.append(RHO * main + RHO_E * e / R_EDGE)
    return rows, fwd, bwd


def test_spmm_passes_follow_the_kernels_register_blocks():
    """kernels/csrc/spmm.cpp: blocks of 128, then one each of 64, 32 and 16 floats, then the rest in one pass."""
    expected = {1: 1, 7: 1, 8: 1, 15: 1, 16: 1, 17: 2, 32: 1, 40: 2, 47: 2, 64: 1, 100: 3, 128: 1, 129: 2,
                256: 2, 600: 7}  # 600 = 4 x 128 + 64 + 16 + 8
    assert {f: spmm_passes(f) for f in expected} == expected
    assert spmm_passes(16, 8) == 1 and spmm_passes(15, 8) == 2  # doubles: a line is 8 of them (8 + 7)


def test_fit_op_separates_the_per_edge_cost_and_the_backward_ratios():
    rows, fwd, bwd = _timings(SHAPES, spmm_passes)
    fit = fit_op(rows, fwd, bwd, 1e9)
    assert fit.rate == pytest.approx(R, rel=1e-6)
    assert fit.row_rate == pytest.approx(R_ROW, rel=1e-6)
    assert fit.edge_rate == pytest.approx(R_EDGE, rel=1e-6)
    assert fit.overhead_s == pytest.approx(O, rel=1e-6)
    assert (fit.bwd_ratio, fit.edge_bwd_ratio) == (pytest.approx(RHO, rel=1e-6), pytest.approx(RHO_E, rel=1e-6))


def test_fit_op_without_edge_visits_keeps_one_backward_ratio():
    """Design rows of three columns (or no per-edge cost in the timings): the fit of before, the backward ratio the
    median of backward over forward."""
    rows, fwd, _ = _timings(SHAPES, spmm_passes)
    bwd = [t * r for t, r in zip(fwd, (1.0, 1.2, 1.4, 1.6, 1.8, 2.0, 2.2, 2.4, 2.6), strict=True)]
    fit = fit_op([r[:3] for r in rows], fwd, bwd, 1e9)
    assert fit.edge_rate is None and fit.edge_bwd_ratio is None
    assert fit.bwd_ratio == pytest.approx(1.8)
    free = [[1.0, n * d * f, n * f, n * d] for n, d, f in SHAPES]
    fit = fit_op(free, [O + n * d * f / R + n * f / R_ROW for n, d, f in SHAPES], [], 1e9)
    assert fit.edge_rate is None and fit.rate == pytest.approx(R, rel=1e-6)


def test_edge_visits_are_priced_by_hand():
    """spmm: 1e6 work units per s; 1e5 edge visits per s, backward edge ratio 0.5 (work ratio 2)."""
    base = hand_profile()
    spmm = replace(base.op("spmm"), edge_rate=1e5, edge_bwd_ratio=0.5)
    profile = replace(base, ops={**base.ops, "spmm": spmm}, compute_scale=1.0)
    model = CostModel(profile, threads=1)
    assert model.op_seconds(Op("spmm", 2e6, edges=3e4)) == pytest.approx(2.0 + 0.3)
    assert model.op_seconds(Op("spmm", 2e6, edges=3e4, backward=True)) == pytest.approx(2.0 * 2 + 0.3 * 0.5)
    without = replace(spmm, edge_bwd_ratio=None)
    model = CostModel(replace(profile, ops={**profile.ops, "spmm": without}), threads=1)
    assert model.op_seconds(Op("spmm", 2e6, edges=3e4, backward=True)) == pytest.approx(2.0 * 2 + 0.3 * 2)
    model = CostModel(base, threads=1)  # a profile calibrated before the term: edge visits cost nothing
    assert model.op_seconds(Op("spmm", 2e6, edges=3e4)) == pytest.approx(2.0 * base.compute_scale)


def test_op_cost_rejects_a_non_positive_edge_rate():
    with pytest.raises(ValueError, match="edge_rate"):
        OpCost(rate=1.0, edge_rate=0.0)
    with pytest.raises(ValueError, match="edge_bwd_ratio"):
        OpCost(rate=1.0, edge_rate=1.0, edge_bwd_ratio=-1.0)


@pytest.mark.parametrize("model,hidden,heads,visits", [("gat", 32, 4, [4, 1]), ("gat", 512, 8, [8, 1]),
                                                       ("gcn", 40, 1, [2, 1]), ("sage", 100, 1, [1, 3])])
def test_layers_count_an_edge_once_per_head_or_pass(model, hidden, heads, visits):
    """GAT: each hidden layer's edge is scored once per head (the output layer has one); GCN aggregates after its
    linear map (hidden 40 = 32 + 8: two passes), SAGE before it (64 input features: one pass; hidden 100: three)."""
    spec = ModelSpec(model, layers=2, hidden=hidden, heads=heads, fused=True, batchnorm=False)
    plans = layer_plans(spec, feature_dim=64, num_classes=16)
    edges = 1000
    got = [plan.shard_fwd(edges, 500, 500)[0].edges / edges for plan in plans]
    assert got == visits


def test_work_that_costs_nothing_beside_the_edge_visits_is_free_not_the_fallback():
    """Timings made of overhead, rows and edge visits only (GAT's in-cache channels on some days): the work's rate is
    the free one, not the fallback of a family never measured (2e8/s had priced a 24,000-node GAT epoch at 2.5 s)."""
    rows, fwd, bwd = [], [], []
    for n, d, f in SHAPES:
        e = n * d
        rows.append([1.0, n * d * f, n * f, e])
        fwd.append(O + n * f / R_ROW + e / R_EDGE)
        bwd.append(RHO * (O + n * f / R_ROW) + RHO_E * e / R_EDGE)
    fit = fit_op(rows, fwd, bwd, 2e8)
    assert fit.rate == FREE_RATE
    assert (fit.edge_rate, fit.row_rate) == (pytest.approx(R_EDGE, rel=1e-6), pytest.approx(R_ROW, rel=1e-6))
