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
import re
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
    df = with_defaults(df, str(path))
    df["records_path"] = str(path)
    if "machine" not in df.columns:  # records older than the column: the CPU `sarlab bench engine` named in its
        df["machine"] = header_machine(path)  # markdown summary beside them, else unknown (empty)
    return df


def header_machine(records_path: str | Path) -> str:
    """The CPU named by the ``measured on <cpu> (<n> cores)`` first line of the markdown summary that
    ``sarlab bench engine`` writes beside its records (``<stem>.md``); empty when there is none."""
    md = Path(records_path).with_suffix(".md")
    try:
        first = md.read_text().splitlines()[0]
    except (OSError, IndexError):
        return ""
    match = re.match(r"#?\s*measured on (.+?) \(\d+ cores?\)", first)
    return match.group(1).strip() if match else ""


def machine_mismatch(records: pd.DataFrame, profile: Profile) -> list[str]:
    """The CPUs the records were measured on that differ from the one ``profile`` was calibrated on (empty
    when they agree, or when either side does not say). A profile of another CPU does not validate."""
    calibrated = str(profile.meta.get("machine") or "")
    if not calibrated or "machine" not in records.columns:
        return []
    seen = {str(m) for m in records["machine"].dropna().unique() if str(m)}
    return sorted(m for m in seen if m != calibrated)


def with_defaults(df: pd.DataFrame, source: str = "records") -> pd.DataFrame:
    """Check the required metric-record columns and fill the optional configuration columns' defaults."""
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise ValueError(
            f"{source}: records lack columns {missing}; they must have the metric-record columns "
            "(mode, model, workers, rank, epoch, epoch_time_s, ...) and the configuration columns"
        )
    df = df.copy()
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
    carried = [c for c in (*PROBE_COLUMNS, "records_path", "machine") if c in keep.columns]
    if carried:  # one value per configuration: its probe (``sarlab bench engine --probe``), its records file
        extra = keep.groupby(keys, dropna=False)[carried].first().reset_index()
        out = out.merge(extra, on=keys, how="left")
    return out


#: columns ``sarlab bench engine --probe`` adds to every record: the speed probe's epoch time next to the run
#: (geometric mean of the probes before and after it) and the probe's configuration
PROBE_COLUMNS = (
    "probe_epoch_s",
    "probe_before_s",
    "probe_after_s",
    "probe_graph",
    "probe_partition_dir",
    "probe_num_nodes",
    "probe_num_edges",
    "probe_feature_dim",
    "probe_num_classes",
    "probe_threads",
)


def probe_row(row: pd.Series) -> pd.Series:
    """The configuration of the speed probe that ran next to ``row`` (:func:`simulator.calibrate.speed_probe`),
    as a :func:`summarize_measured`-like row that :func:`simulate_row` accepts."""
    from simulator.calibrate import PROBE_MODEL

    return pd.Series(
        {
            "label": "probe",
            "graph": row["probe_graph"],
            "partition_dir": row.get("probe_partition_dir") or "",
            "num_nodes": int(row["probe_num_nodes"]),
            "num_edges": int(row["probe_num_edges"]),
            "feature_dim": int(row["probe_feature_dim"]),
            "num_classes": int(row["probe_num_classes"]),
            "model": PROBE_MODEL["model"],
            "layers": PROBE_MODEL["layers"],
            "hidden": PROBE_MODEL["hidden"],
            "heads": 1,
            "aggr": "mean",
            "fused": False,
            "mode": "sar",
            "workers": 1,
            "prefetch": 1,
            "dtype": "float32",
            "batchnorm": False,
            "dropout": 0.0,
            "threads": int(row["probe_threads"]),
            "records_path": row.get("records_path") or "",
        }
    )


def probe_scale(row: pd.Series, profile: Profile) -> float:
    """``compute_scale`` while ``row`` ran: its adjacent speed-probe epoch time over the simulator's
    prediction of the probe with ``compute_scale`` 1 (NaN when the records carry no probe)."""
    value = row.get("probe_epoch_s")
    if value is None or not np.isfinite(float(value)) or float(value) <= 0:
        return math.nan
    predicted = float(simulate_row(probe_row(row), profile.with_scale(1.0)).epoch_time_s.max())
    return float(value) / predicted


def manifest_path(pdir: str, records_path: str = "") -> Path | None:
    """Where the manifest of partition directory ``pdir`` is: the directory itself, else the copy
    ``sarlab bench engine`` keeps beside its records (``<records stem>_manifests/<dir name>.json``)."""
    if not pdir:
        return None
    if (Path(pdir) / "manifest.json").exists():
        return Path(pdir) / "manifest.json"
    if records_path:
        kept = Path(records_path).with_name(Path(records_path).stem + "_manifests") / (Path(pdir).name + ".json")
        if kept.exists():
            return kept
    return None


