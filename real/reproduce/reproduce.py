"""``sarlab reproduce``: regenerate the SAR paper's figures 2-8 and its accuracy table as plan -> units ->
figures, measured where this machine can run them and simulated where it cannot, each labelled on its face.

The plan (:mod:`sarlab.real.reproduce.reproduce_plan`) lists steps and their units with parameters; each unit is a
Python call (:mod:`sarlab.real.reproduce.reproduce_units`) that draws with :mod:`sarlab.common.figures`;
:mod:`sarlab.real.reproduce.step_cache` skips finished work.

Steps, in this order (``--only`` picks some; ``fig3`` and ``fig4`` name ``fig3_fig4``, ``fig5`` and ``fig6``
name ``fig5_fig6``):

* ``fig2``: one GAT layer, forward and backward time and peak memory against heads 2/4/8: the engine's own
  ``sarlab.nn.GATConv`` with the fused C++ kernels and unfused, vs PyG's ``GATConv`` (vs DGL's where it
  imports). Measured with :mod:`sarlab.real.bench.kernel_bench`.
* ``fig3_fig4``: 3-layer GraphSAGE (hidden 256) and 3-layer GAT (hidden 128 = 4 heads x 32), epoch time and
  peak memory per worker against N; ``sar`` vs vanilla domain parallel (``oneshot``), GAT also ``sar`` with
  the fused kernels. (a) measured here with :mod:`sarlab.real.bench.bench` on a products-like synthetic graph (mean
  degree 50, 100 features, 47 classes) at N = 2, 4, 8; (b) simulated for ogbn-products at N = 4, 8, 16 on a
  machine profile (default: the ``icelake-hdr200`` preset, the paper's cluster).
* ``fig5_fig6``: the same models on ogbn-papers100M at N = 32, 64, 128, simulated, with the memory scaling
  (memory at the smallest N / memory at N) on a second axis and an OOM marker where one host's workers would
  need more than the profile's memory per host.
* ``fig7``: 3-layer R-GCN (hidden 256): measured here on an ogbn-mag-like heterogeneous graph at N = 2, 4, 8
  (:mod:`sarlab.real.reproduce.fig7`), simulated on ogbn-mag at N = 4, 8, 16 (:mod:`sarlab.simulator.studies.fig7`).
* ``fig8``: training curves with and without label augmentation and MFG pruning, and MFG's epoch time, memory
  and bytes against the label rate, measured on a products-like graph with few labels
  (:mod:`sarlab.real.reproduce.fig8`).
* ``accuracy``: GCN, SAGE, GAT, plain / + label augmentation / + C&S, mean and std over seeds, on Cora and a
  products-like graph, with an N = 4 check (:mod:`sarlab.real.reproduce.accuracy_table`).

Every unit of work (one figure) writes a PNG, the numbers it draws as a CSV beside it, and its entry in the
step manifest ``reproduce_<step>.json``: the parameters, whether it is measured or simulated, and where
(CPU model and date, or the profile). A step whose manifest matches the current parameters and whose
outputs exist is skipped; ``--force`` re-runs it. An interrupted step keeps its finished units. The
simulator's source files count as a parameter of simulated units (they are cheap and must match the model
in the tree); the engine's do not (measured runs are long).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from sarlab.common.paths import cache_dir
from sarlab.common.tables import SIMULATED, SMOKE_MARK
from sarlab.data import staging
from sarlab.real.launch import outputs
from sarlab.real.reproduce.reproduce_plan import STEPS, build_plan, select_steps, unit_outputs
from sarlab.real.reproduce.reproduce_units import Log, run_fig2, run_measured, run_simulated
from sarlab.real.reproduce.step_cache import (
    MANIFEST_VERSION,
    params_sha,
    read_manifest,
    step_current,
    unit_current,
    write_manifest,
)
from sarlab.version import version_string

DEFAULT_OUT = cache_dir("reproduce")


class Progress:
    """A one-line progress bar over all units of the selected steps, printed at each change."""

    def __init__(self, total: int, width: int = 24):
        self.total, self.done, self.width, self.start = max(total, 1), 0, width, time.perf_counter()

    def line(self, text: str) -> str:
        filled = round(self.width * self.done / self.total)
        return (f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} "
                f"{time.perf_counter() - self.start:6.0f}s  {text}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="sarlab reproduce",
        description="Regenerate the SAR paper's figures 2-8 and accuracy table into --out: measured on this machine "
        "where it can run them (figure 2: one GAT layer; figures 3a/4a: a products-like synthetic graph at N=2,4,8), "
        "simulated with the SimPy model where it cannot (figures 3b/4b: ogbn-products at N=4,8,16; figures "
        "5/6: ogbn-papers100M at N=32,64,128; figure 7b: ogbn-mag at N=4,8,16; figures 7a/8 and the accuracy table: "
        "measured on synthetic graphs and Cora). Each figure says on its face whether it is measured (CPU "
        "model, date) or simulated (profile); a CSV of its numbers lies beside it; reproduce_<step>.json "
        "records the parameters. Finished steps are skipped unless --force or their parameters changed.",
        epilog=f"Steps: {', '.join(STEPS)} (fig3/fig4 and fig5/fig6 name the step that draws them).")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="smoke-sized versions of every step, to check that they "
                      "run; every figure and table says SMOKE-SIZED on its face (measured on a 2-core VM: 290 s of "
                      "CPU, 4-16 min of wall time depending on what else runs there)")
    size.add_argument("--full", action="store_true", help="the real run (the default; about 1.5-2 hours on 2 cores, "
                      "most of it fig8 and accuracy)")
    p.add_argument("--out", help=f"output directory (default {DEFAULT_OUT}/<quick|full>, sarlab's cache: "
                   "$SARLAB_CACHE_DIR, a checkout's .cache or the user cache; pass --out results in a checkout to "
                   "update the committed figures)")
    p.add_argument("--force", action="store_true", help="re-run the selected steps even when up to date, and replace "
                   "files in --out (and --json) that a step would write but no step manifest lists (files this command "
                   "did not write; without --force they are refused before anything runs)")
    p.add_argument("--only", help=f"comma list of steps to run ({', '.join(STEPS)}; or fig2..fig8)")
    p.add_argument("--profile", default="icelake-hdr200",
                   help="machine profile of the simulated figures: preset or profile JSON (default %(default)s)")
    p.add_argument("--cache", help="partition cache of the measured runs (default: partitions/ in sarlab's cache "
                   "for --full, "
                   "a temporary directory for --quick)")
    p.add_argument("--dry-run", action="store_true", help="say which steps and units would run, run nothing")
    p.add_argument("--json", metavar="PATH", help="write a machine-readable summary of what ran here")
    return p.parse_args(argv)


def run_unit(unit: str, params: dict[str, Any], out: Path, cache: Path | None, log: Log) -> dict[str, Any]:
    """Run one unit and return its provenance. The unit writes into a staging directory under ``out``
    (``.reproduce-<unit>-<pid>-*``, swept by a later run once this process is gone), whose files are then moved
    into ``out`` one by one atomically: a unit that fails or is killed changes nothing in ``out``. A ``--quick``
    unit's figures and tables are marked smoke-sized on their face (:func:`mark_smoke`)."""
    stage = Path(staging.staging_dir(str(out), f".reproduce-{unit}-"))
    try:
        provenance = _run_unit(unit, params, stage, cache, log)
        if params.get("run") == "quick":
            mark_smoke(stage, unit_outputs(unit, params))
        for made in sorted(stage.iterdir()):
            if made.is_file():
                outputs.write_bytes(out / made.name, made.read_bytes())
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return provenance


