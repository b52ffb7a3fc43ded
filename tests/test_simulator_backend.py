"""Tests of the per-backend communication overlays of a profile (issue 27): the JSON form, what
``Profile.for_backend`` replaces, its errors, ``sarlab simulate --backend``, validation per record backend and
``sarlab calibrate --backend`` adding an overlay without touching the rest of the profile."""

from __future__ import annotations

import json
from dataclasses import fields, replace

import pandas as pd
import pytest
from backends_common import require_ccl
from test_simulator_fixtures import hand_profile, run1, two_parts, write_manifest

import sarlab.real.commands.calibrate_cmd as calibrate_cmd
from sarlab.real.commands.calibrate_cmd import calibrate_main
from sarlab.real.commands.simulate_cmd import simulate_main
from sarlab.simulator.hardware.backends import COMM_FIELDS, OVERLAY_FIELDS
from sarlab.simulator.hardware.profile import Link, Profile, load_profile, save_profile
from sarlab.simulator.hardware.provenance import resolve_profile, shipped_profiles
from sarlab.simulator.studies.validate import backend_ratios, error_summary, validate
from sarlab.simulator.system.sweep import simulate_sweep
from sarlab.simulator.workload.model import ModelSpec

GCN1 = ModelSpec("gcn", layers=1, hidden=4)
SLOW = Link(latency_s=1.0 + 1e-3, bandwidth_Bps=1e6, gap_s=2e-4)  # hand_profile's link, latency + 1 s


def ccl_overlay(**extra) -> dict:
    """An overlay that changes the links' latency (+1 s) and the exchange call (+0.5 s), with provenance."""
    return {"intra_host": SLOW, "inter_host": SLOW, "p2p_call_s": 0.5, "notes": ["measured by hand"],
            "meta": {"date": "2026-11-26", "command": "by hand"}, **extra}  # fmt: skip


def with_ccl(profile: Profile | None = None, **extra) -> Profile:
    return replace(profile or hand_profile(), backends={"ccl": ccl_overlay(**extra)})


def test_overlay_round_trips_through_json(tmp_path):
    prof = with_ccl(p2p_op_s=3e-5, p2p_cpu_s_per_byte=1e-10, progress_spread={2: 0.01, 8: 0.02})
    path = save_profile(prof, tmp_path / "p.json")
    raw = json.loads(path.read_text())
    assert raw["backends"]["ccl"]["progress_spread"] == {"2": 0.01, "8": 0.02}
    assert raw["backends"]["ccl"]["intra_host"] == {"latency_s": 1.0 + 1e-3, "bandwidth_Bps": 1e6, "gap_s": 2e-4}
    assert raw["backends"]["ccl"]["p2p_call_s"] == 0.5 and raw["backends"]["ccl"]["notes"] == ["measured by hand"]
    back = load_profile(path)
    assert back.backends == prof.backends
    assert back.backends["ccl"]["intra_host"] == SLOW and isinstance(back.backends["ccl"]["notes"], tuple)
    assert back.for_backend("ccl") == prof.for_backend("ccl")
    # a profile written before overlays existed (no `backends` key) loads as gloo only, and the shipped ones load
    del raw["backends"]
    (tmp_path / "old.json").write_text(json.dumps(raw))
    assert load_profile(tmp_path / "old.json").backends == {}
    for name in shipped_profiles():
        resolve_profile(name)


def test_for_backend_replaces_exactly_the_comm_fields():
    base = replace(hand_profile(), round_jitter_s=1e-5, p2p_msg_cpu_s=2e-6, notes=("base note",),
                   meta={"machine": "hand"})  # fmt: skip
    base = replace(base, progress_spread={2: 0.05, 4: 0.09})
    prof = with_ccl(base, p2p_wait_s=7e-6, progress_spread={"2": 0.01, "4": 0.02})
    assert prof.for_backend("gloo") is prof  # gloo: the profile itself
    ccl = prof.for_backend("ccl")
    overlay = {"intra_host": SLOW, "inter_host": SLOW, "p2p_call_s": 0.5, "p2p_wait_s": 7e-6,
               "progress_spread": {2: 0.01, 4: 0.02}}
    for f in fields(Profile):
        got, old = getattr(ccl, f.name), getattr(base, f.name)
        if f.name in overlay:
            assert f.name in OVERLAY_FIELDS and got == overlay[f.name], f.name
        elif f.name == "notes":
            assert got == ("base note", "[ccl] measured by hand")
        elif f.name == "meta":
            assert got == {"machine": "hand", "backend": "ccl"}
        else:  # op costs, memory, placement, the comm fields the overlay does not set (jitter, msg CPU)
            assert got == old, f.name
    assert ccl.for_backend("ccl") is ccl
    with pytest.raises(ValueError, match="already prices backend 'ccl'"):
        ccl.for_backend("gloo")


