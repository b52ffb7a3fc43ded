"""One rank of ``sarlab netbench``: transfers between emulated hosts over a torch.distributed backend, timed; rank 0
writes the samples as JSON.

``python -m sarlab.real.bench.netprobe OUT BYTES REPEATS TIMEOUT_S [BACKEND]`` under the env:// variables (the
netbench sets them, one process per host); BACKEND is ``gloo`` (default) or ``ccl``. Every sample is timed from a
barrier to a barrier, so it covers the whole transfer:

- ``oneway``: rank 0 sends BYTES to rank 1.
- ``bidir``: ranks 0 and 1 send BYTES to each other at once, each posting its receive before its send.
- ``bidir_send_first``: the same with the send posted first. Gloo then may queue a rank's "ready to receive"
  note behind its own outgoing data on the shared connection, and the two directions run one after the other.
- ``ring`` (3 or more hosts): every rank sends BYTES to the next and receives from the previous (receive first).
- ``latency``: half the round trip of a 4-byte ping-pong between ranks 0 and 1, one sample per round trip.
- ``tcp_oneway``, ``tcp_bidir``: the link itself, free of gloo's protocol: plain TCP sockets between ranks 0 and 1,
  one connection per direction (as ``iperf3 --bidir`` does); ``tcp_bidir`` sends BYTES both ways at once.
"""
from __future__ import annotations

import datetime
import json
import os
import socket
import sys
import threading
import time

import torch
import torch.distributed as dist

from sarlab.core.comm import prepare_backend
from sarlab.real.launch.lifecycle import die_with_parent

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


def _own_address() -> str:
    """This host's address on the emulated network: the source address of a route to the rendezvous host."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((os.environ["MASTER_ADDR"], 9))
        return s.getsockname()[0]


def _tcp_pair(pair: bool) -> tuple[socket.socket | None, socket.socket | None]:
    """(outgoing, incoming) TCP connections between ranks 0 and 1, one per direction; every rank calls it (the
    addresses are gathered collectively), ranks with ``pair`` False get (None, None)."""
    listener = socket.create_server((_own_address(), 0)) if pair else None
    where = [None] * dist.get_world_size()
    dist.all_gather_object(where, listener.getsockname() if listener else None)
    if listener is None:
        return None, None
    out = socket.create_connection(where[1 - dist.get_rank()])
    inc, _ = listener.accept()
    listener.close()
    return out, inc


def _recv_exactly(sock: socket.socket, buf: memoryview) -> None:
    got = 0
    while got < len(buf):
        n = sock.recv_into(buf[got:])
        if n == 0:
            raise ConnectionError("peer closed the connection in the middle of a transfer")
        got += n


def tcp_samples(nbytes: int, repeats: int) -> dict[str, list[float]]:
    """Seconds per ``tcp_oneway`` and ``tcp_bidir`` sample between ranks 0 and 1 (others only join the barriers)."""
    rank = dist.get_rank()
    data, sink = bytearray(nbytes), memoryview(bytearray(nbytes))
    out, inc = _tcp_pair(rank < 2)

    def oneway() -> None:
        if rank == 0:
            out.sendall(data)
            _recv_exactly(inc, sink[:1])  # the receiver's acknowledgement: the data has arrived
        elif rank == 1:
            _recv_exactly(inc, sink)
            out.sendall(b"k")

    def bidir() -> None:
        if rank < 2:
            sender = threading.Thread(target=out.sendall, args=(data,))
            sender.start()
            _recv_exactly(inc, sink)
            sender.join()

    try:
        return {"tcp_oneway": [_timed(oneway) for _ in range(repeats)],
                "tcp_bidir": [_timed(bidir) for _ in range(repeats)]}
    finally:
        for s in (out, inc):
            if s is not None:
                s.close()


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
    out.update(tcp_samples(nbytes, repeats))
    return out


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    out_path, nbytes, repeats, timeout_s = args[:4]
    backend = args[4] if len(args) > 4 else "gloo"
    die_with_parent(int(os.environ["SARLAB_LAUNCHER_PID"]))
    prepare_backend(backend)
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=float(timeout_s)))
    samples = measure(int(nbytes), int(repeats))
    if dist.get_rank() == 0:
        with open(out_path + ".tmp", "w") as f:
            json.dump(samples, f)
        os.replace(out_path + ".tmp", out_path)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
