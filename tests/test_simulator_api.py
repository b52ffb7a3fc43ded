"""``sarlab.simulate`` and ``sarlab.plan`` (:mod:`sarlab.simulator.api`): the same numbers as the commands
``python -m sarlab simulate --json`` and ``python -m sarlab plan --json`` run as separate processes (an independent
entry path: flag parsing, profile resolution and JSON output), bytes and bills by hand, and a cheap front door."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pandas as pd
import pytest
from test_simulator_fixtures import hand_profile, two_parts, write_manifest

import sarlab
from sarlab.common.records import RECORD_COLUMNS
from sarlab.simulator import api
from sarlab.simulator.hardware import provenance

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ESTIMATE = "estimate:nodes=20000,edges=300000,features=32,classes=8,cut=0.2"
#: the metric-record columns a simulated epoch predicts (the rest describe the configuration)
PREDICTED = ("epoch_time_s", "compute_s", "comm_wait_s", "bytes_sent", "bytes_recv", "peak_mem_bytes",
             "baseline_mem_bytes")


def cli(command: str, *args: str, cwd, cache) -> dict:
    """Run ``python -m sarlab COMMAND ARGS --json OUT`` in its own process; the JSON it wrote."""
    out = os.path.join(str(cwd), f"{command}.json")
    env = {**os.environ, "PYTHONPATH": ROOT, "SARLAB_CACHE_DIR": str(cache)}
    proc = subprocess.run([sys.executable, "-m", "sarlab", command, *args, "--json", out], cwd=str(cwd), env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    with open(out) as f:
        return json.load(f)


def same_frame(got: pd.DataFrame, want: pd.DataFrame) -> None:
    """Equal column by column; floats to the last bit (JSON keeps every double exactly)."""
    assert list(got.columns) == list(want.columns)
    assert len(got) == len(want) > 0
    for col in got.columns:
        a, b = got[col].tolist(), want[col].tolist()
        for x, y in zip(a, b, strict=True):
            if isinstance(x, float) and math.isnan(x):
                assert isinstance(y, float) and math.isnan(y), col
            else:
                assert x == y, (col, x, y)


@pytest.mark.timeout(600)
def test_simulate_equals_the_cli_on_a_preset_profile(tmp_path):
    args = ["--graph", ESTIMATE, "--workers", "2,4", "--models", "gcn,sage-max,gat-unfused", "--modes",
            "sar,sa,oneshot", "--layers", "3", "--hidden", "32", "--heads", "2", "--prefetch", "2", "--profile",
            "icelake-hdr200"]
    want = cli("simulate", *args, cwd=tmp_path, cache=tmp_path / "cache")
    got = sarlab.simulate(ESTIMATE, workers=(2, 4), model=["gcn", "sage-max", "gat-unfused"], modes="sar,sa,oneshot",
                          profile="icelake-hdr200", layers=3, hidden=32, heads=2, prefetch=2)
    assert list(got.columns) == list(RECORD_COLUMNS) and len(got) == (2 + 4) * 3 * 3
    same_frame(got, pd.DataFrame(want["records"], columns=list(RECORD_COLUMNS)))
    assert got.attrs == {"profile": want["profile"], "profile_source": want["profile_source"]}
    summary = sarlab.simulate(ESTIMATE, workers=(2, 4), model="gcn,sage-max,gat-unfused", profile="icelake-hdr200",
                              layers=3, hidden=32, heads=2, prefetch=2, summary=True)
    same_frame(summary, pd.DataFrame(want["summary"], columns=list(summary.columns)))
    for col in PREDICTED:  # the predictions are not all alike (a comparison of constants would prove little)
        assert got[col].nunique() > 1, col


@pytest.mark.timeout(600)
def test_simulate_equals_the_cli_on_a_partition_directory_and_the_default_profile(tmp_path, monkeypatch):
    """``{N}`` partition directory, no --profile (this machine's calibration is absent: the shipped epyc-2core)."""
    write_manifest(tmp_path / "parts-2", two_parts())
    spec = str(tmp_path / "parts-{N}")
    cache = tmp_path / "cache"
    monkeypatch.setattr(provenance, "LOCAL_PROFILE", cache / "simulator_profile.json")
    want = cli("simulate", "--graph", spec, "--workers", "2", "--model", "gcn,gat", "--batchnorm", "--dropout",
               "0.5", "--unfused", cwd=tmp_path, cache=cache)
    got = sarlab.simulate(spec, 2, model="gcn,gat", batchnorm=True, dropout=0.5, fused=False)
    assert want["profile_source"] == str(provenance.DEFAULT_PROFILE) == got.attrs["profile_source"]
    assert set(got.partition_dir) == {str(tmp_path / "parts-2")} and set(got["mode"]) == {"sar", "sa", "oneshot"}
    same_frame(got, pd.DataFrame(want["records"], columns=list(RECORD_COLUMNS)))


@pytest.mark.parametrize("mode", ["sar", "sa", "oneshot"])
def test_simulate_bytes_by_hand(tmp_path, mode):
    """GCN, 1 layer, 2 hand-made parts (halo rows: part 0 needs 20 of part 1's, part 1 needs 30 of part 0's),
    F = 8, C = 4: each rank sends its rows forward and the mirrored gradients backward, 4 B per value, then the
    all-reduce of the weight and bias gradients (F C + C values) and 8 B of loss: 30*16 + 20*16 + 36*4 + 8 = 952 B."""
    write_manifest(tmp_path / "parts", two_parts())
    df = sarlab.simulate(str(tmp_path / "parts"), 2, model="gcn", modes=mode, profile=hand_profile(), layers=1,
                         hidden=4, threads=1)
    assert df.bytes_sent.tolist() == [952, 952] and df.bytes_recv.tolist() == [952, 952]
    assert df.attrs["profile"] == "hand" and (df.num_nodes == 160).all() and (df.workers == 2).all()


def test_simulate_refuses_what_it_does_not_price():
    with pytest.raises(ValueError, match="sarlab.plan"):
        sarlab.simulate(ESTIMATE, 2, modes="sar,sampling", profile="icelake-hdr200")
    with pytest.raises(ValueError, match="unknown mode"):
        sarlab.simulate(ESTIMATE, 2, modes="sar,bogus", profile="icelake-hdr200")
    with pytest.raises(ValueError, match="unknown GAT variant"):
        sarlab.simulate(ESTIMATE, 2, model="gat-slow", profile="icelake-hdr200")


def _json(result: dict) -> dict:
    """What ``--json`` keeps of a plan (``default=str``, as the command writes it)."""
    return json.loads(json.dumps(result, default=str))


@pytest.mark.timeout(900)
@pytest.mark.parametrize("graph", ["estimate:nodes=20000,edges=200000,features=16,classes=4,train=2000",
                                   "synthetic:nodes=3000,degree=8,features=16,classes=4,seed=0"])
def test_plan_equals_the_cli(tmp_path, graph):
    """A simulator workload and an engine graph (partitioned with METIS per worker count in both)."""
    want = cli("plan", "--graph", graph, "--model", "gat", "--epochs", "30", "--max-workers", "4", "--fanouts",
               "5,5", "--batch-size", "256", "--staleness", "2", "--profile", "icelake-hdr200", "--memory-per-worker",
               "0.5", cwd=tmp_path, cache=tmp_path / "cache")
    got = sarlab.plan(graph, model="gat", epochs=30, max_workers=4, fanouts="5,5", batch_size=256, staleness=2,
                      profile="icelake-hdr200", memory_per_worker=0.5)
    assert _json(got) == want
    assert len(got["candidates"]) == 3 * (2 + 4 + 4) and got["picks"]


def test_plan_bills_by_hand():
    """time = epochs x epoch; the cpu resource (c5.4xlarge, $0.68 per hour) bills per second with a 60 s minimum
    per worker; value = 1 / (time x cost); the picks are the extremes over the candidates that fit."""
    result = sarlab.plan("estimate:nodes=50000,edges=500000,features=32,classes=8", epochs=40, max_workers=8,
                         resources="cpu,serverless", strategies=["sar", "stale"], profile="icelake-hdr200")
    rows = result["candidates"]
    assert {r["resource"] for r in rows} == {"cpu", "serverless"} and {r["workers"] for r in rows} == {1, 2, 4, 8}
    assert len(rows) == 2 * (1 + 2 * 3)  # one worker: stale is exact, so only sar
    for r in rows:
        assert r["time_s"] == pytest.approx(40 * r["epoch_s"])
        if r["resource"] == "cpu":
            billed = math.ceil(max(60.0, r["time_s"]) - 1e-9)
            assert r["cost_usd"] == pytest.approx(r["workers"] * 0.68 * billed / 3600)
        assert r["value"] == pytest.approx(1 / (r["time_s"] * r["cost_usd"]))
    fits = [r for r in rows if r["fits"]]
    assert result["picks"]["lowest_time"]["time_s"] == min(r["time_s"] for r in fits)
    assert result["picks"]["lowest_cost"]["cost_usd"] == min(r["cost_usd"] for r in fits)
    assert result["picks"]["best_value"]["value"] == max(r["value"] for r in fits)
    with pytest.raises(ValueError, match="unknown resource"):
        sarlab.plan("ogbn-products", epochs=1, resources="tpu")
    with pytest.raises(ValueError, match="must be >= 1"):
        sarlab.plan("ogbn-products", epochs=0)


def test_front_door_is_lazy_and_maps_to_the_api():
    code = ("import sys, sarlab; assert not [m for m in sys.modules if m.startswith('sarlab.simulator')], 'eager'; "
            "from sarlab.simulator import api; assert sarlab.simulate is api.simulate and sarlab.plan is api.plan")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert sarlab.simulate is api.simulate and sarlab.plan is api.plan


def test_plan_prices_the_backend_overlay():
    """``backend="ccl"`` plans with the profile's ccl overlay: its link latency, 1 s above gloo's here, reaches every
    resource (each sets only the bandwidth), so every multi-worker candidate's epoch is at least 1 s longer (at least
    one message on the critical path) and one worker's is unchanged (it sends nothing). A backend the profile has no
    overlay of is the one-line error that says how to measure it."""
    from dataclasses import replace

    from sarlab.simulator.hardware.profile import Link

    base, _ = provenance.resolve_profile("icelake-hdr200")
    slow = Link(base.inter_host.latency_s + 1.0, base.inter_host.bandwidth_Bps, base.inter_host.gap_s)
    prof = replace(base, backends={"ccl": {"inter_host": slow, "intra_host": slow}})
    args = dict(epochs=10, max_workers=4, resources="cpu", strategies="sar,oneshot", profile=prof)
    gloo = {(r["strategy"], r["workers"]): r for r in sarlab.plan(ESTIMATE, **args)["candidates"]}
    result = sarlab.plan(ESTIMATE, backend="ccl", **args)
    assert result["backend"] == "ccl"
    ccl = {(r["strategy"], r["workers"]): r for r in result["candidates"]}
    assert set(ccl) == set(gloo) and {w for _, w in ccl} == {1, 2, 4}
    for key, r in ccl.items():
        if key[1] == 1:
            assert r["epoch_s"] == pytest.approx(gloo[key]["epoch_s"], rel=1e-12)
        else:
            assert r["epoch_s"] >= gloo[key]["epoch_s"] + 1.0
    with pytest.raises(ValueError, match="no communication costs measured over backend 'ccl'"):
        sarlab.plan(ESTIMATE, backend="ccl", **{**args, "profile": base})