def test_unknown_and_unmeasured_backends_are_one_line_errors():
    prof = with_ccl()
    with pytest.raises(ValueError, match=r"^unknown backend 'infiniband': choose one of gloo, .*ccl") as err:
        prof.for_backend("infiniband")
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"no communication costs measured over backend 'mpi' \(it has gloo, "
                                         r"ccl\); measure them with `sarlab calibrate --backend mpi") as err:
        prof.for_backend("mpi")
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="not communication fields"):
        replace(hand_profile(), backends={"ccl": {"compute_scale": 2.0}})
    with pytest.raises(ValueError, match="gloo is the profile's own"):
        replace(hand_profile(), backends={"gloo": {"p2p_call_s": 1.0}})
    with pytest.raises(ValueError, match=">= 0"):
        replace(hand_profile(), backends={"ccl": {"p2p_op_s": -1.0}})
    with pytest.raises(ValueError, match="spreads >= 0"):
        replace(hand_profile(), backends={"ccl": {"progress_spread": {4: -0.1}}})


def test_ccl_prices_its_own_links_and_calls_by_hand():
    """One GCN layer, oneshot, 2 workers: the epoch waits, in sequence, for the halo exchange, the gradient return
    and two all-reduces (loss and gradients; recursive doubling: one latency each at N = 2), and makes two exchange
    calls. The overlay's +1 s latency and +0.5 s exchange call therefore cost 4 * 1 + 2 * 0.5 s more than gloo."""
    st, prof = two_parts(), with_ccl()
    gloo = run1(st, GCN1, "oneshot", prof.for_backend("gloo")).epoch_time_s
    ccl = run1(st, GCN1, "oneshot", prof.for_backend("ccl")).epoch_time_s
    assert ccl == pytest.approx(gloo + 4 * 1.0 + 2 * 0.5, abs=1e-9)


def test_simulate_backend_flag(tmp_path, capsys):
    st = two_parts()
    write_manifest(tmp_path / "parts", st)
    prof = with_ccl()
    same = replace(hand_profile(), backends={"ccl": {k: getattr(prof, k) for k in COMM_FIELDS}})
    out = {}
    for label, p in (("ccl", prof), ("same", same)):
        path = save_profile(p, tmp_path / f"{label}.json")
        for backend in ("gloo", "ccl"):
            csv = tmp_path / f"{label}-{backend}.csv"
            argv = ["--graph", str(tmp_path / "parts"), "--workers", "2", "--models", "gcn", "--layers", "1",
                    "--hidden", "4", "--modes", "sar,oneshot", "--threads", "1", "--profile", str(path),
                    "--backend", backend, "--out", str(csv)]  # fmt: skip
            assert simulate_main(argv) == 0
            out[label, backend] = pd.read_csv(csv)
    assert set(out["ccl", "ccl"]["backend"]) == {"ccl"} and set(out["ccl", "gloo"]["backend"]) == {"gloo"}
    # where the comm costs differ, so do the predictions: oneshot by the hand count above
    gloo, ccl = (out["ccl", b].set_index(["mode", "rank"]).epoch_time_s for b in ("gloo", "ccl"))
    assert (ccl - gloo).loc["oneshot"].tolist() == pytest.approx([5.0, 5.0], abs=1e-9)
    assert (ccl > gloo + 1.0).all()
    # an overlay equal to the profile's own fields prices exactly as gloo
    cols = ["epoch_time_s", "compute_s", "comm_wait_s", "bytes_sent", "peak_mem_bytes"]
    pd.testing.assert_frame_equal(out["same", "ccl"][cols], out["same", "gloo"][cols])
    # a backend the profile has not measured: exit 2 with the line that says how to measure it
    capsys.readouterr()
    assert simulate_main(["--graph", str(tmp_path / "parts"), "--workers", "2", "--profile",
                          str(tmp_path / "ccl.json"), "--backend", "mpi"]) == 2  # fmt: skip
    assert "sarlab calibrate --backend mpi" in capsys.readouterr().err
    # the Python sweep takes the same argument
    df, _ = simulate_sweep(str(tmp_path / "parts"), ["oneshot"], [GCN1], [2], prof, threads=1, backend="ccl")
    assert df.epoch_time_s.tolist() == pytest.approx(ccl.loc["oneshot"].tolist())


