"""Sweeps over modes x models x worker counts, returned as metric-record DataFrames.

The DataFrame has exactly the columns of the engine's metric records (one row per rank), so predicted
and measured runs can be concatenated and compared; ``loss`` and the accuracies are NaN.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import pandas as pd

from sarlab.common.records import RECORD_COLUMNS, summarize
from sarlab.simulator.hardware.profile import Profile
from sarlab.simulator.network.linkprofile import LinkProfile, for_network
from sarlab.simulator.system.epoch import simulate_epoch
from sarlab.simulator.system.result import EpochResult
from sarlab.simulator.system.runspec import MODES, RunSpec
from sarlab.simulator.workload.model import ModelSpec
from sarlab.simulator.workload.workload import PartitionStats, resolve_workload

#: the configuration columns a sweep varies: one summary row per combination (:func:`summarize_sweep`)
SWEEP_KEYS = ("graph", "model", "aggr", "fused", "heads", "mode", "workers", "prefetch")
#: the :func:`sarlab.common.records.summarize` columns that one simulated epoch per rank gives a meaning to
SUMMARY_COLUMNS = ("epoch_time_s", "compute_mean_s", "comm_wait_mean_s", "bytes_sent_per_worker",
                   "peak_mem_above_baseline_bytes")


def result_frame(
    result: EpochResult,
    stats: PartitionStats,
    model: ModelSpec,
    run: RunSpec,
    partition_dir: str = "",
    epoch: int = 1,
    net: str = "loopback",
    backend: str = "gloo",
) -> pd.DataFrame:
    """One metric record per rank for a simulated epoch (``peak_mem_bytes`` = baseline + predicted peak)."""
    n = result.workers
    nan = math.nan
    rows = {
        "mode": [run.mode] * n,
        "model": [model.model] * n,
        "workers": [n] * n,
        "rank": list(range(n)),
        "epoch": [epoch] * n,
        "epoch_time_s": result.epoch_time_s,
        "compute_s": result.compute_s,
        "comm_wait_s": result.comm_wait_s,
        "bytes_sent": result.bytes_sent.round().astype("int64"),
        "bytes_recv": result.bytes_recv.round().astype("int64"),
        "peak_mem_bytes": (result.baseline_bytes + result.peak_above_baseline_bytes).round().astype("int64"),
        "baseline_mem_bytes": result.baseline_bytes.round().astype("int64"),
        "loss": [nan] * n,
        "train_acc": [nan] * n,
        "val_acc": [nan] * n,
        "test_acc": [nan] * n,
        "graph": [stats.graph] * n,
        "partition_dir": [partition_dir] * n,
        "num_nodes": [stats.num_nodes] * n,
        "num_edges": [stats.num_edges] * n,
        "feature_dim": [stats.feature_dim] * n,
        "num_classes": [stats.num_classes] * n,
        "layers": [model.layers] * n,
        "hidden": [model.hidden] * n,
        "heads": [model.heads] * n,
        "num_relations": [model.relations] * n,
        "aggr": [model.aggr] * n,
        "fused": [model.fused] * n,
        "self_loops": [model.self_loops] * n,
        "prefetch": [run.prefetch] * n,
        "dtype": [model.dtype] * n,
        "batchnorm": [model.batchnorm] * n,
        "dropout": [model.dropout] * n,
        "threads": [result.placement.threads] * n,
        "net": [net] * n,
        "backend": [backend] * n,
    }
    return pd.DataFrame(rows, columns=list(RECORD_COLUMNS))


@dataclass(frozen=True)
class SweepItem:
    """One simulated configuration of a sweep."""

    mode: str
    model: ModelSpec
    workers: int
    stats: PartitionStats
    run: RunSpec
    result: EpochResult

    def key(self) -> str:
        return f"{self.model.label()}-{self.mode}-N{self.workers}"


def workload_for(spec: str, workers: int, edge_cut: float | None) -> tuple[PartitionStats, str]:
    """Partition statistics for ``workers`` parts; ``{N}`` in ``spec`` is replaced by the worker count."""
    concrete = spec.replace("{N}", str(workers))
    stats = resolve_workload(concrete, workers, edge_cut)
    partition_dir = concrete if stats.source.startswith("manifest:") else ""
    return stats, partition_dir


def simulate_sweep(
    workload: str,
    modes: Iterable[str],
    models: Iterable[ModelSpec],
    workers: Iterable[int],
    profile: Profile,
    prefetch: int = 1,
    threads: float | None = None,
    workers_per_host: int | None = None,
    edge_cut: float | None = None,
    trace: bool = False,
    network: str = "reserve",
    progress: Callable[[str], None] | None = None,
    net: str = "loopback",
    links: list[LinkProfile] | None = None,
    backend: str = "gloo",
) -> tuple[pd.DataFrame, list[SweepItem]]:
    """Simulate every (mode, model, workers) combination; returns per-rank records and the raw results.

    Args:
        workload: partition directory (``{N}`` is replaced by the worker count), graph preset or
            ``estimate:`` spec (:func:`sarlab.simulator.workload.workload.resolve_workload`).
        modes: subset of ``sar``, ``sa``, ``oneshot``.
        models: model configurations.
        workers: worker counts.
        profile: machine profile.
        prefetch, threads, workers_per_host, network: :class:`RunSpec` fields.
        edge_cut: edge-cut fraction for presets/estimates (``None`` = random partition).
        trace: keep Gantt/memory traces in the results.
        progress: called with one line per configuration.
        net, links: the network spec (``loopback`` or ``veth:rate=R[,hosts=H]``) and the link profiles that
            price it (:func:`sarlab.simulator.network.linkprofile.for_network`).
        backend: the torch.distributed backend whose links and message costs price the exchanges
            (:meth:`Profile.for_backend`; ValueError when the profile has not measured it); records carry it.
    """
    modes, models, workers = list(modes), list(models), [int(w) for w in workers]
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise ValueError(f"unknown mode(s) {bad}: choose from {', '.join(MODES)}")
    profile = profile.for_backend(backend)
    frames, items = [], []
    total = len(modes) * len(models) * len(workers)
    done = 0
    for n in workers:
        stats, partition_dir = workload_for(workload, n, edge_cut)
        prof, per_nic = for_network(profile, links or [], net, n)
        for model in models:
            for mode in modes:
                run = RunSpec(
                    mode=mode,
                    prefetch=prefetch,
                    threads=threads,
                    workers_per_host=workers_per_host,
                    trace=trace,
                    network=network,
                    workers_per_nic=per_nic,
                )
                result = simulate_epoch(stats, model, run, prof)
                items.append(SweepItem(mode, model, n, stats, run, result))
                frames.append(result_frame(result, stats, model, run, partition_dir, net=net, backend=backend))
                done += 1
                if progress is not None:
                    progress(
                        f"[{done}/{total}] {model.label():10s} {mode:8s} N={n:<4d} "
                        f"epoch {result.epoch_time_s.max():.4g}s  wait {result.comm_wait_s.mean():.3g}s  "
                        f"peak {result.peak_above_baseline_bytes.max() / 2**20:,.1f} MiB  "
                        f"({result.events} events, {result.wall_s:.2f}s)"
                    )
    return pd.concat(frames, ignore_index=True), items


def summarize_sweep(records: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration of a sweep: :func:`sarlab.common.records.summarize` over :data:`SWEEP_KEYS`, its
    :data:`SUMMARY_COLUMNS` (slowest rank's epoch time; mean compute, wait and bytes sent over ranks;
    largest peak above the baseline)."""
    summary = summarize(records, keys=SWEEP_KEYS)
    keys = [k for k in SWEEP_KEYS if k in summary.columns]
    return summary[[*keys, *SUMMARY_COLUMNS]]
