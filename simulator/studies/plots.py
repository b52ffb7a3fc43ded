"""PNG figures: a Gantt chart of one epoch per worker, memory over time, predicted vs measured."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from sarlab.simulator.system.result import EpochResult

COLORS = {"compute": "#4C72B0", "wait": "#DD8452", "allreduce": "#8172B3", "send": "#55A868"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str | Path) -> Path:
    """``fig`` laid out and written at 110 dpi by :func:`sarlab.common.figures.save_figure` (imported here, so that
    importing this module loads no matplotlib)."""
    from sarlab.common.figures import save_figure

    return save_figure(fig, path, dpi=110)


def _shown_ranks(workers: int, max_workers: int) -> list[int]:
    if workers <= max_workers:
        return list(range(workers))
    return sorted(set(np.linspace(0, workers - 1, max_workers).round().astype(int).tolist()))


def gantt(result: EpochResult, path: str | Path, title: str = "", max_workers: int = 16) -> Path:
    """Gantt chart of one simulated epoch (needs a ``trace=True`` result).

    Per worker: compute (blue), waiting on point-to-point messages (orange) or in all-reduces (purple);
    below each row, the worker's outgoing messages on its NIC (green).
    """
    if not result.intervals:
        raise ValueError("the result has no trace: simulate with RunSpec(trace=True)")
    plt = _pyplot()
    ranks = _shown_ranks(result.workers, max_workers)
    fig, ax = plt.subplots(figsize=(12, 0.45 * len(ranks) + 1.5))
    for row, p in enumerate(ranks):
        y = len(ranks) - 1 - row
        for kind in ("compute", "wait", "allreduce"):
            bars = [(iv.start, iv.end - iv.start) for iv in result.intervals[p] if iv.kind == kind]
            if bars:
                ax.broken_barh(bars, (y - 0.3, 0.45), facecolors=COLORS[kind], linewidth=0)
        sends = [(m.start, m.end - m.start) for m in result.transfers if m.src == p and m.end > m.start]
        if sends:
            ax.broken_barh(sends, (y - 0.42, 0.1), facecolors=COLORS["send"], linewidth=0)
    ax.set_yticks(range(len(ranks)))
    ax.set_yticklabels([f"rank {p}" for p in reversed(ranks)])
    ax.set_xlabel("time in epoch (s)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
    ax.legend(handles, ["compute", "p2p wait", "all-reduce", "sending"], loc="upper right", fontsize=8, ncol=4)
    ax.set_title(title or f"{result.mode}, {result.workers} workers: one epoch")
    return _save(fig, path)


def memory_plot(result: EpochResult, path: str | Path, title: str = "", max_workers: int = 8) -> Path:
    """Bytes above the baseline over one epoch, one line per worker (needs a ``trace=True`` result)."""
    if not result.memory:
        raise ValueError("the result has no trace: simulate with RunSpec(trace=True)")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 4))
    for p in _shown_ranks(result.workers, max_workers):
        times, values = result.memory[p]
        ax.step(times, np.asarray(values) / 2**20, where="post", label=f"rank {p}", linewidth=1)
    ax.set_xlabel("time in epoch (s)")
    ax.set_ylabel("MiB above baseline")
    ax.set_title(title or f"{result.mode}, {result.workers} workers: memory")
    ax.legend(fontsize=8, ncol=2)
    return _save(fig, path)


def model_label(row: pd.Series) -> str:
    """``gcn``, ``sage-max``, ``gat-fused``... from a summary row's model/aggr/fused columns."""
    model = str(row["model"])
    if model == "sage":
        return f"sage-{row.get('aggr', 'mean')}"
    if model == "gat" and bool(row.get("fused", False)):
        return "gat-fused"
    return model