def _records(pdir, backend: str | None, epoch_s: float) -> list[dict]:
    rows = []
    for epoch in range(2):
        for rank in range(2):
            r = {"mode": "oneshot", "model": "gcn", "workers": 2, "rank": rank, "epoch": epoch, "epoch_time_s": epoch_s,
                 "comm_wait_s": 0.0, "bytes_sent": 0, "peak_mem_bytes": 6000, "baseline_mem_bytes": 1000,
                 "graph": "tiny", "partition_dir": str(pdir), "num_nodes": 160, "num_edges": 590, "feature_dim": 8,
                 "num_classes": 4, "layers": 1, "hidden": 4, "threads": 1}  # fmt: skip
            if backend is not None:
                r["backend"] = backend
            rows.append(r)
    return rows


def test_validation_prices_each_record_with_its_own_backend(tmp_path, capsys):
    st = two_parts()
    write_manifest(tmp_path / "parts", st)
    prof = with_ccl()
    gloo_t = run1(st, GCN1, "oneshot", prof).epoch_time_s.max()
    ccl_t = run1(st, GCN1, "oneshot", prof.for_backend("ccl")).epoch_time_s.max()
    old = pd.DataFrame(_records(tmp_path / "parts", None, 2.0 * gloo_t))  # before the column: gloo
    new = pd.DataFrame(_records(tmp_path / "parts", "ccl", 0.5 * ccl_t))
    old.to_csv(tmp_path / "old.csv", index=False)
    new.to_csv(tmp_path / "new.csv", index=False)
    table = validate(pd.concat([old, new], ignore_index=True), prof).set_index("backend")
    assert table.loc["gloo", "predicted_epoch_time_s"] == pytest.approx(gloo_t)
    assert table.loc["ccl", "predicted_epoch_time_s"] == pytest.approx(ccl_t)
    assert table.loc["gloo", "time_error"] == pytest.approx(-0.5) and table.loc["ccl", "time_error"] == pytest.approx(1)
    errors = error_summary(table.reset_index())
    assert errors["median_abs_time_error_gloo"] == pytest.approx(0.5)
    assert errors["median_abs_time_error_ccl"] == pytest.approx(1.0)
    assert errors["configurations_ccl"] == 1 and errors["median_abs_time_error"] == pytest.approx(0.75)
    # the pair's ratio: measured ccl / gloo = (0.5 ccl_t) / (2 gloo_t), predicted ccl_t / gloo_t: 4x, error +300 %
    ratios = backend_ratios(table.reset_index())
    assert len(ratios) == 1 and ratios.loc[0, "backend"] == "ccl" and ratios.loc[0, "workers"] == "2"
    assert ratios.loc[0, "measured_ratio"] == pytest.approx(0.25 * ccl_t / gloo_t)
    assert ratios.loc[0, "predicted_ratio"] == pytest.approx(ccl_t / gloo_t)
    assert errors["median_abs_ratio_error_ccl"] == pytest.approx(3.0) and errors["paired_configurations_ccl"] == 1
    assert backend_ratios(table.reset_index().iloc[:1]).empty  # one backend: no pairs
    # the command line: the same, and a profile without a ccl overlay cannot price the ccl records
    path = save_profile(prof, tmp_path / "p.json")
    argv = ["--validate", str(tmp_path / "old.csv"), str(tmp_path / "new.csv"), "--validation-out",
            str(tmp_path / "v.csv"), "--json", str(tmp_path / "v.json")]  # fmt: skip
    assert simulate_main([*argv, "--profile", str(path)]) == 0
    assert json.loads((tmp_path / "v.json").read_text())["median_abs_time_error_ccl"] == pytest.approx(1.0)
    printed = capsys.readouterr().out
    assert "ccl: time 100.0%" in printed and "median |error| 300.0% over 1 pairs" in printed
    assert pd.read_csv(tmp_path / "v_backend_ratios.csv").ratio_error.tolist() == pytest.approx([3.0])
    bare = save_profile(hand_profile(), tmp_path / "bare.json")
    assert simulate_main([*argv, "--profile", str(bare)]) == 2
    assert "sarlab calibrate --backend ccl" in capsys.readouterr().err
    assert simulate_main([*argv, "--profile", str(path), "--backend", "ccl"]) == 2  # each record says its own