def mark_smoke(out: Path, files: dict[str, str]) -> None:
    """Mark a smoke-sized unit's outputs with :data:`~sarlab.common.tables.SMOKE_MARK`: a red band above each PNG
    (and the PNG's Description), a first line in each Markdown table; the CSVs keep their columns (the step's
    manifest says ``"run": "quick"``)."""
    import matplotlib.pyplot as plt

    for name in files:  # in the unit's staging directory: run_unit moves them into --out afterwards
        path = out / name
        if name.endswith(".md"):
            path.write_text(f"**{SMOKE_MARK}**\n\n{path.read_text()}")
        elif name.endswith(".png"):
            image = plt.imread(path)
            height, width, band, dpi = image.shape[0], image.shape[1], 44, 100
            fig = plt.figure(figsize=(width / dpi, (height + band) / dpi), dpi=dpi)
            fig.add_axes((0, 0, 1, height / (height + band))).imshow(image, interpolation="none")
            fig.axes[0].set_axis_off()
            fig.patches.append(plt.Rectangle((0, height / (height + band)), 1, band / (height + band),
                                             transform=fig.transFigure, color="#b22222"))
            fig.text(0.5, 1 - band / 2 / (height + band), SMOKE_MARK, ha="center", va="center", color="white",
                     fontsize=13, weight="bold")
            fig.savefig(path, dpi=dpi, metadata={"Description": SMOKE_MARK})
            plt.close(fig)


