"""Simulating what a record measured: its partition, model, mode, prefetch and threads, from its columns."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from simulator.epoch import simulate_epoch
from simulator.linkprofile import LinkProfile, for_network
from simulator.model import ModelSpec
from simulator.profile import Profile
from simulator.result import EpochResult
from simulator.runspec import RunSpec
from simulator.workload import PartitionStats, estimate_partition, load_manifest


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


def network_of(row: pd.Series) -> str:
    """The network spec a record ran on (its ``net`` or ``network`` column; ``loopback`` when it has none)."""
    for key in ("net", "network"):
        value = row.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return "loopback"


def simulate_row(
    row: pd.Series,
    profile: Profile,
    stats: PartitionStats | None = None,
    model: ModelSpec | None = None,
    links: list[LinkProfile] | None = None,
) -> EpochResult:
    """Simulate the configuration of one :func:`simulator.measured.summarize_measured` row (its partition, model, mode,
    prefetch, threads per worker and network: a ``veth`` record takes the link profile of its rate from ``links``
    as the inter-host link, its ``N / H`` workers per emulated host sharing that host's NIC, all workers on this
    machine's cores)."""
    threads = float(row["threads"]) if float(row.get("threads") or 0) > 0 else None
    workers = int(row["workers"])
    profile, per_nic = for_network(profile, links or [], network_of(row), workers)
    run = RunSpec(mode=split_mode(row["mode"])[0], prefetch=int(row["prefetch"]), threads=threads,
                  workers_per_nic=per_nic)  # fmt: skip
    return simulate_epoch(stats or stats_for(row), model or model_for(row), run, profile)
