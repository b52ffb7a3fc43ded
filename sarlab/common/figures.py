"""Figure drawing for measured and simulated results: the paper's scaling and layer figures, engine benchmarks.

Every figure says on its face whether it is measured (CPU model, cores, date) or simulated (the profile),
in a coloured banner above its title (:func:`face`). Nothing here measures or simulates: the callers pass records
or tables; :func:`summarize_measured` shapes measured records into the table :func:`plot_scaling` draws, and
:func:`write_csv` writes the tables beside the figures.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from sarlab.common.tables import MEASURED, SIMULATED  # noqa: E402


def face(fig, kind: str, banner: str, title: str) -> float:
    """The banner that says measured/simulated (coloured box), then the title under it; returns the figure
    fraction left for the axes below them."""
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


def save_figure(fig, path: str | Path, rect: tuple[float, float, float, float] | None = None,
                dpi: int = 120) -> Path:
    """Lay ``fig`` out (inside ``rect``, the figure fraction its axes may fill; None: all of it), write it as a PNG
    at ``path`` (its folder created), close it, and return the path."""
    fig.tight_layout(rect=rect)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


COLORS = {"sar": "C0", "sar+fused": "C2", "vanilla (oneshot)": "C3"}


def plot_scaling(table, path: Path, kind: str, banner: str, title: str, xlabel: str,
                 per_worker_limit: float | None = None, limit_label: str = "", scaling: bool = False) -> None:
    """Epoch time (lines) and peak memory per worker (bars: resident after setup, lighter, plus the epoch's
    peak above it) against N, one colour per series; OOM configurations drawn hatched and marked; with
    ``scaling`` the memory scaling mem(N_min)/mem(N) on a second axis with the ideal N/N_min."""
    series = list(dict.fromkeys(table["series"]))
    workers = sorted(int(w) for w in table["workers"].unique())
    x = np.arange(len(workers))
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(12, 5.2))
    top = float(table["peak_mem_bytes"].max())
    unit, scale = ("GiB", 2**30) if top >= 4 * 2**30 else ("MiB", 2**20)
    any_oom = _draw_series(ax_t, ax_m, table, series, workers, scale)
    ymax = _memory_limit(ax_m, x, top, scale, per_worker_limit, limit_label)
    times = table["epoch_time_s"].to_numpy(float)
    if times.max() > 8 * times.min():
        ax_t.set_yscale("log")
        ax_t.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
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
    handles = [Patch(facecolor=COLORS.get(name, f"C{k + 4}")) for k, name in enumerate(series)]
    labels = list(series)
    if scaling:
        h2, l2 = _scaling_axis(ax_m, table, series, workers)
        handles, labels = handles + h2, labels + l2
    if any_oom:
        handles.append(Patch(facecolor="white", edgecolor="red", hatch="xx"))
        labels.append("OOM: exceeds the memory per node")
    ax_m.legend(handles, labels, fontsize=7, loc="upper right")
    save_figure(fig, path, rect=(0, 0, 1, face(fig, kind, banner, title)))


def _draw_series(ax_t, ax_m, table, series: list, workers: list[int], scale: float) -> bool:
    """:func:`plot_scaling`'s series: epoch time as a line on ``ax_t`` (OOM points crossed and labelled) and
    memory as bars on ``ax_m`` (resident after setup lighter, the peak above it on top; OOM bars hatched);
    returns whether any configuration ran out of memory."""
    x = np.arange(len(workers))
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
    return any_oom


def _memory_limit(ax_m, x: np.ndarray, top: float, scale: float, per_worker_limit: float | None,
                  limit_label: str) -> float:
    """The memory per worker a node allows, on ``ax_m``: a dashed line where it would not squash the bars (then
    the axis reaches it), else a sentence; returns the top of the memory axis in its unit."""
    ymax = top / scale
    if per_worker_limit and top >= 0.2 * per_worker_limit:
        ymax = max(ymax, per_worker_limit / scale)
        ax_m.axhline(per_worker_limit / scale, color="k", ls="--", lw=1)
        ax_m.annotate(limit_label, (x[0] - 0.45, per_worker_limit / scale), textcoords="offset points",
                      xytext=(0, 3), fontsize=7)
    elif per_worker_limit:  # the limit would squash the bars: say it in words
        ax_m.text(0.02, 0.97, f"{limit_label}: every configuration fits", transform=ax_m.transAxes,
                  va="top", fontsize=7)
    return ymax


def _scaling_axis(ax_m, table, series: list, workers: list[int]) -> tuple[list, list]:
    """The memory scaling mem(N_min)/mem(N) of every series (dashed) and the ideal N/N_min on a second axis of
    ``ax_m``; returns their legend handles and labels."""
    x = np.arange(len(workers))
    ax2 = ax_m.twinx()
    for k, name in enumerate(series):
        d = table[table["series"] == name].set_index("workers").reindex(workers)
        ax2.plot(x, d["mem_scaling"].to_numpy(float), "s--", color=COLORS.get(name, f"C{k + 4}"), mfc="white",
                 label=f"{name}: scaling")
    ideal = np.asarray(workers, float) / workers[0]
    ax2.plot(x, ideal, "k:", marker=".", label=f"ideal N/{workers[0]}")
    ax2.set_ylim(0, ideal.max() * 1.45)
    ax2.set_ylabel(f"memory scaling: mem(N={workers[0]}) / mem(N)  (dashed)")
    return ax2.get_legend_handles_labels()


def plot_fig2(rows: list[dict], path: Path, banner: str, title: str) -> None:
    """Figure 2: forward time, backward time and peak memory (forward+backward) against heads, grouped bars
    per implementation, labelled with the ratio to PyG."""
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
    save_figure(fig, path, rect=(0, 0.03, 1, face(fig, MEASURED, banner, title)))


def plot_engine_bench(summary: pd.DataFrame, path: str, title: str) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {"sar": "o-", "sa": "s--", "oneshot": "^:", "sar+fused": "D-"}
    colors = {label: f"C{i}" for i, label in enumerate(sorted(summary.label.unique()))}
    shades = {"sar": 1.0, "sar+fused": 0.75, "sa": 0.55, "oneshot": 0.4}
    for (label, mode), d in summary.groupby(["label", "mode"]):
        d = d.sort_values("workers")
        kw = dict(color=colors[label], alpha=shades.get(mode, 1.0), label=f"{label} {mode}")
        axes[0].plot(d.workers, d.peak_mem_above_baseline_bytes / 2**20, styles.get(mode, "x-"), **kw)
        axes[1].plot(d.workers, d.epoch_time_s, styles.get(mode, "x-"), **kw)
    for ax, ylabel in zip(axes, ["peak memory per worker above baseline (MiB)", "epoch time (s)"]):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("workers (N)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("\n".join(textwrap.wrap(title, 150)), fontsize=8)
    save_figure(fig, path)
