"""gloo vs ccl side by side, one sitting: collectives, ring rounds and training epochs, on loopback and on
emulated hosts (``python -m benchmarks.backend_bench --out DIR``; ``make bench-backends``).

For every network of ``--nets`` (default ``loopback`` and ``veth:rate=1gbit``: one emulated host per rank, each
with a 1 Gbit/s full-duplex link), in this order:

* **collectives** (2 ranks, one per host): ``all_reduce`` (float32 SUM) and ``all_to_all_single`` (float32,
  equal splits) of 4 KiB .. 64 MiB per rank. Both backends live in the same two processes (the default group is
  gloo, ``dist.new_group(backend="ccl")`` is ccl) and alternate call by call size by size, gloo first in even
  repeats, ccl first in odd ones. ``seconds`` is the mean time of one call over a timed loop (after two warm-up
  calls, between barriers); ``GBps`` = bytes per rank / seconds (the algorithm bandwidth, not the bytes on the
  wire).
* **rounds** (:mod:`sarlab.real.calibration.roundbench`, 4 ranks, one per host, 1 MB messages): the ``sar``
  ring's rounds with prefetch 0 and 1 and the ``oneshot`` exchange, no compute; backends alternate per repeat.
* **epochs** (``sarlab bench engine --backend gloo,ccl``: the launcher, a worker per rank as ``sarlab train`` runs
  them): GCN, SAGE, GAT in ``sar`` and ``oneshot`` at N = 2, 4, 8 on ``--graph`` (default a 20000-node graph),
  ``--epochs`` epochs (the first is warm-up); the two backends run back to back per configuration, their order
  alternating from one configuration to the next.

Each backend runs with its defaults (ccl: :data:`sarlab.kernels.ccl.ENV_DEFAULTS`, unless set in the environment).
Writes into DIR (refusing to replace files): ``backends_collectives.csv``, ``backends_rounds.csv``,
``backends_epochs.csv`` (every metric record, with ``backend`` and ``net`` columns; the partitions' manifests in
``backends_epochs_manifests/``, for ``sarlab simulate --validate``), ``backends_bench.json`` (the
command, date, CPU, torch, oneCCL version, the load averages before and after every phase), then the tables and the
plot of :mod:`benchmarks.backend_report`.
"""
from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import sys
import time

from benchmarks.backend_report import COLL_FILE, EPOCH_FILE, META_FILE, ROUND_FILE, write_report

SIZES = [4 << 10 << (2 * i) for i in range(8)]  # 4 KiB .. 64 MiB
BACKENDS = ("gloo", "ccl")
NETS = ("loopback", "veth:rate=1gbit")
OUTPUTS = (COLL_FILE, ROUND_FILE, EPOCH_FILE, META_FILE)
ROUND_PATTERNS = ("ring:0", "ring:1", "oneshot")


def _order(rep: int) -> tuple[str, str]:
    return BACKENDS if rep % 2 == 0 else BACKENDS[::-1]


