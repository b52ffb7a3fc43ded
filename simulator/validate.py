"""Validation: simulate the configurations of real metric records and compare with what was measured.

Measured values are summarised as ``sarlab bench engine`` does: per epoch the slowest rank's epoch
time, then the median over the measured epochs (epoch 0 is warm-up when there are later ones); the peak
is the largest ``peak_mem_bytes - baseline_mem_bytes`` over ranks and measured epochs. The spread of the
measured epochs, ``(max - min) / median``, says how much a time can be trusted. The prediction error of a
quantity is ``predicted / measured - 1``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.epoch import EpochResult, RunSpec, simulate_epoch
from simulator.layers import ModelSpec
from simulator.profile import Profile
from simulator.workload import PartitionStats, estimate_partition, load_manifest

CONFIG_KEYS = (
    "label",
    "graph",
    "partition_dir",
    "num_nodes",
    "num_edges",
    "feature_dim",
    "num_classes",
    "model",
    "layers",
    "hidden",
    "heads",
    "aggr",
    "fused",
    "mode",
    "workers",
    "prefetch",
    "dtype",
    "batchnorm",
    "dropout",
    "threads",
)
DEFAULTS = {
    "label": "",
    "graph": "",
    "partition_dir": "",
    "heads": 1,
    "aggr": "mean",
    "fused": False,
    "prefetch": 1,
    "dtype": "float32",
    "batchnorm": False,
    "dropout": 0.0,
    "threads": 0,
}
REQUIRED = (
    "mode",
    "model",
    "workers",
    "rank",
    "epoch",
    "epoch_time_s",
    "peak_mem_bytes",
    "baseline_mem_bytes",
    "num_nodes",
    "num_edges",
    "feature_dim",
    "num_classes",
    "layers",
    "hidden",
)


def read_records(path: str | Path) -> pd.DataFrame:
    """Metric records from CSV, JSON lines, or a JSON array of records (what the workers write)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no records at {path}; produce them with `sarlab bench engine --json PATH`")
    text = path.read_text()
    if path.suffix.lower() == ".csv":
        df = pd.read_csv(path)
    elif text.lstrip().startswith("["):
        df = pd.DataFrame(json.loads(text))
    elif text.lstrip().startswith("{") and "\n" not in text.strip():
        obj = json.loads(text)
        df = pd.DataFrame(obj.get("records", [obj]))
    else:
        df = pd.DataFrame([json.loads(line) for line in text.splitlines() if line.strip()])
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise ValueError(
            f"{path}: records lack columns {missing}; they must have the metric-record columns "
            "(mode, model, workers, rank, epoch, epoch_time_s, ...) and the configuration columns"
        )
    for key, value in DEFAULTS.items():
        if key not in df.columns:
            df[key] = value
        df[key] = df[key].fillna(value)
    for key in ("fused", "batchnorm"):
        df[key] = df[key].map(_as_bool)
    return df


def _as_bool(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "y", "t")
    return bool(value)


def summarize_measured(df: pd.DataFrame, warmup: int = 1) -> pd.DataFrame:
    """One row per configuration: measured epoch time, peak above baseline, wait, bytes (module doc)."""
    keep = df[df.epoch >= warmup] if (df.epoch >= warmup).any() else df
    keep = keep.assign(peak_above=keep.peak_mem_bytes - keep.baseline_mem_bytes)
    keys = list(CONFIG_KEYS)
    per_epoch = keep.groupby(keys + ["epoch"], dropna=False).agg(
        epoch_time_s=("epoch_time_s", "max"),
        peak=("peak_above", "max"),
        comm_wait_s=("comm_wait_s", "max") if "comm_wait_s" in keep else ("epoch_time_s", lambda s: math.nan),
        bytes_sent=("bytes_sent", "sum") if "bytes_sent" in keep else ("epoch_time_s", lambda s: math.nan),
        ranks=("rank", "nunique"),
    )
    out = (
        per_epoch.groupby(keys, dropna=False)
        .agg(
            measured_epoch_time_s=("epoch_time_s", "median"),
            measured_epoch_spread=("epoch_time_s", lambda t: (t.max() - t.min()) / t.median() if len(t) else math.nan),
            measured_peak_above_baseline_bytes=("peak", "max"),
            measured_comm_wait_s=("comm_wait_s", "median"),
            measured_bytes_sent=("bytes_sent", "median"),
            epochs=("epoch_time_s", "size"),
            ranks=("ranks", "max"),
        )
        .reset_index()
    )
    return out


def stats_for(row: pd.Series) -> PartitionStats:
    """The partition the records ran on (its manifest), or a random-partition estimate from the totals."""
    workers = int(row["workers"])
    pdir = str(row.get("partition_dir") or "")
    if pdir and (Path(pdir) / "manifest.json").exists():
        stats = load_manifest(pdir)
        if stats.num_parts == workers:
            return stats
    return estimate_partition(
        int(row["num_nodes"]),
        int(row["num_edges"]),
        workers,
        int(row["feature_dim"]),
        int(row["num_classes"]),
        graph=str(row.get("graph") or "records"),
    )


