"""gloo vs ccl side by side on loopback: collective bandwidth against message size, and GCN epoch time.

``python -m sarlab.executor.bench.backend_bench --out DIR`` writes into DIR (refusing to replace files):

* ``backend_collectives.csv``: ``op, bytes, backend, rep, seconds, GBps`` for ``all_reduce`` (float32, SUM) and
  ``all_to_all_single`` (float32, equal splits) of 4 KiB .. 64 MiB per rank on 2 ranks. ``seconds`` is the mean
  time of one call over a timed loop (after two warm-up calls); ``GBps`` = bytes per rank / seconds (the
  algorithm bandwidth, not the bytes on the wire).
* ``backend_epochs.csv``: ``model, mode, workers, backend, rep, epoch_time_s, epochs``: the median epoch time of
  ``--epochs`` full-batch GCN epochs (the first, warm-up epoch excluded) on ``--graph``, per mode and worker count.
* ``backend_bench.json``: the command, date, CPU, torch, ``/proc/loadavg`` before and after, the ccl environment.

Both backends live in the same processes: the default process group is gloo, a second group over all ranks is
ccl (``dist.new_group(backend="ccl")``), and the measurements alternate between them (gloo first in even
repeats, ccl first in odd ones), so both see the same load. The epochs run the engine (:class:`Trainer` on a
:class:`ShardedGraph`) with a :class:`Comm` on one group or the other, as a worker of ``sarlab train`` does,
without the launcher. Defaults of both backends (ccl: :data:`sarlab.kernels.ccl.ENV_DEFAULTS`).
"""
from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

SIZES = [4 << 10 << (2 * i) for i in range(8)]  # 4 KiB .. 64 MiB
BACKENDS = ("gloo", "ccl")
COLL_FILE, EPOCH_FILE, META_FILE = "backend_collectives.csv", "backend_epochs.csv", "backend_bench.json"


def _order(rep: int) -> tuple[str, str]:
    return BACKENDS if rep % 2 == 0 else BACKENDS[::-1]


def _init(rank: int, world: int, port: int):
    """Join gloo (default group) and ccl (a group over all ranks); returns {name: group}."""
    import torch.distributed as dist

    from sarlab.core.comm import prepare_backend

    prepare_backend("ccl")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    return {"gloo": dist.group.WORLD, "ccl": dist.new_group(backend="ccl")}


def _collectives(rank: int, world: int, port: int, reps: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    groups = _init(rank, world, port)
    rows = []

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

    for rep in range(reps):
        for op in ("all_reduce", "all_to_all_single"):
            for nbytes in SIZES:
                for backend in _order(rep):
                    s = timed(op, backend, nbytes)
                    rows.append({"op": op, "bytes": nbytes, "backend": backend, "rep": rep, "seconds": s,
                                 "GBps": nbytes / s / 1e9})
    if rank == 0:
        _write_csv(os.path.join(out, COLL_FILE), rows)
    dist.destroy_process_group(groups["ccl"])
    dist.destroy_process_group()


def _epochs(rank: int, world: int, port: int, reps: int, out: str, pdir: str, modes: list[str], epochs: int,
            model: str) -> None:
    import torch
    import torch.distributed as dist

    from sarlab.core import memory
    from sarlab.core.comm import Comm
    from sarlab.core.config import EngineConfig
    from sarlab.core.shards import ShardedGraph
    from sarlab.core.train import TrainConfig, Trainer
    from sarlab.data.partition import load_manifest, load_part
    from sarlab.nn.model import ModelConfig

    cores = len(os.sched_getaffinity(0))
    torch.set_num_threads(max(1, cores // world))  # as a worker of `sarlab train` does
    groups = _init(rank, world, port)
    part = load_part(pdir, rank, load_manifest(pdir), verify=False)
    rows = []
    for rep in range(reps):
        for mode in modes:
            for backend in _order(rep):
                comm = Comm(rank, world, groups[backend])
                graph = ShardedGraph.from_partition(part, comm, EngineConfig(mode=mode))
                trainer = Trainer(graph, part, ModelConfig(model=model), TrainConfig(epochs=epochs, eval_every=0))
                comm.barrier()
                times = [trainer.step(e, memory.baseline_bytes())["epoch_time_s"] for e in range(epochs)]
                rows.append({"model": model, "mode": mode, "workers": world, "backend": backend, "rep": rep,
                             "epoch_time_s": statistics.median(times[1:]), "epochs": epochs - 1})
                del trainer, graph
    if rank == 0:
        _write_csv(os.path.join(out, f".epochs{world}.csv"), rows)
    dist.destroy_process_group(groups["ccl"])
    dist.destroy_process_group()


def _write_csv(path: str, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(world: int, child_args: list[str], timeout_s: float) -> None:
    """Run this module as ``world`` child ranks; kill them all and raise with their output on failure/timeout."""
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, "-m", __spec__.name, "--child", *child_args, "--rank", str(r),
                               "--world", str(world), "--port", str(port)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True) for r in range(world)]
    deadline, outputs = time.monotonic() + timeout_s, []
    try:
        for p in procs:
            try:
                outputs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic()))[0])
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"backend_bench: ranks still running after {timeout_s:.0f} s; killed") from None
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    if any(p.returncode for p in procs):
        raise RuntimeError("backend_bench: a rank failed:\n" + "\n".join(o[-3000:] for o in outputs))


