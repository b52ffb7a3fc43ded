"""Each op family's factor over the compute-scale curve (``Profile.family_scale``): priced on its family only (a
hand timeline), fitted back from runs built with known factors, split out of a one-worker prediction, kept in the
profile's JSON and written by the engine step. No timing: every number here is given."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest
from test_simulator_fixtures import hand_profile, run1, two_parts

from sarlab.real.calibration.engine_runs import FAMILY_HIDDEN, child_plan, run_one
from sarlab.simulator.calibration.fitting import FAMILY_BOUNDS, aggregation_factors, fit_family_scale
from sarlab.simulator.hardware.profile import Profile, load_profile, save_profile
from sarlab.simulator.system.replay import family_seconds, simulate_row
from sarlab.simulator.workload.model import ModelSpec
from sarlab.simulator.workload.workload import estimate_partition

GCN1 = ModelSpec("gcn", layers=1, hidden=4, batchnorm=False, dropout=0.0)


def test_a_family_factor_prices_its_family_only_by_hand():
    """One GCN layer on one worker of 160 nodes and 590 edges, 8 features, 4 classes (the hand profile: GEMM at 1e9
    FLOP/s, SpMM at 1e6 edge*feature/s with backward x2, elementwise free): x W and the weight gradient, two GEMMs of
    2 n F C FLOP; A (x W) forward (E C) and A^T g backward (2 E C). The epoch is 2 k_gemm g + 3 k_spmm s."""
    st = estimate_partition(160, 590, 1, 8, 4)
    g, s = 2 * 160 * 8 * 4 / 1e9, 590 * 4 / 1e6
    for factors in ({}, {"gemm": 3.0}, {"spmm": 0.5}, {"gemm": 3.0, "spmm": 0.5, "gat_fused": 7.0}):
        epoch = run1(st, GCN1, "sar", replace(hand_profile(), family_scale=factors)).epoch_time_s[0]
        assert epoch == pytest.approx(2 * factors.get("gemm", 1.0) * g + 3 * factors.get("spmm", 1.0) * s, rel=1e-12)


@pytest.mark.parametrize("executor", ["events", "lockstep"])
def test_two_workers_price_each_family_with_its_factor(executor):
    """Two workers of the hand partition: doubling every family's factor doubles the compute on the timeline, and a
    factor on a family the model does not run (GAT's) changes nothing."""
    st, prof = two_parts(), hand_profile(latency=0.0, bandwidth=1e15, gap=0.0)
    base = run1(st, GCN1, "sar", prof, executor=executor).epoch_time_s
    doubled = run1(st, GCN1, "sar", replace(prof, family_scale={"gemm": 2.0, "spmm": 2.0}), executor=executor)
    unused = run1(st, GCN1, "sar", replace(prof, family_scale={"gat_unfused": 5.0}), executor=executor)
    assert doubled.epoch_time_s == pytest.approx(2.0 * base, rel=1e-9)
    assert unused.epoch_time_s == pytest.approx(base, rel=1e-12)


def _split(gemm: float, spmm: float, elementwise: float, gat: float = 0.0) -> dict[str, float]:
    out = {"gemm": gemm, "spmm": spmm, "elementwise": elementwise}
    if gat:
        out["gat_fused"] = gat
    return {k: v for k, v in out.items() if v}


OTHERS = ("spmm", "max_aggr", "gat_unfused", "gat_fused", "gat_autograd", "elementwise")


def test_fit_family_scale_recovers_the_factors_runs_were_built_with():
    """Runs whose families split as GCN's, SAGE's and GAT's do, measured as sum_f k_f p_f with GEMM's k and one k
    shared by the others: the fit finds both (within the weak pull towards 1) and gives the shared one to every family
    but GEMM, the ones the runs did not hold included."""
    gemm, rest = 1.3, 0.6
    splits = [_split(0.37, 0.18, 0.45), _split(0.59, 0.15, 0.26), _split(0.08, 0, 0.37, 0.55),
              _split(0.30, 0.33, 0.36), _split(0.50, 0.29, 0.21), _split(0.08, 0, 0.36, 0.56)]
    measured = [sum((gemm if f == "gemm" else rest) * v for f, v in s.items()) for s in splits]
    found = fit_family_scale(measured, splits)
    assert found == pytest.approx({"gemm": gemm, **dict.fromkeys(OTHERS, rest)}, rel=0.01)
    # exact runs of factor 1 everywhere give 1
    assert fit_family_scale([sum(s.values()) for s in splits], splits) == pytest.approx(
        {"gemm": 1.0, **dict.fromkeys(OTHERS, 1.0)})
    # GEMM apart and the rest: a family of its own where asked
    alone = fit_family_scale(measured, splits, apart=("gemm", "gat_fused"))
    assert alone["gemm"] == pytest.approx(gemm, rel=0.01) and alone["gat_fused"] == pytest.approx(rest, rel=0.01)


def test_measured_aggregation_gives_its_family_factor_and_the_rest_is_fitted_around_it():
    """Runs built with GEMM 1.3, SpMM 1.1, fused GAT 0.55 and the rest 0.6: each run's aggregation measured as its
    factor times its price (one run unmeasured, a SAGE-max run of another family); the two aggregation factors are the
    medians of measured over priced, and with them given, the fit recovers GEMM's and the rest's."""
    k = {"gemm": 1.3, "spmm": 1.1, "gat_fused": 0.55}
    rest = 0.6
    splits = [_split(0.37, 0.18, 0.45), _split(0.59, 0.15, 0.26), _split(0.08, 0, 0.37, 0.55),
              _split(0.30, 0.33, 0.36), _split(0.50, 0.29, 0.21), _split(0.08, 0, 0.36, 0.56)]
    measured = [sum(k.get(f, rest) * v for f, v in s.items()) for s in splits]
    aggregation = [1.1 * 0.18, 1.2 * 0.15, 0.55 * 0.55, None, 1.0 * 0.29, 0.55 * 0.56]
    known = aggregation_factors(aggregation, splits)
    assert known == pytest.approx({"spmm": 1.1, "gat_fused": 0.55})  # spmm: the median of 1.1, 1.2 and 1.0
    found = fit_family_scale(measured, splits, known=known)
    assert found == pytest.approx({"gemm": 1.3, "spmm": 1.1, "gat_fused": 0.55,
                                   **dict.fromkeys(("max_aggr", "gat_unfused", "gat_autograd", "elementwise"), rest)},
                                  rel=0.01)
    # a run pricing two aggregation families, or none, measures neither; the factors keep within the bounds
    assert aggregation_factors([1.0, 1.0], [{"spmm": 1.0, "max_aggr": 1.0}, {"gemm": 1.0}]) == {}
    assert aggregation_factors([100.0], [{"spmm": 1.0}]) == {"spmm": FAMILY_BOUNDS[1]}
    with pytest.raises(ValueError, match="one measurement"):
        aggregation_factors([1.0], splits)


def test_fit_family_scale_holds_its_bounds_leaves_out_what_no_run_holds_and_refuses_bad_input():
    splits = [_split(1.0, 0, 0), _split(0, 1.0, 0)]
    assert fit_family_scale([100.0, 0.001], splits) == {"gemm": FAMILY_BOUNDS[1],
                                                          **dict.fromkeys(OTHERS, FAMILY_BOUNDS[0])}
    only_gemm = [_split(1.0, 0.001, 0), _split(2.0, 0, 0.001)]
    assert fit_family_scale([1.2, 2.4], only_gemm) == {"gemm": pytest.approx(1.2, rel=0.01)}  # the rest: < 10 %
    with pytest.raises(ValueError, match="one measured epoch"):
        fit_family_scale([1.0], splits)
    with pytest.raises(ValueError, match="finite"):
        fit_family_scale([1.0, 0.0], splits)


def _row(model: str, workers: int = 1) -> pd.Series:
    return pd.Series({"label": "", "graph": "g", "partition_dir": "", "num_nodes": 20_000, "num_edges": 400_000,
                      "feature_dim": 64, "num_classes": 16, "model": model, "layers": 2, "hidden": 64, "heads": 4,
                      "aggr": "mean", "fused": True, "mode": "sar", "workers": workers, "prefetch": 1,
                      "dtype": "float32", "batchnorm": False, "dropout": 0.0, "threads": 1, "net": "loopback",
                      "backend": "gloo", "mem_method": "live"})  # fmt: skip


@pytest.mark.parametrize("model", ["gcn", "sage", "gat"])
def test_family_seconds_add_up_to_the_one_worker_epoch(model):
    prof = replace(load_profile("reference-laptop"), family_scale={"gemm": 1.5})
    stats = estimate_partition(20_000, 400_000, 1, 64, 16)
    split = family_seconds(_row(model), prof, stats)
    whole = float(simulate_row(_row(model), prof, stats).epoch_time_s.max())
    assert sum(split.values()) == pytest.approx(whole, rel=1e-6)
    assert "gemm" in split and ("gat_fused" in split) == (model == "gat") and "max_aggr" not in split
    with pytest.raises(ValueError, match="one-worker"):
        family_seconds(_row(model, workers=2), prof, stats)


def test_profile_keeps_its_family_factors_and_refuses_bad_ones(tmp_path):
    prof = replace(hand_profile(), family_scale={"gemm": 1.2, "gat_fused": 0.8})
    back = load_profile(save_profile(prof, tmp_path / "p.json"))
    assert back.family_scale == {"gemm": 1.2, "gat_fused": 0.8}
    assert "family_scale" not in hand_profile().to_json()  # written as before the field where empty
    assert Profile.from_json(hand_profile().to_json()).family_scale == {}
    with pytest.raises(ValueError, match="family_scale"):
        replace(hand_profile(), family_scale={"gemm": 0.0})
    with pytest.raises(ValueError, match="family_scale"):
        replace(hand_profile(), family_scale={"matmul": 1.0})


def test_the_engine_plan_runs_gat_beside_gcn_and_sage_at_the_family_sizes(tmp_path):
    plan = child_plan((1, 2, 3), 0, 2, 3, 256, 2, tmp_path, family_sizes=(1, 2))
    live = [(r["spec"].split(",")[0].split("=")[1], r["model"], r["hidden"]) for r in plan if r["memory"] == "live"]
    assert live == [("1", "gcn", 256), ("1", "sage", 256), ("1", "gat", FAMILY_HIDDEN),
                    ("2", "gcn", 256), ("2", "sage", 256), ("2", "gat", FAMILY_HIDDEN),
                    ("3", "gcn", 256), ("3", "sage", 256)]
    quick = child_plan((1, 2), 0, 2, 2, 32, 2, tmp_path, family_sizes=(1, 2))
    assert {r["hidden"] for r in quick if r["model"] == "gat"} == {32}
    # the live runs at the family sizes time their aggregation in one more epoch; the rss runs and the largest size not
    timed = [(r["spec"].split(",")[0].split("=")[1], r["model"], r["memory"]) for r in plan if r["aggregation"]]
    assert timed == [(n, m, "live") for n in ("1", "2") for m in ("gcn", "sage", "gat")]


def test_the_engine_step_writes_the_family_factors_into_the_profile(monkeypatch, tmp_path):
    import sarlab.real.calibration.calibrate as calibrate_module
    from sarlab.simulator.calibration.calibration import Calibration, Findings

    raw = {"runs": [{}] * 4, "ratio_nodes": 3000, "compute_scale_memory": "live", "memory_scale": {"rss": 2.1},
           "family_scale": {"gemm": 1.25, "gat_fused": 0.75}, "family_split": [{}] * 8}
    curve = ((50e6, 0.5), (500e6, 0.4))
    monkeypatch.setattr(calibrate_module, "bench_engine", lambda cal, prof: (0.45, curve, raw))
    cal = Calibration(quick=True, quiet_tries=1, log=lambda _line: None)
    prof = calibrate_module._fit_engine(cal, Findings(), hand_profile())
    assert prof.family_scale == {"gemm": 1.25, "gat_fused": 0.75}
    assert "family_scale" in prof.notes[-1] and "gemm 1.25" in prof.notes[-1]
    assert load_profile(save_profile(prof, tmp_path / "p.json")).family_scale == prof.family_scale


def test_a_run_times_its_aggregation_in_one_more_epoch(tmp_path):
    """A tiny one-worker GCN run of the calibration's child (under ``rss``: the test process keeps glibc's
    allocator): the profiled epoch's aggregation takes some of the time and less than a timed epoch holds, in a
    process that must see the engine's ``ShardAggregate`` events (0 would mean their names changed)."""
    run = {"spec": "synthetic:nodes=3000,degree=10,features=32,classes=4,seed=1", "partition_dir": str(tmp_path / "p"),
           "model": "gcn", "layers": 2, "hidden": 32, "epochs": 2, "threads": 1, "memory": "rss",
           "aggregation": True}
    records = run_one(run)
    assert len(records) == 2
    agg = records[-1]["aggregation_s"]
    assert 0.0 < agg < 3 * max(r["epoch_time_s"] for r in records)
    assert "aggregation_s" not in run_one({**run, "aggregation": False})[-1]