def split_mode(mode: str) -> tuple[str, str]:
    """``sar+fused`` -> (``sar``, ``fused``): ``sarlab bench engine`` labels GAT variants in the mode column."""
    base, _, variant = str(mode).partition("+")
    return base, variant


def model_for(row: pd.Series) -> ModelSpec:
    """The :class:`ModelSpec` of a record's configuration columns (GAT: fused from ``fused`` or the
    ``+fused`` mode suffix)."""
    gat = row["model"] == "gat"
    heads = int(row.get("heads") or 1) if gat else 1
    fused = gat and (bool(row.get("fused")) or split_mode(row["mode"])[1] == "fused")
    return ModelSpec(
        model=str(row["model"]),
        layers=int(row["layers"]),
        hidden=int(row["hidden"]),
        heads=heads,
        aggr=str(row.get("aggr") or "mean"),
        fused=fused,
        batchnorm=bool(row.get("batchnorm")),
        dropout=float(row.get("dropout") or 0.0),
        dtype=str(row.get("dtype") or "float32"),
    )


def simulate_row(
    row: pd.Series, profile: Profile, stats: PartitionStats | None = None, model: ModelSpec | None = None
) -> EpochResult:
    """Simulate the configuration of one :func:`summarize_measured` row (its partition, model, mode,
    prefetch and threads per worker)."""
    threads = float(row["threads"]) if float(row.get("threads") or 0) > 0 else None
    run = RunSpec(mode=split_mode(row["mode"])[0], prefetch=int(row["prefetch"]), threads=threads)
    return simulate_epoch(stats or stats_for(row), model or model_for(row), run, profile)


def _error(pred: float, meas: float) -> float:
    return pred / meas - 1.0 if meas > 0 and np.isfinite(pred) and np.isfinite(meas) else math.nan


def validate(
    records: pd.DataFrame, profile: Profile, warmup: int = 1, progress: Callable[[str], None] | None = None
) -> pd.DataFrame:
    """Simulate every configuration in ``records``; one row per configuration with both values and errors."""
    measured = summarize_measured(records, warmup)
    rows = []
    for i, row in measured.iterrows():
        stats = stats_for(row)
        model = model_for(row)
        result = simulate_row(row, profile, stats, model)
        pred_t = float(result.epoch_time_s.max())
        pred_m = float(result.peak_above_baseline_bytes.max())
        out = row.to_dict()
        out.update(
            workload_source=stats.source,
            predicted_epoch_time_s=pred_t,
            predicted_peak_above_baseline_bytes=pred_m,
            predicted_comm_wait_s=float(result.comm_wait_s.max()),
            predicted_bytes_sent=float(result.bytes_sent.sum()),
            time_error=_error(pred_t, float(row["measured_epoch_time_s"])),
            memory_error=_error(pred_m, float(row["measured_peak_above_baseline_bytes"])),
        )
        rows.append(out)
        if progress is not None:
            progress(
                f"[{i + 1}/{len(measured)}] {model.label():10s} {row['mode']:10s} N={int(row['workers']):<3d} "
                f"time {pred_t:.4g}s vs {row['measured_epoch_time_s']:.4g}s ({out['time_error']:+.0%}), "
                f"peak {pred_m / 2**20:.1f} vs {row['measured_peak_above_baseline_bytes'] / 2**20:.1f} MiB "
                f"({out['memory_error']:+.0%})"
            )
    return pd.DataFrame(rows)


def error_summary(table: pd.DataFrame) -> dict[str, float]:
    """Median absolute prediction errors over configurations (NaN where nothing was measurable)."""

    def med(col: str) -> float:
        vals = table[col].abs().dropna()
        return float(vals.median()) if len(vals) else math.nan

    return {
        "configurations": int(len(table)),
        "median_abs_time_error": med("time_error"),
        "median_abs_memory_error": med("memory_error"),
    }


def markdown_table(table: pd.DataFrame) -> str:
    """The validation table as Markdown: one row per configuration, times in s, memory in MiB, errors."""
    cols = ["model", "mode", "workers", "time meas (s)", "epoch spread", "time pred (s)", "time err",
            "wait meas (s)", "wait pred (s)", "peak meas (MiB)", "peak pred (MiB)", "peak err"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    order = table.assign(_m=table["model"].astype(str)).sort_values(["_m", "workers", "mode"])
    for _, r in order.iterrows():
        model = f"sage-{r['aggr']}" if r["model"] == "sage" else str(r["model"])
        cells = [
            model,
            str(r["mode"]),
            str(int(r["workers"])),
            f"{r['measured_epoch_time_s']:.2f}",
            f"{r.get('measured_epoch_spread', math.nan):.0%}",
            f"{r['predicted_epoch_time_s']:.2f}",
            f"{r['time_error']:+.1%}",
            f"{r['measured_comm_wait_s']:.2f}",
            f"{r['predicted_comm_wait_s']:.2f}",
            f"{r['measured_peak_above_baseline_bytes'] / 2**20:.0f}",
            f"{r['predicted_peak_above_baseline_bytes'] / 2**20:.0f}",
            f"{r['memory_error']:+.1%}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
