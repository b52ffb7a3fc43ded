"""The units of ``sarlab reproduce``: one figure each, measured here or simulated, as Python calls.

Every unit takes its parameters (from :mod:`sarlab.real.reproduce.reproduce_plan`), writes ``<unit>.png`` and
``<unit>.csv`` (and for measured scaling figures ``<unit>_records.csv``) into ``out`` and returns its provenance for the
manifest. Figures 7 and 8 and the accuracy table (:mod:`sarlab.real.reproduce.fig7`,
:mod:`sarlab.real.reproduce.fig8`, :mod:`sarlab.real.reproduce.accuracy_table`) write the files
:func:`sarlab.real.reproduce.reproduce_plan.unit_outputs` lists for them; :func:`run_measured` dispatches to them.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from sarlab.common.figures import plot_fig2, plot_scaling
from sarlab.common.machine import cpu_model, load_1min, today, usable_cores
from sarlab.common.tables import (
    MEASURED,
    SIMULATED,
    epochs_text,
    measured_banner,
    simulated_banner,
    summarize_measured,
    write_csv,
)
from sarlab.real.bench.bench import EngineBenchConfig, run_engine_bench
from sarlab.real.bench.kernel_bench import KernelBenchConfig, run_kernel_bench
from sarlab.real.reproduce.accuracy_table import AccuracyConfig, run_accuracy, write_accuracy
from sarlab.real.reproduce.fig7 import Fig7Config, run_fig7, write_fig7
from sarlab.real.reproduce.fig8 import Fig8Config, run_fig8_curves, run_fig8_rates, write_fig8
from sarlab.real.reproduce.reproduce_plan import profile_identity
from sarlab.simulator.hardware.profile import load_profile
from sarlab.simulator.studies import fig7 as sim_fig7
from sarlab.simulator.system.sweep import simulate_sweep
from sarlab.simulator.workload.model import ModelSpec

Log = Callable[[str], None]


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


def _config(cls, p: dict[str, Any]):
    """A figure's frozen config from the plan's parameters (JSON lists back to tuples)."""
    fields = {k: tuple(tuple(x) if isinstance(x, list) else x for x in v) if isinstance(v, list) else v
              for k, v in p["config"].items()}
    return cls(**fields)


def _provenance(load: tuple[float, float], **extra) -> dict[str, Any]:
    return {"machine": cpu_model(), "cores": usable_cores(), "date": today(), "loadavg_1min_start_end": list(load),
            **extra}


def run_fig7_unit(unit: str, p: dict[str, Any], out: Path, cache: Path, log: Log) -> dict[str, Any]:
    """Figure 7: R-GCN on an ogbn-mag-like graph, sar vs oneshot, both R-GCN orders, measured here."""
    cfg = _config(Fig7Config, p)
    start = load_1min()
    records = run_fig7(cfg, cache, log=lambda line: log(f"  {line}"))
    load = (start, load_1min())
    write_fig7(records, cfg, out, prefix=unit, load=load)
    return _provenance(load, graph=cfg.graph)


def run_fig8_unit(unit: str, p: dict[str, Any], out: Path, cache: Path, log: Log) -> dict[str, Any]:
    """Figure 8: training curves with/without label augmentation and MFG; MFG's epoch time per label rate."""
    cfg = _config(Fig8Config, p)
    start = load_1min()
    rates = run_fig8_rates(cfg, cache, log=lambda line: log(f"  {line}"))
    curves = run_fig8_curves(cfg, cache, log=lambda line: log(f"  {line}"))
    load = (start, load_1min())
    write_fig8(curves, rates, cfg, out, prefix=unit, load=load)
    return _provenance(load, graph=cfg.graph)


def run_accuracy_unit(unit: str, p: dict[str, Any], out: Path, cache: Path, log: Log) -> dict[str, Any]:
    """The accuracy table: plain / label augmentation / C&S over seeds, and the N-worker check."""
    cfg = _config(AccuracyConfig, p)
    start = load_1min()
    runs = run_accuracy(cfg, cache, log=lambda line: log(f"  {line}"))
    command = f"sarlab reproduce --{p['run']} --only accuracy --out {out}"
    write_accuracy(runs, cfg, out, command)
    return _provenance((start, load_1min()), runs=len(runs))


#: the units :func:`run_measured` hands on, by figure
OTHER_MEASURED = {"fig7": run_fig7_unit, "fig8": run_fig8_unit, "accuracy": run_accuracy_unit}


def run_measured(unit: str, p: dict[str, Any], out: Path, cache: Path, log: Log) -> dict[str, Any]:
    """Figures 3a/4a: the engine benchmark on a products-like synthetic graph (measured here); figures 7, 8 and
    the accuracy table through :data:`OTHER_MEASURED`."""
    if p["figure"] in OTHER_MEASURED:
        return OTHER_MEASURED[p["figure"]](unit, p, out, cache, log)
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
    """Figures 3b/4b/5/6/7b: the SimPy model on an OGB preset with an estimated METIS-like partition."""
    if p["figure"] == "fig7":
        return run_fig7_simulated(unit, p, out, log)
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


def run_fig7_simulated(unit: str, p: dict[str, Any], out: Path, log: Log) -> dict[str, Any]:
    """Figure 7's simulated panel: 3-layer R-GCN (hidden 256) on ogbn-mag at the paper's N
    (:mod:`sarlab.simulator.studies.fig7`)."""
    ident = profile_identity(p["profile"])
    log(f"  R-GCN on ogbn-mag, N = {', '.join(map(str, p['workers']))}, profile {ident['name']}")
    table = sim_fig7.simulate_fig7(tuple(p["workers"]), p["profile"])
    sim_fig7.write_fig7(table, out, "sarlab reproduce --only fig7")
    return {"profile": ident["name"], "profile_source": ident["where"], "profile_sha": ident["sha"],
            "date": today(), "graph": p["graph"]}
