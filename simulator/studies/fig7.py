"""Figure 7 simulated: a 3-layer R-GCN on ogbn-mag, ``sar`` vs ``oneshot``, both aggregation orders; and the
simulator's R-GCN checked against the measured fig 7 records.

``python -m sarlab.simulator.studies.fig7 --out DIR`` writes ``DIR/fig7_rgcn_mag-like_simulated.{csv,png}`` (the paper's
N = 4, 8, 16 on the ``icelake-hdr200`` cluster preset, ogbn-mag's partition estimated:
:func:`sarlab.simulator.workload.rgcn_workload.mag_partition`);
``--validate RECORDS`` prices every configuration of measured R-GCN records (their partitions' relation counts,
read from the partition directories the records name) with ``--validation-profile`` and prints predicted vs
measured per configuration.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from sarlab.common.figures import plot_scaling
from sarlab.common.machine import today
from sarlab.common.tables import SIMULATED, simulated_banner
from sarlab.simulator.calibration.measured import summarize_measured, with_defaults
from sarlab.simulator.hardware.profile import load_profile
from sarlab.simulator.hardware.provenance import resolve_profile
from sarlab.simulator.system.epoch import simulate_epoch
from sarlab.simulator.system.replay import model_for, simulate_row
from sarlab.simulator.system.runspec import RunSpec
from sarlab.simulator.workload.model import ModelSpec
from sarlab.simulator.workload.rgcn_workload import mag_partition
from sarlab.simulator.workload.workload import load_manifest

#: (series name, mode, aggregate-first order) as the measured fig 7 names them
SERIES = (("sar", "sar", True), ("vanilla (oneshot)", "oneshot", True),
          ("sar, per-edge messages", "sar", False), ("vanilla (oneshot), per-edge messages", "oneshot", False))
OUT_STEM = "fig7_rgcn_mag-like_simulated"


def simulate_fig7(workers: tuple[int, ...] = (4, 8, 16), profile: str = "icelake-hdr200", layers: int = 3,
                  hidden: int = 256, reverse: bool = True, edge_cut: float | None = None) -> pd.DataFrame:
    """One row per (series, N): the slowest worker's epoch, the largest worker's peak memory, bytes sent.

    Args:
        workers: worker counts ``N``.
        profile: a preset or profile path (:func:`sarlab.simulator.hardware.profile.load_profile`).
        layers, hidden: the R-GCN (no BatchNorm, no dropout, float32, prefetch 1).
        reverse: ogbn-mag's relations with their reverses (8 relations).
        edge_cut: the partition's edge cut (None: the METIS pair-size law's).
    """
    prof = load_profile(profile)
    rows = []
    for n in workers:
        stats = mag_partition(n, reverse, edge_cut)
        for name, mode, fused in SERIES:
            spec = ModelSpec(model="rgcn", layers=layers, hidden=hidden, fused=fused, batchnorm=False, dropout=0.0,
                             relations=stats.relations.num_relations)
            r = simulate_epoch(stats, spec, RunSpec(mode=mode, prefetch=1), prof)
            total = r.baseline_bytes + r.peak_above_baseline_bytes
            worst = int(total.argmax())
            host = float(total.max()) * r.placement.workers_per_host
            rows.append({
                "kind": SIMULATED, "profile": prof.name, "date": today(), "graph": stats.graph,
                "num_nodes": stats.num_nodes, "num_edges": stats.num_edges, "num_relations": spec.relations,
                "feature_dim": stats.feature_dim, "num_classes": stats.num_classes, "model": "rgcn",
                "layers": layers, "hidden": hidden, "series": name, "mode": mode, "fused": fused, "workers": n,
                "epoch_time_s": float(r.epoch_time_s.max()), "compute_s": float(r.compute_s.mean()),
                "comm_wait_s": float(r.comm_wait_s.mean()), "bytes_sent_per_worker": float(r.bytes_sent.mean()),
                "baseline_mem_bytes": int(r.baseline_bytes[worst]),
                "peak_mem_above_baseline_bytes": int(r.peak_above_baseline_bytes[worst]),
                "peak_mem_bytes": int(total[worst]), "workers_per_host": r.placement.workers_per_host,
                "threads_per_worker": r.placement.threads, "host_mem_needed_bytes": int(host),
                "oom": bool(prof.mem_per_host_bytes and host > prof.mem_per_host_bytes),
                "edge_cut": stats.edge_cut_fraction(), "partition": stats.method,
            })
    return pd.DataFrame(rows)


def ratios(table: pd.DataFrame) -> pd.DataFrame:
    """Per order and N: sar over oneshot for the peak memory (whole and above the baseline) and the epoch time."""
    out = []
    for fused, order in ((True, "aggregate-first"), (False, "per-edge")):
        part = table[table["fused"] == fused]
        for n, group in part.groupby("workers"):
            s, o = (group[group["mode"] == m].iloc[0] for m in ("sar", "oneshot"))
            out.append({"order": order, "workers": int(n),
                        "sar_over_oneshot_peak_mem": s.peak_mem_bytes / o.peak_mem_bytes,
                        "sar_over_oneshot_peak_above_baseline": s.peak_mem_above_baseline_bytes
                        / o.peak_mem_above_baseline_bytes,
                        "sar_over_oneshot_epoch_time": s.epoch_time_s / o.epoch_time_s})
    return pd.DataFrame(out)


def write_fig7(table: pd.DataFrame, out: Path, command: str) -> None:
    """``out/fig7_rgcn_mag-like_simulated.{csv,png}`` (the CSV's ``command`` column names the command)."""
    out.mkdir(parents=True, exist_ok=True)
    table.assign(command=command).to_csv(out / f"{OUT_STEM}.csv", index=False)
    first = table.iloc[0]
    r = ratios(table)
    agg = r[r.order == "aggregate-first"]
    mem = ", ".join(f"N={w} {v:.2f}" for w, v in zip(agg.workers, agg.sar_over_oneshot_peak_mem))
    wph = int(first.workers_per_host)
    placement = "one worker per node" if wph == 1 else f"{wph} workers per host"
    title = (f"Figure 7 (simulated): {first.layers}-layer R-GCN, hidden {first.hidden}, ogbn-mag "
             f"({first.num_nodes:,} nodes, {first.num_edges:,} edges, {first.num_relations} relations); partition "
             f"estimated (METIS pair-size law, relation mix of ogbn-mag); {placement}, "
             f"{first.threads_per_worker:g} threads each. Peak memory sar / oneshot (aggregate-first): {mem}")
    plot_scaling(table, out / f"{OUT_STEM}.png", SIMULATED,
                 simulated_banner(str(first.profile), "cluster preset (simulator/hardware/profile.py)",
                                  str(first.date)),
                 title, f"workers N ({placement})")


def validate_fig7(records: str | Path, profile: str = "epyc-2core", warmup: int = 1) -> pd.DataFrame:
    """Predicted vs measured per configuration of measured R-GCN records (each record's partition directory
    must still hold its parts: the relation counts are read from them)."""
    prof, _ = resolve_profile(profile)
    measured = summarize_measured(with_defaults(pd.read_csv(records)), warmup)
    rows = []
    for _, row in measured.iterrows():
        part = Path(str(row["partition_dir"]))
        if not (part / "manifest.json").exists():
            raise FileNotFoundError(f"{part}: the partition of these records is gone; partition {row['graph']} "
                                    f"again into {int(row['workers'])} parts (`sarlab partition`) and point the "
                                    "records' partition_dir at it")
        stats = load_manifest(part)
        spec = model_for(row, stats)
        r = simulate_row(row, prof, stats, spec)
        pred_t, pred_m = float(r.epoch_time_s.max()), float(r.peak_above_baseline_bytes.max())
        meas_t, meas_m = float(row["measured_epoch_time_s"]), float(row["measured_peak_above_baseline_bytes"])
        rows.append({"order": "aggregate-first" if spec.fused else "per-edge", "mode": row["mode"].split("+")[0],
                     "workers": int(row["workers"]), "measured_epoch_time_s": meas_t,
                     "measured_epoch_spread": float(row["measured_epoch_spread"]), "predicted_epoch_time_s": pred_t,
                     "time_error": pred_t / meas_t - 1.0, "measured_peak_above_baseline_mib": meas_m / 2**20,
                     "predicted_peak_above_baseline_mib": pred_m / 2**20, "memory_error": pred_m / meas_m - 1.0,
                     "measured_bytes_sent": float(row["measured_bytes_sent"]),
                     "predicted_bytes_sent": float(r.bytes_sent.sum())})
    return pd.DataFrame(rows).sort_values(["order", "workers", "mode"], kind="stable").reset_index(drop=True)


def validation_markdown(table: pd.DataFrame) -> str:
    """:func:`validate_fig7`'s table as Markdown, with the common factor measured / predicted of each N (the
    median over its configurations) and each configuration's time error once that factor is taken out."""
    factor = (table.measured_epoch_time_s / table.predicted_epoch_time_s).groupby(table.workers).transform("median")
    residual = table.predicted_epoch_time_s * factor / table.measured_epoch_time_s - 1.0
    head = ["order", "mode", "N", "time meas (s)", "epoch spread", "time pred (s)", "time err", "N's factor",
            "err after factor", "peak meas (MiB)", "peak pred (MiB)", "peak err", "MB sent meas", "MB sent pred"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (_, r), f, res in zip(table.iterrows(), factor, residual):
        lines.append("| " + " | ".join([
            r.order, r["mode"], str(r.workers), f"{r.measured_epoch_time_s:.2f}", f"{r.measured_epoch_spread:.0%}",
            f"{r.predicted_epoch_time_s:.2f}", f"{r.time_error:+.0%}", f"{f:.2f}", f"{res:+.0%}",
            f"{r.measured_peak_above_baseline_mib:.0f}", f"{r.predicted_peak_above_baseline_mib:.0f}",
            f"{r.memory_error:+.0%}", f"{r.measured_bytes_sent / 1e6:.0f}", f"{r.predicted_bytes_sent / 1e6:.0f}",
        ]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m sarlab.simulator.studies.fig7", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="directory for fig7_rgcn_mag-like_simulated.{csv,png}")
    p.add_argument("--workers", default="4,8,16")
    p.add_argument("--profile", default="icelake-hdr200")
    p.add_argument("--validate", metavar="RECORDS", help="also price these measured R-GCN records")
    p.add_argument("--validation-profile", default="epyc-2core")
    a = p.parse_args(argv)
    workers = tuple(int(w) for w in a.workers.split(","))
    command = "python -m sarlab.simulator.studies.fig7 " + " ".join(argv if argv is not None else sys.argv[1:])
    table = simulate_fig7(workers, a.profile)
    write_fig7(table, Path(a.out), command)
    cols = ["series", "workers", "epoch_time_s", "comm_wait_s", "peak_mem_bytes", "peak_mem_above_baseline_bytes",
            "edge_cut"]
    print(table[cols].to_string(index=False))
    print(ratios(table).round(3).to_string(index=False))
    if a.validate:
        print(validation_markdown(validate_fig7(a.validate, a.validation_profile)))


if __name__ == "__main__":
    main()
