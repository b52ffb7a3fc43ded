"""One rank of ``sarlab netbench``: gloo transfers between emulated hosts, timed; rank 0 writes the samples as JSON.

``python -m real.netprobe OUT BYTES REPEATS TIMEOUT_S`` under the env:// variables (the netbench sets them, one
process per host). Every sample is timed from a barrier to a barrier, so it covers the whole transfer:

- ``oneway``: rank 0 sends BYTES to rank 1.
- ``bidir``: ranks 0 and 1 send BYTES to each other at once, each posting its receive before its send.
- ``bidir_send_first``: the same with the send posted first. Gloo then may queue a rank's "ready to receive"
  note behind its own outgoing data on the shared connection, and the two directions run one after the other.
- ``ring`` (3 or more hosts): every rank sends BYTES to the next and receives from the previous (receive first).
- ``latency``: half the round trip of a 4-byte ping-pong between ranks 0 and 1, one sample per round trip.
"""
from __future__ import annotations

import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist

from .lifecycle import die_with_parent

LATENCY_ROUNDS = 200


def _timed(fn) -> float:
    dist.barrier()
    t0 = time.perf_counter()
    fn()
    dist.barrier()
    return time.perf_counter() - t0


def _exchange(send: torch.Tensor, recv: torch.Tensor, to: int, frm: int, recv_first: bool) -> None:
    ops = [dist.P2POp(dist.isend, send, to), dist.P2POp(dist.irecv, recv, frm)]
    for work in dist.batch_isend_irecv(ops[::-1] if recv_first else ops):
        work.wait()


def measure(nbytes: int, repeats: int) -> dict[str, list[float]]:
    """Seconds per sample of each pattern (see the module docstring); every rank must call it."""
    rank, world = dist.get_rank(), dist.get_world_size()
    send = torch.ones(max(1, nbytes // 4), dtype=torch.float32)
    recv = torch.empty_like(send)
    peer = 1 - rank if rank < 2 else None

    def oneway() -> None:
        if rank == 0:
            dist.send(send, 1)
        elif rank == 1:
            dist.recv(recv, 0)

    def bidir(recv_first: bool) -> None:
        if peer is not None:
            _exchange(send, recv, peer, peer, recv_first)

    def ring() -> None:
        _exchange(send, recv, (rank + 1) % world, (rank - 1) % world, True)

    patterns = {"oneway": oneway, "bidir": lambda: bidir(True), "bidir_send_first": lambda: bidir(False)}
    if world >= 3:
        patterns["ring"] = ring
    out: dict[str, list[float]] = {name: [_timed(fn) for _ in range(repeats)] for name, fn in patterns.items()}
    ping, pong = torch.zeros(1), torch.zeros(1)
    rounds = []
    dist.barrier()
    for _ in range(LATENCY_ROUNDS):
        t0 = time.perf_counter()
        if rank == 0:
            dist.send(ping, 1)
            dist.recv(pong, 1)
        elif rank == 1:
            dist.recv(pong, 0)
            dist.send(ping, 0)
        rounds.append(time.perf_counter() - t0)
    out["latency"] = [t / 2 for t in rounds]
    return out


def main(argv: list[str] | None = None) -> None:
    out_path, nbytes, repeats, timeout_s = sys.argv[1:5] if argv is None else argv
    die_with_parent(int(os.environ["SARLAB_LAUNCHER_PID"]))
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=float(timeout_s)))
    samples = measure(int(nbytes), int(repeats))
    if dist.get_rank() == 0:
        with open(out_path + ".tmp", "w") as f:
            json.dump(samples, f)
        os.replace(out_path + ".tmp", out_path)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
