"""``sarlab reproduce``: regenerate the SAR paper's figures 2-6, measured where this machine can run them and
simulated where it cannot, each labelled on its face.

Steps, in this order (``--only`` picks some; ``fig3`` and ``fig4`` name ``fig3_fig4``, ``fig5`` and ``fig6``
name ``fig5_fig6``):

* ``fig2``: one GAT layer, forward and backward time and peak memory against heads 2/4/8, fused C++ kernel
  vs unfused torch vs PyG ``GATConv`` (vs DGL where it imports). Measured with :mod:`kernels.bench`.
* ``fig3_fig4``: 3-layer GraphSAGE (hidden 256) and 3-layer GAT (hidden 128 = 4 heads x 32), epoch time and
  peak memory per worker against N; ``sar`` vs vanilla domain parallel (``oneshot``), GAT also ``sar`` with
  the fused kernels. (a) measured here with :mod:`real.bench` on a products-like synthetic graph (mean
  degree 50, 100 features, 47 classes) at N = 2, 4, 8; (b) simulated for ogbn-products at N = 4, 8, 16 on a
  machine profile (default: the ``icelake-hdr200`` preset, the paper's cluster).
* ``fig5_fig6``: the same models on ogbn-papers100M at N = 32, 64, 128, simulated, with the memory scaling
  (memory at the smallest N / memory at N) on a second axis and an OOM marker where one host's workers would
  need more than the profile's memory per host.

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
import hashlib
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
MANIFEST_VERSION = 1
STEPS = ("fig2", "fig3_fig4", "fig5_fig6")
ALIASES = {"fig2": "fig2", "fig3": "fig3_fig4", "fig4": "fig3_fig4", "fig3_fig4": "fig3_fig4",
           "fig5": "fig5_fig6", "fig6": "fig5_fig6", "fig5_fig6": "fig5_fig6"}
MEASURED, SIMULATED = "measured", "simulated"

# ------------------------------------------------------------------------------------------------ recipes
#: the two models of figures 3-6 (GAT's hidden is the concatenated width: 4 heads x 32)
MODELS = {
    "sage": {"model": "sage", "layers": 3, "hidden": 256, "heads": 1, "aggr": "mean"},
    "gat": {"model": "gat", "layers": 3, "hidden": 128, "heads": 4, "aggr": "mean"},
}
#: (label on the figure, `sarlab bench engine` mode spec, simulator mode, fused GAT kernels)
SERIES = {
    "sage": [("sar", "sar", "sar", False), ("vanilla (oneshot)", "oneshot", "oneshot", False)],
    "gat": [("sar", "sar", "sar", False), ("sar+fused", "sar+fused", "sar", True),
            ("vanilla (oneshot)", "oneshot", "oneshot", False)],
}
PRODUCTS_LIKE = {"degree": 50, "features": 100, "classes": 47}
#: edge-cut fraction assumed for the estimated METIS partitions of the OGB graphs (the simulator's tests use
#: the same figures); a random partition would cut (N-1)/N of the edges
EDGE_CUT = {"ogbn-products": 0.2, "ogbn-papers100M": 0.3}

FULL = {
    "fig2": {"nodes": 20_000, "degree": 50, "heads": [2, 4, 8], "reps": 5, "quick_base": False},
    "measured": {"sage": {"nodes": 200_000, **PRODUCTS_LIKE, "hidden": 256},
                 "gat": {"nodes": 60_000, **PRODUCTS_LIKE, "hidden": 128},
                 "workers": [2, 4, 8], "epochs": 3},
    "products_workers": [4, 8, 16],
    "papers_workers": [32, 64, 128],
}
QUICK = {
    "fig2": {"nodes": 600, "degree": 8, "heads": [2, 4, 8], "reps": 1, "quick_base": True},
    "measured": {"sage": {"nodes": 1500, "degree": 8, "features": 16, "classes": 8, "hidden": 32},
                 "gat": {"nodes": 1000, "degree": 8, "features": 16, "classes": 8, "hidden": 32},
                 "workers": [2], "epochs": 2},
    "products_workers": [4, 8],
    "papers_workers": [32, 64],
}


def _sha(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def simulator_source_sha() -> str:
    """Hash of the simulator's Python sources (a parameter of every simulated unit)."""
    h = hashlib.sha256()
    for path in sorted((REPO / "simulator").glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def profile_identity(spec: str) -> dict[str, str]:
    """Name, where it comes from, and a hash of the profile's content (a parameter of simulated units)."""
    from simulator.profile import PRESETS, load_profile

    profile = load_profile(spec)
    where = (f"preset '{spec}' from simulator/profile.py, {profile.meta.get('machine', 'assumed figures')}"
             if spec in PRESETS else f"profile file {Path(spec).resolve()}")
    return {"name": profile.name, "where": where, "sha": _sha(profile.to_json())}


def build_plan(quick: bool, profile: str) -> dict[str, dict[str, dict[str, Any]]]:
    """step -> unit -> the unit's parameters (everything its outputs depend on)."""
    cfg = QUICK if quick else FULL
    mode = "quick" if quick else "full"
    plan: dict[str, dict[str, dict[str, Any]]] = {
        "fig2": {"fig2_gat_layer": {"kind": MEASURED, "figure": "fig2", "run": mode, **cfg["fig2"]}}
    }
    prof = profile_identity(profile)
    sim_sha = simulator_source_sha()

    def simulated(figs: tuple[str, str], graph: str, workers: list[int], memory_scaling: bool) -> dict:
        """The simulated units of SAGE (first figure) and GAT (second) on an OGB preset."""
        return {
            f"{fig}_{model}_{graph}_{SIMULATED}": {
                "kind": SIMULATED, "figure": fig, "run": mode, "graph": graph, "edge_cut": EDGE_CUT[graph],
                "workers": workers, "model": MODELS[model], "series": SERIES[model],
                "profile": profile, "profile_sha": prof["sha"], "simulator_sha": sim_sha, "prefetch": 1,
                "memory_scaling": memory_scaling,
            }
            for fig, model in zip(figs, ("sage", "gat"))
        }

    step34 = simulated(("fig3", "fig4"), "ogbn-products", cfg["products_workers"], memory_scaling=False)
    for fig, model in (("fig3", "sage"), ("fig4", "gat")):
        m = cfg["measured"]
        graph = {k: m[model][k] for k in ("nodes", "degree", "features", "classes")}
        step34[f"{fig}_{model}_products-like_{MEASURED}"] = {
            "kind": MEASURED, "figure": fig, "run": mode, "graph": {**graph, "seed": 0},
            "model": {**MODELS[model], "hidden": m[model]["hidden"]}, "series": SERIES[model],
            "workers": m["workers"], "epochs": m["epochs"], "prefetch": 1,
        }
    plan["fig3_fig4"] = step34
    plan["fig5_fig6"] = simulated(("fig5", "fig6"), "ogbn-papers100M", cfg["papers_workers"], memory_scaling=True)
    return plan


def unit_outputs(unit: str, params: dict[str, Any]) -> dict[str, str]:
    """File name -> kind (measured/simulated) of everything a unit writes."""
    files = {f"{unit}.png": params["kind"], f"{unit}.csv": params["kind"]}
    if params["kind"] == MEASURED and params["figure"] != "fig2":
        files[f"{unit}_records.csv"] = MEASURED
    return files


# ------------------------------------------------------------------------------------------------ machine
def cpu_model() -> str:
    """The CPU model from /proc/cpuinfo (platform as a fallback)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _today() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")


def _measured_banner(cpu: str, cores: int, date: str, extra: str = "") -> str:
    return f"MEASURED on {cpu} ({cores} cores), {date}" + (f"; {extra}" if extra else "")


def _simulated_banner(profile_name: str, where: str, date: str) -> str:
    return f"SIMULATED (SimPy model, not measured) with profile '{profile_name}': {where}; generated {date}"


# ------------------------------------------------------------------------------------------------ plots
def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def matplotlib_ticker():
    import matplotlib.ticker

    return matplotlib.ticker


def _face(fig, kind: str, banner: str, title: str) -> float:
    """The banner that says measured/simulated (coloured box), then the title under it; returns the figure
    fraction left for the axes below them."""
    import textwrap

    color = {MEASURED: "#d9ead3", SIMULATED: "#fce5cd"}[kind]
    height = fig.get_figheight()
    banner_lines = textwrap.wrap(banner, 150)
    title_lines = textwrap.wrap(title, 160)
    fig.text(0.5, 0.985, "\n".join(banner_lines), ha="center", va="top", fontsize=8.5, fontweight="bold",
             bbox={"boxstyle": "round,pad=0.35", "facecolor": color, "edgecolor": "0.4"})
    line = 0.16 / height  # one text line (about 9 pt plus spacing) as a fraction of the figure height
    title_y = 0.985 - (len(banner_lines) + 0.8) * line
    fig.text(0.5, title_y, "\n".join(title_lines), ha="center", va="top", fontsize=9)
    return title_y - (len(title_lines) + 0.3) * line


COLORS = {"sar": "C0", "sar+fused": "C2", "vanilla (oneshot)": "C3"}


def plot_scaling(table, path: Path, kind: str, banner: str, title: str, xlabel: str,
                 per_worker_limit: float | None = None, limit_label: str = "", scaling: bool = False) -> None:
    """Epoch time (lines) and peak memory per worker (bars: resident after setup, lighter, plus the epoch's
    peak above it) against N, one colour per series; OOM configurations drawn hatched and marked; with
    ``scaling`` the memory scaling mem(N_min)/mem(N) on a second axis with the ideal N/N_min."""
    import numpy as np

    plt = _pyplot()
    series = list(dict.fromkeys(table["series"]))
    workers = sorted(int(w) for w in table["workers"].unique())
    x = np.arange(len(workers))
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(12, 5.2))
    top = float(table["peak_mem_bytes"].max())
    unit, scale = ("GiB", 2**30) if top >= 4 * 2**30 else ("MiB", 2**20)
    width = 0.8 / max(len(series), 1)
    any_oom = False
    for k, name in enumerate(series):
        d = table[table["series"] == name].set_index("workers").reindex(workers)
        color = COLORS.get(name, f"C{k + 4}")
        oom = d["oom"].fillna(False).to_numpy(bool) if "oom" in d else np.zeros(len(workers), bool)
        any_oom = any_oom or bool(oom.any())
        t = d["epoch_time_s"].to_numpy(float)
        ax_t.plot(x, np.where(oom, np.nan, t), "o-", color=color, label=name)
        if oom.any():
            ax_t.plot(x[oom], t[oom], "x", color=color, ms=11, mew=2.5)
            for xi, ti in zip(x[oom], t[oom]):
                ax_t.annotate("OOM", (xi, ti), textcoords="offset points", xytext=(6, 4), color="red",
                              fontsize=8, fontweight="bold")
        pos = x + (k - (len(series) - 1) / 2) * width
        base = d["baseline_mem_bytes"].to_numpy(float) / scale
        above = d["peak_mem_above_baseline_bytes"].to_numpy(float) / scale
        ax_m.bar(pos, base, width, color=color, alpha=0.35, edgecolor=color)
        bars = ax_m.bar(pos, above, width, bottom=base, color=color, edgecolor=color)
        for bar, is_oom, b, a in zip(bars, oom, base, above):
            if is_oom:
                bar.set_hatch("xx")
                bar.set_edgecolor("red")
                ax_m.annotate("OOM", (bar.get_x() + bar.get_width() / 2, b + a), textcoords="offset points",
                              xytext=(0, 2), ha="center", color="red", fontsize=8, fontweight="bold")
    ymax = top / scale
    if per_worker_limit and top >= 0.2 * per_worker_limit:
        ymax = max(ymax, per_worker_limit / scale)
        ax_m.axhline(per_worker_limit / scale, color="k", ls="--", lw=1)
        ax_m.annotate(limit_label, (x[0] - 0.45, per_worker_limit / scale), textcoords="offset points",
                      xytext=(0, 3), fontsize=7)
    elif per_worker_limit:  # the limit would squash the bars: say it in words
        ax_m.text(0.02, 0.97, f"{limit_label}: every configuration fits", transform=ax_m.transAxes,
                  va="top", fontsize=7)
    times = table["epoch_time_s"].to_numpy(float)
    if times.max() > 8 * times.min():
        ax_t.set_yscale("log")
        ax_t.yaxis.set_major_formatter(matplotlib_ticker().FormatStrFormatter("%g"))
    else:
        ax_t.set_ylim(0, times.max() * 1.35)
    ax_m.set_ylim(0, ymax * 1.45)  # room for the legend above the bars
    ax_t.set_ylabel("epoch time (s)")
    ax_t.set_title("epoch time of the slowest worker", fontsize=9)
    ax_m.set_ylabel(f"peak memory per worker ({unit})")
    resident = ("process RSS after setup: Python/torch runtime, graph, features, model" if kind == MEASURED
                else "estimated: graph, features, model")
    ax_m.set_title(f"peak memory per worker; lighter part: resident after setup\n({resident})", fontsize=9)
    for ax in (ax_t, ax_m):
        ax.set_xticks(x, [str(w) for w in workers])
        ax.set_xlabel(xlabel)
        ax.grid(True, axis="y", which="both", alpha=0.3)
    ax_t.legend(fontsize=8)
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=COLORS.get(name, f"C{k + 4}")) for k, name in enumerate(series)]
    labels = list(series)
    if scaling:
        ax2 = ax_m.twinx()
        for k, name in enumerate(series):
            d = table[table["series"] == name].set_index("workers").reindex(workers)
            ax2.plot(x, d["mem_scaling"].to_numpy(float), "s--", color=COLORS.get(name, f"C{k + 4}"), mfc="white",
                     label=f"{name}: scaling")
        ideal = np.asarray(workers, float) / workers[0]
        ax2.plot(x, ideal, "k:", marker=".", label=f"ideal N/{workers[0]}")
        ax2.set_ylim(0, ideal.max() * 1.45)
        ax2.set_ylabel(f"memory scaling: mem(N={workers[0]}) / mem(N)  (dashed)")
        h2, l2 = ax2.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    if any_oom:
        from matplotlib.patches import Patch

        handles.append(Patch(facecolor="white", edgecolor="red", hatch="xx"))
        labels.append("OOM: exceeds the memory per node")
    ax_m.legend(handles, labels, fontsize=7, loc="upper right")
    fig.tight_layout(rect=(0, 0, 1, _face(fig, kind, banner, title)))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_fig2(rows: list[dict], path: Path, banner: str, title: str) -> None:
    """Figure 2: forward time, backward time and peak memory (forward+backward) against heads, grouped bars
    per implementation, labelled with the ratio to PyG."""
    import numpy as np

    plt = _pyplot()
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    heads = sorted({int(r["heads"]) for r in rows})
    lookup = {(r["impl"], int(r["heads"]), r["phase"]): r for r in rows}
    panels = [("forward", "time_s", 1e3, "forward time (ms)", "speedup_vs_pyg", "{:.1f}x"),
              ("backward", "time_s", 1e3, "backward time (ms)", "speedup_vs_pyg", "{:.1f}x"),
              ("fwd+bwd", "peak_mem_bytes", 1 / 2**20, "peak memory, forward+backward (MiB)",
               "mem_ratio_vs_pyg", "{:.2f}")]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.8))
    width = 0.8 / len(impls)
    x = np.arange(len(heads))
    for ax, (phase, col, mult, ylabel, ratio, fmt) in zip(axes, panels):
        positive = True
        for k, impl in enumerate(impls):
            picked = [lookup.get((impl, h, phase)) for h in heads]
            vals = [float(r[col]) * mult if r else np.nan for r in picked]
            positive = positive and all(v > 0 for v in vals if not np.isnan(v))
            bars = ax.bar(x + (k - (len(impls) - 1) / 2) * width, vals, width, label=impl)
            if impl != "pyg":
                ax.bar_label(bars, [fmt.format(float(r[ratio])) if r else "" for r in picked], fontsize=6.5)
        ax.set_yscale("log" if positive else "linear")  # a tiny graph can show a zero peak
        ax.set_xticks(x, [str(h) for h in heads])
        ax.set_xlabel("attention heads (50 features each)")
        ax.set_ylabel(ylabel)
        ax.grid(True, axis="y", which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.text(0.5, 0.005, "bar labels: speedup over PyG GATConv (time panels), memory as a fraction of PyG's",
             ha="center", fontsize=7.5)
    fig.tight_layout(rect=(0, 0.03, 1, _face(fig, MEASURED, banner, title)))
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------ units
Log = Callable[[str], None]


def _write_csv(df, path: Path) -> None:
    tmp = path.with_suffix(".csv.tmp")
    df.to_csv(tmp, index=False)
    os.replace(tmp, path)


def run_fig2(unit: str, p: dict[str, Any], out: Path, work: Path, log: Log) -> dict[str, Any]:
    """Figure 2 from :mod:`kernels.bench` (measured here)."""
    import pandas as pd

    from kernels.bench import main as kernels_main

    argv = ["--out", str(work), "--json", str(work / "kernels.json"), "--nodes", str(p["nodes"]),
            "--degree", str(p["degree"]), "--reps", str(p["reps"]), "--heads", *map(str, p["heads"])]
    if p["quick_base"]:
        argv.insert(0, "--quick")
    log(f"  sarlab bench kernels {' '.join(argv)}")
    rc = kernels_main(argv)
    if rc != 0:
        raise RuntimeError(f"kernels benchmark exited with status {rc}")
    result = json.loads((work / "kernels.json").read_text())
    date, cpu = result.get("date", _today()), result.get("cpu", cpu_model())
    rows = result["rows"]
    df = pd.DataFrame(rows)
    df.insert(0, "kind", MEASURED)
    df.insert(1, "machine", cpu)
    df.insert(2, "date", date)
    _write_csv(df, out / f"{unit}.csv")
    edges = int(result["edges"])
    load = result.get("loadavg_1min_start_end", [math.nan, math.nan])
    banner = _measured_banner(cpu, os.cpu_count() or 0, date,
                              f"{result['threads']} torch threads, 1-min load {load[0]:.1f} -> {load[1]:.1f}")
    title = (f"Figure 2 (CPU analogue): one GAT layer, {p['nodes']:,} nodes, {edges:,} edges (synthetic, "
             f"power-law in-degree, mean {p['degree']}), in = out = 50 x heads features, float32; medians of "
             f"{p['reps']} repetitions. fused = C++ kernel ({rows[0]['backend']}), unfused = same layer in "
             "torch, pyg = torch_geometric GATConv" + (", dgl = DGL GATConv" if any(r["impl"] == "dgl" for r in rows)
                                                      else "; DGL not installed"))
    plot_fig2(rows, out / f"{unit}.png", banner, title)
    return {"machine": cpu, "cores": os.cpu_count(), "date": date, "threads": result["threads"],
            "torch": result.get("torch"), "loadavg_1min_start_end": load, "stream": result.get("stream"),
            "notes": result.get("notes", [])}


def epochs_text(epochs: int) -> str:
    """Which epochs the figure's times are from (epoch 0 is warm-up when there are more)."""
    if epochs <= 1:
        return "epoch 0 (no warm-up epoch)"
    if epochs == 2:
        return "epoch 1 (epoch 0 is warm-up)"
    return f"median of epochs 1..{epochs - 1} (epoch 0 is warm-up)"


def summarize_measured(records, series: list) -> Any:
    """One row per (series, N): epoch time = median over measured epochs (>= 1 when there are) of the
    slowest rank; memory = the (rank, epoch) with the largest VmHWM, split into its post-setup RSS and the
    peak above it; mem_scaling = peak at the smallest N / peak at N."""
    import pandas as pd

    label = {bench_mode: name for name, bench_mode, _, _ in series}
    df = records[records.epoch >= 1] if records.epoch.max() >= 1 else records
    rows = []
    for (mode, n), d in df.groupby(["mode", "workers"]):
        worst = d.loc[d.peak_mem_bytes.idxmax()]
        rows.append({
            "series": label.get(mode, mode), "mode": mode.split("+")[0], "fused": mode.endswith("+fused"),
            "workers": int(n), "epochs_measured": int(d.epoch.nunique()),
            "epoch_time_s": float(d.groupby("epoch").epoch_time_s.max().median()),
            "comm_wait_s": float(d.groupby("epoch").comm_wait_s.max().median()),
            "bytes_sent_per_epoch": float(d.groupby("epoch").bytes_sent.sum().median()),
            "baseline_mem_bytes": int(worst.baseline_mem_bytes),
            "peak_mem_above_baseline_bytes": int(worst.peak_mem_bytes - worst.baseline_mem_bytes),
            "peak_mem_bytes": int(worst.peak_mem_bytes),
            "threads_per_worker": int(d.threads.iloc[0]) if "threads" in d else 0,
            "loss_last_epoch": float(d[d.epoch == d.epoch.max()].loss.iloc[0]),
        })
    table = pd.DataFrame(rows)
    order = {name: i for i, (name, *_rest) in enumerate(series)}
    table = table.sort_values(["series", "workers"], key=lambda c: c.map(order) if c.name == "series" else c)
    first = table.groupby("series").peak_mem_bytes.transform("first")
    return table.assign(mem_scaling=first / table.peak_mem_bytes).reset_index(drop=True)


def run_measured(unit: str, p: dict[str, Any], out: Path, work: Path, cache: Path, log: Log) -> dict[str, Any]:
    """Figures 3a/4a: ``sarlab bench engine`` on a products-like synthetic graph (measured here)."""
    import pandas as pd

    from real.bench import main as bench_main

    g, m = p["graph"], p["model"]
    argv = ["--nodes", str(g["nodes"]), "--degree", str(g["degree"]), "--features", str(g["features"]),
            "--classes", str(g["classes"]), "--hidden", str(m["hidden"]), "--layers", str(m["layers"]),
            "--heads", str(m["heads"]), "--workers", ",".join(map(str, p["workers"])),
            "--epochs", str(p["epochs"]), "--models", m["model"],
            "--modes", ",".join(bench_mode for _, bench_mode, _, _ in p["series"]),
            "--prefetch", str(p["prefetch"]), "--out", str(work), "--prefix", "engine", "--cache", str(cache)]
    log(f"  sarlab bench engine {' '.join(argv)}")
    load_start = os.getloadavg()[0]
    rc = bench_main(argv)
    if rc != 0:
        raise RuntimeError(f"engine benchmark exited with status {rc}")
    load_end = os.getloadavg()[0]
    records = pd.read_csv(work / "engine.csv")
    shutil.copyfile(work / "engine.csv", out / f"{unit}_records.csv")
    cpu, cores, date = cpu_model(), os.cpu_count() or 0, _today()
    table = summarize_measured(records, p["series"])
    edges = int(records.num_edges.iloc[0]) if "num_edges" in records else 0
    meta = {"kind": MEASURED, "machine": cpu, "cores": cores, "date": date,
            "graph": (f"synthetic:nodes={g['nodes']},degree={g['degree']},features={g['features']},"
                      f"classes={g['classes']},seed={g['seed']}"),
            "num_nodes": g["nodes"], "num_edges": edges, "model": m["model"], "layers": m["layers"],
            "hidden": m["hidden"], "heads": m["heads"] if m["model"] == "gat" else 0}
    for i, (k, v) in enumerate(meta.items()):
        table.insert(i, k, v)
    _write_csv(table, out / f"{unit}.csv")
    name = "GraphSAGE (mean)" if m["model"] == "sage" else f"GAT ({m['heads']} heads)"
    fig = "Figure 3a" if p["figure"] == "fig3" else "Figure 4a"
    banner = _measured_banner(cpu, cores, date, f"the N worker processes share these {cores} cores "
                              f"(gloo on loopback); 1-min load {load_start:.1f} -> {load_end:.1f}")
    title = (f"{fig}: {m['layers']}-layer {name}, hidden {m['hidden']}, products-like synthetic graph: "
             f"{g['nodes']:,} nodes, {edges:,} edges (mean in-degree {edges / g['nodes']:.1f}), "
             f"{g['features']} features, {g['classes']} classes, METIS parts; {epochs_text(p['epochs'])}")
    plot_scaling(table, out / f"{unit}.png", MEASURED, banner, title, f"worker processes N (on {cores} cores)")
    return {"machine": cpu, "cores": cores, "date": date, "loadavg_1min_start_end": [load_start, load_end],
            "graph": meta["graph"], "num_edges": edges}


def run_simulated(unit: str, p: dict[str, Any], out: Path, log: Log) -> dict[str, Any]:
    """Figures 3b/4b/5/6: the SimPy model on an OGB preset with an estimated METIS-like partition."""
    import pandas as pd

    from simulator.layers import ModelSpec
    from simulator.profile import load_profile
    from simulator.sweep import simulate_sweep

    profile = load_profile(p["profile"])
    ident = profile_identity(p["profile"])
    m = p["model"]
    rows, stats = [], None
    for name, _bench_mode, mode, fused in p["series"]:
        spec = ModelSpec(model=m["model"], layers=m["layers"], hidden=m["hidden"], heads=m["heads"],
                         aggr=m["aggr"], fused=fused, batchnorm=False, dropout=0.0)
        _df, items = simulate_sweep(p["graph"], [mode], [spec], p["workers"], profile, prefetch=p["prefetch"],
                                    edge_cut=p["edge_cut"], progress=lambda line, n=name: log(f"  {n}: {line}"))
        for it in items:
            r = it.result
            total = r.baseline_bytes + r.peak_above_baseline_bytes
            worst = int(total.argmax())
            wph = r.placement.workers_per_host
            host = float(total.max()) * wph
            stats = it.stats
            rows.append({
                "series": name, "mode": mode, "fused": fused, "workers": it.workers,
                "epoch_time_s": float(r.epoch_time_s.max()), "compute_s": float(r.compute_s.mean()),
                "comm_wait_s": float(r.comm_wait_s.mean()), "bytes_sent_per_worker": float(r.bytes_sent.mean()),
                "baseline_mem_bytes": int(r.baseline_bytes[worst]),
                "peak_mem_above_baseline_bytes": int(r.peak_above_baseline_bytes[worst]),
                "peak_mem_bytes": int(total[worst]), "workers_per_host": wph,
                "threads_per_worker": r.placement.threads, "host_mem_needed_bytes": int(host),
                "host_mem_bytes": int(profile.mem_per_host_bytes),
                "oom": bool(profile.mem_per_host_bytes and host > profile.mem_per_host_bytes),
                "edge_cut": float(it.stats.edge_cut_fraction()),
            })
    table = pd.DataFrame(rows)
    first = table.groupby("series", sort=False).peak_mem_bytes.transform("first")
    table = table.assign(mem_scaling=first / table.peak_mem_bytes,
                         ideal_scaling=table.workers / table.groupby("series", sort=False).workers.transform("first"))
    date = _today()
    meta = {"kind": SIMULATED, "profile": ident["name"], "profile_source": ident["where"], "date": date,
            "graph": p["graph"], "num_nodes": stats.num_nodes, "num_edges": stats.num_edges,
            "feature_dim": stats.feature_dim, "num_classes": stats.num_classes, "model": m["model"],
            "layers": m["layers"], "hidden": m["hidden"], "heads": m["heads"] if m["model"] == "gat" else 0}
    for i, (k, v) in enumerate(meta.items()):
        table.insert(i, k, v)
    _write_csv(table, out / f"{unit}.csv")
    name = "GraphSAGE (mean)" if m["model"] == "sage" else f"GAT ({m['heads']} heads)"
    fig = {"fig3": "Figure 3b", "fig4": "Figure 4b", "fig5": "Figure 5", "fig6": "Figure 6"}[p["figure"]]
    wph = int(table.workers_per_host.iloc[0])
    placement = "one worker per node" if wph == 1 else f"{wph} workers per host"
    title = (f"{fig}: {m['layers']}-layer {name}, hidden {m['hidden']}, {p['graph']} ({stats.num_nodes:,} nodes, "
             f"{stats.num_edges:,} directed edges, {stats.feature_dim} features); partition estimated from "
             f"totals with edge cut {p['edge_cut']:g} (METIS-like, assumed); {placement}, "
             f"{table.threads_per_worker.iloc[0]:g} threads each; no BatchNorm/dropout, float32")
    limit = profile.mem_per_host_bytes / wph if profile.mem_per_host_bytes else None
    limit_label = (f"memory per {'node' if wph == 1 else 'worker'}: {limit / 2**30:,.0f} GiB ({ident['name']})"
                   if limit else "")
    plot_scaling(table, out / f"{unit}.png", SIMULATED, _simulated_banner(ident["name"], ident["where"], date),
                 title, f"workers N ({placement})", per_worker_limit=limit, limit_label=limit_label,
                 scaling=p["memory_scaling"])
    return {"profile": ident["name"], "profile_source": ident["where"], "profile_sha": ident["sha"],
            "date": date, "graph": p["graph"], "edge_cut": p["edge_cut"],
            "oom": [f"{r['series']} N={r['workers']}" for r in rows if r["oom"]]}


# ------------------------------------------------------------------------------------------------ manifests
def manifest_path(out: Path, step: str) -> Path:
    return out / f"reproduce_{step}.json"


def read_manifest(out: Path, step: str) -> dict[str, Any]:
    path = manifest_path(out, step)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if data.get("format_version") == MANIFEST_VERSION and data.get("step") == step else {}


def write_manifest(out: Path, step: str, data: dict[str, Any]) -> None:
    path = manifest_path(out, step)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=False, default=str) + "\n")
    os.replace(tmp, path)


