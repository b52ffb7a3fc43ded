"""Tests of the calibration: its fits by hand, the check of implausible thread efficiencies, a quick real
calibration, the first-use memory probe and the speed probe of `sarlab bench engine`."""

from __future__ import annotations

import math
import subprocess
import sys
import threading
import time
from dataclasses import replace

import numpy as np
import pytest
import torch
from test_simulator_fixtures import hand_profile

import sarlab.real.bench.bench as bench_module
import sarlab.real.calibration.calibrate as calibrate_module
import sarlab.real.calibration.gatbench as gatbench
from sarlab.real.bench.bench import _Prober
from sarlab.real.calibration.gatbench import UNFUSED_LEFT_OUT, form_shapes, gat_inputs, gat_shapes
from sarlab.real.calibration.hostbench import bench_first_use, bench_share, launch_commbench
from sarlab.real.calibration.progressbench import rounds_for
from sarlab.real.calibration.sharebench import (
    GAP_S,
    MIN_WINDOW_S,
    SETTLE_S,
    START_DELAY_S,
    WINDOW_CALLS,
    agree_schedule,
    schedule,
    window_order,
)
from sarlab.real.commands.calibrate_cmd import calibrate_main
from sarlab.real.commands.simulate_cmd import simulate_main
from sarlab.simulator.calibration.calibration import Calibration, Findings
from sarlab.simulator.calibration.fitting import (
    fit_scale_curve,
    median_scale_points,
    pair_share_etas,
    share_eta,
    thread_eta,
)
from sarlab.simulator.hardware.plausibility import implausible_compute_scale, implausible_thread_effs
from sarlab.simulator.hardware.profile import OpCost, icelake_hdr200, load_profile, reference_laptop
from sarlab.simulator.hardware.provenance import plausibility_warnings, shipped_profiles
from sarlab.simulator.system.epoch import simulate_epoch
from sarlab.simulator.system.runspec import RunSpec
from sarlab.simulator.system.spread import barrier_loss
from sarlab.simulator.workload.model import ModelSpec
from sarlab.simulator.workload.workload import estimate_partition


