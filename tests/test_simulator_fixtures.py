"""Shared inputs of the simulator tests (no tests here): a round-number profile, a hand-made 2-part
partition, its manifest on disk, and metric records with optional speed-probe columns."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from sarlab.simulator.hardware.profile import Link, OpCost, Profile
from sarlab.simulator.system.epoch import simulate_epoch
from sarlab.simulator.system.runspec import RunSpec
from sarlab.simulator.workload.workload import PartitionStats

INF = float("inf")


def hand_profile(latency: float = 1e-3, bandwidth: float = 1e6, gap: float = 2e-4) -> Profile:
    """Round numbers; elementwise work is free so that a timeline is a handful of terms."""
    ops = {
        "gemm": OpCost(rate=1e9, overhead_s=0.0, bwd_ratio=1.0, parallel_eff=1.0),
        "spmm": OpCost(rate=1e6, overhead_s=0.0, bwd_ratio=2.0, parallel_eff=1.0),
        "max_aggr": OpCost(rate=1e6, overhead_s=0.0, bwd_ratio=3.0, parallel_eff=1.0),
        "gat_unfused": OpCost(rate=2e5, overhead_s=0.0, bwd_ratio=2.5, parallel_eff=1.0),
        "elementwise": OpCost(rate=INF, overhead_s=0.0, bwd_ratio=1.0, parallel_eff=1.0),
    }
    link = Link(latency_s=latency, bandwidth_Bps=bandwidth, gap_s=gap)
    return Profile("hand", ops, link, link, cores_per_host=4, workers_per_host=0, p2p_call_s=0.0)


def two_parts() -> PartitionStats:
    """n = (100, 60); 300/200 local edges, 50 (from part 1 into 0) and 40 cut edges; halo 20 and 30 rows."""
    return PartitionStats(
        graph="tiny",
        num_nodes=160,
        num_edges=590,
        feature_dim=8,
        num_classes=4,
        train_nodes=0,
        nodes_per_part=np.array([100, 60]),
        edges_per_shard=np.array([[300, 50], [40, 200]]),
        halo_rows=np.array([[0, 20], [30, 0]]),
    )


def write_manifest(path, stats: PartitionStats) -> None:
    starts = np.concatenate([[0], np.cumsum(stats.nodes_per_part)[:-1]])
    manifest = {
        "format_version": 1,
        "graph": stats.graph,
        "source": "hand",
        "method": "metis",
        "seed": 0,
        "num_parts": stats.num_parts,
        "num_nodes": stats.num_nodes,
        "num_edges": stats.num_edges,
        "feature_dim": stats.feature_dim,
        "num_classes": stats.num_classes,
        "feature_dtype": "float32",
        "node_ranges": [[int(s), int(s + n)] for s, n in zip(starts, stats.nodes_per_part, strict=False)],
        "edges_per_shard": stats.edges_per_shard.tolist(),
        "halo_rows": stats.halo_rows.tolist(),
        "train_nodes": stats.train_nodes,
        "files": {},
    }
    path.mkdir(parents=True, exist_ok=True)
    (path / "manifest.json").write_text(json.dumps(manifest))


def run1(stats, model, mode, profile, **kw):
    """One epoch of ``mode`` with one thread per worker."""
    return simulate_epoch(stats, model, RunSpec(mode=mode, threads=1, **kw), profile)


def probe_records(workers: int, probe_epoch_s: float | None, probe_nodes: int = 2000) -> pd.DataFrame:
    """Records of one SAGE configuration on an estimated partition (no manifest), 2 epochs, optionally with
    ``sarlab bench engine --probe`` columns."""
    rows = []
    for epoch in range(2):
        for rank in range(workers):
            r = {"mode": "sar", "model": "sage", "workers": workers, "rank": rank, "epoch": epoch,
                 "epoch_time_s": 1.0, "comm_wait_s": 0.0, "bytes_sent": 0, "peak_mem_bytes": 2000,
                 "baseline_mem_bytes": 1000, "graph": "est", "num_nodes": 3000, "num_edges": 30000,
                 "feature_dim": 8, "num_classes": 4, "layers": 2, "hidden": 8, "threads": 1}  # fmt: skip
            if probe_epoch_s is not None:
                r.update(probe_epoch_s=probe_epoch_s, probe_before_s=probe_epoch_s, probe_after_s=probe_epoch_s,
                         probe_graph="est-probe", probe_partition_dir="", probe_num_nodes=probe_nodes,
                         probe_num_edges=10 * probe_nodes, probe_feature_dim=16, probe_num_classes=4,
                         probe_threads=1)  # fmt: skip
            rows.append(r)
    return pd.DataFrame(rows)