def _outputs_present(out: Path, files: dict[str, str]) -> bool:
    return all((out / f).is_file() and (out / f).stat().st_size > 0 for f in files)


def unit_current(entry: dict[str, Any] | None, params: dict[str, Any], out: Path, unit: str) -> bool:
    """A unit is done when its manifest entry has the same parameters and its outputs are all there."""
    return bool(entry) and entry.get("params_sha") == _sha(params) and _outputs_present(
        out, unit_outputs(unit, params))


def step_current(manifest: dict[str, Any], units: dict[str, dict[str, Any]], out: Path) -> bool:
    return (bool(manifest.get("complete")) and manifest.get("params_sha") == _sha(units)
            and all(unit_current(manifest.get("units", {}).get(u), p, out, u) for u, p in units.items()))


# ------------------------------------------------------------------------------------------------ driver
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
        description="Regenerate the SAR paper's figures 2-6 into --out: measured on this machine where it can "
        "run them (figure 2: one GAT layer; figures 3a/4a: a products-like synthetic graph at N=2,4,8), "
        "simulated with the SimPy model where it cannot (figures 3b/4b: ogbn-products at N=4,8,16; figures "
        "5/6: ogbn-papers100M at N=32,64,128). Each figure says on its face whether it is measured (CPU "
        "model, date) or simulated (profile); a CSV of its numbers lies beside it; reproduce_<step>.json "
        "records the parameters. Finished steps are skipped unless --force or their parameters changed.",
        epilog=f"Steps: {', '.join(STEPS)} (fig3/fig4 and fig5/fig6 name the step that draws them).")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="tiny versions of every step (about a minute on 2 cores)")
    size.add_argument("--full", action="store_true", help="the real run (the default; about half an hour on 2 cores)")
    p.add_argument("--out", help=f"output directory (default: {REPO / 'results'}; with --quick "
                   f"{REPO / '.cache' / 'reproduce-quick'}, so tiny figures never replace the real ones)")
    p.add_argument("--force", action="store_true", help="re-run the selected steps even when up to date")
    p.add_argument("--only", help=f"comma list of steps to run ({', '.join(STEPS)}; or fig2..fig6)")
    p.add_argument("--profile", default="icelake-hdr200",
                   help="machine profile of the simulated figures: preset or profile JSON (default %(default)s)")
    p.add_argument("--cache", help="partition cache of the measured runs (default: .cache/partitions in the "
                   "repository for --full, a temporary directory for --quick)")
    p.add_argument("--dry-run", action="store_true", help="say which steps and units would run, run nothing")
    p.add_argument("--json", metavar="PATH", help="write a machine-readable summary of what ran here")
    return p.parse_args(argv)