def _run_unit(unit: str, params: dict[str, Any], out: Path, cache: Path | None, log: Log) -> dict[str, Any]:
    if params["kind"] == SIMULATED:
        return run_simulated(unit, params, out, log)
    work = Path(tempfile.mkdtemp(prefix=".work-", dir=out))
    try:
        if params["figure"] == "fig2":
            return run_fig2(unit, params, out, work, log)
        return run_measured(unit, params, out, cache or (work / "partitions"), log)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def units_to_run(steps: list[str], plan: dict[str, dict[str, dict[str, Any]]], out: Path,
                 force: bool) -> dict[str, list[str]]:
    """Per step, the units that are not up to date (all of them with ``force``); a step whose manifest holds the
    current parameters and all of whose outputs exist has none."""
    todo: dict[str, list[str]] = {}
    for step in steps:
        manifest = read_manifest(out, step)
        outputs = {u: unit_outputs(u, p) for u, p in plan[step].items()}
        if not force and step_current(manifest, plan[step], outputs, out):
            todo[step] = []
        else:
            entries = manifest.get("units", {})
            todo[step] = [u for u, p in plan[step].items()
                          if force or not unit_current(entries.get(u), p, outputs[u], out)]
    return todo


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _run_and_record(unit: str, params: dict[str, Any], out: Path, cache: Path | None, manifest: dict[str, Any],
                    step: str, progress: Progress, log: Log) -> dict[str, Any]:
    """Run one unit, enter it into the step's manifest (written at once) and return its summary entry; a failing
    unit is reported and returned as ``failed``, not raised, so that the others still run."""
    outputs = unit_outputs(unit, params)
    log(progress.line(f"{unit} ({params['kind']}) ..."))
    t0 = time.perf_counter()
    try:
        provenance = run_unit(unit, params, out, cache, log)
    except Exception as err:  # one unit failing must not lose the others: report it and go on
        log(f"FAILED {unit}: {type(err).__name__}: {err}\n{traceback.format_exc()}")
        progress.done += 1
        return {"unit": unit, "status": "failed", "kind": params["kind"], "error": f"{type(err).__name__}: {err}"}
    seconds = time.perf_counter() - t0
    manifest["units"][unit] = {
        "kind": params["kind"], "figure": params["figure"], "params": params, "params_sha": params_sha(params),
        "outputs": outputs, "provenance": provenance, "seconds": round(seconds, 1), "finished": _now()}
    write_manifest(out, step, manifest)
    progress.done += 1
    log(progress.line(f"{unit} ({params['kind']}) done in {seconds:.0f}s: {', '.join(outputs)}"))
    return {"unit": unit, "status": "ran", "kind": params["kind"], "outputs": outputs, "seconds": round(seconds, 1)}


def run_step(step: str, units: dict[str, dict[str, Any]], todo: list[str], out: Path, cache: Path | None,
             run_name: str, progress: Progress, log: Log) -> dict[str, Any]:
    """Run the units of ``todo`` of one step, keeping the others' manifest entries; the manifest is rewritten after
    every unit and marked complete when none failed. Returns the step's summary record."""
    t_step = time.perf_counter()
    record: dict[str, Any] = {"step": step, "units": []}
    if not todo:
        progress.done += len(units)
        log(progress.line(f"{step}: up to date (reproduce_{step}.json), skipped; --force re-runs it"))
        record.update(status="up-to-date", seconds=0.0)
        return record
    old = read_manifest(out, step)
    keep = {u: e for u, e in old.get("units", {}).items() if u in units and u not in todo}
    manifest = {"format_version": MANIFEST_VERSION, "step": step, "run": run_name, "complete": False,
                "params_sha": params_sha(units), "command": "sarlab reproduce --" + run_name + f" --only {step}",
                "sarlab_version": version_string(), "started": _now(), "units": keep}
    write_manifest(out, step, manifest)
    for unit, params in units.items():
        if unit in todo:
            record["units"].append(_run_and_record(unit, params, out, cache, manifest, step, progress, log))
            continue
        progress.done += 1
        log(progress.line(f"{unit} ({params['kind']}): up to date, kept"))
        record["units"].append({"unit": unit, "status": "up-to-date", "kind": params["kind"],
                                "outputs": unit_outputs(unit, params)})
    step_failed = any(u["status"] == "failed" for u in record["units"])
    manifest["complete"] = not step_failed
    manifest["finished"] = _now()
    manifest["seconds"] = round(time.perf_counter() - t_step, 1)
    manifest["outputs"] = {f: k for u in units if u in manifest["units"] for f, k in unit_outputs(u, units[u]).items()}
    write_manifest(out, step, manifest)
    record.update(status="failed" if step_failed else "ran", seconds=manifest["seconds"])
    return record