def test_calibrate_quick(tmp_path):
    """A real quick calibration (accepted whatever its thread efficiencies: a loaded test machine may make
    them implausible, which other tests cover)."""
    path = tmp_path / "profile.json"
    args = ["--quick", "--accept-implausible", "--out", str(path), "--json", str(tmp_path / "c.json")]
    assert calibrate_main(args) == 0
    prof = load_profile(path)
    for name in ("gemm", "spmm", "max_aggr", "gat_unfused", "elementwise"):
        assert math.isfinite(prof.ops[name].rate) and prof.ops[name].rate > 0
    assert prof.intra_host.bandwidth_Bps > 1e6 and prof.intra_host.alpha_s > 0
    assert prof.cores_per_host >= 1
    assert prof.meta["implausible"] == implausible_thread_effs(prof.ops, prof.meta["threads_measured"][-1])
    # judged under the microbenchmarks' allocator (rss), as calibrate and simulate judge it
    assert prof.meta["compute_scale_flag"] == implausible_compute_scale(prof.for_memory("rss").compute_scale)
    # fitted from real engine epochs (sarlab train, 1 worker) of GCN and SAGE at two graph sizes, one pass in
    # --quick: a power law of sane multipliers of the op costs over the runs' predicted peak memory, that survives
    # the JSON round trip; its ends are, per size, the median of its two runs' measured/predicted at the geometric
    # mean of their peaks (two sizes: the line through both)
    assert 0.2 < prof.compute_scale < 20, prof.notes
    assert prof.compute_scale_key == "peak"
    runs = prof.meta["raw"]["engine"]["runs"]
    assert [(r["model"], r["nodes"], r["pass"]) for r in runs] == [
        ("gcn", 1500, 1), ("sage", 1500, 1), ("gcn", 3000, 1), ("sage", 3000, 1)]  # fmt: skip
    assert all(r["predicted_peak_bytes"] > r["activation_bytes"] > 0 for r in runs)
    ends = []
    for nodes in (1500, 3000):
        mine = [r for r in runs if r["nodes"] == nodes]
        peak = math.exp(np.mean([math.log(r["predicted_peak_bytes"]) for r in mine]))
        ends.append((peak, float(np.median([r["measured_s"] / r["predicted_s"] for r in mine]))))
    (b0, s0), (b1, s1) = prof.compute_scale_curve
    assert (b0, s0) == (pytest.approx(ends[0][0]), pytest.approx(ends[0][1]))
    assert (b1, s1) == (pytest.approx(ends[1][0]), pytest.approx(ends[1][1]))
    assert b1 > b0 and all(0.2 < s < 20 for s in (s0, s1))
    ratios = np.array([r["measured_s"] / r["predicted_s"] for r in runs])
    assert prof.compute_scale == pytest.approx(math.exp(np.log(ratios).mean()))
    assert prof.scale_at(b0) == pytest.approx(s0) and prof.scale_at(b1) == pytest.approx(s1)
    # progress spread: measured at P = C, 2C, 4C ranks; each sigma reproduces its probe's barrier loss
    raw = prof.meta["raw"]["progress_spread"]
    cores = prof.meta["threads_measured"][-1]
    assert sorted(prof.progress_spread) == sorted({max(2, cores), 2 * cores, 4 * cores}) == sorted(map(int, raw))
    for p, sigma in prof.progress_spread.items():
        assert raw[str(p)]["loss"] >= 1.0 and 0.0 <= sigma <= 1.5
        if 1.0 < raw[str(p)]["loss"] < barrier_loss(1.5, p, cores):
            assert barrier_loss(sigma, p, cores) == pytest.approx(raw[str(p)]["loss"], rel=2e-3)
    st = estimate_partition(4000, 40000, 2, 16, 4)
    res = simulate_epoch(st, ModelSpec("gcn", layers=2, hidden=16), RunSpec(mode="sar"), prof)
    assert 0 < res.epoch_time_s.max() < 60


def test_first_use_memory_probe():
    """The probe runs in a fresh interpreter and reports a non-negative RSS growth per op family."""
    found = Findings()
    result, transients = bench_first_use(found)
    assert found.raw["first_use"] == result
    assert {"autograd", "spmm", "max_aggr", "gat_unfused"} <= set(result)
    assert all(v >= 0 for v in result.values())
    if transients:  # measured where VmHWM can be reset
        assert set(transients) == {"spmm_fwd_out", "spmm_fwd_edge", "spmm_bwd_out", "spmm_bwd_edge"}
        assert all(v >= 0 for v in transients.values())
    prof = replace(hand_profile(), first_use_bytes={"spmm": 1e6, "max_aggr": 5e6, "autograd": 7e6})
    st = estimate_partition(1000, 10000, 2, 8, 4)
    plain = simulate_epoch(st, ModelSpec("gcn", layers=2, hidden=8), RunSpec(), hand_profile())
    probed = simulate_epoch(st, ModelSpec("gcn", layers=2, hidden=8), RunSpec(), prof)
    assert probed.start_bytes - plain.start_bytes == pytest.approx([8e6, 8e6])  # spmm and autograd


def test_share_eta_from_solo_and_co_located_rates():
    """eta = (C r_C / r_1 - 1) / (C - 1): two copies at the solo rate scale perfectly (1), at half of it
    not at all (0)."""
    etas = share_eta({"gemm": 10.0, "spmm": 10.0, "x": 8.0}, [{"gemm": 10.0, "spmm": 5.0, "x": 6.0},
                                                              {"gemm": 10.0, "spmm": 5.0, "x": 6.0}])  # fmt: skip
    assert etas == pytest.approx({"gemm": 1.0, "spmm": 0.0, "x": 0.5})
    with pytest.raises(ValueError):
        share_eta({"gemm": 1.0}, [{"gemm": 1.0}])