def stats_for(row: pd.Series) -> PartitionStats:
    """The partition the records ran on (its manifest, or the copy kept beside the records), or a
    random-partition estimate from the totals."""
    workers = int(row["workers"])
    found = manifest_path(str(row.get("partition_dir") or ""), str(row.get("records_path") or ""))
    if found is not None:
        stats = load_manifest(found)
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
    records: pd.DataFrame,
    profile: Profile,
    warmup: int = 1,
    progress: Callable[[str], None] | None = None,
    drift: str = "none",
) -> pd.DataFrame:
    """Simulate every configuration in ``records``; one row per configuration with both values and errors.

    Every configuration is priced with the profile as it is (``predicted_epoch_time_static_s``,
    ``time_error_static``) and, where the records carry speed probes (``sarlab bench engine --probe``), also
    with the ``compute_scale`` its adjacent probes measured (:func:`probe_scale`;
    ``predicted_epoch_time_probe_s``, ``time_error_probe``). ``drift`` picks which of the two is the
    row's ``predicted_*`` / ``time_error``: ``"none"`` the profile's own, ``"probe"`` the probe-scaled one
    (an error without probes), ``"auto"`` probe-scaled where the records have probes.
    """
    if drift not in ("auto", "probe", "none"):
        raise ValueError(f"drift must be auto, probe or none, got {drift!r}")
    measured = summarize_measured(with_defaults(records), warmup)
    if drift == "probe" and "probe_epoch_s" not in measured.columns:
        raise ValueError("drift='probe' needs records with probe columns (sarlab bench engine --probe)")
    rows = []
    for i, row in measured.iterrows():
        stats = stats_for(row)
        model = model_for(row)
        meas_t = float(row["measured_epoch_time_s"])
        static = simulate_row(row, profile, stats, model)
        scale = probe_scale(row, profile)
        probed = simulate_row(row, profile.with_scale(scale), stats, model) if np.isfinite(scale) else None
        result = probed if probed is not None and drift != "none" else static
        pred_t = float(result.epoch_time_s.max())
        pred_m = float(result.peak_above_baseline_bytes.max())
        out = row.to_dict()
        out.update(
            workload_source=stats.source,
            compute_scale_used=result.compute_scale,
            scale_key_bytes=result.scale_key_bytes,
            predicted_epoch_time_s=pred_t,
            predicted_peak_above_baseline_bytes=pred_m,
            predicted_comm_wait_s=float(result.comm_wait_s.max()),
            predicted_bytes_sent=float(result.bytes_sent.sum()),
            time_error=_error(pred_t, meas_t),
            memory_error=_error(pred_m, float(row["measured_peak_above_baseline_bytes"])),
            predicted_epoch_time_static_s=float(static.epoch_time_s.max()),
            time_error_static=_error(float(static.epoch_time_s.max()), meas_t),
        )
        if probed is not None:
            out.update(
                probe_compute_scale=scale,
                predicted_epoch_time_probe_s=float(probed.epoch_time_s.max()),
                time_error_probe=_error(float(probed.epoch_time_s.max()), meas_t),
            )
        rows.append(out)
        if progress is not None:
            other = ""
            if probed is not None:
                key = "time_error_static" if result is probed else "time_error_probe"
                other = f"; {'profile' if result is probed else 'probe'} scale {out[key]:+.0%}"
            progress(
                f"[{i + 1}/{len(measured)}] {model.label():10s} {row['mode']:10s} N={int(row['workers']):<3d} "
                f"time {pred_t:.4g}s vs {meas_t:.4g}s ({out['time_error']:+.0%}{other}), "
                f"peak {pred_m / 2**20:.1f} vs {row['measured_peak_above_baseline_bytes'] / 2**20:.1f} MiB "
                f"({out['memory_error']:+.0%})"
            )
    return pd.DataFrame(rows)


def error_summary(table: pd.DataFrame) -> dict[str, float]:
    """Median absolute prediction errors over configurations (NaN where nothing was measurable)."""

    def med(col: str) -> float:
        vals = table[col].abs().dropna()
        return float(vals.median()) if len(vals) else math.nan

    out = {
        "configurations": int(len(table)),
        "median_abs_time_error": med("time_error"),
        "median_abs_memory_error": med("memory_error"),
    }
    if "time_error_static" in table.columns:
        out["median_abs_time_error_static"] = med("time_error_static")
    if "time_error_probe" in table.columns:
        out["median_abs_time_error_probe"] = med("time_error_probe")
    return out


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