def main(argv: list[str] | None = None) -> int:
    """``sarlab reproduce``; returns 0 when every selected step is up to date or ran, 1 when one failed."""
    args = parse_args(argv)
    try:
        steps = select_steps(args.only)
        plan = build_plan(args.quick, args.profile)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else DEFAULT_OUT / ("quick" if args.quick else "full")
    cache = Path(args.cache) if args.cache else (None if args.quick else cache_dir("partitions"))
    check_outputs(args, out, cache, steps, plan)  # before anything runs
    out.mkdir(parents=True, exist_ok=True)

    def log(line: str) -> None:
        print(line, flush=True)

    todo = units_to_run(steps, plan, out, args.force)
    progress = Progress(sum(len(plan[s]) for s in steps))
    run_name = "quick" if args.quick else "full"
    log(f"sarlab reproduce --{run_name} -> {out.resolve()}")
    summary: dict[str, Any] = {"out": str(out.resolve()), "run": run_name, "steps": []}
    if args.dry_run:
        for step in steps:
            state = "up to date" if not todo[step] else f"would run {', '.join(todo[step])}"
            log(f"  {step}: {state}")
            summary["steps"].append({"step": step, "status": "up-to-date" if not todo[step] else "would-run",
                                     "units": todo[step]})
        _write_summary(args.json, summary, ok=True)
        return 0
    for step in steps:
        summary["steps"].append(run_step(step, plan[step], todo[step], out, cache, run_name, progress, log))
    failed = any(r["status"] == "failed" for r in summary["steps"])
    log(progress.line("failed: see FAILED above" if failed else "all steps done"))
    _write_summary(args.json, summary, ok=not failed)
    return 1 if failed else 0


def _write_summary(path: str | None, summary: dict[str, Any], ok: bool) -> None:
    if not path:
        return
    summary = {**summary, "sarlab_version": version_string(), "ok": ok}
    outputs.write_bytes(path, json.dumps(summary, indent=1, default=str) + "\n")


def owned_files(out: Path, steps: list[str]) -> set[str]:
    """The files in ``out`` this command wrote: the steps' manifests and every output they list."""
    owned = set()
    for step in steps:
        manifest = read_manifest(out, step)
        if manifest:
            owned.add(f"reproduce_{step}.json")
            owned.update(manifest.get("outputs", {}))
            for entry in manifest.get("units", {}).values():
                owned.update(entry.get("outputs", {}))
    return owned


def check_outputs(args: argparse.Namespace, out: Path, cache: Path | None, steps: list[str],
                  plan: dict[str, dict[str, dict[str, Any]]]) -> None:
    """``--out``, ``--cache`` and ``--json`` before anything runs (:mod:`sarlab.real.launch.outputs`): a file in
    ``--out`` that a selected step writes, no step manifest lists and sarlab did not write is refused without
    ``--force``, as is such a ``--json`` file."""
    outputs.check_dir(out, "--out")
    if cache is not None:
        outputs.check_dir(cache, "--cache")  # a partition cache: sarlab's own
    if args.json:
        outputs.check_file(args.json, "--json", args.force)
    if args.force or args.dry_run or outputs.in_cache(out) or not out.is_dir():
        return
    owned = owned_files(out, steps)
    writes = [f"reproduce_{step}.json" for step in steps]
    writes += [f for step in steps for unit, params in plan[step].items() for f in unit_outputs(unit, params)]
    foreign = [f for f in dict.fromkeys(writes)
               if (out / f).exists() and f not in owned and not outputs.sarlab_wrote(out / f)]
    if foreign:
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        raise outputs.OutputError(
            f"--out {str(out)!r} already holds {', '.join(foreign[:3])}{more}, which the selected steps would replace "
            "and no step manifest lists (this command did not write them); pass --force to replace them (it also "
            "re-runs the steps), or choose another directory")


if __name__ == "__main__":
    sys.exit(main())
