"""One prediction interface over the training strategies: exact ``sar`` / ``sa`` / ``oneshot``, ``sampling`` and
``stale`` (bounded-staleness halos), so that the planner and ``sarlab simulate`` price them alike.

Each gives the epoch time (the slowest worker), the memory a worker needs (baseline + peak above it, the
largest worker) and the bytes a worker sends per epoch (the largest).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from sarlab.simulator.hardware.profile import Profile
from sarlab.simulator.strategies.sampling_model import (
    SamplerCosts,
    SamplingSpec,
    parse_fanouts,
    simulate_sampling_epoch,
)
from sarlab.simulator.strategies.staleness_model import simulate_stale_epoch
from sarlab.simulator.system.epoch import simulate_epoch
from sarlab.simulator.system.runspec import MODES, RunSpec
from sarlab.simulator.workload.model import ModelSpec
from sarlab.simulator.workload.sampled_sizes import DegreeDistribution, degrees_from_partition, train_nodes_per_part
from sarlab.simulator.workload.workload import PartitionStats, resolve_workload

#: strategy names: the exact modes, mini-batch sampling, bounded staleness
STRATEGIES = (*MODES, "sampling", "stale")


@dataclass(frozen=True)
class Prediction:
    """A strategy's predicted epoch on ``workers`` workers."""

    strategy: str
    workers: int
    epoch_time_s: float
    compute_s: float
    memory_per_worker_bytes: float
    bytes_sent_per_worker: float
    detail: str = ""


def predict(strategy: str, stats: PartitionStats, model: ModelSpec, profile: Profile, *,
            sampling: SamplingSpec | None = None, staleness: int = 1, degrees: DegreeDistribution | None = None,
            train_per_part: np.ndarray | None = None, run: RunSpec | None = None,
            sampler: SamplerCosts | None = None) -> Prediction:
    """Predict one epoch of ``strategy`` (:data:`STRATEGIES`) on ``stats.num_parts`` workers.

    Args:
        strategy: ``sar``, ``sa``, ``oneshot``, ``sampling`` or ``stale``.
        stats: partition statistics.
        model: the model.
        profile: the machine profile.
        sampling: fan-outs, batch size and batches per round (``sampling``; default :class:`SamplingSpec` cut to
            the layers).
        staleness: ``S`` of ``stale`` (>= 1).
        degrees: in-degree histogram (``sampling``).
        train_per_part: training nodes per part (``sampling``).
        run: prefetch, threads, placement (the mode is the strategy's); an emulated network's workers per NIC.
        sampler: the sampler's per-round, per-batch, per-edge and per-row costs (``sampling``).
    """
    run = run or RunSpec()
    N = stats.num_parts
    if strategy in MODES:
        r = simulate_epoch(stats, model, replace(run, mode=strategy), profile)
        mem = float(np.max(r.baseline_bytes + r.peak_above_baseline_bytes))
        return Prediction(strategy, N, float(np.max(r.epoch_time_s)), float(np.max(r.compute_s)), mem,
                          float(np.max(r.bytes_sent)))
    if strategy == "sampling":
        spec = sampling or SamplingSpec(tuple(([15, 10, 5] + [5] * model.layers)[: model.layers]))
        s = simulate_sampling_epoch(stats, model, spec, profile, degrees, train_per_part, run, sampler)
        mem = float(np.max(s.baseline_bytes + s.peak_above_baseline_bytes))
        fan = ",".join("all" if f == -1 else str(f) for f in spec.fanouts)
        rounds = f", {s.rounds} rounds" if s.rounds > 1 else ""
        return Prediction(strategy, N, s.epoch_time_s, float(np.max(s.compute_s)), mem, float(np.max(s.bytes_sent)),
                          f"fanouts {fan}, batch {spec.batch_size}, {s.steps} steps{rounds}")
    if strategy == "stale":
        t = simulate_stale_epoch(stats, model, staleness, profile, run)
        mem = float(np.max(t.baseline_bytes + t.peak_above_baseline_bytes))
        return Prediction(strategy, N, t.epoch_time_s, float(np.max(t.compute_s)), mem, float(np.max(t.bytes_sent)),
                          f"S={staleness}")
    raise ValueError(f"unknown strategy {strategy!r}: choose one of {', '.join(STRATEGIES)}")


def sweep_strategies(graph: str, strategies: list[str], models: list[ModelSpec], workers: list[int],
                     profile: Profile, *, fanouts: str | None = None, batch_size: int = 1024, staleness: int = 1,
                     edge_cut: float | None = None, progress=None) -> pd.DataFrame:
    """``sampling`` / ``stale`` (or any :data:`STRATEGIES`) over models x worker counts, one row each: what
    ``sarlab simulate --modes sampling,stale`` prints. ``{N}`` in ``graph`` is replaced by the worker count; a
    partition directory gives its degrees and training nodes, other workloads the assumed degree law."""
    rows = []
    for n in workers:
        spec = graph.replace("{N}", str(n))
        stats = resolve_workload(spec, n, edge_cut)
        part = Path(spec).is_dir()
        degrees = degrees_from_partition(spec) if part else None
        train = train_nodes_per_part(stats, spec) if part else None
        for model in models:
            text = fanouts or ",".join(str(f) for f in ([15, 10, 5] + [5] * model.layers)[: model.layers])
            sampling = SamplingSpec(parse_fanouts(text, model.layers), batch_size)
            for strategy in strategies:
                p = predict(strategy, stats, model, profile, sampling=sampling, staleness=staleness,
                            degrees=degrees, train_per_part=train)
                rows.append({"graph": stats.graph, "model": model.label(), "mode": strategy, "workers": n,
                             "epoch_time_s": p.epoch_time_s, "compute_s": p.compute_s,
                             "memory_per_worker_bytes": p.memory_per_worker_bytes,
                             "bytes_sent_per_worker": p.bytes_sent_per_worker, "detail": p.detail})
                if progress:
                    progress(f"{strategy} {model.label()} x{n}: {p.epoch_time_s:.4g} s ({p.detail})")
    return pd.DataFrame(rows)