def test_pair_share_etas_by_hand():
    """Each pair of adjacent windows gives its own eta, (C r_C / r_1 - 1) / (C - 1) with the lead's two rates;
    a pair with a window that held no call is left out."""
    rates = {"spmm": {"solo": [10.0, 8.0, None], "shared": [5.0, 8.0, 4.0]},
             "gemm": {"solo": [6.0, 6.0, 6.0], "shared": [4.5, 6.0, 3.0]}}  # fmt: skip
    etas = pair_share_etas(rates, 2)
    assert etas["spmm"] == pytest.approx([0.0, 1.0])  # 2*5/10 - 1, 2*8/8 - 1; the third pair has no solo rate
    assert etas["gemm"] == pytest.approx([0.5, 1.0, 0.0])
    assert pair_share_etas({"x": {"solo": [9.0], "shared": [6.0]}}, 3)["x"] == pytest.approx([0.5])  # (3*6/9-1)/2


@pytest.mark.slow  # timing-bound: under load one family's call can outlast a quick 0.4 s window and leave it empty;
# the default run still goes through sharebench in test_calibrate_quick's real calibration
def test_share_windows_alternate_and_the_group_reports_every_pair():
    """A real quick sharebench group of two processes: the lead's rates fill every window of every family, in
    pairs whose order alternates, and the etas come from those pairs (whatever this machine's value)."""
    assert [window_order(p) for p in range(3)] == [("solo", "shared"), ("shared", "solo"), ("solo", "shared")]
    found = Findings()
    etas = bench_share(Calibration(quick=True), found, 2)
    raw = found.raw["share"]
    assert raw["processes"] == 2 and raw["pairs"] == 2
    for name in ("gemm", "spmm", "max_aggr", "gat_unfused", "elementwise"):
        windows = raw["lead_rates"][name]
        assert len(windows["solo"]) == len(windows["shared"]) == 2
        assert all(r is not None and r > 0 for r in windows["solo"] + windows["shared"]), (name, windows)
        per_pair = [2 * sh / so - 1 for so, sh in zip(windows["solo"], windows["shared"], strict=True)]
        assert raw["eta_per_pair"][name] == pytest.approx(per_pair)
        assert etas[name] == pytest.approx(float(np.clip(np.median(per_pair), 0.0, 1.0)))


def test_share_windows_follow_each_familys_call_time():
    """A family's window holds WINDOW_CALLS of its calls after the lead's settle, within [MIN_WINDOW_S, the longest];
    a family's 2 x pairs windows are adjacent, GAP_S lies between families."""
    fast, mid, slow = 0.001, 0.02, 1.0
    plan = schedule({"fast": fast, "mid": mid, "slow": slow}, 100.0, 0.4, 3)
    assert list(plan) == ["fast", "mid", "slow"]
    assert plan["fast"] == pytest.approx([100.0, MIN_WINDOW_S])
    mid_window = SETTLE_S + WINDOW_CALLS * mid
    assert MIN_WINDOW_S < mid_window < 0.4
    assert plan["mid"] == pytest.approx([100.0 + 6 * MIN_WINDOW_S + GAP_S, mid_window])
    assert plan["slow"] == pytest.approx([plan["mid"][0] + 6 * mid_window + GAP_S, 0.4])


def test_share_group_agrees_one_schedule(tmp_path):
    """The lead fixes the schedule once the others are ready, from its own call times, START_DELAY_S ahead; a
    partner reads the same one (here a thread stands in for the partner process)."""
    calls = {"gemm": 0.01, "spmm": 0.05}
    seen = {}
    partner = threading.Thread(target=lambda: seen.update(
        agree_schedule(tmp_path, False, 2, {"gemm": 9.0, "spmm": 9.0}, 0.4, 2)))
    partner.start()
    before = time.time()
    plan = agree_schedule(tmp_path, True, 2, calls, 0.4, 2)
    partner.join(timeout=30)
    assert not partner.is_alive() and seen == plan
    assert plan == schedule(calls, plan["gemm"][0], 0.4, 2)  # the lead's call times, not the partner's
    assert before + START_DELAY_S <= plan["gemm"][0] <= time.time() + START_DELAY_S