def test_calibrate_backend_adds_the_overlay_and_nothing_else(tmp_path, monkeypatch, capsys):
    path = save_profile(hand_profile(), tmp_path / "p.json")
    data = json.loads(path.read_text())
    data["a_key_of_a_later_version"] = {"kept": True}
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    seen = {}

    def fake(cal, backend, command=""):
        seen.update(backend=backend, command=command, network=cal.network)
        return {**ccl_overlay(), "p2p_op_s": 1e-5, "p2p_wait_s": 2e-6, "p2p_msg_cpu_s": 3e-6}

    monkeypatch.setattr(calibrate_cmd, "calibrate_backend", fake)
    assert calibrate_main(["--backend", "ccl", "--out", str(path), "--quick"]) == 0
    assert seen == {"backend": "ccl", "command": f"sarlab calibrate --backend ccl --out {path} --quick",
                    "network": True}  # fmt: skip
    after = json.loads(path.read_text())
    assert {k: v for k, v in after.items() if k != "backends"} == data
    assert after["backends"]["ccl"]["p2p_call_s"] == 0.5
    assert load_profile(path).for_backend("ccl").p2p_op_s == 1e-5
    assert "wrote backends.ccl into" in capsys.readouterr().out
    # measuring it again replaces the overlay; a missing profile is an error that says what to run first
    assert calibrate_main(["--backend", "ccl", "--out", str(path)]) == 0
    assert list(json.loads(path.read_text())["backends"]) == ["ccl"]
    assert calibrate_main(["--backend", "ccl", "--out", str(tmp_path / "none.json")]) == 2
    assert "run `sarlab calibrate --out" in capsys.readouterr().err


def test_commbench_runs_over_ccl():
    """The message benchmark itself over oneCCL: 2 ranks, one repeat, a ring and an all-to-all of 256 bytes and one
    all-reduce (skipped where oneCCL is not installed)."""
    require_ccl()  # build once here, not in both ranks at once
    from sarlab.real.calibration.hostbench import launch_commbench

    result = launch_commbench(2, 1, [256], timeout=120, backend="ccl", allreduce_sizes=(8,))
    assert result["backend"] == "ccl" and result["world"] == 2
    assert set(result["medians"]) == {"ring:256", "alltoall:256"}
    assert all(m["ops"] == 2 and m["wall_s"] > 0 and m["post_s"] >= 0 for m in result["medians"].values())
    assert list(result["allreduce_wall_s"]) == ["8"] and result["allreduce_wall_s"]["8"] > 0


