"""Figure 7 (SAR paper, appendix A): a 3-layer R-GCN on an ogbn-mag-like heterogeneous graph, measured here.

:func:`run_fig7` partitions the graph (METIS) for every N, trains ``epochs`` epochs of ``sar`` and of
``oneshot`` (vanilla domain parallel) through the launcher and returns the metric records; :func:`write_fig7`
writes ``<prefix>_records.csv`` (every record), ``<prefix>.csv`` (one row per mode and N, with the SAR/oneshot
memory ratios) and ``<prefix>.png`` (epoch time and peak memory per worker).
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from sarlab.common.figures import plot_scaling
from sarlab.common.machine import cpu_model, today, usable_cores
from sarlab.common.tables import MEASURED, epochs_text, measured_banner, summarize_measured, write_csv
from sarlab.core.config import EngineConfig
from sarlab.data.graphs import load_graph
from sarlab.data.partition import is_partition_dir, partition
from sarlab.nn.model import ModelConfig
from sarlab.real.launch.jobs import Job
from sarlab.real.launch.launcher import launch
from sarlab.training.trainer import TrainConfig

_log = logging.getLogger(__name__)

#: (label, mode key in the records, mode, fused): aggregate-first R-GCN (the engine's default, ``fused``) and
#: per-edge messages (``--unfused``: PyG FastRGCNConv's / DGL RelGraphConv's order, the paper's baseline layer)
SERIES = [("sar", "sar", "sar", True), ("vanilla (oneshot)", "oneshot", "oneshot", True),
          ("sar, per-edge messages", "sar+edge", "sar", False),
          ("vanilla (oneshot), per-edge messages", "oneshot+edge", "oneshot", False)]


@dataclass(frozen=True)
class Fig7Config:
    """What figure 7 measures: the graph spec, the model (the paper's: 3 layers, hidden 256), N, epochs."""

    graph: str = "hetero:nodes=60000,features=128,classes=32,reverse=1,seed=0"
    layers: int = 3
    hidden: int = 256
    workers: tuple = (2, 4, 8)
    epochs: int = 3
    prefetch: int = 1
    timeout_s: float = 600.0
    series: tuple = field(default=tuple(key for _, key, _, _ in SERIES))


def run_fig7(cfg: Fig7Config, cache: Path, log: Callable[[str], None] = _log.info) -> pd.DataFrame:
    """Every (mode, N) of ``cfg``: R-GCN trained ``cfg.epochs`` epochs; the metric records of all ranks
    (partitions cached under ``cache``)."""
    graph = None
    records = []
    for n in cfg.workers:
        pdir = os.path.join(cache, f"{cfg.graph.replace(':', '_').replace(',', '_')}-n{n}")
        if not is_partition_dir(pdir):
            graph = graph or load_graph(cfg.graph)
            log(f"partitioning {cfg.graph} into {n} parts")
            partition(graph, n, pdir, source=cfg.graph)
        for _, key, mode, fused in SERIES:
            if key not in cfg.series:
                continue
            job = Job("train", pdir, ModelConfig(model="rgcn", layers=cfg.layers, hidden=cfg.hidden, seed=0),
                      TrainConfig(epochs=cfg.epochs, lr=0.01, eval_every=0),
                      EngineConfig(mode=mode, prefetch=cfg.prefetch, fused=fused),
                      timeout_s=cfg.timeout_s, quiet=True, label=f"fig7 {key}")
            recs = [dict(r, mode=key) for r in launch(job, n)]  # the series key: mode and R-GCN order
            above = max(r["peak_mem_bytes"] - r["baseline_mem_bytes"] for r in recs) / 2**20
            log(f"  {key} N={n}: epoch times {[round(r['epoch_time_s'], 2) for r in recs if r['rank'] == 0]}, "
                f"peak above baseline {above:.0f} MiB")
            records += recs
    return pd.DataFrame(records)


def write_fig7(records: pd.DataFrame, cfg: Fig7Config, out: Path, prefix: str = "fig7_rgcn_mag-like_measured",
               load: tuple = (float("nan"), float("nan"))) -> pd.DataFrame:
    """Write the records, the summary (with ``sar_over_oneshot_*`` memory ratios per N) and the figure."""
    out.mkdir(parents=True, exist_ok=True)
    write_csv(records, out / f"{prefix}_records.csv")
    table = summarize_measured(records, [s for s in SERIES if s[1] in set(records["mode"])])
    table["mode"] = table["series"].map({label: mode for label, _, mode, _ in SERIES})
    table["fused"] = table["series"].map({label: fused for label, _, _, fused in SERIES})
    cpu, cores, date = cpu_model(), usable_cores(), today()
    edges, nodes = int(records.num_edges.iloc[0]), int(records.num_nodes.iloc[0])
    relations = int(records.num_relations.iloc[0])
    for i, (k, v) in enumerate({"kind": MEASURED, "machine": cpu, "cores": cores, "date": date, "graph": cfg.graph,
                                "num_nodes": nodes, "num_edges": edges, "num_relations": relations,
                                "model": "rgcn", "layers": cfg.layers, "hidden": cfg.hidden}.items()):
        table.insert(i, k, v)
    ratios = []
    for order, (sar_key, one_key) in (("aggregate-first", ("sar", "vanilla (oneshot)")),
                                      ("per-edge", ("sar, per-edge messages", "vanilla (oneshot), per-edge messages"))):
        sar, one = (table[table["series"] == k].set_index("workers") for k in (sar_key, one_key))
        if sar.empty or one.empty:
            continue
        ratios.append(pd.DataFrame({
            "order": order, "workers": sar.index,
            "sar_over_oneshot_peak_mem": sar.peak_mem_bytes / one.peak_mem_bytes,
            "sar_over_oneshot_peak_above_baseline": sar.peak_mem_above_baseline_bytes
            / one.peak_mem_above_baseline_bytes,
            "sar_over_oneshot_epoch_time": sar.epoch_time_s / one.epoch_time_s}).reset_index(drop=True))
    ratios = pd.concat(ratios, ignore_index=True)
    write_csv(ratios, out / f"{prefix}_ratios.csv")
    write_csv(table, out / f"{prefix}.csv")
    banner = measured_banner(cpu, cores, date, f"the N worker processes share these {cores} cores (gloo on "
                             f"loopback); 1-min load {load[0]:.1f} -> {load[1]:.1f}")
    text = "; ".join(f"{order}: " + ", ".join(f"N={int(r.workers)} {r.sar_over_oneshot_peak_above_baseline:.2f}"
                                               for r in group.itertuples())
                     for order, group in ratios.groupby("order", sort=False))
    title = (f"Figure 7 (CPU analogue): {cfg.layers}-layer R-GCN, hidden {cfg.hidden}, ogbn-mag-like graph "
             f"({nodes:,} nodes, {edges:,} edges, {relations} relations), METIS parts; "
             f"{epochs_text(cfg.epochs)}. Peak memory above baseline, sar / oneshot: {text}")
    plot_scaling(table, out / f"{prefix}.png", MEASURED, banner, title, f"worker processes N (on {cores} cores)")
    return table