def test_forked_ranks_import_nothing_the_zygote_lacks():
    """The rank benchmarks' modules (what a rank forked from the zygote imports) leave the simulator, pandas and
    scipy out: importing them cost each rank 0.6-0.9 s, most of a commbench or progressbench group's length on
    2 cores (results/host_model/budget/cuts2)."""
    code = ("import sys; import sarlab.real.calibration.commbench, sarlab.real.calibration.progressbench, "
            "sarlab.real.calibration.sharebench, sarlab.core.comm; "
            "print(sorted(m for m in ('sarlab.simulator', 'pandas', 'scipy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.strip() == "[]"


def test_budget_trims_keep_what_they_measure():
    """The calibration-budget trims (results/host_model/budget/trims): progressbench gives every worker count the
    rank-rounds of the smallest (never fewer than 10 rounds, so --quick's 10 stay 10); the unfused GAT forms leave
    out their two largest shapes (the widest heads among them), the fused form and --quick keep every shape."""
    assert [rounds_for(p, 2, 40) for p in (2, 4, 8)] == [40, 20, 10]
    assert [rounds_for(p, 16, 40) for p in (16, 32, 64)] == [40, 20, 10]
    assert [rounds_for(p, 2, 10) for p in (2, 4, 8)] == [10, 10, 10]
    assert rounds_for(3, 2, 40) == 27  # rounded up
    full, quick = Calibration(), Calibration(quick=True)
    assert form_shapes(full, fused=True) == gat_shapes(full)
    unfused = form_shapes(full, fused=False)
    assert len(unfused) == len(gat_shapes(full)) - 2 and not UNFUSED_LEFT_OUT & set(unfused)
    assert form_shapes(quick, fused=False) == gat_shapes(quick)


def test_unfused_gat_times_threads_on_the_shape_it_leaves_out(monkeypatch):
    """A shape left out of an unfused form's fit is still the one its thread speed-ups are timed on."""
    quick = Calibration(quick=True)
    left_out = (2000, 16, 2, 16)
    timed = []
    monkeypatch.setattr(gatbench, "UNFUSED_LEFT_OUT", frozenset({left_out}))
    monkeypatch.setattr(gatbench, "gat_inputs", lambda n, *rest: timed.append(n) or gat_inputs(n, *rest))
    found = Findings()
    gatbench.bench_gat_unfused(quick, found, 2, torch.Generator().manual_seed(0))
    assert left_out not in [tuple(s) for s in found.raw["gat_unfused"]["shapes"]]
    assert timed[-1] == left_out[0] and len(timed) == len(gat_shapes(quick))
    assert [t for t, _ in found.raw["thread_speedups"]["gat_unfused"]] == [2]


def test_commbench_ranks_know_they_share_the_host(monkeypatch):
    """commbench's ranks carry LOCAL_WORLD_SIZE = the group's size, as the launcher's do, so a backend that
    configures itself by it (oneCCL's worker thread) is measured as it trains."""
    seen = []

    class Stop(Exception):
        pass

    def fake_group(commands, envs, *args, **kwargs):
        seen.extend(envs)
        raise Stop

    monkeypatch.setattr("sarlab.real.calibration.hostbench.run_group", fake_group)
    with pytest.raises(Stop):
        launch_commbench(4, 1, [256], backend="ccl")
    assert seen[0]["LOCAL_WORLD_SIZE"] == "4"


def test_thread_eta_from_one_thread_and_all_core_times():
    """eta = (t_1 / t_C - 1) / (C - 1): a perfect 2-core speedup is 1, none is 0, 4 cores at 2.5x is 0.5."""
    assert thread_eta(2.0, 1.0, 2) == pytest.approx(1.0)
    assert thread_eta(1.0, 1.0, 2) == pytest.approx(0.0)
    assert thread_eta(2.5, 1.0, 4) == pytest.approx(0.5)
    assert thread_eta(1.0, 1.25, 2) < 0  # unclipped: slower with more threads (the caller clips the median)


def test_fit_scale_curve_by_hand():
    """The power law through the calibration runs: exact through two runs; through a symmetric zig-zag it is
    the line between the zig-zag's means; one key gives one point at the geometric mean."""
    ((b0, s0), (b1, s1)) = fit_scale_curve([1e6, 1e8], [1.0, 4.0])
    assert (b0, b1, s0, s1) == (pytest.approx(1e6), pytest.approx(1e8), pytest.approx(1.0), pytest.approx(4.0))
    # keys a decade apart (x = 0, 1, 2, 3 decades), log-ratios 0, d, 0, d: the line 0.2 d + 0.2 d x
    keys = [1e6, 1e7, 1e8, 1e9]
    ratios = [1.0, 2.0, 1.0, 2.0]
    ((_, s0), (_, s1)) = fit_scale_curve(keys, ratios)
    d = math.log(2.0)
    assert math.log(s0) == pytest.approx(0.2 * d) and math.log(s1) == pytest.approx(0.8 * d)
    assert fit_scale_curve([5e6, 5e6], [1.0, 4.0]) == ((pytest.approx(5e6), pytest.approx(2.0)),)
    with pytest.raises(ValueError):
        fit_scale_curve([], [])


def test_median_scale_points_ignore_one_slow_run():
    """One point per size: the geometric mean of its runs' keys and the median of their ratios, so that one run
    of four slowed 1.6x moves nothing, while the line through all runs tilts; the spread flags the size."""
    sizes = [10, 10, 20, 20, 20, 20, 10, 10]
    keys = [1e6, 4e6, 1e8, 4e8, 1e8, 4e8, 1e6, 4e6]
    ratios = [1.0, 1.1, 0.8, 0.9, 0.8, 0.9 * 1.6, 1.0, 1.1]
    k, r, spread = median_scale_points(sizes, keys, ratios)
    assert k == [pytest.approx(2e6), pytest.approx(2e8)]
    assert r == [pytest.approx(1.05), pytest.approx(0.85)] and spread == [pytest.approx(1.1), pytest.approx(1.8)]
    ((_, s0), (_, s1)) = fit_scale_curve(k, r)
    assert (s0, s1) == (pytest.approx(1.05), pytest.approx(0.85))
    ((_, t0), (_, t1)) = fit_scale_curve(keys, ratios)
    assert abs(t1 / t0 - 0.85 / 1.05) > 0.05  # the least-squares line through all eight moves
    with pytest.raises(ValueError):
        median_scale_points([10], [1e6, 2e6], [1.0])


def test_bench_probe_brackets_each_configuration(monkeypatch):
    """`sarlab bench engine --probe`: a configuration's records get the probes before and after it and their
    geometric mean."""
    times = iter([2.0, 8.0, 2.0])
    monkeypatch.setattr(bench_module, "speed_probe", lambda pdir: {"probe_epoch_s": next(times), "probe_graph": "g",
                                                                "probe_time": 0.0})  # fmt: skip
    prober = _Prober("/nonexistent-cache")
    prober.run(0.0)
    first, second = [{"rank": 0}, {"rank": 1}], [{"rank": 0}]
    prober.attach(first, 0.0)
    prober.attach(second, 0.0)
    assert [r["probe_epoch_s"] for r in first] == [pytest.approx(4.0)] * 2
    assert (first[0]["probe_before_s"], first[0]["probe_after_s"]) == (2.0, 8.0)
    assert second[0]["probe_epoch_s"] == pytest.approx(4.0) and second[0]["probe_before_s"] == 8.0
    assert first[0]["probe_graph"] == "g" and "probe_time" not in first[0]


def _ops(**effs: float) -> dict[str, OpCost]:
    return {name: OpCost(rate=1.0, parallel_eff=eff) for name, eff in effs.items()}


def test_implausible_thread_efficiencies_by_hand():
    """On C cores the all-core speed-up 1 + (C - 1) eta must reach 1 + (min(C, 8) - 1) eta_min, eta_min 0.5 for
    GEMM and 0.25 for the other families."""
    # campaign 7's 2-core calibration: GEMM 0.42 < 0.5 and spmm 0.10 < 0.25 are flagged, elementwise 0.46 is not
    flagged = implausible_thread_effs(_ops(gemm=0.42, spmm=0.10, elementwise=0.46), 2)
    assert [line.split(":")[0] for line in flagged] == ["gemm", "spmm"]
    # campaign 8's (the default profile's) and the floors themselves pass
    assert implausible_thread_effs(_ops(gemm=0.60, spmm=0.60, elementwise=0.58, max_aggr=0.67), 2) == []
    assert implausible_thread_effs(_ops(gemm=0.5, spmm=0.25), 2) == []
    assert implausible_thread_effs(_ops(gemm=0.6, gat_unfused=0.06), 2) == []  # the unfused GAT form scales little
    # 72 cores: the first 8 must give x2.75 for spmm, i.e. eta >= 1.75 / 71 over all 72
    assert implausible_thread_effs(_ops(spmm=1.75 / 71 + 1e-9), 72) == []
    assert [line.split(":")[0] for line in implausible_thread_effs(_ops(spmm=1.7 / 71), 72)] == ["spmm"]
    assert implausible_thread_effs(_ops(spmm=0.0), 1) == []  # one core: nothing to scale
    for preset in (icelake_hdr200(), reference_laptop()):
        assert implausible_thread_effs(preset.ops, preset.cores_per_host) == []
    for path in shipped_profiles().values():
        assert plausibility_warnings(load_profile(path)) == []


def test_calibrate_refuses_an_implausible_calibration(tmp_path, monkeypatch, capsys):
    """A 2-core calibration whose spmm thread efficiency came out at 0.10 is flagged in the profile and not
    written where asked (exit status 3; it lies beside as <stem>.rejected.json) unless --accept-implausible;
    `sarlab simulate` warns when it uses such a profile."""
    ops = {**reference_laptop().ops, "spmm": OpCost(rate=0.5e9, parallel_eff=0.10, row_rate=0.4e9)}
    monkeypatch.setattr(calibrate_module, "_measure_ops", lambda cal, found, cores, total: dict(ops))
    monkeypatch.setattr(calibrate_module, "_measure_memory", lambda cal, found: (1.0, {}, {}))
    out = tmp_path / "p.json"
    args = ["--out", str(out), "--no-network", "--no-engine", "--threads", "2"]
    assert calibrate_main(args) == 3
    assert not out.exists() and "not written to" in capsys.readouterr().err
    rejected = load_profile(tmp_path / "p.rejected.json")
    assert [line.split(":")[0] for line in rejected.meta["implausible"]] == ["spmm"]
    assert rejected.notes[0].startswith("IMPLAUSIBLE spmm")
    assert calibrate_main([*args, "--accept-implausible"]) == 0
    assert load_profile(out).meta["implausible"] == rejected.meta["implausible"]
    capsys.readouterr()
    graph = "estimate:nodes=2000,edges=20000,features=8,classes=4"
    assert simulate_main(["--profile", str(out), "--graph", graph, "--workers", "2", "--modes", "sar"]) == 0
    assert "implausible calibration, spmm" in capsys.readouterr().err
