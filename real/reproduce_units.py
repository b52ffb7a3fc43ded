"""The units of ``sarlab reproduce``: one figure each, measured here or simulated, as Python calls.

Every unit takes its parameters (from :mod:`real.reproduce_plan`), writes ``<unit>.png`` and ``<unit>.csv`` (and
for measured scaling figures ``<unit>_records.csv``) into ``out`` and returns its provenance for the manifest.
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from sarlab.machine import cpu_model, load_1min, today, usable_cores
from sarlab.records import summarize
from simulator.model import ModelSpec
from simulator.profile import load_profile
from simulator.sweep import simulate_sweep

from .bench import EngineBenchConfig, run_engine_bench
from .figures import MEASURED, SIMULATED, measured_banner, plot_fig2, plot_scaling, simulated_banner
from .kernel_bench import KernelBenchConfig, run_kernel_bench
from .reproduce_plan import profile_identity

Log = Callable[[str], None]


def write_csv(df: pd.DataFrame, path: Path) -> None:
    """Write a table atomically (write, then rename)."""
    tmp = path.with_suffix(".csv.tmp")
    df.to_csv(tmp, index=False)
    os.replace(tmp, path)


def run_fig2(unit: str, p: dict[str, Any], out: Path, work: Path, log: Log) -> dict[str, Any]:
    """Figure 2: one engine GAT layer (fused, unfused) against PyG's (and DGL's) ``GATConv``, measured here."""
    cfg = KernelBenchConfig.quick() if p["quick_base"] else KernelBenchConfig()
    cfg = cfg.with_sizes(nodes=p["nodes"], degree=p["degree"], reps=p["reps"], heads=tuple(p["heads"]))
    log(f"  kernel benchmark: {cfg}")
    result = run_kernel_bench(cfg, log=lambda line: log(f"  {line}"))
    date, cpu = result.get("date", today()), result.get("cpu", cpu_model())
    rows = result["rows"]
    df = pd.DataFrame(rows)
    df.insert(0, "kind", MEASURED)
    df.insert(1, "machine", cpu)
    df.insert(2, "date", date)
    write_csv(df, out / f"{unit}.csv")
    edges = int(result["edges"])
    load = result.get("loadavg_1min_start_end", [math.nan, math.nan])
    banner = measured_banner(cpu, usable_cores(), date,
                             f"{result['threads']} torch threads, 1-min load {load[0]:.1f} -> {load[1]:.1f}")
    title = (f"Figure 2 (CPU analogue): one GAT layer, {p['nodes']:,} nodes, {edges:,} edges (synthetic, "
             f"power-law in-degree, mean {p['degree']}), in = out = 50 x heads features, float32; medians of "
             f"{p['reps']} repetitions. fused / unfused = sarlab.nn.GATConv, the layer the engine trains, with the "
             f"C++ kernels ({rows[0]['backend']}) / in torch; pyg = torch_geometric GATConv"
             + (", dgl = DGL GATConv" if any(r["impl"] == "dgl" for r in rows) else "; DGL not installed"))
    plot_fig2(rows, out / f"{unit}.png", banner, title)
    return {"machine": cpu, "cores": usable_cores(), "date": date, "threads": result["threads"],
            "torch": result.get("torch"), "loadavg_1min_start_end": load, "stream": result.get("stream"),
            "notes": result.get("notes", [])}


def epochs_text(epochs: int) -> str:
    """Which epochs the figure's times are from (epoch 0 is warm-up when there are more)."""
    if epochs <= 1:
        return "epoch 0 (no warm-up epoch)"
    if epochs == 2:
        return "epoch 1 (epoch 0 is warm-up)"
    return f"median of epochs 1..{epochs - 1} (epoch 0 is warm-up)"


def summarize_measured(records: pd.DataFrame, series: list) -> pd.DataFrame:
    """One row per (series, N) from :func:`sarlab.records.summarize`, with the series' label and the memory
    scaling (peak at the smallest N / peak at N)."""
    label = {bench_mode: name for name, bench_mode, _, _ in series}
    table = summarize(records, keys=("mode", "workers"))
    threads = records.groupby(["mode", "workers"]).threads.first() if "threads" in records else None
    table = pd.DataFrame({
        "series": table["mode"].map(lambda m: label.get(m, m)), "mode": table["mode"].str.split("+").str[0],
        "fused": table["mode"].str.endswith("+fused"), "workers": table["workers"].astype(int),
        "epochs_measured": table["epochs"].astype(int), "epoch_time_s": table["epoch_time_s"],
        "comm_wait_s": table["comm_wait_s"], "bytes_sent_per_epoch": table["bytes_sent_per_epoch"],
        "baseline_mem_bytes": table["baseline_mem_bytes"].astype(int),
        "peak_mem_above_baseline_bytes": (table["peak_mem_bytes"] - table["baseline_mem_bytes"]).astype(int),
        "peak_mem_bytes": table["peak_mem_bytes"].astype(int),
        "threads_per_worker": [int(threads.loc[(m, n)]) if threads is not None else 0
                               for m, n in zip(table["mode"], table["workers"])],
        "loss_last_epoch": table["loss"]})
    order = {name: i for i, (name, *_rest) in enumerate(series)}
    table = table.sort_values(["series", "workers"], key=lambda c: c.map(order) if c.name == "series" else c)
    first = table.groupby("series").peak_mem_bytes.transform("first")
    return table.assign(mem_scaling=first / table.peak_mem_bytes).reset_index(drop=True)


