"""Tests of `sarlab simulate`: sweeps as metric records, validation against hand-made records, the
profile it uses and its warnings, and the model flags it shares with `sarlab train`."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_simulator_fixtures import hand_profile, probe_records, run1, two_parts, write_manifest

import sarlab.real.commands.options as real_options
from sarlab.common.machine import cpu_model, usable_cores
from sarlab.common.records import RECORD_COLUMNS
from sarlab.real.commands.simulate_cmd import MODEL_DEFAULTS, base_model, simulate_main, simulate_parser
from sarlab.simulator.calibration.measured import machine_mismatch, read_records, summarize_measured, with_defaults
from sarlab.simulator.calibration.probe import PROBE_MODEL
from sarlab.simulator.hardware.profile import save_profile
from sarlab.simulator.hardware.provenance import DEFAULT_PROFILE, PROFILES_DIR, resolve_profile, shipped_profiles
from sarlab.simulator.studies.validate import validate
from sarlab.simulator.system.epoch import simulate_epoch
from sarlab.simulator.system.runspec import RunSpec
from sarlab.simulator.workload.model import ModelSpec, parse_model
from sarlab.simulator.workload.workload import estimate_partition

TINY = "estimate:nodes=2000,edges=20000,features=8,classes=4"


def test_simulate_cli_sweep(tmp_path, capsys):
    out_json, out_csv = tmp_path / "sim.json", tmp_path / "sim.csv"
    rc = simulate_main(
        [
            "--graph",
            "estimate:nodes=20000,edges=300000,features=32,classes=8,cut=0.2",
            "--workers",
            "2,4",
            "--models",
            "gcn,sage-max,gat-fused",
            "--modes",
            "sar,oneshot",
            "--layers",
            "2",
            "--hidden",
            "32",
            "--heads",
            "2",
            "--profile",
            "icelake-hdr200",
            "--json",
            str(out_json),
            "--out",
            str(out_csv),
            "--plots",
            str(tmp_path / "png"),
            "--plot-limit",
            "1",
        ]
    )
    assert rc == 0
    df = pd.read_csv(out_csv)
    assert list(df.columns) == list(RECORD_COLUMNS)
    assert len(df) == (2 + 4) * 3 * 2 and set(df["mode"]) == {"sar", "oneshot"}
    payload = json.loads(out_json.read_text())
    assert len(payload["summary"]) == 12 and payload["events"] > 0
    # the summary, recomputed from the records: slowest rank's time, mean wait, largest peak above baseline
    keys = ["model", "aggr", "fused", "mode", "workers"]
    want = df.assign(above=df.peak_mem_bytes - df.baseline_mem_bytes).groupby(keys).agg(
        t=("epoch_time_s", "max"), wait=("comm_wait_s", "mean"), peak=("above", "max"))
    got = pd.DataFrame(payload["summary"]).set_index(keys).sort_index()
    np.testing.assert_allclose(got.epoch_time_s, want.t, rtol=1e-12)
    np.testing.assert_allclose(got.comm_wait_mean_s, want.wait, rtol=1e-12)
    np.testing.assert_allclose(got.peak_mem_above_baseline_bytes, want.peak, rtol=1e-12)
    assert (tmp_path / "png" / "simulator_gantt_gcn-sar-N2.png").stat().st_size > 0
    assert (tmp_path / "png" / "simulator_memory_gcn-sar-N2.png").stat().st_size > 0
    assert (tmp_path / "png" / "simulator_scaling.png").exists()
    out = capsys.readouterr().out
    assert "events/s" in out
    # the table says it is predicted, on which profile, and the hosts it assumed for each worker count
    assert "PREDICTED by the SimPy model (not measured)" in out
    assert "N = 2: " in out and "N = 4: " in out and "thread(s) each" in out


def test_validation_on_hand_made_records(tmp_path):
    """Two configurations x 2 ranks x 3 epochs; epoch 0 is warm-up. Measured time = median over epochs 1, 2
    of the slower rank; measured peak = max over ranks and epochs of peak - baseline."""
    stats = two_parts()
    pdir = tmp_path / "tiny-2"
    write_manifest(pdir, stats)
    prof_path = save_profile(hand_profile(), tmp_path / "hand.json")
    rows = []
    times = {
        "sar": [[9.0, 9.0], [0.010, 0.012], [0.011, 0.016]],
        "oneshot": [[9.0, 9.0], [0.02, 0.01], [0.03, 0.01]],
    }
    peaks = {
        "sar": [[10**6, 10**6], [3000, 5000], [4000, 2000]],
        "oneshot": [[10**6, 10**6], [7000, 1000], [6000, 8000]],
    }
    for mode in ("sar", "oneshot"):
        for epoch in range(3):
            for rank in range(2):
                rows.append(
                    {
                        "mode": mode,
                        "model": "gcn",
                        "workers": 2,
                        "rank": rank,
                        "epoch": epoch,
                        "epoch_time_s": times[mode][epoch][rank],
                        "compute_s": 0.001,
                        "comm_wait_s": 0.001,
                        "bytes_sent": 100,
                        "bytes_recv": 100,
                        "peak_mem_bytes": 50_000 + peaks[mode][epoch][rank],
                        "baseline_mem_bytes": 50_000,
                        "loss": 1.0,
                        "train_acc": 0.5,
                        "val_acc": 0.5,
                        "test_acc": 0.5,
                        "graph": "tiny",
                        "partition_dir": str(pdir),
                        "num_nodes": 160,
                        "num_edges": 590,
                        "feature_dim": 8,
                        "num_classes": 4,
                        "layers": 1,
                        "hidden": 4,
                        "heads": 4,
                        "aggr": "mean",
                        "fused": True,
                        "prefetch": 1,
                        "dtype": "float32",
                        "batchnorm": False,
                        "dropout": 0.0,
                        "threads": 1,
                    }
                )
    records = tmp_path / "records.jsonl"
    records.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "validation.csv"
    rc = simulate_main(
        [
            "--validate",
            str(records),
            "--profile",
            str(prof_path),
            "--validation-out",
            str(out),
            "--json",
            str(tmp_path / "v.json"),
        ]
    )
    assert rc == 0
    table = pd.read_csv(out).set_index("mode")
    assert table.loc["sar", "measured_epoch_time_s"] == pytest.approx(np.median([0.012, 0.016]))
    assert table.loc["oneshot", "measured_epoch_time_s"] == pytest.approx(np.median([0.02, 0.03]))
    assert table.loc["sar", "measured_peak_above_baseline_bytes"] == 5000
    assert table.loc["oneshot", "measured_peak_above_baseline_bytes"] == 8000
    # the prediction is the hand-checked simulator on the partition's own manifest
    pred = run1(
        stats,
        ModelSpec("gcn", layers=1, hidden=4, heads=4, fused=True, batchnorm=False, dropout=0.0),
        "sar",
        hand_profile(),
    )
    assert table.loc["sar", "predicted_epoch_time_s"] == pytest.approx(pred.epoch_time_s.max())
    assert table.loc["sar", "time_error"] == pytest.approx(pred.epoch_time_s.max() / 0.014 - 1)
    assert table.loc["sar", "workload_source"].startswith("manifest:")
    summary = json.loads((tmp_path / "v.json").read_text())
    errs = table["time_error"].abs()
    assert summary["median_abs_time_error"] == pytest.approx(errs.median())
    assert out.with_suffix(".png").stat().st_size > 0


def test_validation_rejects_bad_records(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    pd.DataFrame({"mode": ["sar"], "epoch_time_s": [1.0]}).to_csv(bad, index=False)
    assert simulate_main(["--validate", str(bad), "--profile", "icelake-hdr200"]) == 2
    assert "lack columns" in capsys.readouterr().err


def test_validation_follows_the_speed_probe():
    """With probe columns, each configuration is priced with compute_scale = probe epoch / the simulator's
    probe prediction at scale 1: a probe that ran 3x the prediction gives scale 3 and, for one worker (all
    compute), exactly 3 / the profile's scale times the profile's own prediction."""
    base = replace(hand_profile(), compute_scale=1.5)
    # the probe prediction, built here from the probe's definition (GCN, sar, one worker, estimated graph)
    probe_model = ModelSpec(PROBE_MODEL["model"], layers=PROBE_MODEL["layers"], hidden=PROBE_MODEL["hidden"])
    probe_pred = simulate_epoch(
        estimate_partition(2000, 20000, 1, 16, 4), probe_model, RunSpec(mode="sar", threads=1),
        replace(base, compute_scale=1.0),
    ).epoch_time_s.max()  # fmt: skip
    table = validate(probe_records(1, 3.0 * probe_pred), base, drift="auto")
    row = table.iloc[0]
    assert row["compute_scale_used"] == pytest.approx(3.0) and row["probe_compute_scale"] == pytest.approx(3.0)
    assert row["predicted_epoch_time_s"] == pytest.approx(row["predicted_epoch_time_static_s"] * 3.0 / 1.5)
    assert row["time_error_static"] == pytest.approx(row["predicted_epoch_time_static_s"] / 1.0 - 1.0)
    assert row["time_error_probe"] == pytest.approx(row["time_error"])
    # the default keeps the profile's scale as the primary prediction and reports the probe's beside it;
    # records without probes cannot be asked for drift="probe"
    none = validate(probe_records(1, 3.0 * probe_pred), base).iloc[0]
    assert none["compute_scale_used"] == 1.5
    assert none["predicted_epoch_time_s"] == pytest.approx(row["predicted_epoch_time_static_s"])
    assert none["predicted_epoch_time_probe_s"] == pytest.approx(row["predicted_epoch_time_s"])
    plain = validate(probe_records(1, None), base, drift="auto")
    assert plain.iloc[0]["compute_scale_used"] == 1.5 and "time_error_probe" not in plain.columns
    with pytest.raises(ValueError, match="probe"):
        validate(probe_records(1, None), base, drift="probe")


def test_validation_finds_the_manifest_kept_beside_the_records(tmp_path):
    """A clone without the partition cache: the manifest copy `sarlab bench engine` keeps in
    `<records stem>_manifests/` stands in for the missing partition directory (no estimate)."""
    stats = two_parts()
    write_manifest(tmp_path / "gone", stats)
    kept = tmp_path / "recs_manifests"
    kept.mkdir()
    (tmp_path / "gone" / "manifest.json").rename(kept / "tiny-n2.json")
    recs = probe_records(2, None).assign(partition_dir="/no/such/cache/tiny-n2", num_nodes=160, num_edges=590,
                                          feature_dim=8, num_classes=4)  # fmt: skip
    recs.to_csv(tmp_path / "recs.csv", index=False)
    table = validate(read_records(tmp_path / "recs.csv"), hand_profile())
    assert table.iloc[0]["workload_source"] == f"manifest:{kept / 'tiny-n2.json'}"
    # without the copy the same records fall back to the random-partition estimate, and say so
    (kept / "tiny-n2.json").unlink()
    with pytest.warns(UserWarning, match=r"partition /no/such/cache/tiny-n2: no manifest .*random-partition estimate"):
        table = validate(read_records(tmp_path / "recs.csv"), hand_profile())
    assert table.iloc[0]["workload_source"].startswith("estimate:")


def test_validation_warns_when_the_profile_is_another_cpus(tmp_path, capsys):
    """Records name the CPU they ran on (a `machine` column, or for older records the `measured on <cpu>`
    header of the markdown beside them); validating them with a profile calibrated on another CPU warns."""

    recs = probe_records(2, None)
    recs.to_csv(tmp_path / "old.csv", index=False)
    (tmp_path / "old.md").write_text("# measured on AMD EPYC (2 cores), 2026-11-23: synthetic, 3 layers\n")
    recs.assign(machine="Intel(R) Xeon(R) Processor @ 2.10GHz").to_csv(tmp_path / "new.csv", index=False)
    recs.to_csv(tmp_path / "bare.csv", index=False)  # no column, no markdown: unknown, never a warning
    xeon = replace(hand_profile(), meta={"machine": "Intel(R) Xeon(R) Processor @ 2.10GHz"})
    old, new, bare = (read_records(tmp_path / f"{n}.csv") for n in ("old", "new", "bare"))
    assert set(old["machine"]) == {"AMD EPYC"}
    assert machine_mismatch(old, xeon) == ["AMD EPYC"]
    assert machine_mismatch(new, xeon) == []
    assert machine_mismatch(bare, xeon) == []
    assert machine_mismatch(old, hand_profile()) == []  # a profile that does not say: nothing to compare

    path = save_profile(xeon, tmp_path / "xeon.json")
    args = ["--validate", str(tmp_path / "old.csv"), str(tmp_path / "new.csv"), "--profile", str(path),
            "--validation-out", str(tmp_path / "v.csv"), "--json", str(tmp_path / "v.json")]  # fmt: skip
    assert simulate_main(args) == 0
    err = capsys.readouterr().err
    assert "measured on AMD EPYC" in err and "calibrated on Intel(R) Xeon(R)" in err
    assert json.loads((tmp_path / "v.json").read_text())["records_machines_not_profile"] == ["AMD EPYC"]


def test_measured_summary_by_hand():
    """Per configuration: the median over the epochs after the warm-up of the slowest rank, the spread
    (max - min) / median of those, the largest peak above the baseline; configurations in sorted order;
    bytes sent NaN when the records do not have them."""
    times = {"sar": [[5.0, 5.0], [1.0, 2.0], [4.0, 3.0], [2.5, 0.5]], "sa": [[5.0, 5.0], [1.0, 1.0], [3.0, 1.0],
                                                                            [2.0, 2.0]]}  # fmt: skip
    base = probe_records(2, None).iloc[0].to_dict()  # baseline 1000 bytes
    rows = [{**base, "mode": mode, "epoch": epoch, "rank": rank, "epoch_time_s": t,
             "peak_mem_bytes": 1000 + 100 * epoch + rank}
            for mode in ("sar", "sa") for epoch, per_rank in enumerate(times[mode]) for rank, t in enumerate(per_rank)]
    summary = summarize_measured(with_defaults(pd.DataFrame(rows).drop(columns="bytes_sent")), warmup=1)
    assert list(summary["mode"]) == ["sa", "sar"]
    assert list(summary["measured_epoch_time_s"]) == [2.0, 2.5]  # medians of (1, 3, 2) and (2, 4, 2.5)
    assert list(summary["measured_epoch_spread"]) == [pytest.approx(1.0), pytest.approx(0.8)]
    assert list(summary["measured_peak_above_baseline_bytes"]) == [301, 301]  # epoch 3, rank 1
    assert summary["measured_bytes_sent"].isna().all() and list(summary["epochs"]) == [3, 3]


def test_simulate_takes_trains_model_flags_and_defaults():
    """`sarlab simulate` and `sarlab train` share model flags and defaults: nothing given, or the same flags
    given, both parse to the same values and describe the same model (train's ModelConfig and fused flag)."""
    train = argparse.ArgumentParser()
    real_options.add_model_args(train)
    real_options.add_engine_args(train)
    assert {k: MODEL_DEFAULTS[k] for k in real_options.MODEL_DEFAULTS} == real_options.MODEL_DEFAULTS
    shared = ("layers", "hidden", "aggr", "heads", "dropout", "batchnorm", "seed", "dtype", "unfused", "prefetch")
    for flags in ([], ["--model", "gat", "--layers", "3", "--hidden", "32", "--heads", "2", "--aggr", "max",
                       "--dropout", "0.3", "--batchnorm", "--dtype", "float64", "--unfused", "--prefetch", "2",
                       "--seed", "5"]):  # fmt: skip
        t, s = train.parse_args(flags), simulate_parser().parse_args(flags)
        assert [getattr(s, k) for k in shared] == [getattr(t, k) for k in shared]
        assert s.models == t.model
        spec, config = parse_model(s.models, base_model(s)), real_options.model_config(t)
        fields = ("model", "layers", "hidden", "heads", "aggr", "dropout", "batchnorm")
        assert [getattr(spec, k) for k in fields] == [getattr(config, k) for k in fields]
        assert spec.fused == real_options.engine_config(t).fused


def test_simulate_names_its_profile_and_warns_on_another_cpu(tmp_path, capsys):
    """A calibrated profile is named with its machine; one from another CPU draws a warning, one from this
    CPU and core count does not, and neither does a preset (it describes another machine on purpose)."""
    here = replace(hand_profile(), cores_per_host=usable_cores(), meta={"machine": cpu_model(), "date": "2026-01-01"})
    other = replace(here, meta={"machine": "Imaginary CPU 9000", "date": "2026-01-01"})
    args = ["--graph", TINY, "--workers", "2", "--modes", "sar"]
    for prof, warned in ((here, False), (other, True)):
        path = save_profile(prof, tmp_path / f"{warned}.json")
        assert simulate_main([*args, "--profile", str(path)]) == 0
        out = capsys.readouterr()
        assert f"from {path}: calibrated on {prof.meta['machine']}" in out.out
        assert (f"this machine is {cpu_model()}" in out.err) == warned
    assert simulate_main([*args, "--profile", "icelake-hdr200"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_a_prediction_on_the_shipped_profile_says_this_machine_has_no_calibration(tmp_path, monkeypatch, capsys):
    """Without --profile and without this machine's calibration, the prediction runs on the shipped profile and says
    so (with how to make one); this machine's own calibration, or a profile asked for, gets no such line."""
    from sarlab.simulator.hardware import provenance

    local = tmp_path / "cache" / "simulator_profile.json"
    monkeypatch.setattr(provenance, "LOCAL_PROFILE", local)
    args = ["--graph", "estimate:nodes=2000,edges=20000,features=8,classes=4", "--model", "gcn", "--workers", "2",
            "--modes", "sar"]
    line = "this machine has no calibration of its own"
    assert simulate_main(args) == 0
    out = capsys.readouterr().out
    assert f"from {DEFAULT_PROFILE}" in out and line in out and "`sarlab calibrate`" in out
    assert simulate_main([*args, "--profile", "epyc-2core"]) == 0
    assert line not in capsys.readouterr().out
    prof = resolve_profile("epyc-2core")[0]
    save_profile(replace(prof, meta={**prof.meta, "machine": cpu_model()}, cores_per_host=usable_cores()), local)
    assert simulate_main(args) == 0
    out = capsys.readouterr().out
    assert f"from {local}" in out and line not in out


def test_default_profile_is_this_machines_calibration_else_the_shipped_one(tmp_path, monkeypatch):
    """Without --profile: `simulator_profile.json` in sarlab's cache (what `sarlab calibrate` writes by default)
    when it exists, else simulator/profiles/epyc-2core.json; shipped profiles also go by their names."""
    from sarlab.simulator.hardware import provenance

    local = tmp_path / "cache" / "simulator_profile.json"
    monkeypatch.setattr(provenance, "LOCAL_PROFILE", local)
    prof, source = resolve_profile(None)
    assert Path(source) == DEFAULT_PROFILE == PROFILES_DIR / "epyc-2core.json"
    assert prof.meta["machine"] == "AMD EPYC" and prof.cores_per_host == 2
    save_profile(replace(prof, name="mine"), local)
    mine, source = resolve_profile(None)
    assert mine.name == "mine" and Path(source) == local
    assert set(shipped_profiles()) == {"epyc-2core", "xeon-2core"}
    assert resolve_profile("xeon-2core")[0].meta["machine"].startswith("Intel(R) Xeon(R)")
    assert resolve_profile("icelake-hdr200") == (resolve_profile("icelake-hdr200")[0], "preset icelake-hdr200")
