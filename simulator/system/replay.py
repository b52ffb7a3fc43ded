"""Simulating what a record measured: its partition, model, mode, prefetch and threads, from its columns."""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path

import pandas as pd

from sarlab.common.records import RUN_COLUMN
from sarlab.simulator.hardware.profile import OP_UNITS, Profile
from sarlab.simulator.network.linkprofile import LinkProfile, for_network
from sarlab.simulator.network.sharing import with_sharing
from sarlab.simulator.system.epoch import simulate_epoch
from sarlab.simulator.system.result import EpochResult
from sarlab.simulator.system.runspec import RunSpec
from sarlab.simulator.workload.model import ModelSpec
from sarlab.simulator.workload.workload import PartitionStats, estimate_partition, load_manifest


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
    random-partition estimate from the totals; a warning says so when the records name a partition whose manifest
    is not found (a random partition's halos are far larger than METIS's: the prediction is not of that run)."""
    workers = int(row["workers"])
    pdir = str(row.get("partition_dir") or "")
    found = manifest_path(pdir, str(row.get(RUN_COLUMN) or ""))
    if found is not None:
        stats = load_manifest(found)
        if stats.num_parts == workers:
            return stats
    if pdir:
        where = (f"{found} has other parts than {workers}" if found is not None
                 else "no manifest there or beside the records")
        warnings.warn(f"partition {pdir}: {where} (records_path {row.get('records_path') or 'not set'}); "
                      f"priced on a random-partition estimate of {int(row['num_nodes'])} nodes", stacklevel=2)
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


def model_for(row: pd.Series, stats: PartitionStats | None = None) -> ModelSpec:
    """The :class:`ModelSpec` of a record's configuration columns.

    GAT: fused from ``fused`` or the ``+fused`` mode suffix; self-loops from ``self_loops`` (:func:`flag_of`; True, the
    engine's default, where the record lacks it). R-GCN: aggregate-first from ``fused`` unless the mode
    says ``+edge`` (``sarlab bench engine``'s per-edge label); its relations from ``num_relations``, or, where the
    records lack it, from the partition (``stats``, else :func:`stats_for`: the manifest the records name).

    Args:
        row: a record, or a :func:`sarlab.simulator.calibration.measured.summarize_measured` row.
        stats: the partition the record ran on, when the caller has it.
    """
    model = str(row["model"])
    gat, rgcn = model == "gat", model == "rgcn"
    heads = int(row.get("heads") or 1) if gat else 1
    variant = split_mode(row["mode"])[1]
    if rgcn:
        fused = bool(row.get("fused", True)) and variant != "edge"
    else:
        fused = gat and (bool(row.get("fused")) or variant == "fused")
    return ModelSpec(
        model=model,
        layers=int(row["layers"]),
        hidden=int(row["hidden"]),
        heads=heads,
        aggr=str(row.get("aggr") or "mean"),
        fused=fused,
        batchnorm=bool(row.get("batchnorm")),
        dropout=float(row.get("dropout") or 0.0),
        dtype=str(row.get("dtype") or "float32"),
        relations=relations_of(row, stats) if rgcn else 1,
        self_loops=flag_of(row, "self_loops", True),
    )


def flag_of(row: pd.Series, key: str, default: bool) -> bool:
    """A boolean column of a record: ``default`` where it is missing or empty; ``False``/``false``/``0`` read as
    False (a CSV read as text)."""
    value = row.get(key)
    if value is None or (not isinstance(value, str) and pd.isna(value)) or value == "":
        return default
    if isinstance(value, str):
        return value.strip().lower() not in ("false", "0", "no")
    return bool(value)


def relations_of(row: pd.Series, stats: PartitionStats | None = None) -> int:
    """An R-GCN record's relations: its ``num_relations`` column where it says more than one, else the partition's
    (``stats``, or the manifest the record names: :func:`stats_for`; one where it is untyped or gone).

    Records older than the column read 1 (``sarlab.common.records.CONFIG_DEFAULTS``), hence the partition decides then.
    """
    value = row.get("num_relations")
    given = 0 if value is None or pd.isna(value) else int(value)
    if given > 1:
        return given
    stats = stats if stats is not None else stats_for(row)
    return stats.relations.num_relations if stats.relations is not None else max(given, 1)


def network_of(row: pd.Series) -> str:
    """The network spec a record ran on (its ``net`` or ``network`` column; ``loopback`` when it has none)."""
    for key in ("net", "network"):
        value = row.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return "loopback"


#: the column that says which memory method (allocator) a record ran under (``live``, ``rss``; written by the workers),
#: which prices its compute (:meth:`sarlab.simulator.hardware.profile.Profile.for_memory`)
MEMORY_COLUMN = "mem_method"


def memory_of(row: pd.Series) -> str:
    """The memory method (allocator) a record ran under: its ``mem_method`` column (``live`` or ``rss``), empty where
    it has none (records older than the column; priced as the profile's curve is,
    :meth:`~sarlab.simulator.hardware.profile.Profile.for_memory`)."""
    value = row.get(MEMORY_COLUMN)
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return ""
    return str(value).strip()


def simulate_row(
    row: pd.Series,
    profile: Profile,
    stats: PartitionStats | None = None,
    model: ModelSpec | None = None,
    links: list[LinkProfile] | None = None,
) -> EpochResult:
    """Simulate the configuration of one :func:`sarlab.simulator.calibration.measured.summarize_measured` row (its
    partition, model, mode, prefetch, threads per worker and network: a ``veth`` record takes the link profile of its
    rate from ``links`` as the inter-host link, with its ``shared_efficiency``
    (:mod:`sarlab.simulator.network.sharing`), its ``N / H`` workers per emulated host sharing that host's NIC, all
    workers on this machine's cores), with the compute scale of the memory method it ran under (its ``mem_method``:
    :meth:`~sarlab.simulator.hardware.profile.Profile.for_memory`)."""
    profile = profile.for_memory(memory_of(row))
    threads = float(row["threads"]) if float(row.get("threads") or 0) > 0 else None
    workers = int(row["workers"])
    links = [with_sharing(lp) for lp in links or []]  # the link profile's loss of concurrent flows, if measured
    profile, per_nic = for_network(profile, links, network_of(row), workers)
    run = RunSpec(mode=split_mode(row["mode"])[0], prefetch=int(row["prefetch"]), threads=threads,
                  workers_per_nic=per_nic)  # fmt: skip
    return simulate_epoch(stats or stats_for(row), model or model_for(row), run, profile)


#: the factor a family not asked for is priced at by :func:`family_seconds` (a factor must be > 0)
_OFF = 1e-12


def family_seconds(row: pd.Series, profile: Profile, stats: PartitionStats | None = None) -> dict[str, float]:
    """The predicted epoch of a one-worker ``row`` split over op families: ``{family: seconds}`` at ``profile``'s
    scale, each priced with the others' factors set to (almost) 0
    (:attr:`~sarlab.simulator.hardware.profile.Profile.family_scale`). One worker has no exchange, so its epoch is
    the sum of its ops' costs and the parts add up to it. Families without cost in the run are left out. ``stats``:
    the partition's statistics (default: read from the row's partition, :func:`stats_for`)."""
    if int(row["workers"]) != 1:
        raise ValueError(f"family_seconds splits one-worker runs only (no exchange to overlap), got {row['workers']}")
    stats, model = stats or stats_for(row), model_for(row)
    out = {}
    for name in OP_UNITS:
        alone = {f: (profile.family_scale.get(f, 1.0) if f == name else _OFF) for f in OP_UNITS}
        seconds = float(simulate_row(row, replace(profile, family_scale=alone), stats, model).epoch_time_s.max())
        if seconds > 1e-9:
            out[name] = seconds
    return out
