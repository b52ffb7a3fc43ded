"""Real engine epochs for the calibration: single-worker ``sarlab train`` runs, the compute scale they give, and
the speed probe (:func:`speed_probe`) that ``sarlab bench engine --probe`` runs between configurations.

The op microbenchmarks miss part of a whole epoch (fresh-page faults of large tensors, the allocator, small
ops and Python), and that part grows with the memory a worker holds. :func:`bench_engine` measures it: real
single-worker, single-thread epochs of the engine on graphs of several sizes, over what the simulator
predicts for them from the microbenchmarks alone, each size run in two passes and fitted through the median of
its runs as a power law of the worker's predicted peak memory
(:attr:`sarlab.simulator.hardware.profile.Profile.compute_scale_curve`). The runs are subprocesses
(:func:`engine_epoch`), so they use the engine's own launcher and malloc settings.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from sarlab.real.calibration.harness import ROOT
from sarlab.simulator.calibration.calibration import Calibration
from sarlab.simulator.calibration.fitting import fit_scale_curve, median_scale_points
from sarlab.simulator.calibration.measured import read_records, summarize_measured
from sarlab.simulator.calibration.probe import PROBE_GRAPH, PROBE_MODEL
from sarlab.simulator.hardware.profile import Profile
from sarlab.simulator.system.replay import simulate_row

#: graphs of :func:`bench_engine`, ``nodes`` from :data:`ENGINE_SIZES` or the quick sizes (not graphs any
#: benchmark or validation uses)
ENGINE_GRAPH = "synthetic:nodes={nodes},degree=30,features=128,classes=16,seed=7"
#: three sizes (the whole calibration's budget is 3 minutes on a quiet machine; five sizes up to 200,000 nodes took
#: most of the 13 minutes of the 2-core VM's calibration before issue 39)
ENGINE_SIZES = (12_500, 35_000, 100_000)
ENGINE_SIZES_QUICK = (1_500, 3_000)
#: passes over the sizes (ascending, then descending): each size's point is the median of its 2 x passes runs
ENGINE_PASSES = 2
#: a size whose runs' ratios differ by more than this factor is logged as a warning
SPREAD_WARNING = 1.3


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
    allocator with the engine's thresholds, under which the op microbenchmarks run (large outputs are fresh
    pages) and the validation campaigns' runs too; ``live`` (``sarlab train``'s default) installs the counting
    allocator, whose block cache reuses resident pages and makes elementwise work about 4x faster, which the
    microbenchmarks do not see (the scale would then hold it: 0.47 in campaign 9's profile).
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


def bench_engine(cal: Calibration, profile: Profile) -> tuple[float, tuple[tuple[float, float], ...], dict[str, Any]]:
    """Fit :attr:`Profile.compute_scale_curve`: real single-worker epochs of the engine over what the
    simulator predicts for them from the microbenchmark profile, at several graph sizes.

    Runs :func:`engine_epoch` for GCN and GraphSAGE-mean, 3 layers, hidden 256, one worker with one thread,
    on graphs of :data:`ENGINE_SIZES` nodes (degree 30, 128 features; graphs no benchmark or validation
    uses; ``--quick``: two small sizes, one pass): whole-graph activations of 13-102 MB, the range of one worker's
    shard in the validation runs. One
    worker keeps communication out of the fit. Every size runs in each of :data:`ENGINE_PASSES` passes, the
    sizes ascending in the first pass and descending in the second, so that a slow minute of a shared machine
    hits one run of a size, not all of them. Each run gives a ratio measured / predicted (median of the epochs
    after the first) at its key (``cal.scale_key``): its predicted peak memory (``"peak"``) or its activation
    bytes (``"activation"``, :func:`sarlab.simulator.workload.layers.activation_bytes`); both are kept in the
    raw runs. The curve is the power law (:func:`sarlab.simulator.calibration.fitting.fit_scale_curve`) through
    one point per size, the median of its runs (:func:`sarlab.simulator.calibration.fitting.median_scale_points`);
    a size whose runs disagree by more than :data:`SPREAD_WARNING` is logged as a warning.
    Returns the geometric mean of all ratios (the profile's single ``compute_scale``), the curve and the
    raw numbers.
    """
    one = profile.with_scale(1.0)
    sizes = ENGINE_SIZES_QUICK if cal.quick else ENGINE_SIZES
    layers, hidden, epochs = (2, 32, 2) if cal.quick else (3, 256, 3)
    passes = 1 if cal.quick else ENGINE_PASSES
    raw: dict[str, Any] = {"graphs": [ENGINE_GRAPH.format(nodes=n) for n in sizes], "layers": layers,
                           "hidden": hidden, "passes": passes, "runs": []}  # fmt: skip
    all_sizes, all_keys, all_ratios = [], [], []
    with tempfile.TemporaryDirectory(prefix="sarlab-cal-engine-") as tmp:
        for turn in range(passes):
            for nodes in sizes if turn % 2 == 0 else sizes[::-1]:
                spec = ENGINE_GRAPH.format(nodes=nodes)
                ratios, keys = [], []
                for model in ("gcn", "sage"):
                    row = engine_epoch(spec, model, layers, hidden, epochs, Path(tmp) / f"parts-{nodes}")
                    result = simulate_row(row, one)
                    predicted, peak = float(result.epoch_time_s.max()), float(result.peak_above_baseline_bytes.max())
                    measured = float(row["measured_epoch_time_s"])
                    ratios.append(measured / predicted)
                    keys.append(peak if cal.scale_key == "peak" else result.activation_bytes)
                    raw["runs"].append({"model": model, "nodes": nodes, "pass": turn + 1,
                                        "activation_bytes": result.activation_bytes, "predicted_peak_bytes": peak,
                                        "measured_peak_bytes": float(row["measured_peak_above_baseline_bytes"]),
                                        "measured_s": measured, "predicted_s": predicted})  # fmt: skip
                all_sizes.extend([nodes] * len(keys))
                all_keys.extend(keys)
                all_ratios.extend(ratios)
                cal.log(f"    pass {turn + 1}, {nodes:>7,d} nodes ({keys[0] / 2**20:6.1f} / {keys[1] / 2**20:6.1f} MB "
                        f"{cal.scale_key}): engine / microbenchmarks GCN {ratios[0]:.2f}, SAGE {ratios[1]:.2f}")
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
    raw["compute_scale"], raw["compute_scale_curve"], raw["compute_scale_key"] = overall, curve, cal.scale_key
    return overall, curve, raw


def speed_probe(partition_dir: str | Path, spec: str = PROBE_GRAPH) -> dict[str, Any]:
    """Measure the machine's current speed with the probe (:data:`PROBE_MODEL` on ``spec``, one worker with
    one thread); returns its epoch time and the configuration columns its prediction needs (:func:`probe_row`).

    One thread, like the calibration's engine runs (:func:`engine_epoch`): the scale the probe gives then
    holds no error of the profile's thread efficiencies (records of probes run with all cores carry
    ``probe_threads`` and are priced as they ran).
    """
    row = engine_epoch(spec, PROBE_MODEL["model"], PROBE_MODEL["layers"], PROBE_MODEL["hidden"],
                       PROBE_MODEL["epochs"], partition_dir, threads=1)  # fmt: skip
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