def test_crowded_hosts_price_their_own_background_cpu(tmp_path):
    """An overlay's ``crowded_cpu``: the background CPU costs of a host that launches more ranks than its cores
    (oneCCL without its worker thread there), priced as a profile whose own fields hold them, and only there."""
    st, crowded = two_parts(), {"p2p_msg_cpu_s": 1e-4, "p2p_cpu_s_per_byte": 1e-6}
    prof = replace(hand_profile(), backends={"ccl": {"p2p_msg_cpu_s": 1e-6, "p2p_cpu_s_per_byte": 1e-9,
                                                     "crowded_cpu": crowded}})  # fmt: skip
    ccl = prof.for_backend("ccl")
    assert ccl.crowded_cpu == crowded
    assert ccl.comm_cpu(4) == (1e-6, 1e-9) and ccl.comm_cpu(5) == (1e-4, 1e-6)  # hand_profile: 4 cores
    as_own, without = replace(ccl, crowded_cpu={}, **crowded), replace(ccl, crowded_cpu={})

    def epoch(p: Profile, cores: int) -> list[float]:  # two workers on shared cores
        return run1(st, GCN1, "sar", replace(p, cores_per_host=cores), shared_cores=True).epoch_time_s.tolist()

    assert epoch(ccl, 1) == pytest.approx(epoch(as_own, 1))  # 2 ranks on 1 core: crowded
    assert epoch(ccl, 2) == pytest.approx(epoch(without, 2))  # 2 ranks on 2 cores: the overlay's own costs
    # two emulated one-rank hosts on one machine's core share it, as the executor decides it: crowded
    on_hosts = [run1(st, GCN1, "sar", replace(p, cores_per_host=1), shared_cores=True, workers_per_nic=1).epoch_time_s
                for p in (ccl, as_own)]
    assert on_hosts[0].tolist() == pytest.approx(on_hosts[1].tolist())
    assert min(epoch(as_own, 1)) > max(epoch(without, 1)) + 1e-3  # the crowded costs do change the price
    # the profile's own crowded costs are gloo's: a ccl overlay without them prices ccl without them
    gloo_crowded = replace(hand_profile(), crowded_cpu={"p2p_msg_cpu_s": 1.0}, backends={"ccl": ccl_overlay()})
    assert gloo_crowded.crowded_cpu == {"p2p_msg_cpu_s": 1.0} and gloo_crowded.for_backend("ccl").crowded_cpu == {}
    back = load_profile(save_profile(prof, tmp_path / "p.json"))
    assert back.for_backend("ccl") == ccl and json.loads((tmp_path / "p.json").read_text())["backends"]["ccl"][
        "crowded_cpu"] == crowded
    assert "crowded_cpu" not in json.loads(save_profile(hand_profile(), tmp_path / "bare.json").read_text())
    with pytest.raises(ValueError, match="crowded_cpu takes costs >= 0 of p2p_msg_cpu_s, p2p_cpu_s_per_byte"):
        with_ccl(crowded_cpu={"p2p_call_s": 1.0})
    with pytest.raises(ValueError, match="crowded_cpu takes costs >= 0"):
        replace(hand_profile(), crowded_cpu={"p2p_cpu_s_per_byte": -1.0})


def _commbench_run(world: int, bg_per_op: float) -> dict:
    """A commbench result whose background CPU per op is ``bg_per_op`` at every op count."""
    medians = {}
    for pattern, ops in (("ring", 2), ("alltoall", 2 * (world - 1))):
        post, wait = 1e-4 + 2e-5 * ops, 5e-6 * ops
        medians[f"{pattern}:256"] = {"ops": ops, "post_s": post, "wait_s": wait, "cpu_s": post + wait + ops * bg_per_op}
    return {"world": world, "sizes": [256], "medians": medians}


def test_calibration_measures_background_cpu_apart_for_crowded_hosts(monkeypatch):
    """The ccl overlay's per-message CPU from the commbench worlds on each side of the cores, its per-byte CPU on a
    crowded host from netbench told that its host launches one rank more than its cores."""
    from sarlab.real.calibration import calibrate
    from sarlab.simulator.calibration.calibration import Calibration, Findings

    told = []

    def fake_network(cal, found, backend, local_world=2, raw_key="network"):
        told.append((backend, local_world, raw_key))
        return SLOW, 1e-4, 6e-10

    monkeypatch.setattr(calibrate, "bench_network", fake_network)
    found = Findings()
    found.raw["messages"] = {"runs": [_commbench_run(2, 8e-5), _commbench_run(4, 3e-5), _commbench_run(8, 3e-5),
                                      _commbench_run(2, 8e-5)]}
    one_try = Calibration(quick=True, quiet_tries=1, log=lambda _: None)  # the fake step is not re-run as disturbed
    own, crowded = calibrate._crowded_costs(one_try, found, "ccl", cores=2)
    assert own == {"p2p_msg_cpu_s": pytest.approx(8e-5)}
    assert crowded == {"p2p_msg_cpu_s": pytest.approx(3e-5), "p2p_cpu_s_per_byte": 6e-10}
    assert told == [("ccl", 3, "network_crowded")]
    assert any(n.startswith("crowded_cpu: background CPU where a host launches more ranks than its 2 cores")
               for n in found.notes)
    # where every world fits the cores, the per-message fit stays one over all worlds; the per-byte is measured
    found.raw["messages"]["runs"] = [_commbench_run(2, 8e-5)]
    own, crowded = calibrate._crowded_costs(one_try, found, "ccl", cores=8)
    assert own == {} and crowded == {"p2p_cpu_s_per_byte": 6e-10} and told[-1] == ("ccl", 9, "network_crowded")
