"""``sarlab plan``: which strategy, how many workers and which resource give the lowest time, the lowest cost and
the best value (1 / (time x cost)) for a graph, a model and a number of epochs, with the memory each needs.

The work is :func:`sarlab.simulator.api.plan` (``sarlab.plan``); this module is its flags and its table. Every
candidate (strategy x workers x resource) is one simulated epoch
(:func:`sarlab.simulator.strategies.predictor.predict`) on the machine profile turned into that resource
(:func:`sarlab.simulator.strategies.cost_model.resource_profile`), billed by
:func:`sarlab.simulator.strategies.cost_model.run_cost`. Candidates whose worker needs more memory than the resource has
(or than ``--memory-per-worker``) are listed but not chosen. Accuracy is not modelled: ``sampling`` and ``stale`` learn
something else than exact full-batch training (``results/strategies/strategies.md`` measures how much).
"""
from __future__ import annotations

import argparse
import textwrap

from sarlab.real.commands.options import EPILOG, progress, write_json
from sarlab.real.launch import outputs
from sarlab.simulator import api
from sarlab.simulator.strategies.predictor import STRATEGIES

COLUMNS = ("strategy", "resource", "workers", "epoch_s", "time_s", "cost_usd", "value", "mem_gib", "fits")
#: what the table's numbers are, in ``--help`` and under the table
PRICING = ("Every number is PREDICTED by the simulator (one epoch on the profile turned into each resource), not "
           "measured. total s = epochs x epoch s; cost $ = workers x price per hour x billed time, each worker billed "
           "for at least the resource's minimum (60 s for the cpu and gpu servers, so a short job costs its minimum) "
           "in its billing increments, serverless per request too; value = 1 / (total s x cost $), higher is better "
           "(Dorylus's measure).")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sarlab plan", epilog=EPILOG + " Also simulator workloads: ogbn-products, ogbn-papers100M, "
        "estimate:nodes=N,edges=E,features=F,classes=C[,train=T], or a partition directory with {N}. " + PRICING,
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
    p.add_argument("--backend", default="gloo", help="torch.distributed backend of the runs: gloo (default) or one the "
                   "profile has an overlay of (ccl: `sarlab calibrate --backend ccl`), whose message costs and link "
                   "latency price the exchanges")
    p.add_argument("--top", type=int, default=15, help="rows of the table printed (default %(default)s)")
    p.add_argument("--json", metavar="PATH", help="write every candidate, the picks and the prices here")
    p.add_argument("--force", action="store_true", help="replace --json when it exists and this command did not "
                   "write it")
    return p


def plan(a: argparse.Namespace) -> dict:
    """Every candidate and the three picks (the work of :func:`main`): :func:`sarlab.simulator.api.plan` with the
    flags' values, progress on stderr."""
    return api.plan(a.graph, epochs=a.epochs, model=a.model, layers=a.layers, hidden=a.hidden, heads=a.heads,
                    strategies=a.strategies, resources=a.resources, prices=a.prices, max_workers=a.max_workers,
                    memory_per_worker=a.memory_per_worker, fanouts=a.fanouts, batch_size=a.batch_size,
                    staleness=a.staleness, profile=a.profile, edge_cut=a.edge_cut, progress=progress,
                    backend=a.backend)


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
    if a.json:
        outputs.check_file(a.json, "--json", a.force)  # before anything is partitioned or priced
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
    print(textwrap.fill(f"profile {result['profile']} ({result['profile_source']}). {PRICING}", 116))
    write_json(a.json, result)
    if a.json:
        progress(f"wrote {a.json}")
    return 0