def run_measured(unit: str, p: dict[str, Any], out: Path, cache: Path, log: Log) -> dict[str, Any]:
    """Figures 3a/4a: the engine benchmark on a products-like synthetic graph (measured here)."""
    g, m = p["graph"], p["model"]
    cfg = EngineBenchConfig(nodes=g["nodes"], degree=g["degree"], features=g["features"], classes=g["classes"],
                            hidden=m["hidden"], layers=m["layers"], heads=m["heads"], workers=tuple(p["workers"]),
                            epochs=p["epochs"], models=(m["model"],),
                            modes=tuple(bench_mode for _, bench_mode, _, _ in p["series"]), prefetch=p["prefetch"],
                            cache=str(cache))
    log(f"  engine benchmark: {cfg}")
    load_start = load_1min()
    records = run_engine_bench(cfg, log=lambda line: log(f"  {line}"))
    load_end = load_1min()
    write_csv(records, out / f"{unit}_records.csv")
    cpu, cores, date = cpu_model(), usable_cores(), today()
    table = summarize_measured(records, p["series"])
    edges = int(records.num_edges.iloc[0]) if "num_edges" in records else 0
    meta = {"kind": MEASURED, "machine": cpu, "cores": cores, "date": date, "graph": cfg.graph_spec,
            "num_nodes": g["nodes"], "num_edges": edges, "model": m["model"], "layers": m["layers"],
            "hidden": m["hidden"], "heads": m["heads"] if m["model"] == "gat" else 0}
    for i, (k, v) in enumerate(meta.items()):
        table.insert(i, k, v)
    write_csv(table, out / f"{unit}.csv")
    name = "GraphSAGE (mean)" if m["model"] == "sage" else f"GAT ({m['heads']} heads)"
    fig = "Figure 3a" if p["figure"] == "fig3" else "Figure 4a"
    banner = measured_banner(cpu, cores, date, f"the N worker processes share these {cores} cores "
                             f"(gloo on loopback); 1-min load {load_start:.1f} -> {load_end:.1f}")
    title = (f"{fig}: {m['layers']}-layer {name}, hidden {m['hidden']}, products-like synthetic graph: "
             f"{g['nodes']:,} nodes, {edges:,} edges (mean in-degree {edges / g['nodes']:.1f}), "
             f"{g['features']} features, {g['classes']} classes, METIS parts; {epochs_text(p['epochs'])}")
    plot_scaling(table, out / f"{unit}.png", MEASURED, banner, title, f"worker processes N (on {cores} cores)")
    return {"machine": cpu, "cores": cores, "date": date, "loadavg_1min_start_end": [load_start, load_end],
            "graph": meta["graph"], "num_edges": edges}
def run_simulated(unit: str, p: dict[str, Any], out: Path, log: Log) -> dict[str, Any]:
    """Figures 3b/4b/5/6: the SimPy model on an OGB preset with an estimated METIS-like partition."""
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
    date = today()
    meta = {"kind": SIMULATED, "profile": ident["name"], "profile_source": ident["where"], "date": date,
            "graph": p["graph"], "num_nodes": stats.num_nodes, "num_edges": stats.num_edges,
            "feature_dim": stats.feature_dim, "num_classes": stats.num_classes, "model": m["model"],
            "layers": m["layers"], "hidden": m["hidden"], "heads": m["heads"] if m["model"] == "gat" else 0}
    for i, (k, v) in enumerate(meta.items()):
        table.insert(i, k, v)
    write_csv(table, out / f"{unit}.csv")
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
    plot_scaling(table, out / f"{unit}.png", SIMULATED, simulated_banner(ident["name"], ident["where"], date),
                 title, f"workers N ({placement})", per_worker_limit=limit, limit_label=limit_label,
                 scaling=p["memory_scaling"])
    return {"profile": ident["name"], "profile_source": ident["where"], "profile_sha": ident["sha"],
            "date": date, "graph": p["graph"], "edge_cut": p["edge_cut"],
            "oom": [f"{r['series']} N={r['workers']}" for r in rows if r["oom"]]}