def _loadavg() -> str:
    with open("/proc/loadavg") as f:
        return f.read().strip()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sarlab.executor.bench.backend_bench",
                                description=__doc__.split("\n")[0])
    p.add_argument("--out", help="output directory (created; existing result files are not replaced)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--graph", default="synthetic:nodes=20000,degree=10,features=64,classes=8,seed=0")
    p.add_argument("--workers", default="2,4", help="comma list of worker counts for the epoch times")
    p.add_argument("--modes", default="sar,oneshot")
    p.add_argument("--model", default="gcn")
    p.add_argument("--epochs", type=int, default=4, help="epochs per measurement (the first is warm-up)")
    p.add_argument("--skip", choices=["collectives", "epochs"], action="append", default=[])
    p.add_argument("--timeout", type=float, default=900, help="seconds per group of child ranks")
    p.add_argument("--child", choices=["collectives", "epochs"], help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--world", type=int, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--pdir", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child == "collectives":
        _collectives(a.rank, a.world, a.port, a.reps, a.out)
        return 0
    if a.child == "epochs":
        _epochs(a.rank, a.world, a.port, a.reps, a.out, a.pdir, a.modes.split(","), a.epochs, a.model)
        return 0
    if not a.out:
        p.error("--out DIR is required")
    from sarlab.kernels import ccl

    ok, why = ccl.available()
    if not ok:
        print(f"error: ccl backend unavailable: {why}", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    for name in (COLL_FILE, EPOCH_FILE, META_FILE):
        if os.path.exists(os.path.join(a.out, name)):
            print(f"error: {os.path.join(a.out, name)} exists; choose another --out", file=sys.stderr)
            return 2
    ccl.load()  # build once here, not in every rank
    import torch

    from sarlab.core.machine import cpu_model

    meta = {"command": " ".join([p.prog, *(argv if argv is not None else sys.argv[1:])]),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cpu": cpu_model(), "cores": len(os.sched_getaffinity(0)), "torch": torch.__version__,
            "ccl_env": {k: os.environ.get(k, v) for k, v in ccl.ENV_DEFAULTS.items()},
            "loadavg_before": _loadavg()}
    common = ["--out", a.out, "--reps", str(a.reps)]
    if "collectives" not in a.skip:
        print(f"collectives, 2 ranks (load {_loadavg()})", flush=True)
        _spawn(2, ["collectives", *common], a.timeout)
    if "epochs" not in a.skip:
        from sarlab.data.graphs import load_graph
        from sarlab.data.partition import partition

        graph = load_graph(a.graph)
        tmp = tempfile.mkdtemp(prefix="sarlab-backend-bench-")
        rows = []
        try:
            for world in [int(w) for w in a.workers.split(",")]:
                pdir = os.path.join(tmp, f"p{world}")
                partition(graph, world, pdir)
                print(f"epochs, {world} ranks (load {_loadavg()})", flush=True)
                _spawn(world, ["epochs", *common, "--pdir", pdir, "--modes", a.modes, "--epochs", str(a.epochs),
                               "--model", a.model], a.timeout)
                part_csv = os.path.join(a.out, f".epochs{world}.csv")
                with open(part_csv) as f:
                    rows += list(csv.DictReader(f))
                os.remove(part_csv)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        _write_csv(os.path.join(a.out, EPOCH_FILE), rows)
    meta["loadavg_after"] = _loadavg()
    with open(os.path.join(a.out, META_FILE), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"wrote {a.out}: load before {meta['loadavg_before']}, after {meta['loadavg_after']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
