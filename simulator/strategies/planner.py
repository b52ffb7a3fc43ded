"""The planner's search: every (worker count x resource x strategy) candidate priced for a whole run, and the
three picks (lowest time, lowest cost, best value). :func:`sarlab.simulator.api.plan` is its front door."""
from __future__ import annotations

import math
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sarlab.data.graphs import load_graph
from sarlab.data.partition import is_partition_dir, partition
from sarlab.simulator.hardware.profile import Profile
from sarlab.simulator.strategies.cost_model import GIB, Resource, resource_profile, run_cost, value
from sarlab.simulator.strategies.predictor import predict
from sarlab.simulator.strategies.sampling_model import SamplingSpec
from sarlab.simulator.workload.model import ModelSpec
from sarlab.simulator.workload.sampled_sizes import DegreeDistribution, degrees_from_partition, train_nodes_per_part
from sarlab.simulator.workload.workload import load_manifest, resolve_workload

#: graph specs that name an engine graph (``sarlab plan`` partitions them per worker count with METIS)
ENGINE_SPECS = ("synthetic:", "npz:", "ogb:", "planetoid:", "hetero:")


class Workloads:
    """Partition statistics, degrees and training nodes per worker count, from an engine graph (partitioned here,
    into a temporary directory removed by :meth:`close`) or a simulator workload."""

    def __init__(self, spec, edge_cut: float | None, log: Callable[[str], None] | None = None):
        self.spec, self.edge_cut = spec, edge_cut
        self.graph = None
        if not isinstance(spec, str):  # a Graph object
            self.graph, self.spec = spec, f"graph:{getattr(spec, 'name', 'graph')}"
        elif spec.startswith(ENGINE_SPECS):
            if log is not None:
                log(f"loading graph {spec}")
            self.graph = load_graph(spec)
        self.tmp = tempfile.mkdtemp(prefix="sarlab-plan-") if self.graph is not None else None

    def fixed_workers(self) -> int | None:
        """The worker count a partition directory without ``{N}`` fixes (else None)."""
        if self.graph is not None:
            return None
        return load_manifest(self.spec).num_parts if is_partition_dir(self.spec) else None

    def get(self, workers: int):
        """(stats, degrees, training nodes per part) for ``workers`` parts."""
        if self.graph is not None:
            directory = str(Path(self.tmp) / f"parts-{workers}")
            partition(self.graph, workers, directory, method="metis", seed=0, source=self.spec, progress=None)
        else:
            directory = self.spec.replace("{N}", str(workers))
        if is_partition_dir(directory):
            stats = load_manifest(directory)
            return stats, degrees_from_partition(directory), train_nodes_per_part(stats, directory)
        stats = resolve_workload(directory, workers, self.edge_cut)
        degrees = DegreeDistribution.power_law(stats.num_nodes, stats.num_edges / max(stats.num_nodes, 1))
        return stats, degrees, None

    def close(self) -> None:
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)


def candidates(loads: Workloads, max_workers: int, resources: dict[str, Resource], strategies: list[str],
               base: Profile, spec: ModelSpec, epochs: int, *, sampling: SamplingSpec, staleness: int,
               memory_per_worker: float | None, progress: Callable[[str], None] | None = None) -> list[dict]:
    """One row per (worker count, resource, strategy): the predicted epoch, the run's time and cost, its value
    ``1 / (time_s * cost_usd)``, the memory per worker and whether it fits the resource (or ``memory_per_worker``
    GiB). Worker counts are powers of two up to ``max_workers``, or the one a partition directory fixes."""
    fixed = loads.fixed_workers()
    counts = [fixed] if fixed else [2 ** i for i in range(int(math.log2(max_workers)) + 1)]
    rows = []
    for workers in counts:
        start = time.perf_counter()
        stats, degrees, train = loads.get(workers)
        for name, res in resources.items():
            prof = resource_profile(base, res)
            cap = min(res.memory_gib, memory_per_worker or math.inf)
            for strategy in strategies:
                if workers == 1 and (strategy == "stale" or (strategy == "oneshot" and "sar" in strategies)):
                    continue  # one worker: no halo, so stale is exact and oneshot is sar
                pred = predict(strategy, stats, spec, prof, sampling=sampling, staleness=staleness,
                               degrees=degrees, train_per_part=train)
                total = pred.epoch_time_s * epochs
                cost = run_cost(res, workers, pred.epoch_time_s, epochs, spec.layers)
                mem = pred.memory_per_worker_bytes / GIB
                rows.append({"strategy": strategy, "resource": name, "workers": workers,
                             "epoch_s": pred.epoch_time_s, "time_s": total, "cost_usd": cost,
                             "value": value(total, cost), "mem_gib": mem, "fits": mem <= cap,
                             "detail": pred.detail})
        if progress is not None:
            progress(f"{workers} worker(s): {sum(r['workers'] == workers for r in rows)} candidates in "
                     f"{time.perf_counter() - start:.1f}s ({stats.graph})")
    return rows


def picks(rows: list[dict]) -> dict:
    """The candidates that fit with the lowest time, the lowest cost and the best value (empty when none fits)."""
    fits = [r for r in rows if r["fits"]]
    if not fits:
        return {}
    return {"lowest_time": min(fits, key=lambda r: r["time_s"]),
            "lowest_cost": min(fits, key=lambda r: r["cost_usd"]),
            "best_value": max(fits, key=lambda r: r["value"])}
