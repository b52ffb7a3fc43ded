"""Two-process point-to-point benchmark on 127.0.0.1 over gloo or ``--backend ccl`` (run as ``python -m
sarlab.real.calibration.netbench``).

Rank 0 prints one JSON line: one-way times of a ping-pong per size, the time per message of a stream of
back-to-back small messages, the CPU time of posting one isend/irecv pair, and the process CPU seconds per
byte a rank sends or receives while both ranks exchange big buffers (loopback copies), and the wall time of
a bulk exchange of engine-sized buffers (both directions at once, fresh receive buffer). Run as two separate
interpreters (not multiprocessing) so that it works from pytest, notebooks and scripts alike.
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


def run(rank: int, port: int, sizes: list[int], repeats: int, stream: int, bulk: int = 64 << 20,
        backend: str = "gloo") -> dict | None:
    """Join the 2-rank ``backend`` group and measure; rank 0 returns the results."""
    torch.set_num_threads(1)
    tune_malloc(threshold=1 << 17)  # the engine's malloc settings: large buffers are fresh pages
    join_group(backend, port, rank, 2, timeout_s=60.0)
    peer = 1 - rank
    result: dict = {"backend": backend, "one_way_s": {}, "stream_s": None, "call_s": None}
    try:
        for size in sizes:
            buf = torch.zeros(max(size // 4, 1))
            times = []
            for i in range(repeats + 2):
                dist.barrier()
                t0 = time.perf_counter()
                if rank == 0:
                    dist.send(buf, peer)
                    dist.recv(buf, peer)
                else:
                    dist.recv(buf, peer)
                    dist.send(buf, peer)
                if i >= 2:
                    times.append(time.perf_counter() - t0)
            result["one_way_s"][str(size)] = min(times) / 2.0  # other tenants can only lengthen a round trip
        small = [torch.zeros(256) for _ in range(stream)]
        dist.barrier()
        t0 = time.perf_counter()
        works = [dist.isend(t, peer) if rank == 0 else dist.irecv(t, peer) for t in small]
        for work in works:
            work.wait()
        dist.barrier()
        result["stream_s"] = (time.perf_counter() - t0) / stream
        calls = []
        for _ in range(repeats + 2):
            send, recv = torch.zeros(256), torch.zeros(256)
            dist.barrier()
            t0 = time.perf_counter()
            works = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, peer)])
            calls.append(time.perf_counter() - t0)
            for work in works:
                work.wait()
        result["call_s"] = min(calls[2:])
        # CPU cost of moving bytes (loopback copies in the backend's threads): both ranks exchange big buffers at
        # once, as the engine's rounds do; process CPU time over the bytes this rank sent and received
        big = 8 << 20
        send = torch.ones(big // 4)
        dist.barrier()
        cpu0 = time.process_time()
        for _ in range(max(repeats // 2, 4)):
            recv = torch.empty(big // 4)  # a fresh buffer per round, as the engine's rounds allocate
            works = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, peer)])
            for work in works:
                work.wait()
            del recv
        cpu = torch.tensor([(time.process_time() - cpu0) / (2.0 * big * max(repeats // 2, 4))], dtype=torch.float64)
        dist.all_reduce(cpu)
        result["cpu_s_per_byte"] = float(cpu[0]) / 2.0
        # bulk exchanges as the engine's halo rounds make them: both ranks send and receive ``bulk`` bytes at
        # once, into a fresh receive buffer (first-touch faults included); the wall time per exchange gives
        # the bandwidth one direction of a link sustains for engine-sized messages
        send = torch.ones(bulk // 4)
        walls = []
        for _ in range(max(repeats // 3, 3)):
            dist.barrier()
            t0 = time.perf_counter()
            recv = torch.empty(bulk // 4)
            works = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, peer)])
            for work in works:
                work.wait()
            walls.append(time.perf_counter() - t0)
            del recv
        wall = torch.tensor([statistics.median(walls)], dtype=torch.float64)
        dist.all_reduce(wall, op=dist.ReduceOp.MAX)
        result["bulk_bytes"] = bulk
        result["bulk_exchange_s"] = float(wall[0])
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return result if rank == 0 else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--sizes", default="4,4096,65536,1048576")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--stream", type=int, default=64)
    parser.add_argument("--bulk", type=int, default=64 << 20, help="bytes of the bulk exchange")
    parser.add_argument("--backend", default="gloo", choices=BENCH_BACKENDS, help="torch.distributed backend")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    result = run(args.rank, args.port, sizes, args.repeats, args.stream, args.bulk, args.backend)
    if result is not None:
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
