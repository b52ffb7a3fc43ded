"""Validation: simulate the configurations of real metric records and compare with what was measured.

Measured values are the records' summary per configuration
(:func:`sarlab.simulator.calibration.measured.summarize_measured`); the prediction error of a quantity is ``predicted /
measured - 1``. Each configuration is priced with the links and message costs of its own ``backend`` column
(:meth:`Profile.for_backend`; records without the column ran on gloo) and the compute scale of the memory method
(allocator) it ran under (its ``mem_method`` column, :meth:`Profile.for_memory`; the table's ``allocator`` column says
which priced it).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from sarlab.common.records import CONFIG_KEYS
from sarlab.simulator.calibration.measured import summarize_measured, with_defaults
from sarlab.simulator.calibration.probe import probe_scale
from sarlab.simulator.hardware.backends import BASE_BACKEND
from sarlab.simulator.hardware.host import regime
from sarlab.simulator.hardware.profile import Profile
from sarlab.simulator.network.linkprofile import LinkProfile
from sarlab.simulator.system.replay import memory_of, model_for, simulate_row, stats_for


def _error(pred: float, meas: float) -> float:
    return pred / meas - 1.0 if meas > 0 and np.isfinite(pred) and np.isfinite(meas) else math.nan


def validate(
    records: pd.DataFrame,
    profile: Profile,
    warmup: int = 1,
    progress: Callable[[str], None] | None = None,
    drift: str = "none",
    links: list[LinkProfile] | None = None,
) -> pd.DataFrame:
    """Simulate every configuration in ``records``; one row per configuration with both values and errors.

    Every configuration is priced with the profile as it is (``predicted_epoch_time_static_s``,
    ``time_error_static``) and, where the records carry speed probes (``sarlab bench engine --probe``), also
    with the ``compute_scale`` its adjacent probes measured (:func:`probe_scale`;
    ``predicted_epoch_time_probe_s``, ``time_error_probe``). ``drift`` picks which of the two is the
    row's ``predicted_*`` / ``time_error``: ``"none"`` the profile's own, ``"probe"`` the probe-scaled one
    (an error without probes), ``"auto"`` probe-scaled where the records have probes. ``links``: link
    profiles for records measured on an emulated network (:func:`sarlab.simulator.system.replay.simulate_row`).
    """
    if drift not in ("auto", "probe", "none"):
        raise ValueError(f"drift must be auto, probe or none, got {drift!r}")
    measured = summarize_measured(with_defaults(records), warmup)
    if drift == "probe" and "probe_epoch_s" not in measured.columns:
        raise ValueError("drift='probe' needs records with probe columns (sarlab bench engine --probe)")
    rows = []
    backends = sorted({backend_of_row(row) for _, row in measured.iterrows()})
    priced = {name: profile.for_backend(name) for name in backends}  # one clear error before any pricing
    for i, row in measured.iterrows():
        stats = stats_for(row)
        model = model_for(row)
        meas_t = float(row["measured_epoch_time_s"])
        prof = priced[backend_of_row(row)]
        static = simulate_row(row, prof, stats, model, links)
        scale = probe_scale(row, prof)
        probed = simulate_row(row, prof.with_scale(scale), stats, model, links) if np.isfinite(scale) else None
        result = probed if probed is not None and drift != "none" else static
        pred_t = float(result.epoch_time_s.max())
        pred_m = float(result.peak_above_baseline_bytes.max())
        out = row.to_dict()
        place = result.placement
        out.update(
            threads_used=place.threads,
            host_regime=regime(place.workers_per_host, place.threads, prof.cores_per_host),
            allocator=prof.memory_label(memory_of(row)),
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
                f"{backend_of_row(row):5s} "
                f"time {pred_t:.4g}s vs {meas_t:.4g}s ({out['time_error']:+.0%}{other}), "
                f"peak {pred_m / 2**20:.1f} vs {row['measured_peak_above_baseline_bytes'] / 2**20:.1f} MiB "
                f"({out['memory_error']:+.0%})"
            )
    return pd.DataFrame(rows)


def backend_of_row(row: pd.Series) -> str:
    """The backend a record (or a summary row) ran on: its ``backend`` column, gloo where it has none."""
    value = row.get("backend")
    if value is None or (not isinstance(value, str) and pd.isna(value)) or not str(value).strip():
        return BASE_BACKEND
    return str(value).strip()


def error_summary(table: pd.DataFrame) -> dict[str, float]:
    """Median absolute prediction errors over configurations (NaN where nothing was measurable); with records of
    several backends also per backend (``median_abs_time_error_<backend>``, ``configurations_<backend>``)."""

    def med(col: str, rows: pd.DataFrame = table) -> float:
        vals = rows[col].abs().dropna()
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
    backends = table.apply(backend_of_row, axis=1) if len(table) else pd.Series(dtype=str)
    if backends.nunique() > 1:
        for name in sorted(backends.unique()):
            rows = table[backends == name]
            out[f"configurations_{name}"] = int(len(rows))
            out[f"median_abs_time_error_{name}"] = med("time_error", rows)
            out[f"median_abs_memory_error_{name}"] = med("memory_error", rows)
        ratios = backend_ratios(table)
        for name in sorted(set(ratios["backend"])):
            rows = ratios[ratios["backend"] == name]
            out[f"paired_configurations_{name}"] = int(len(rows))
            out[f"median_abs_ratio_error_{name}"] = med("ratio_error", rows)
    return out


def backend_ratios(table: pd.DataFrame) -> pd.DataFrame:
    """For every configuration measured under gloo and under another backend: the other backend's epoch time over
    gloo's, measured and predicted, and the error of the predicted ratio (``predicted / measured - 1``). This is
    the error of the backend's overlay alone: the base model's errors, common to both runs of a configuration,
    cancel in the ratio. Empty when the table has one backend."""
    keys = [k for k in CONFIG_KEYS if k != "backend" and k in table.columns]
    cols = ["backend", *keys, "measured_ratio", "predicted_ratio", "ratio_error"]
    if not len(table):
        return pd.DataFrame(columns=cols)
    backends = table.apply(backend_of_row, axis=1)
    times = ["measured_epoch_time_s", "predicted_epoch_time_s"]
    base = table.loc[backends == BASE_BACKEND, keys + times].astype({k: str for k in keys})
    rows = []
    for name in sorted(set(backends) - {BASE_BACKEND}):
        other = table.loc[backends == name, keys + times].astype({k: str for k in keys})
        both = other.merge(base, on=keys, suffixes=("", "_base"))
        for _, r in both.iterrows():
            meas = r["measured_epoch_time_s"] / r["measured_epoch_time_s_base"]
            pred = r["predicted_epoch_time_s"] / r["predicted_epoch_time_s_base"]
            rows.append({"backend": name, **{k: r[k] for k in keys}, "measured_ratio": meas, "predicted_ratio": pred,
                         "ratio_error": _error(pred, meas)})
    return pd.DataFrame(rows, columns=cols)


def markdown_table(table: pd.DataFrame) -> str:
    """The validation table as Markdown: one row per configuration, times in s, memory in MiB, errors."""
    several = table.apply(backend_of_row, axis=1).nunique() > 1 if len(table) else False
    cols = ["model", "mode", "workers", "threads", "host", "allocator", *(["backend"] if several else []),
            "time meas (s)",
            "epoch spread",
            "time pred (s)", "time err",
            "wait meas (s)", "wait pred (s)", "peak meas (MiB)", "peak pred (MiB)", "peak err"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    order = table.assign(_m=table["model"].astype(str), _b=table.apply(backend_of_row, axis=1) if len(table) else "")
    order = order.sort_values(["_b", "_m", "workers", "mode"])
    for _, r in order.iterrows():
        model = f"sage-{r['aggr']}" if r["model"] == "sage" else str(r["model"])
        cells = [
            model,
            str(r["mode"]),
            str(int(r["workers"])),
            f"{r.get('threads_used', math.nan):g}",
            str(r.get("host_regime", "")),
            str(r.get("allocator", "")),
            *([r["_b"]] if several else []),
            f"{r['measured_epoch_time_s']:.3g}",
            f"{r.get('measured_epoch_spread', math.nan):.0%}",
            f"{r['predicted_epoch_time_s']:.3g}",
            f"{r['time_error']:+.1%}",
            f"{r['measured_comm_wait_s']:.3g}",
            f"{r['predicted_comm_wait_s']:.3g}",
            f"{r['measured_peak_above_baseline_bytes'] / 2**20:.0f}",
            f"{r['predicted_peak_above_baseline_bytes'] / 2**20:.0f}",
            f"{r['memory_error']:+.1%}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
