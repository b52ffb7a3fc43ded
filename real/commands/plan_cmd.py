"""``sarlab plan``: which strategy, how many workers and which resource give the lowest time, the lowest cost and
the best value (1 / (time x cost)) for a graph, a model and a number of epochs, with the memory each needs.

Every candidate (strategy x workers x resource) is one simulated epoch
(:func:`sarlab.simulator.strategies.strategies.predict`) on the machine profile turned into that resource
(:func:`sarlab.simulator.strategies.cost_model.resource_profile`), billed by
:func:`sarlab.simulator.strategies.cost_model.run_cost`. Candidates whose worker needs more memory than the resource has
(or than ``--memory-per-worker``) are listed but not chosen. Accuracy is not modelled: ``sampling`` and ``stale`` learn
something else than exact full-batch training (``results/strategies.md`` measures how much).
"""
from __future__ import annotations

import argparse
import math
import shutil
import tempfile
import time
from pathlib import Path

from sarlab.data.partition import is_partition_dir, partition
from sarlab.executor.commands.options import EPILOG, load_source, progress, write_json
from sarlab.simulator.hardware.provenance import profile_line, resolve_profile
from sarlab.simulator.strategies.cost_model import (
    GIB,
    load_resources,
    resource_profile,
    resources_json,
    run_cost,
    value,
)
from sarlab.simulator.strategies.sampling_model import SamplingSpec, parse_fanouts
from sarlab.simulator.strategies.strategies import STRATEGIES, predict
from sarlab.simulator.workload.model import ModelSpec, parse_model
from sarlab.simulator.workload.sampled_sizes import DegreeDistribution, degrees_from_partition, train_nodes_per_part
from sarlab.simulator.workload.workload import load_manifest, resolve_workload

ENGINE_SPECS = ("synthetic:", "npz:", "ogb:")
COLUMNS = ("strategy", "resource", "workers", "epoch_s", "time_s", "cost_usd", "value", "mem_gib", "fits")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sarlab plan", epilog=EPILOG + " Also simulator workloads: ogbn-products, ogbn-papers100M, "
        "estimate:nodes=N,edges=E,features=F,classes=C[,train=T], or a partition directory with {N}.",
        description="Predict, for a graph, a model and a number of epochs, which strategy (sar, oneshot, sampling, "
                    "stale), how many workers and which resource (CPU servers, GPU servers, serverless threads) give "
                    "the lowest time, the lowest cost and the best value, with the memory per worker each needs.")
    p.add_argument("--graph", required=True, help="graph spec (engine graphs are partitioned with METIS per worker "
                   "count into a temporary directory) or a simulator workload")
    p.add_argument("--model", default="sage", help="gcn, sage[-mean|-max], gat[-fused|-unfused] (default %(default)s)")
    p.add_argument("--layers", type=int, default=2, help="graph convolutions (default %(default)s)")
    p.add_argument("--hidden", type=int, default=64, help="hidden size (default %(default)s)")
    p.add_argument("--heads", type=int, default=4, help="GAT heads (default %(default)s)")
    p.add_argument("--epochs", type=int, required=True, help="epochs to train")
    p.add_argument("--prices", metavar="FILE", help="JSON of resource fields overriding the defaults, e.g. "
                   '{"cpu": {"price_per_hour": 0.61}} (see simulator/strategies/cost_model.py)')
    p.add_argument("--max-workers", type=int, default=16, help="largest worker count tried (powers of two; default "
                   "%(default)s)")
    p.add_argument("--memory-per-worker", type=float, metavar="GIB", help="memory cap per worker in GiB (default: "
                   "each resource's own)")
    p.add_argument("--strategies", default="sar,oneshot,sampling,stale", help="comma list of "
                   f"{', '.join(STRATEGIES)} (default %(default)s)")
    p.add_argument("--resources", default=None, help="comma list of resource names (default: all in the prices)")
    p.add_argument("--fanouts", default=None, help="sampling: fan-outs, hop 1 first, or 'all' (default 15,10,5 cut "
                   "or padded with 5 to --layers)")
    p.add_argument("--batch-size", type=int, default=1024, help="sampling: seeds per worker and step "
                   "(default %(default)s)")
    p.add_argument("--staleness", type=int, default=1, help="stale: S >= 1 (default %(default)s)")
    p.add_argument("--profile", default=None, help="machine profile the resources are derived from (default: as "
                   "`sarlab simulate`)")
    p.add_argument("--edge-cut", type=float, default=None, help="edge cut of estimate workloads")
    p.add_argument("--top", type=int, default=15, help="rows of the table printed (default %(default)s)")
    p.add_argument("--json", metavar="PATH", help="write every candidate, the picks and the prices here")
    return p


class Workloads:
    """Partition statistics, degrees and training nodes per worker count, from an engine graph (partitioned here,
    into a temporary directory removed by :meth:`close`) or a simulator workload."""

    def __init__(self, spec: str, edge_cut: float | None):
        self.spec, self.edge_cut = spec, edge_cut
        self.graph = load_source(spec) if spec.startswith(ENGINE_SPECS) else None
        self.tmp = tempfile.mkdtemp(prefix="sarlab-plan-") if self.graph is not None else None

    def fixed_workers(self) -> int | None:
        """The worker count a partition directory without ``{N}`` fixes (else None)."""
        return load_manifest(self.spec).num_parts if is_partition_dir(self.spec) else None

    def get(self, workers: int):
        """(stats, degrees, training nodes per part) for ``workers`` parts."""
        if self.graph is not None:
            out = str(Path(self.tmp) / f"parts-{workers}")
            partition(self.graph, workers, out, method="metis", seed=0, source=self.spec, progress=None)
            directory = out
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