def select_steps(only: str | None) -> list[str]:
    """The steps to run, in order; ``only`` is a comma list of steps or figure names."""
    if not only:
        return list(STEPS)
    wanted = set()
    for name in only.split(","):
        name = name.strip().lower()
        if not name:
            continue
        if name not in ALIASES:
            raise ValueError(f"unknown step {name!r} in --only: choose from {', '.join(STEPS)} (or fig2..fig6)")
        wanted.add(ALIASES[name])
    return [s for s in STEPS if s in wanted]


def run_unit(unit: str, params: dict[str, Any], out: Path, cache: Path | None, log: Log) -> dict[str, Any]:
    """Run one unit in a scratch directory under ``out``; returns its provenance."""
    work = Path(tempfile.mkdtemp(prefix=f".reproduce-{unit}-", dir=out))
    try:
        if params["kind"] == SIMULATED:
            return run_simulated(unit, params, out, log)
        if params["figure"] == "fig2":
            return run_fig2(unit, params, out, work, log)
        return run_measured(unit, params, out, work, cache or (work / "partitions"), log)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """``sarlab reproduce``; returns 0 when every selected step is up to date or ran, 1 when one failed."""
    args = parse_args(argv)
    try:
        steps = select_steps(args.only)
        plan = build_plan(args.quick, args.profile)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = Path(args.out or (REPO / ".cache" / "reproduce-quick" if args.quick else REPO / "results"))
    out.mkdir(parents=True, exist_ok=True)
    cache = Path(args.cache) if args.cache else (None if args.quick else REPO / ".cache" / "partitions")

    def log(line: str) -> None:
        print(line, flush=True)

    todo: dict[str, list[str]] = {}
    for step in steps:
        manifest = read_manifest(out, step)
        if not args.force and step_current(manifest, plan[step], out):
            todo[step] = []
        else:
            entries = manifest.get("units", {})
            todo[step] = [u for u, p in plan[step].items()
                          if args.force or not unit_current(entries.get(u), p, out, u)]
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
    failed = False
    for step in steps:
        units = plan[step]
        t_step = time.perf_counter()
        record: dict[str, Any] = {"step": step, "units": []}
        if not todo[step]:
            progress.done += len(units)
            log(progress.line(f"{step}: up to date (reproduce_{step}.json), skipped; --force re-runs it"))
            record.update(status="up-to-date", seconds=0.0)
            summary["steps"].append(record)
            continue
        old = read_manifest(out, step)
        keep = {u: e for u, e in old.get("units", {}).items() if u in units and u not in todo[step]}
        manifest = {"format_version": MANIFEST_VERSION, "step": step, "run": run_name, "complete": False,
                    "params_sha": _sha(units), "command": "sarlab reproduce --" + run_name + f" --only {step}",
                    "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "units": keep}
        write_manifest(out, step, manifest)
        step_failed = False
        for unit, params in units.items():
            outputs = unit_outputs(unit, params)
            if unit not in todo[step]:
                progress.done += 1
                log(progress.line(f"{unit} ({params['kind']}): up to date, kept"))
                record["units"].append({"unit": unit, "status": "up-to-date", "kind": params["kind"],
                                        "outputs": outputs})
                continue
            log(progress.line(f"{unit} ({params['kind']}) ..."))
            t0 = time.perf_counter()
            try:
                provenance = run_unit(unit, params, out, cache, log)
            except Exception as err:  # one unit failing must not lose the others: report it and go on
                step_failed = failed = True
                log(f"FAILED {unit}: {type(err).__name__}: {err}\n{traceback.format_exc()}")
                record["units"].append({"unit": unit, "status": "failed", "kind": params["kind"],
                                        "error": f"{type(err).__name__}: {err}"})
                progress.done += 1
                continue
            seconds = time.perf_counter() - t0
            manifest["units"][unit] = {
                "kind": params["kind"], "figure": params["figure"], "params": params, "params_sha": _sha(params),
                "outputs": outputs, "provenance": provenance, "seconds": round(seconds, 1),
                "finished": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
            write_manifest(out, step, manifest)
            progress.done += 1
            log(progress.line(f"{unit} ({params['kind']}) done in {seconds:.0f}s: {', '.join(outputs)}"))
            record["units"].append({"unit": unit, "status": "ran", "kind": params["kind"], "outputs": outputs,
                                    "seconds": round(seconds, 1)})
        manifest["complete"] = not step_failed
        manifest["finished"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        manifest["seconds"] = round(time.perf_counter() - t_step, 1)
        manifest["outputs"] = {f: k for u in units if u in manifest["units"]
                               for f, k in unit_outputs(u, units[u]).items()}
        write_manifest(out, step, manifest)
        record.update(status="failed" if step_failed else "ran", seconds=manifest["seconds"])
        summary["steps"].append(record)
    log(progress.line("failed: see FAILED above" if failed else "all steps done"))
    _write_summary(args.json, summary, ok=not failed)
    return 1 if failed else 0


def _write_summary(path: str | None, summary: dict[str, Any], ok: bool) -> None:
    if not path:
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps({**summary, "ok": ok}, indent=1, default=str) + "\n")


if __name__ == "__main__":
    sys.exit(main())
