"""Measured metric records: reading them, checking their columns, and summarising each configuration.

Records come from ``sarlab bench engine`` (CSV or JSON lines) with the columns of :mod:`sarlab.common.records`.
A configuration is summarised by :func:`sarlab.common.records.summarize` (per epoch the slowest rank's epoch time,
then the median over the measured epochs; the peak is the largest ``peak_mem_bytes - baseline_mem_bytes``
over ranks and measured epochs; the spread of the measured epochs, ``(max - min) / median``, says how much
a time can be trusted), under the ``measured_*`` names of the validation table (:data:`MEASURED_NAMES`).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd

from sarlab.common.records import CONFIG_DEFAULTS, CONFIG_KEYS, RUN_COLUMN, measured_epochs, summarize
from sarlab.simulator.hardware.profile import Profile
from sarlab.simulator.system.replay import MEMORY_COLUMN

#: the columns validation cannot do without (the rest of the configuration columns have defaults)
REQUIRED = ("mode", "model", "workers", "rank", "epoch", "epoch_time_s", "peak_mem_bytes", "baseline_mem_bytes",
            "num_nodes", "num_edges", "feature_dim", "num_classes", "layers", "hidden")
#: :func:`sarlab.common.records.summarize` columns and their names in a measured summary
MEASURED_NAMES = {
    "epoch_time_s": "measured_epoch_time_s",
    "epoch_spread": "measured_epoch_spread",
    "peak_mem_above_baseline_bytes": "measured_peak_above_baseline_bytes",
    "comm_wait_s": "measured_comm_wait_s",
    "bytes_sent_per_epoch": "measured_bytes_sent",
    "epochs": "epochs",
    "ranks": "ranks",
}

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
    df[RUN_COLUMN] = str(path)
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
    for key, value in CONFIG_DEFAULTS.items():
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
    """One row per configuration (:data:`sarlab.common.records.CONFIG_KEYS`, in their sorted order, and the memory
    method, :data:`~sarlab.simulator.system.replay.MEMORY_COLUMN`, where the records say it: runs of one
    configuration under two allocators are two rows, priced apart): the measured summary (module docstring) and,
    where the records carry them, the configuration's probe columns (:data:`PROBE_COLUMNS`), records file and
    machine."""
    keys = [*CONFIG_KEYS, *([MEMORY_COLUMN] if MEMORY_COLUMN in df.columns else [])]
    out = summarize(df, keys=keys, warmup=warmup)[[*keys, *MEASURED_NAMES]].rename(columns=MEASURED_NAMES)
    if "bytes_sent" not in df.columns:  # sarlab.common.records.summarize sums a missing column to 0
        out["measured_bytes_sent"] = math.nan
    out = out.sort_values(keys, kind="stable").reset_index(drop=True)
    keep = measured_epochs(df, warmup)
    carried = [c for c in (*PROBE_COLUMNS, RUN_COLUMN, "machine") if c in keep.columns]
    if carried:  # one value per configuration: its probe (``sarlab bench engine --probe``), its records file
        extra = keep.groupby(keys, dropna=False)[carried].first().reset_index()
        out = out.merge(extra, on=keys, how="left")
    return out