def _collectives_child(reps: int, out: str) -> None:
    """One rank (env:// variables set by the parent): every op, size and backend, ``reps`` times; rank 0 writes
    the rows to ``out``."""
    import torch
    import torch.distributed as dist

    from sarlab.core.comm import prepare_backend

    torch.set_num_threads(1)
    prepare_backend("ccl")
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=300))
    groups = {"gloo": dist.group.WORLD, "ccl": dist.new_group(backend="ccl")}

    def timed(op: str, backend: str, nbytes: int) -> float:
        group, n = groups[backend], nbytes // 4
        x, y = torch.ones(n), torch.empty(n)
        call = (lambda: dist.all_reduce(x, group=group)) if op == "all_reduce" else \
            (lambda: dist.all_to_all_single(y, x, group=group))
        iters = max(3, min(50, (64 << 20) // nbytes))
        call()
        call()
        dist.barrier(group=group)
        t0 = time.perf_counter()
        for _ in range(iters):
            call()
        dist.barrier(group=group)
        return (time.perf_counter() - t0) / iters

    rows = []
    for rep in range(reps):
        for op in ("all_reduce", "all_to_all_single"):
            for nbytes in SIZES:
                for backend in _order(rep):
                    s = timed(op, backend, nbytes)
                    rows.append({"op": op, "bytes": nbytes, "backend": backend, "rep": rep, "seconds": s,
                                 "GBps": nbytes / s / 1e9})
    if dist.get_rank() == 0:
        _write_csv(out, rows)
    dist.destroy_process_group(groups["ccl"])
    dist.destroy_process_group()


def _write_csv(path: str, rows: list[dict], mode: str = "w") -> None:
    new = mode == "w" or not os.path.exists(path)
    with open(path, mode, newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        if new:
            w.writeheader()
        w.writerows(rows)


def _read_csv(path: str) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def collectives(net: str, reps: int, timeout_s: float) -> list[dict]:
    """The collectives phase on ``net``: 2 ranks (one per emulated host); returns the rows."""
    import tempfile

    from sarlab.real.calibration.ranks import run_ranks
    from sarlab.real.calibration.roundbench import rank_hosts

    fd, out = tempfile.mkstemp(prefix="sarlab-backend-bench-", suffix=".csv")
    os.close(fd)
    try:
        with rank_hosts(net, 2) as (env, prefix, _):
            run_ranks(2, lambda rank: [*prefix(rank), sys.executable, "-m", __spec__.name, "--child", "--reps",
                                       str(reps), "--out", out], env, "backend_bench collectives", timeout_s)
        rows = _read_csv(out)
    finally:
        os.remove(out)
    return [{"net": net, **r} for r in rows]


def rounds(net: str, reps: int, world: int, nbytes: int, timeout_s: float) -> list[dict]:
    """The rounds phase on ``net``: roundbench per backend, alternating per repeat; one row per pass."""
    from sarlab.real.calibration import roundbench

    rows = []
    for rep in range(reps):
        for backend in _order(rep):
            raw = roundbench.measure(net, world, list(ROUND_PATTERNS), nbytes, 1, 0.0, timeout_s=timeout_s,
                                     backend=backend)
            for pattern, row in roundbench.summarize(raw["samples"], world, nbytes, 0.0).items():
                rows.append({"net": net, "pattern": pattern, "workers": world, "bytes": nbytes, "backend": backend,
                             "rep": rep, "pass_s": row["pass_s"], "round_s": row["round_s"]})
    return rows


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.backend_bench",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="output directory (created; existing result files are not replaced)")
    p.add_argument("--nets", default=",".join(NETS), help="semicolon-free comma list of networks: loopback, "
                   "veth:rate=R (default %(default)s)")
    p.add_argument("--reps", type=int, default=3, help="repeats of the collectives and rounds (default 3)")
    p.add_argument("--graph", default="synthetic:nodes=20000,degree=10,features=64,classes=8,seed=0",
                   help="graph of the epochs (default %(default)s)")
    p.add_argument("--workers", default="2,4,8", help="worker counts of the epochs (default %(default)s)")
    p.add_argument("--models", default="gcn,sage,gat")
    p.add_argument("--hidden", type=int, default=64, help="hidden size of the epochs' models (default 64, as train)")
    p.add_argument("--layers", type=int, default=2, help="layers of the epochs' models (default 2, as train)")
    p.add_argument("--modes", default="sar,oneshot")
    p.add_argument("--epochs", type=int, default=6, help="epochs per run (the first is warm-up; default 6)")
    p.add_argument("--round-workers", type=int, default=4, help="ranks of the rounds phase (default 4)")
    p.add_argument("--round-bytes", type=int, default=1_000_000, help="message bytes of the rounds (default 1 MB)")
    p.add_argument("--skip", choices=["collectives", "rounds", "epochs"], action="append", default=[])
    p.add_argument("--timeout", type=float, default=900, help="seconds per group of ranks (default 900)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return p


def _nets(text: str) -> list[str]:
    """``loopback,veth:rate=1gbit,hosts=2`` -> the specs (a ``key=value`` item belongs to the spec before it)."""
    nets: list[str] = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        if nets and "=" in item and ":" not in item:
            nets[-1] += "," + item
        else:
            nets.append(item)
    return nets


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    a = p.parse_args(argv)
    if a.child:
        _collectives_child(a.reps, a.out)
        return 0
    if not a.out:
        p.error("--out DIR is required")
    from sarlab.core.comm import check_backend
    from sarlab.real.launch.netspec import NetSpec

    nets = _nets(a.nets)
    try:
        for net in nets:
            NetSpec.parse(net)
        check_backend("ccl")  # built once here, not in every rank; one line naming what is missing
    except (ValueError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    taken = [n for n in OUTPUTS if os.path.exists(os.path.join(a.out, n))]
    if taken:
        print(f"error: {', '.join(taken)} exist in {a.out}; choose another --out", file=sys.stderr)
        return 2
    import torch

    from sarlab.common.machine import cpu_model, load_averages
    from sarlab.kernels import ccl

    meta = {"command": " ".join([p.prog, *(argv if argv is not None else sys.argv[1:])]),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cpu": cpu_model(), "cores": len(os.sched_getaffinity(0)), "torch": torch.__version__,
            "oneccl": ccl.load().library_version(),
            "ccl_env": {k: os.environ.get(k, v) for k, v in ccl.ENV_DEFAULTS.items()}, "load": []}
    t0 = time.perf_counter()

    def phase(name: str, net: str) -> None:
        load = load_averages()
        meta["load"].append({"phase": name, "net": net, "at_s": round(time.perf_counter() - t0), "loadavg": load})
        print(f"[{time.perf_counter() - t0:6.0f}s] {name} on {net} (load {load})", flush=True)

    for net in nets:
        if "collectives" not in a.skip:
            phase("collectives", net)
            _write_csv(os.path.join(a.out, COLL_FILE), collectives(net, a.reps, a.timeout), "a")
        if "rounds" not in a.skip:
            phase("rounds", net)
            _write_csv(os.path.join(a.out, ROUND_FILE),
                       rounds(net, a.reps, a.round_workers, a.round_bytes, a.timeout), "a")
    if "epochs" not in a.skip:
        import pandas as pd

        from sarlab.real.bench.bench import EngineBenchConfig, run_engine_bench

        parts = []
        for net in nets:
            phase("epochs", net)
            cfg = EngineBenchConfig(graph=a.graph, workers=tuple(int(w) for w in a.workers.split(",")),
                                    models=tuple(a.models.split(",")), modes=tuple(a.modes.split(",")),
                                    epochs=a.epochs, net=net, backends=BACKENDS, timeout_s=120.0,
                                    hidden=a.hidden, layers=a.layers)
            # the partitions' manifests beside the records: `sarlab simulate --validate` finds them there
            parts.append(run_engine_bench(cfg, log=lambda line: print(line, flush=True),
                                          manifests=os.path.join(a.out, EPOCH_FILE[:-4] + "_manifests")))
            pd.concat(parts, ignore_index=True).to_csv(os.path.join(a.out, EPOCH_FILE), index=False)
    phase("done", "-")
    with open(os.path.join(a.out, META_FILE), "w") as f:
        json.dump(meta, f, indent=1)
    for path in write_report(a.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