def plan(a: argparse.Namespace) -> dict:
    """Every candidate and the three picks (the work of :func:`main`)."""
    base, source = resolve_profile(a.profile)
    progress(profile_line(base, source))
    resources = load_resources(a.prices)
    names = list(resources) if a.resources is None else [r.strip() for r in a.resources.split(",") if r.strip()]
    unknown = [n for n in names if n not in resources]
    strategies = [s.strip() for s in a.strategies.split(",") if s.strip()]
    if unknown:
        raise ValueError(f"unknown resource(s) {unknown}: the prices know {sorted(resources)}")
    if not strategies or set(strategies) - set(STRATEGIES):
        raise ValueError(f"--strategies: choose among {', '.join(STRATEGIES)}")
    if a.epochs < 1 or a.max_workers < 1 or a.staleness < 1:
        raise ValueError("--epochs, --max-workers and --staleness must be >= 1")
    model = parse_model(a.model, ModelSpec(layers=a.layers, hidden=a.hidden, heads=a.heads, fused=True,
                                           batchnorm=False, dropout=0.0))
    fanouts = parse_fanouts(a.fanouts or ",".join(str(f) for f in ([15, 10, 5] + [5] * a.layers)[:a.layers]),
                            a.layers)
    sampling = SamplingSpec(fanouts, a.batch_size)
    loads = Workloads(a.graph, a.edge_cut)
    fixed = loads.fixed_workers()
    counts = [fixed] if fixed else [2 ** i for i in range(int(math.log2(a.max_workers)) + 1)]
    rows = []
    try:
        for workers in counts:
            start = time.perf_counter()
            stats, degrees, train = loads.get(workers)
            for name in names:
                res = resources[name]
                prof = resource_profile(base, res)
                cap = min(res.memory_gib, a.memory_per_worker or math.inf)
                for strategy in strategies:
                    if workers == 1 and (strategy == "stale" or (strategy == "oneshot" and "sar" in strategies)):
                        continue  # one worker: no halo, so stale is exact and oneshot is sar
                    pred = predict(strategy, stats, model, prof, sampling=sampling, staleness=a.staleness,
                                   degrees=degrees, train_per_part=train)
                    total = pred.epoch_time_s * a.epochs
                    cost = run_cost(res, workers, pred.epoch_time_s, a.epochs, model.layers)
                    mem = pred.memory_per_worker_bytes / GIB
                    rows.append({"strategy": strategy, "resource": name, "workers": workers,
                                 "epoch_s": pred.epoch_time_s, "time_s": total, "cost_usd": cost,
                                 "value": value(total, cost), "mem_gib": mem, "fits": mem <= cap,
                                 "detail": pred.detail})
            progress(f"{workers} worker(s): {sum(r['workers'] == workers for r in rows)} candidates in "
                     f"{time.perf_counter() - start:.1f}s ({stats.graph})")
    finally:
        loads.close()
    fits = [r for r in rows if r["fits"]]
    picks = {}
    if fits:
        picks = {"lowest_time": min(fits, key=lambda r: r["time_s"]),
                 "lowest_cost": min(fits, key=lambda r: r["cost_usd"]),
                 "best_value": max(fits, key=lambda r: r["value"])}
    return {"graph": a.graph, "model": model.label(), "layers": model.layers, "hidden": model.hidden,
            "epochs": a.epochs, "profile": base.name, "profile_source": source, "fanouts": list(fanouts),
            "batch_size": a.batch_size, "staleness": a.staleness, "memory_per_worker_gib": a.memory_per_worker,
            "resources": resources_json({n: resources[n] for n in names}), "candidates": rows, "picks": picks,
            "note": "accuracy is not modelled: sampling and stale learn differently from exact training"}


def table(rows: list[dict]) -> str:
    """The candidates as a fixed-width table."""
    lines = [f"{'strategy':<9} {'resource':<11} {'N':>3} {'epoch s':>9} {'total s':>9} {'cost $':>10} "
             f"{'value':>10} {'mem GiB':>8} fits"]
    for r in rows:
        lines.append(f"{r['strategy']:<9} {r['resource']:<11} {r['workers']:>3} {r['epoch_s']:>9.3g} "
                     f"{r['time_s']:>9.3g} {r['cost_usd']:>10.3g} {r['value']:>10.3g} {r['mem_gib']:>8.3g} "
                     f"{'yes' if r['fits'] else 'no'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    result = plan(a)
    rows = sorted(result["candidates"], key=lambda r: (not r["fits"], -r["value"]))
    print(f"{len(rows)} candidates for {result['model']} x {result['epochs']} epochs on {a.graph} "
          f"(best value first; the top {min(a.top, len(rows))}):")
    print(table(rows[: max(a.top, 0)]))
    if not result["picks"]:
        write_json(a.json, result)
        raise ValueError("no candidate fits in memory: raise --max-workers or --memory-per-worker, or add a "
                         "resource with more memory (--prices)")
    print()
    for what, r in result["picks"].items():
        print(f"{what.replace('_', ' '):<12} {r['strategy']} on {r['workers']} x {r['resource']}: "
              f"{r['time_s']:.3g} s, ${r['cost_usd']:.3g}, {r['mem_gib']:.3g} GiB per worker"
              + (f" ({r['detail']})" if r["detail"] else ""))
    print(f"note: {result['note']}")
    write_json(a.json, result)
    if a.json:
        progress(f"wrote {a.json}")
    return 0
