"""Real engine epochs for the calibration: single-worker engine runs, the compute scale they give under each memory
method (allocator), and the speed probe (:func:`speed_probe`) that ``sarlab bench engine --probe`` runs between
configurations.

The op microbenchmarks miss part of a whole epoch (fresh-page faults of large tensors, the allocator, small
ops and Python), and that part grows with the memory a worker holds. :func:`bench_engine` measures it: real
single-worker, single-thread epochs of the engine on graphs of several sizes, over what the simulator
predicts for them from the microbenchmarks alone, each size run in :data:`ENGINE_PASSES` pass(es) and fitted through
the median of its runs as a power law of the worker's predicted peak memory
(:attr:`sarlab.simulator.hardware.profile.Profile.compute_scale_curve`), under ``sarlab train``'s default memory
method (``live``: the counting allocator, whose block cache reuses resident pages); the other method's epochs
(``rss``: every large tensor on fresh pages) are measured on the same graph at the middle size, and their ratio kept
(:attr:`sarlab.simulator.hardware.profile.Profile.memory_scale`): on the 2-core VM the two differed 2.3x on
2026-11-27, and the fault-paying ``rss`` side drifts from day to day. Each pass's runs share one process
(:func:`run_child` starts ``python -m sarlab.real.calibration.engine_runs``, :func:`main`, which runs them as a
one-worker ``sarlab train`` worker would), forked from the zygote as ``sarlab train``'s workers are
(:func:`sarlab.real.calibration.ranks.run_group`): no interpreter start or torch import per pass;
:func:`engine_epoch` (the probe's) is a whole ``sarlab train``.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from sarlab import kernels
from sarlab.core import memory
from sarlab.core.comm import Comm
from sarlab.core.config import EngineConfig
from sarlab.core.shards import ShardedGraph
from sarlab.data.partition import load_manifest, load_part
from sarlab.nn.model import ModelConfig
from sarlab.real.calibration.harness import ROOT, aggregation_seconds
from sarlab.real.calibration.ranks import run_group
from sarlab.real.launch.prepare import prepare_partition
from sarlab.simulator.calibration.calibration import Calibration
from sarlab.simulator.calibration.fitting import (
    FAMILY_APART,
    FAMILY_BOUNDS,
    aggregation_factors,
    fit_family_scale,
    fit_memory_ratio,
    fit_scale_curve,
    median_scale_points,
)
from sarlab.simulator.calibration.measured import read_records, summarize_measured, with_defaults
from sarlab.simulator.calibration.probe import PROBE_GRAPH, PROBE_MEMORY, PROBE_MODEL
from sarlab.simulator.hardware.profile import Profile
from sarlab.simulator.system.replay import family_seconds, simulate_row, stats_for
from sarlab.simulator.workload.workload import PartitionStats
from sarlab.training.trainer import TrainConfig, Trainer

#: graphs of :func:`bench_engine`, ``nodes`` from :data:`ENGINE_SIZES` or the quick sizes (not graphs any
#: benchmark or validation uses)
ENGINE_GRAPH = "synthetic:nodes={nodes},degree=30,features=128,classes=16,seed=7"
#: three sizes (the whole calibration's budget is 3 minutes on a quiet machine; five sizes up to 200,000 nodes took
#: most of the 13 minutes of the 2-core VM's calibration before issue 39), whose peaks (~50, 150 and 450 MB live)
#: span one worker's in the validations of results/host_model (25-470 MB); 12,500 / 35,000 / 100,000 before
#: 2026-11-28 (95-750 MB, ~20 s more of the 2-core VM's calibration)
ENGINE_SIZES = (8_000, 24_000, 70_000)
ENGINE_SIZES_QUICK = (1_500, 3_000)
#: passes over the sizes (ascending, then descending): each size's point is the median of its 2 x passes runs. One:
#: a second pass moved each size's point by less than the two passes differ from each other (results/host_model/
#: budget/README.md) and cost ~40 s of a 1-core calibration's 3-minute budget
ENGINE_PASSES = 1
#: a size whose runs' ratios differ by more than this factor is logged as a warning
SPREAD_WARNING = 1.3
#: the models of every size (the curve's runs)
ENGINE_MODELS = ("gcn", "sage")
#: the models run besides them at the smaller sizes (all of them in ``--quick``) for the op families' factors
#: (:attr:`sarlab.simulator.hardware.profile.Profile.family_scale`): GAT's epoch is mostly its fused attention, which
#: GCN and SAGE never run; GCN and SAGE weigh GEMM and aggregation differently (SAGE has two products a layer)
FAMILY_MODELS = ("gat",)
#: hidden width of :data:`FAMILY_MODELS`' runs (GAT: 4 heads of 32; an epoch at 24,000 nodes ~0.6 s on the 2-core VM)
FAMILY_HIDDEN = 128
#: the memory method the curve is fitted under (``sarlab train``'s default), and the other one, whose ratio to it is
#: measured at the middle size (:attr:`sarlab.simulator.hardware.profile.Profile.memory_scale`)
CURVE_MEMORY, OTHER_MEMORY = "live", "rss"
#: whether the aggregation families take their timed factors (:func:`family_scale_of`) in place of the shared
#: least-squares one, the other families keeping theirs. Refitting GEMM and the rest around the timed factors
#: compensated and did worse at hidden 128 (sittings s15, s16); keeping them and taking the timed aggregation did better
#: in every validation of s15-s17 (replayed; results/host_model/families): the least-squares factor had priced SpMM at
#: ~0.4 of its time, which weighs twice at P = 2, where the split doubles the aggregation
AGGREGATION_TIMED_FACTORS = True
#: seconds one engine child may take (a full pass: ~40 s on the quiet 2-core VM)
CHILD_TIMEOUT_S = 900


def engine_epoch(
    spec: str, model: str, layers: int, hidden: int, epochs: int, partition_dir: str | Path, threads: int = 1,
    memory: str = "rss",
) -> pd.Series:
    """One real single-worker ``sarlab train`` run of ``model`` (sar, mean aggregation) on graph ``spec``
    with ``threads`` threads (0: the engine's default, all cores); returns its
    :func:`sarlab.simulator.calibration.measured.summarize_measured`
    row (median epoch time of the epochs after the first).
    ``partition_dir`` is reused when it already holds the partition.

    One thread by default: the compute scale fitted from these runs then holds no error of the measured
    thread efficiencies, which the simulator applies on its own. ``--memory rss`` by default: glibc's
    allocator with the engine's thresholds, under which the op microbenchmarks and the speed probe run (large
    outputs are fresh pages); ``live`` (``sarlab train``'s default) installs the counting allocator, whose block
    cache reuses resident pages and makes elementwise work about 4x faster, which the microbenchmarks do not see
    (the compute scale of ``live`` runs holds it; :attr:`Profile.memory_scale` relates the two).
    """
    reuse = (Path(partition_dir) / "manifest.json").exists()
    graph = ["--graph", str(partition_dir)] if reuse else ["--graph", spec, "--partition-dir", str(partition_dir)]
    with tempfile.TemporaryDirectory(prefix="sarlab-engine-epoch-") as tmp:
        out = Path(tmp) / f"{model}.json"
        cmd = [
            sys.executable, "-m", "sarlab", "train", *graph, "--workers", "1", "--mode", "sar",
            "--model", model, "--layers", str(layers), "--hidden", str(hidden), "--epochs", str(epochs),
            "--threads", str(threads), "--memory", memory, "--eval-every", "0", "--json", str(out),
        ]  # fmt: skip
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            raise RuntimeError(f"sarlab train ({model}) exited with {proc.returncode}: {proc.stderr[-400:]}")
        return summarize_measured(read_records(out), warmup=1).iloc[0]


def child_plan(sizes: tuple[int, ...], turn: int, ratio_size: int, layers: int, hidden: int, epochs: int,
               parts: Path, family_sizes: tuple[int, ...] = ()) -> list[dict[str, Any]]:
    """The runs of pass ``turn`` (0-based) in one child process (:func:`run_child`): GCN and SAGE under
    ``rss`` at ``ratio_size`` first (the counting allocator, once installed, stays), then under ``live`` at every
    size, ascending in even passes and descending in odd ones, with :data:`FAMILY_MODELS` beside them at
    ``family_sizes`` (width :data:`FAMILY_HIDDEN`); the ``live`` runs at ``family_sizes`` measure their aggregation
    in one more epoch (``aggregation``: :func:`sarlab.real.calibration.harness.aggregation_seconds`)."""
    def run(nodes: int, model: str, memory: str) -> dict[str, Any]:
        width = min(hidden, FAMILY_HIDDEN) if model in FAMILY_MODELS else hidden
        return {"spec": ENGINE_GRAPH.format(nodes=nodes), "partition_dir": str(parts / f"parts-{nodes}"),
                "model": model, "layers": layers, "hidden": width, "epochs": epochs, "threads": 1,
                "memory": memory, "aggregation": memory == CURVE_MEMORY and nodes in family_sizes}  # fmt: skip

    order = sizes if turn % 2 == 0 else sizes[::-1]
    return [*(run(ratio_size, m, OTHER_MEMORY) for m in ENGINE_MODELS),
            *(run(n, m, CURVE_MEMORY) for n in order
              for m in ENGINE_MODELS + (FAMILY_MODELS if n in family_sizes else ()))]


def run_child(runs: list[dict[str, Any]], tmp: Path) -> list[pd.Series]:
    """Run ``runs`` in one child process (``python -m sarlab.real.calibration.engine_runs``, :func:`main`); returns
    each run's :func:`sarlab.simulator.calibration.measured.summarize_measured` row (median epoch time of the epochs
    after the first), with the memory method it ran under (``mem_method``)."""
    plan, out = tmp / "plan.json", tmp / "runs.json"
    plan.write_text(json.dumps({"runs": runs}))
    cmd = [sys.executable, "-m", "sarlab.real.calibration.engine_runs", str(plan), str(out)]
    run_group([cmd], [dict(os.environ)], "engine runs", CHILD_TIMEOUT_S)  # forked from the zygote, as the workers
    records = json.loads(out.read_text())["runs"]
    rows = []
    for recs in records:
        row = summarize_measured(with_defaults(pd.DataFrame(recs)), warmup=1).iloc[0].copy()
        row["aggregation_s"] = recs[-1].get("aggregation_s") if recs else None
        rows.append(row)
    return rows


def bench_engine(cal: Calibration, profile: Profile) -> tuple[float, tuple[tuple[float, float], ...], dict[str, Any]]:
    """Fit :attr:`Profile.compute_scale_curve` under ``sarlab train``'s memory method (:data:`CURVE_MEMORY`): real
    single-worker epochs of the engine over what the simulator predicts for them from the microbenchmark profile,
    at several graph sizes; and the ratio of :data:`OTHER_MEMORY`'s epochs to them (:attr:`Profile.memory_scale`).

    GCN and GraphSAGE-mean, 3 layers, hidden 256, one worker with one thread, on graphs of :data:`ENGINE_SIZES`
    nodes (degree 30, 128 features; graphs no benchmark or validation uses; ``--quick``: two small sizes, one pass):
    predicted peaks of ~50-450 MB, the range of one worker's in the validation runs (25-470 MB). One worker keeps
    communication out of the fit. Each of :data:`ENGINE_PASSES` passes is one process
    (:func:`run_child`): GCN and SAGE under ``rss`` at the middle size
    first, then both under ``live`` at every size, ascending in the first pass and descending in the second, so that
    a slow minute of a shared machine hits one run of a size, not all of them. Each ``live`` run gives a ratio
    measured / predicted (median of the epochs after the first) at its key (``cal.scale_key``): its predicted peak
    memory (``"peak"``) or its activation bytes (``"activation"``,
    :func:`sarlab.simulator.workload.layers.activation_bytes`); both are kept in the raw runs. The curve is the power
    law (:func:`sarlab.simulator.calibration.fitting.fit_scale_curve`) through one point per size, the median of
    its runs (:func:`sarlab.simulator.calibration.fitting.median_scale_points`); a size whose runs disagree by more
    than :data:`SPREAD_WARNING` is logged as a warning. The ``rss`` ratio is the median over the passes' and
    models' ``rss`` / ``live`` epochs of the middle size
    (:func:`sarlab.simulator.calibration.fitting.fit_memory_ratio`). Where the counting allocator cannot be
    installed (no C++ kernels) the ``live`` runs are ``rss`` runs: the curve is then ``rss``'s, with no ratio.
    GAT (:data:`FAMILY_MODELS`, width :data:`FAMILY_HIDDEN`) runs beside them at the sizes but the largest (all in
    ``--quick``): its runs and GCN's and SAGE's give each op family's factor over the curve
    (:func:`family_scale_of`; the one scale fitted on GCN and SAGE over-priced GAT's fused attention and under-priced
    SAGE's GEMMs in every validation of results/host_model/budget). Returns the geometric mean of the curve's ratios
    (the profile's single ``compute_scale``), the curve and the raw numbers (``compute_scale_memory``,
    ``memory_scale`` and ``family_scale`` among them).
    """
    one = profile.with_scale(1.0)
    sizes = ENGINE_SIZES_QUICK if cal.quick else ENGINE_SIZES
    layers, hidden, epochs = (2, 32, 2) if cal.quick else (3, 256, 3)
    passes = 1 if cal.quick else ENGINE_PASSES
    ratio_size = sizes[len(sizes) // 2]
    family_sizes = sizes if cal.quick else sizes[:-1]
    raw: dict[str, Any] = {"graphs": [ENGINE_GRAPH.format(nodes=n) for n in sizes], "layers": layers,
                           "hidden": hidden, "passes": passes, "ratio_nodes": ratio_size, "runs": [],
                           "memory_runs": [], "family_runs": [], "family_nodes": list(family_sizes),
                           "family_hidden": FAMILY_HIDDEN}  # fmt: skip
    rows: list[tuple[pd.Series, PartitionStats]] = []
    with tempfile.TemporaryDirectory(prefix="sarlab-cal-engine-") as tmp:
        for turn in range(passes):
            runs = child_plan(sizes, turn, ratio_size, layers, hidden, epochs, Path(tmp), family_sizes)
            for run, row in zip(runs, run_child(runs, Path(tmp)), strict=True):
                result = simulate_row(row, one)
                peak = float(result.peak_above_baseline_bytes.max())
                kind = ("memory_runs" if run["memory"] == OTHER_MEMORY
                        else "family_runs" if run["model"] in FAMILY_MODELS else "runs")
                raw[kind].append(
                    {"model": run["model"], "nodes": int(row["num_nodes"]), "pass": turn + 1,
                     "memory": str(row["mem_method"]), "activation_bytes": result.activation_bytes,
                     "predicted_peak_bytes": peak,
                     "measured_peak_bytes": float(row["measured_peak_above_baseline_bytes"]),
                     "measured_s": float(row["measured_epoch_time_s"]),
                     "predicted_s": float(result.epoch_time_s.max())})  # fmt: skip
                if run["memory"] == CURVE_MEMORY:
                    rows.append((row, stats_for(row)))  # the partition's statistics, read while it is there
            _log_pass(cal, raw["runs"] + raw["family_runs"], turn + 1)
    curve_runs = raw["runs"]
    all_sizes = [r["nodes"] for r in curve_runs]
    all_keys = [r["predicted_peak_bytes"] if cal.scale_key == "peak" else r["activation_bytes"] for r in curve_runs]
    all_ratios = [r["measured_s"] / r["predicted_s"] for r in curve_runs]
    keys, medians, spreads = median_scale_points(all_sizes, all_keys, all_ratios)
    raw["median_points"] = [{"nodes": n, "key": k, "ratio": m, "spread": sp}
                            for n, k, m, sp in zip(sorted(set(all_sizes)), keys, medians, spreads, strict=True)]
    for point in raw["median_points"]:
        warn = f" (WARNING: its runs differ {point['spread']:.2f}x: a busy machine?)" \
            if point["spread"] > SPREAD_WARNING else ""
        cal.log(f"    {point['nodes']:>7,d} nodes: median {point['ratio']:.2f}{warn}")
    overall = float(np.exp(np.mean(np.log(all_ratios))))
    curve = fit_scale_curve(keys, medians)
    cal.log("    power law: " + ", ".join(f"{v:.3f} at {b / 2**20:.0f} MB" for b, v in curve))
    memory, ratios = memory_scale_of(raw, cal.log)
    raw.update(compute_scale=overall, compute_scale_curve=curve, compute_scale_key=cal.scale_key,
               compute_scale_memory=memory, memory_scale=ratios)
    raw["family_scale"] = family_scale_of(rows, replace(one, compute_scale=overall, compute_scale_curve=curve,
                                                        compute_scale_key=cal.scale_key), raw, cal.log)
    return overall, curve, raw


def family_scale_of(rows: list[tuple[pd.Series, PartitionStats]], curved: Profile, raw: dict[str, Any],
                    log=lambda _line: None) -> dict[str, float]:
    """The op families' factors relative to the curve (:attr:`Profile.family_scale`) from the curve method's runs
    ``rows`` (GCN, SAGE and :data:`FAMILY_MODELS`; each with its partition's statistics), each split over the
    families at ``curved``'s scale (:func:`sarlab.simulator.system.replay.family_seconds`) and fitted by
    :func:`sarlab.simulator.calibration.fitting.fit_family_scale`; the splits are kept in ``raw["family_split"]``.
    The aggregation families whose time some runs measured (``aggregation_s``,
    :func:`sarlab.real.calibration.harness.aggregation_seconds`) have that factor recorded in
    ``raw["aggregation_factors"]`` (:func:`sarlab.simulator.calibration.fitting.aggregation_factors`); with
    :data:`AGGREGATION_TIMED_FACTORS` they take it in place of the least-squares factor (the others keep theirs)."""
    if not rows:
        return {}
    splits = [family_seconds(row, curved, stats) for row, stats in rows]
    measured = [float(row["measured_epoch_time_s"]) for row, _ in rows]
    aggregation = [_or_none(row.get("aggregation_s")) for row, _ in rows]
    raw["family_split"] = [{"model": str(row["model"]), "nodes": int(row["num_nodes"]), "measured_s": m,
                            "aggregation_s": a, **split}
                           for (row, _), m, a, split in zip(rows, measured, aggregation, splits, strict=True)]
    timed = aggregation_factors(aggregation, splits)
    raw["aggregation_factors"] = timed
    factors = fit_family_scale(measured, splits)  # GEMM apart, every other family one factor (least squares)
    fitted_rest = next((v for f, v in factors.items() if f not in FAMILY_APART), None)
    if AGGREGATION_TIMED_FACTORS:
        factors = {**factors, **{f: v for f, v in timed.items() if f in factors}}
    low, high = FAMILY_BOUNDS
    words = ([f"{f} {factors[f]:.2f}" for f in FAMILY_APART if f in factors]
             + ([f"every other family {fitted_rest:.2f}"] if fitted_rest is not None else []))
    bound = " (a bound reached)" if any(v in (low, high) for v in factors.values()) else ""
    log("    op families over the curve (" + ", ".join(dict.fromkeys(str(r["model"]).upper() for r, _ in rows))
        + " runs): " + ", ".join(words) + bound)
    if timed:
        log("    aggregation as timed, over the curve: " + ", ".join(f"{f} {v:.2f}" for f, v in timed.items())
            + ("" if AGGREGATION_TIMED_FACTORS else " (recorded, not used)"))
    return factors


def _or_none(value: Any) -> float | None:
    """A measured number, or None where the run measured none (NaN, None)."""
    return None if value is None or not np.isfinite(float(value)) else float(value)


def memory_scale_of(raw: dict[str, Any], log=lambda _line: None) -> tuple[str, dict[str, float]]:
    """The memory method the curve's runs ran under and ``{other method: ratio}`` from ``raw``'s paired runs: each
    ``memory_runs`` entry against the curve run of the same model, size and pass
    (:func:`sarlab.simulator.calibration.fitting.fit_memory_ratio`); no ratio where the curve's runs are not
    :data:`CURVE_MEMORY`'s (the counting allocator was not available) or nothing pairs."""
    methods = {r["memory"] for r in raw["runs"]}
    memory = CURVE_MEMORY if methods == {CURVE_MEMORY} else OTHER_MEMORY
    if memory != CURVE_MEMORY:
        log(f"    the {CURVE_MEMORY} runs ran under {sorted(methods)} (counting allocator unavailable): "
            f"the curve is {OTHER_MEMORY}'s, no allocator ratio")
        return memory, {}
    own = {(r["model"], r["nodes"], r["pass"]): r["measured_s"] for r in raw["runs"]}
    pairs = [(r["measured_s"], own[key]) for r in raw["memory_runs"]
             if r["memory"] == OTHER_MEMORY and (key := (r["model"], r["nodes"], r["pass"])) in own]
    if not pairs:
        return memory, {}
    ratio, spread = fit_memory_ratio([p[0] for p in pairs], [p[1] for p in pairs])
    raw["memory_ratio_spread"] = spread
    log(f"    {OTHER_MEMORY} / {CURVE_MEMORY} epochs at {raw.get('ratio_nodes', 0):,d} nodes: {ratio:.2f} "
        f"(median of {len(pairs)}, spread {spread:.2f}x)")
    return memory, {OTHER_MEMORY: ratio}


def _log_pass(cal: Calibration, runs: list[dict[str, Any]], turn: int) -> None:
    """One progress line per size of pass ``turn``: engine / microbenchmarks of each model."""
    mine = [r for r in runs if r["pass"] == turn]
    for nodes in dict.fromkeys(r["nodes"] for r in mine):
        at = [r for r in mine if r["nodes"] == nodes]
        key = "predicted_peak_bytes" if cal.scale_key == "peak" else "activation_bytes"
        cal.log(f"    pass {turn}, {nodes:>7,d} nodes ("
                + " / ".join(f"{r[key] / 2**20:6.1f}" for r in at) + f" MB {cal.scale_key}): engine / "
                "microbenchmarks " + ", ".join(f"{r['model'].upper()} {r['measured_s'] / r['predicted_s']:.2f}"
                                               for r in at))


def speed_probe(partition_dir: str | Path, spec: str = PROBE_GRAPH) -> dict[str, Any]:
    """Measure the machine's current speed with the probe (:data:`PROBE_MODEL` on ``spec``, one worker with
    one thread); returns its epoch time and the configuration columns its prediction needs (:func:`probe_row`).

    One thread, like the calibration's engine runs (:func:`engine_epoch`): the scale the probe gives then
    holds no error of the profile's thread efficiencies (records of probes run with all cores carry
    ``probe_threads`` and are priced as they ran).
    """
    row = engine_epoch(spec, PROBE_MODEL["model"], PROBE_MODEL["layers"], PROBE_MODEL["hidden"],
                       PROBE_MODEL["epochs"], partition_dir, threads=1, memory=PROBE_MEMORY)  # fmt: skip
    return {
        "probe_epoch_s": float(row["measured_epoch_time_s"]),
        "probe_graph": spec,
        "probe_num_nodes": int(row["num_nodes"]),
        "probe_num_edges": int(row["num_edges"]),
        "probe_feature_dim": int(row["feature_dim"]),
        "probe_num_classes": int(row["num_classes"]),
        "probe_partition_dir": str(partition_dir),
        "probe_threads": int(row["threads"]),
        "probe_time": time.time(),
    }


# ------------------------------------------------------------------------------------------------ the child process
# Each run is what a one-worker ``sarlab train --mode sar --eval-every 0 --threads T --memory M`` does in its worker
# (sarlab.real.launch.worker.run): the partition loaded and verified, the graph and trainer built with the cyclic
# collector paused, then collected and frozen, the baseline taken and the epochs stepped; without the launcher and its
# process group (one worker needs none), with one interpreter and one torch import for all the runs of a pass.
# The allocator cannot be chosen freely per run: ``live`` installs the counting allocator as torch's CPU allocator,
# which cannot be taken out again (sarlab.core.memory.use_method; only its block cache can be switched off, which is
# not what an ``rss`` run does). So a plan lists its ``rss`` runs first and its ``live`` runs after them.

#: the keys of one run in a plan
RUN_KEYS = ("spec", "partition_dir", "model", "layers", "hidden", "epochs", "threads", "memory")


def check_plan(runs: list[dict[str, Any]]) -> None:
    """Raise ValueError unless every run has :data:`RUN_KEYS` and no ``rss`` run follows a ``live`` one (the counting
    allocator, once installed, stays)."""
    for i, run in enumerate(runs):
        missing = [k for k in RUN_KEYS if k not in run]
        if missing:
            raise ValueError(f"run {i} of the plan lacks {missing}")
        if run["memory"] not in memory.METHODS:
            raise ValueError(f"run {i}: memory must be one of {memory.METHODS}, got {run['memory']!r}")
    methods = [run["memory"] for run in runs]
    if "live" in methods and "rss" in methods[methods.index("live"):]:
        raise ValueError("a plan runs its rss runs before its live ones: the counting allocator cannot be taken out")


def _partition(spec: str, pdir: Path) -> str:
    """The one-part partition of ``spec`` in ``pdir`` (made there the first time, as ``sarlab train --partition-dir``
    makes it: METIS, seed 0)."""
    if (pdir / "manifest.json").exists():
        return str(pdir)
    made, _ = prepare_partition(spec, 1, "metis", 0, str(pdir), cache=False, say=lambda _line: None)
    return made


def run_one(run: dict[str, Any]) -> list[dict[str, Any]]:
    """One run of a plan: its records, one per epoch, with the configuration columns the worker adds."""
    method = memory.use_method(run["memory"])
    kernels.backend("auto")  # built and loaded before the first measured epoch, as the worker does
    torch.set_num_threads(int(run["threads"]) or max(1, len(os.sched_getaffinity(0))))
    pdir = _partition(run["spec"], Path(run["partition_dir"]))
    gc.disable()  # the worker builds its graph and trainer with the collector paused (worker_entry)
    try:
        manifest = load_manifest(pdir)
        part = load_part(pdir, 0, manifest, verify=True)
        graph = ShardedGraph.from_partition(part, Comm(0, 1), EngineConfig(mode="sar"))
        trainer = Trainer(graph, part, ModelConfig(model=run["model"], layers=int(run["layers"]),
                                                   hidden=int(run["hidden"])),
                          TrainConfig(epochs=int(run["epochs"]), eval_every=0))
    finally:
        gc.collect()
        gc.freeze()
        gc.enable()
    extra = trainer.config_columns()
    extra.update(graph=manifest["graph"], partition_dir=os.path.abspath(pdir), num_edges=manifest["num_edges"],
                 label="", net="loopback", backend="gloo", mem_method=method)
    baseline = memory.baseline_bytes()
    records = []
    for epoch in range(int(run["epochs"])):
        rec = trainer.step(epoch, baseline)
        rec.update(extra, peak_vmhwm_bytes=memory.vmhwm_bytes())
        records.append(rec)
    if run.get("aggregation"):  # one more epoch, not timed as one: its aggregation under the profiler
        agg_s = aggregation_seconds(functools.partial(trainer.step, int(run["epochs"]), baseline))
        for rec in records:
            rec["aggregation_s"] = agg_s
    del trainer, graph, part
    gc.unfreeze()  # the next run's set-up is frozen on its own; this one's objects may go
    gc.collect()
    return records


def main(argv: list[str] | None = None) -> None:
    """``python -m sarlab.real.calibration.engine_runs PLAN.json OUT.json`` (what :func:`run_child` starts): run
    ``PLAN``'s ``runs`` in order in this process and write ``{"runs": [records of each run]}`` to ``OUT``."""
    plan_path, out_path = sys.argv[1:3] if argv is None else argv
    runs = json.loads(Path(plan_path).read_text())["runs"]
    check_plan(runs)
    memory.tune_malloc()  # the engine's thresholds before any tensor, whatever the first run's method
    out = [run_one(run) for run in runs]
    Path(out_path).write_text(json.dumps({"runs": out}, default=str))


if __name__ == "__main__":
    main()
