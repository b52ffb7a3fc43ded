"""Message costs as the engine pays them, on ``world`` ranks over 127.0.0.1 (``python -m
sarlab.real.calibration.commbench``), over gloo or ``--backend ccl`` (oneCCL, :mod:`sarlab.kernels.ccl`).

Each rank posts its messages the engine's way (``dist.batch_isend_irecv`` of ``P2POp`` lists, then ``wait`` on
every work) in two patterns, for several message sizes, alternating patterns and sizes within every repeat so
that a slow spell of a shared machine lands on all of them:

* ``ring``: ``world - 1`` rounds, round ``r`` sends to ``p + r`` and receives from ``p - r`` (2 ops), waited
  before the next round is posted (``sar`` with prefetch 0);
* ``alltoall``: one batch of ``2 (world - 1)`` ops to and from every peer, then all waited (``oneshot``);
* ``globalround``: ``world - 1`` rounds as the SAR paper's library runs them (one exchange with every peer per
  round: the round's message to ``p + r`` and from ``p - r``, a 4-byte tensor to and from each other peer);
* ``incast`` (rank 0 only receives): ``k = 1 .. world-1`` peers send one message to rank 0 at once;
* ``allreduce`` (``--allreduce-sizes``): one ``all_reduce`` (SUM, float32) of each size, called and waited as the
  engine's gradient and loss all-reduces are (their wall time, ``allreduce_wall_s``).

Per (pattern, size) rank 0 reports medians over repeats of: the main thread's CPU time inside the posting call
(``post_s``) and inside the waits (``wait_s``), the process CPU time of the whole pattern (the backend's
threads included, ``cpu_s``) and the wall time (``wall_s``), each per pattern instance, with the op count. Main-thread
CPU time is what a worker's clock pays whatever the load (others time-slicing the core stretch the wall, not
the CPU); :func:`sarlab.simulator.calibration.fitting.fit_message_costs` turns it into per-call and per-op costs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist

from sarlab.core.memory import tune_malloc
from sarlab.real.calibration.ranks import BENCH_BACKENDS, join_group


def _timed_exchange(ops: list[dist.P2POp]) -> tuple[float, float]:
    """Post ``ops`` in one batch and wait for every work: (main-thread CPU s posting, waiting)."""
    t0 = time.thread_time()
    works = dist.batch_isend_irecv(ops)
    t1 = time.thread_time()
    for work in works:
        work.wait()
    return t1 - t0, time.thread_time() - t1


def ring_pass(rank: int, world: int, send: torch.Tensor, recv: torch.Tensor) -> dict[str, float]:
    """``world - 1`` ring rounds, each posted and waited before the next; totals over the pass."""
    post = wait = 0.0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for r in range(1, world):
        ops = [dist.P2POp(dist.isend, send, (rank + r) % world), dist.P2POp(dist.irecv, recv, (rank - r) % world)]
        a, b = _timed_exchange(ops)
        post, wait = post + a, wait + b
    rounds = world - 1
    return {"post_s": post / rounds, "wait_s": wait / rounds, "cpu_s": (time.process_time() - cpu0) / rounds,
            "wall_s": (time.perf_counter() - wall0) / rounds, "ops": 2}


def global_pass(rank: int, world: int, send: torch.Tensor, recv: torch.Tensor) -> dict[str, float]:
    """``world - 1`` rounds, each one batch with every peer (the round's real pair, 4-byte dummies elsewhere)."""
    post = wait = 0.0
    dummies_out = [torch.zeros(1) for _ in range(world)]
    dummies_in = [torch.zeros(1) for _ in range(world)]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for r in range(1, world):
        ops = []
        for peer in range(world):
            if peer != rank:
                out = send if peer == (rank + r) % world else dummies_out[peer]
                into = recv if peer == (rank - r) % world else dummies_in[peer]
                ops += [dist.P2POp(dist.isend, out, peer), dist.P2POp(dist.irecv, into, peer)]
        a, b = _timed_exchange(ops)
        post, wait = post + a, wait + b
    rounds = world - 1
    return {"post_s": post / rounds, "wait_s": wait / rounds, "cpu_s": (time.process_time() - cpu0) / rounds,
            "wall_s": (time.perf_counter() - wall0) / rounds, "ops": 2 * (world - 1)}


def alltoall(rank: int, world: int, sends: list[torch.Tensor], recvs: list[torch.Tensor]) -> dict[str, float]:
    """One batch of sends to and receives from every peer, then every work waited."""
    ops = []
    for r in range(1, world):
        ops.append(dist.P2POp(dist.isend, sends[r - 1], (rank + r) % world))
        ops.append(dist.P2POp(dist.irecv, recvs[r - 1], (rank - r) % world))
    cpu0, wall0 = time.process_time(), time.perf_counter()
    post, wait = _timed_exchange(ops)
    return {"post_s": post, "wait_s": wait, "cpu_s": time.process_time() - cpu0,
            "wall_s": time.perf_counter() - wall0, "ops": len(ops)}


def incast(rank: int, world: int, senders: int, buf: torch.Tensor, bufs: list[torch.Tensor]) -> float | None:
    """Ranks ``1..senders`` send ``buf`` to rank 0 at once; rank 0's wall time until all have arrived."""
    dist.barrier()
    if rank == 0:
        t0 = time.perf_counter()
        works = [dist.irecv(bufs[k], k + 1) for k in range(senders)]
        for work in works:
            work.wait()
        return time.perf_counter() - t0
    if rank <= senders:
        dist.send(buf, 0)
    return None


def allreduce_wall(buf: torch.Tensor) -> float:
    """Wall time of one ``all_reduce`` of ``buf`` from a barrier (the slowest rank's is what every rank waits)."""
    dist.barrier()
    t0 = time.perf_counter()
    dist.all_reduce(buf)
    return time.perf_counter() - t0


def run(rank: int, world: int, port: int, sizes: list[int], repeats: int, incast_bytes: int,
        patterns: tuple[str, ...] = ("ring", "alltoall"), backend: str = "gloo",
        allreduce_sizes: tuple[int, ...] = ()) -> dict | None:
    """Join the ``backend`` group of ``world`` ranks and measure; rank 0 returns the medians and raw samples."""
    torch.set_num_threads(1)
    tune_malloc(threshold=1 << 17)
    join_group(backend, port, rank, world)
    samples: dict[str, list[dict[str, float]]] = {}
    incasts: dict[str, list[float]] = {}
    allreduces: dict[str, list[float]] = {}
    try:
        tensors = {s: (torch.ones(max(s // 4, 1)), torch.empty(max(s // 4, 1)),
                       [torch.ones(max(s // 4, 1)) for _ in range(world - 1)],
                       [torch.empty(max(s // 4, 1)) for _ in range(world - 1)]) for s in sizes}
        big = torch.ones(max(incast_bytes // 4, 1))
        bigs = [torch.empty(max(incast_bytes // 4, 1)) for _ in range(world - 1)]
        reduced = {s: torch.ones(max(s // 4, 1)) for s in allreduce_sizes}
        for rep in range(repeats + 1):  # the first repeat warms connections and allocator up
            for size in sizes:
                send, recv, sends, recvs = tensors[size]
                for pattern in (patterns if rep % 2 == 0 else tuple(reversed(patterns))):
                    dist.barrier()
                    if pattern == "ring":
                        m = ring_pass(rank, world, send, recv)
                    elif pattern == "globalround":
                        m = global_pass(rank, world, send, recv)
                    else:
                        m = alltoall(rank, world, sends, recvs)
                    if rep:
                        samples.setdefault(f"{pattern}:{size}", []).append(m)
            for k in range(1, world):
                t = incast(rank, world, k, big, bigs)
                if rep and t is not None:
                    incasts.setdefault(str(k), []).append(t)
            for size, buf in reduced.items():
                wall = torch.tensor([allreduce_wall(buf)], dtype=torch.float64)
                dist.all_reduce(wall, op=dist.ReduceOp.MAX)
                if rep:
                    allreduces.setdefault(str(size), []).append(float(wall[0]))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return None
    medians = {key: {f: statistics.median(m[f] for m in ms) for f in ms[0]} for key, ms in samples.items()}
    return {"world": world, "backend": backend, "sizes": sizes, "repeats": repeats, "medians": medians,
            "samples": samples, "incast_bytes": incast_bytes,
            "incast_wall_s": {k: statistics.median(v) for k, v in incasts.items()}, "incast_samples": incasts,
            "allreduce_wall_s": {k: statistics.median(v) for k, v in allreduces.items()},
            "allreduce_samples": allreduces}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--sizes", default="256,16384,262144,2097152", help="message bytes (comma list)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--incast-bytes", type=int, default=1 << 20)
    parser.add_argument("--patterns", default="ring,alltoall", help="comma list of ring, alltoall, globalround")
    parser.add_argument("--backend", default="gloo", choices=BENCH_BACKENDS, help="torch.distributed backend")
    parser.add_argument("--allreduce-sizes", default="", help="all_reduce bytes (comma list; empty: none)")
    args = parser.parse_args(argv)
    result = run(args.rank, args.world, args.port, [int(s) for s in args.sizes.split(",")], args.repeats,
                 args.incast_bytes, tuple(args.patterns.split(",")), args.backend,
                 tuple(int(s) for s in args.allreduce_sizes.split(",") if s))
    if result is not None:
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
