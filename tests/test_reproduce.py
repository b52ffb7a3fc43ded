"""`sarlab reproduce --quick`: every figure with its CSV, manifests that say measured or simulated, a second
run that does nothing, --force and changed parameters that re-run a step.

The first run is a subprocess with a timeout (its output is shown when it fails or hangs), as a user runs it; the
later runs (up to date, dry runs, a simulated step re-run) and the refusal run in this process.
"""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, cli_here

from sarlab.real.reproduce.reproduce_plan import build_plan, select_steps, unit_outputs
from sarlab.simulator.hardware.profile import icelake_hdr200, save_profile

FIGURES = {"fig2": {"measured"}, "fig3": {"measured", "simulated"}, "fig4": {"measured", "simulated"},
           "fig5": {"simulated"}, "fig6": {"simulated"}}
STEPS = ("fig2", "fig3_fig4", "fig5_fig6")
#: the steps the quick fixture runs (figures 7, 8 and the accuracy table train models: listed by a dry run only)
ONLY = ["--only", ",".join(STEPS)]


def reproduce(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Run ``sarlab reproduce ARGS``; fail with its output on a non-zero exit or a timeout."""
    cmd = [sys.executable, "-m", "sarlab.real.reproduce.reproduce", *args]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"`sarlab reproduce {' '.join(args)}` did not finish in {timeout}s\n"
                    f"stdout:\n{err.stdout}\nstderr:\n{err.stderr}")
    return _succeeded(args, res)


def reproduce_here(args: list[str]) -> subprocess.CompletedProcess:
    """``sarlab reproduce ARGS`` in this process (``cli.main``): for runs that start no worker (up-to-date checks,
    dry runs, simulated steps); fail with its output on a non-zero exit."""
    return _succeeded(args, cli_here(["reproduce", *args]))


def _succeeded(args: list[str], res: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    if res.returncode != 0:
        pytest.fail(f"`sarlab reproduce {' '.join(args)}` exited {res.returncode}\n"
                    f"stdout:\n{res.stdout[-20000:]}\nstderr:\n{res.stderr[-20000:]}")
    return res


def summary(path: Path) -> dict[str, dict]:
    return {s["step"]: s for s in json.loads(path.read_text())["steps"]}


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("reproduce")
    start = time.perf_counter()
    res = reproduce(["--quick", *ONLY, "--out", str(out), "--json", str(out / "first.json")], timeout=240)
    return out, res, time.perf_counter() - start


@pytest.mark.timeout(300)
def test_every_figure_has_png_and_csv(quick):
    out, res, seconds = quick
    assert all(s["status"] == "ran" for s in summary(out / "first.json").values()), res.stdout[-5000:]
    for fig, kinds in FIGURES.items():
        pngs = sorted(out.glob(f"{fig}_*.png"))
        assert pngs, f"no {fig} figure in {sorted(p.name for p in out.iterdir())}"
        seen = set()
        for png in pngs:
            assert png.stat().st_size > 10_000, png
            csv = png.with_suffix(".csv")
            assert csv.is_file(), f"{png.name} has no CSV beside it"
            table = pd.read_csv(csv)
            assert len(table) > 0, csv
            assert table["kind"].nunique() == 1, csv
            seen.add(table["kind"].iloc[0])
        assert seen == kinds, (fig, seen)
    assert "[" in res.stdout and "all steps done" in res.stdout  # the progress lines


@pytest.mark.timeout(300)
def test_manifests_record_measured_or_simulated(quick):
    out, _, _ = quick
    listed = {}
    for step in STEPS:
        manifest = json.loads((out / f"reproduce_{step}.json").read_text())
        assert manifest["complete"] and manifest["run"] == "quick", step
        for unit, entry in manifest["units"].items():
            assert entry["kind"] in ("measured", "simulated"), unit
            assert entry["params"]["kind"] == entry["kind"]
            if entry["kind"] == "measured":
                assert entry["provenance"]["machine"] and entry["provenance"]["date"], unit
            else:
                assert entry["provenance"]["profile"] == "icelake-hdr200", unit
            listed.update(entry["outputs"])
    for png in out.glob("*.png"):  # every figure is accounted for, with its kind
        assert listed.get(png.name) in ("measured", "simulated"), png.name
    fig5 = pd.read_csv(next(out.glob("fig5_*.csv")))
    assert {"mem_scaling", "oom", "host_mem_bytes"} <= set(fig5.columns)
    assert (fig5.groupby("series").mem_scaling.first() == 1.0).all()
    assert (fig5.host_mem_bytes == 256 * 2**30).all()  # read from the icelake-hdr200 profile


@pytest.mark.timeout(300)
def test_second_run_is_a_no_op(quick):
    out, _, _ = quick
    before = {p.name: p.stat().st_mtime_ns for p in out.glob("*.png")}
    res = reproduce_here(["--quick", *ONLY, "--out", str(out), "--json", str(out / "second.json")])
    # nothing ran (every step up to date) and nothing was rewritten; no wall-time bound, which a loaded machine breaks
    assert all(s["status"] == "up-to-date" for s in summary(out / "second.json").values()), res.stdout
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("*.png")} == before


@pytest.mark.timeout(300)
def test_force_and_changed_parameters_rerun_a_step(quick, tmp_path):
    """--force and a changed parameter each make an up-to-date step (test_second_run_is_a_no_op) run again, and only
    that step. The decision, ``units_to_run``, is the same for a dry run and a real one: a dry run shows it for
    --force, the changed parameter runs the step for real (one fig5_fig6 run instead of two). The other profile is
    the default's figures under another name, in a profile file: simulated as cheaply as the first run (the
    ``reference-laptop`` preset's slow links made this step's simulation ~10x as long)."""
    out, _, _ = quick
    other = save_profile(dataclasses.replace(icelake_hdr200(), name="icelake-hdr200-copy"),
                         tmp_path / "icelake-hdr200-copy.json")
    fig2_png = next(out.glob("fig2_*.png"))
    fig2_before = fig2_png.stat().st_mtime_ns
    fig5_png = next(out.glob("fig5_*.png"))
    before = fig5_png.stat().st_mtime_ns

    reproduce_here(["--quick", "--out", str(out), "--dry-run", "--force", "--only", "fig5", "--json",
                    str(out / "force.json")])
    assert {k: v["status"] for k, v in summary(out / "force.json").items()} == {"fig5_fig6": "would-run"}
    assert fig5_png.stat().st_mtime_ns == before  # a dry run runs nothing
    # a changed parameter (another machine profile) re-runs the step without --force
    reproduce_here(["--quick", "--out", str(out), "--only", "fig6", "--profile", str(other),
                    "--json", str(out / "profile.json")])
    steps = summary(out / "profile.json")
    assert list(steps) == ["fig5_fig6"] and steps["fig5_fig6"]["status"] == "ran"
    assert fig5_png.stat().st_mtime_ns != before
    assert fig2_png.stat().st_mtime_ns == fig2_before
    manifest = json.loads((out / "reproduce_fig5_fig6.json").read_text())
    assert {e["provenance"]["profile"] for e in manifest["units"].values()} == {"icelake-hdr200-copy"}


def test_unknown_step_is_refused(tmp_path):
    res = cli_here(["reproduce", "--quick", "--only", "fig9", "--out", str(tmp_path)])  # refused before any work
    assert res.returncode == 2 and "unknown step 'fig9'" in res.stderr, res.stderr
    assert not list(tmp_path.iterdir())


def test_dry_run_lists_figures_7_8_and_the_accuracy_table(tmp_path):
    """Without --only every step is planned, the three training steps included, each with the files it writes."""
    res = cli_here(["reproduce", "--quick", "--dry-run", "--out", str(tmp_path), "--json", str(tmp_path / "dry.json")])
    assert res.returncode == 0, res.stdout + res.stderr  # in this process: a dry run starts nothing
    steps = summary(tmp_path / "dry.json")
    assert list(steps) == [*STEPS, "fig7", "fig8", "accuracy"], res.stdout
    assert all(s["status"] == "would-run" for s in steps.values())
    assert steps["fig7"]["units"] == ["fig7_rgcn_mag-like_measured", "fig7_rgcn_mag-like_simulated"]
    assert steps["fig8"]["units"] == ["fig8_mfg_label_aug_products-like_measured"]
    assert steps["accuracy"]["units"] == ["accuracy"]
    assert not list(tmp_path.glob("*.png"))  # a dry run runs nothing
    plan = build_plan(quick=True, profile="icelake-hdr200")
    assert set(unit_outputs("accuracy", plan["accuracy"]["accuracy"])) == {"accuracy.md", "accuracy.csv",
                                                                           "accuracy_summary.csv"}
    fig8 = "fig8_mfg_label_aug_products-like_measured"
    assert set(unit_outputs(fig8, plan["fig8"][fig8])) == {f"{fig8}.png", f"{fig8}_curves.csv", f"{fig8}_rates.csv"}
    sim7 = "fig7_rgcn_mag-like_simulated"
    assert unit_outputs(sim7, plan["fig7"][sim7]) == {f"{sim7}.png": "simulated", f"{sim7}.csv": "simulated"}
    assert select_steps("fig7,accuracy") == ["fig7", "accuracy"]