def scaling_plot(summary: pd.DataFrame, path: str | Path, title: str = "") -> Path:
    """Epoch time and peak memory per worker against the number of workers: a colour per model, a line
    style per mode."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {"sar": "o-", "sa": "s--", "oneshot": "^:"}
    labels = summary.apply(model_label, axis=1)
    colors = {label: f"C{i}" for i, label in enumerate(dict.fromkeys(labels))}
    for (label, mode), d in summary.assign(label=labels).groupby(["label", "mode"], sort=False):
        d = d.sort_values("workers")
        kw = {"color": colors[label], "label": f"{label} {mode}"}
        axes[0].plot(d.workers, d.epoch_time_s, styles.get(mode, "x-"), **kw)
        axes[1].plot(d.workers, d.peak_mem_above_baseline_bytes / 2**20, styles.get(mode, "x-"), **kw)
    for ax, ylabel in zip(axes, ("epoch time (s)", "peak MiB per worker above baseline"), strict=True):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("workers")
        ax.set_ylabel(ylabel)
    axes[1].legend(fontsize=7, ncol=2)
    fig.suptitle(title or "simulated scaling")
    return _save(fig, path)


def validation_plot(table: pd.DataFrame, path: str | Path, title: str = "") -> Path:
    """Predicted against measured epoch time and peak memory (log-log, y = x and +-10 % lines); colour is
    the model, marker the mode, size the worker count."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.8))
    pairs = (
        ("measured_epoch_time_s", "predicted_epoch_time_s", "epoch time (s)"),
        (
            "measured_peak_above_baseline_bytes",
            "predicted_peak_above_baseline_bytes",
            "peak above baseline (MiB)",
        ),
    )
    aggr = table["aggr"].astype(str) if "aggr" in table else pd.Series("mean", index=table.index)
    models = table["model"].astype(str) + np.where(table["model"].astype(str).eq("sage"), "-" + aggr, "")
    colours = {m: f"C{i}" for i, m in enumerate(sorted(set(models)))}
    markers = {"sar": "o", "sar+fused": "D", "sa": "s", "oneshot": "^"}
    workers = table["workers"].to_numpy(float)
    # with speed probes, the other of the two time predictions (validate's docstring) is drawn hollow
    other_col = None
    if "predicted_epoch_time_probe_s" in table:
        probe_is_primary = bool(np.allclose(table["predicted_epoch_time_probe_s"], table["predicted_epoch_time_s"]))
        other_col = "predicted_epoch_time_static_s" if probe_is_primary else "predicted_epoch_time_probe_s"
    drifted = other_col is not None
    other = table[other_col].to_numpy(float) if drifted else None
    for ax, (mx, px, name) in zip(axes, pairs, strict=False):
        scale = 2**20 if "bytes" in mx else 1.0
        meas, pred = table[mx].to_numpy(float) / scale, table[px].to_numpy(float) / scale
        ok = np.isfinite(meas) & np.isfinite(pred) & (meas > 0) & (pred > 0)
        for model, colour in colours.items():
            for mode, marker in markers.items():
                sel = ok & (models.to_numpy() == model) & (table["mode"].astype(str).to_numpy() == mode)
                if sel.any():
                    ax.scatter(meas[sel], pred[sel], marker=marker, color=colour, s=12 + 6 * workers[sel],
                               label=f"{model} {mode}", alpha=0.8)
                    if drifted and "time" in mx:  # the other prediction: hollow, joined to the primary one
                        ax.scatter(meas[sel], other[sel], marker=marker, facecolors="none", edgecolors=colour,
                                   s=12 + 6 * workers[sel], alpha=0.5, linewidths=0.7)
                        for m_, a_, b_ in zip(meas[sel], other[sel], pred[sel], strict=True):
                            ax.plot([m_, m_], [a_, b_], color=colour, linewidth=0.4, alpha=0.5)
        if ok.any():
            lo, hi = min(meas[ok].min(), pred[ok].min()) / 1.3, max(meas[ok].max(), pred[ok].max()) * 1.3
            ax.plot([lo, hi], [lo, hi], "k--", linewidth=0.8)
            for f in (0.9, 1.1):
                ax.plot([lo, hi], [lo * f, hi * f], "k:", linewidth=0.6)
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set_xlabel(f"measured {name}")
        ax.set_ylabel(f"predicted {name}")
    axes[1].legend(fontsize=7, ncol=2, loc="upper left")
    if drifted:
        names = ("profile's compute_scale", "speed probes' compute_scale")
        if other_col == "predicted_epoch_time_static_s":
            names = names[::-1]
        axes[0].set_title(f"filled: {names[0]}; hollow: {names[1]}", fontsize=8)
    fig.suptitle(title or "simulator: predicted vs measured")
    return _save(fig, path)
