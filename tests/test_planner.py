"""``sarlab plan`` end to end (picks, billing by hand, memory caps, bad inputs). notebooks/planner.ipynb runs headless
in tests/test_notebooks.py (with its two figures and the picks it prints: ``MUST_SHOW``)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
from conftest import cli_here

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRAPH = "synthetic:nodes=3000,degree=8,features=16,classes=4,seed=0"


PLAN = ["plan", "--graph", GRAPH, "--model", "sage", "--epochs", "20", "--max-workers", "2", "--fanouts", "5,5",
        "--batch-size", "256"]


def run_plan(*args: str, cwd: str) -> subprocess.CompletedProcess:
    """``sarlab plan`` in a subprocess, as a user runs it."""
    cmd = [sys.executable, "-m", "sarlab", *PLAN, *args]
    env = {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def plan_here(*args: str, cwd: str) -> subprocess.CompletedProcess:
    """``sarlab plan`` in this process (``cli.main``, what the script calls): for the refusals, which start nothing
    (a fresh interpreter costs ~4 s of CPU importing torch)."""
    return cli_here([*PLAN, *args], cwd=cwd)


@pytest.mark.timeout(900)
def test_plan_picks_and_bills_by_hand(tmp_path):
    out = tmp_path / "plan.json"
    proc = run_plan("--json", str(out), cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    rows = result["candidates"]
    # 1 worker: sar, sampling (oneshot is sar, stale is exact there); 2 workers: all four; x 3 resources
    assert len(rows) == 3 * (2 + 4)
    assert {r["strategy"] for r in rows} == {"sar", "oneshot", "sampling", "stale"}
    for r in rows:
        assert r["time_s"] == pytest.approx(20 * r["epoch_s"])
        if r["resource"] == "cpu":  # c5.4xlarge: $0.68 per hour, per second, 60 s minimum
            billed = math.ceil(max(60.0, r["time_s"]) - 1e-9)
            assert r["cost_usd"] == pytest.approx(r["workers"] * 0.68 * billed / 3600)
        assert r["value"] == pytest.approx(1 / (r["time_s"] * r["cost_usd"]))
    fits = [r for r in rows if r["fits"]]
    picks = result["picks"]
    assert picks["lowest_time"]["time_s"] == min(r["time_s"] for r in fits)
    assert picks["lowest_cost"]["cost_usd"] == min(r["cost_usd"] for r in fits)
    assert picks["best_value"]["value"] == max(r["value"] for r in fits)
    assert "lowest time" in proc.stdout and "best value" in proc.stdout
    # the output says the numbers are predicted and how cost and value are computed
    text = " ".join(proc.stdout.split())  # the legend is wrapped for the terminal
    assert "PREDICTED" in text and "value = 1 / (total s x cost $)" in text
    assert "1 worker(s)" in proc.stderr  # progress
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]


@pytest.mark.timeout(900)
def test_plan_memory_cap_and_bad_inputs(tmp_path):
    proc = plan_here("--memory-per-worker", "0.000001", "--resources", "cpu", "--strategies", "sar",
                     cwd=str(tmp_path))
    assert proc.returncode == 1 and "no candidate fits in memory" in proc.stderr
    proc = plan_here("--resources", "tpu", cwd=str(tmp_path))
    assert proc.returncode == 1 and "unknown resource" in proc.stderr
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"cpu": {"dollars": 1}}))
    proc = plan_here("--prices", str(prices), cwd=str(tmp_path))
    assert proc.returncode == 1 and "fields among" in proc.stderr
