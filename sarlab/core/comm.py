"""Communication: process-group set-up, pairwise ring exchanges, all-reduce, byte and wait counters.

Round ``r`` of the ring schedule sends to ``(rank + r) % world`` and receives from ``(rank - r) % world``;
every worker posts the same rounds in the same order, so the exchanges pair up without a coordinator.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

BACKENDS = ("gloo", "nccl", "ccl", "mpi")

# message kinds, folded into the point-to-point tag so concurrent exchanges never match each other
TAG_FEATURES, TAG_GRADS, TAG_HALO, TAG_HALO_GRADS = 1, 2, 3, 4


def check_backend(name: str) -> None:
    """Raise a clear error when a backend is unknown or not built into this torch."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}: choose one of {', '.join(BACKENDS)}")
    available = {
        "gloo": dist.is_gloo_available(),
        "nccl": dist.is_nccl_available() and torch.cuda.is_available(),
        "mpi": dist.is_mpi_available(),
        "ccl": _ccl_available(),
    }
    if not available[name]:
        hints = {
            "nccl": "NCCL needs a CUDA build of torch and a GPU",
            "mpi": "this torch was built without MPI support (build torch from source with MPI)",
            "ccl": "the oneCCL binding (oneccl_bindings_for_pytorch) is not installed",
            "gloo": "this torch was built without gloo",
        }
        usable = [b for b in BACKENDS if available[b]]
        raise RuntimeError(f"backend {name!r} is not available in this torch build: {hints[name]}. "
                           f"Available here: {', '.join(usable) or 'none'}")


def _ccl_available() -> bool:
    try:
        import oneccl_bindings_for_pytorch  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class CommStats:
    """Counters of one worker: bytes it sent/received and seconds it spent blocked waiting."""

    bytes_sent: int = 0
    bytes_recv: int = 0
    wait_s: float = 0.0

    def reset(self) -> None:
        self.bytes_sent, self.bytes_recv, self.wait_s = 0, 0, 0.0


@dataclass
class Pending:
    """In-flight point-to-point operations; ``wait`` blocks and books the blocked time."""

    works: list
    stats: CommStats
    done: bool = field(default=False)

    def wait(self) -> None:
        if self.done:
            return
        t0 = time.perf_counter()
        for work in self.works:
            work.wait()
        self.stats.wait_s += time.perf_counter() - t0
        self.done = True


class Comm:
    """One worker's view of the process group (``world == 1`` needs no process group)."""

    def __init__(self, rank: int = 0, world: int = 1, group=None):
        self.rank, self.world, self.group = rank, world, group
        self.stats = CommStats()

    def exchange(self, sends: list[tuple[int, torch.Tensor]], recvs: list[tuple[int, torch.Tensor]],
                 tag: int) -> Pending:
        """Post sends and receives (peer, tensor) without blocking; empty tensors are skipped."""
        # receives first: gloo sends its "ready to receive" notice on the same connection as data, and posted
        # after our own sends it can queue behind them, so that two peers exchanging at once take turns
        # (measured on a rate-limited link: exactly twice the time in about half the runs)
        ops = []
        for peer, tensor in recvs:
            if tensor.numel():
                ops.append(dist.P2POp(dist.irecv, tensor, peer, self.group, tag))
                self.stats.bytes_recv += tensor.numel() * tensor.element_size()
        for peer, tensor in sends:
            if tensor.numel():
                ops.append(dist.P2POp(dist.isend, tensor, peer, self.group, tag))
                self.stats.bytes_sent += tensor.numel() * tensor.element_size()
        works = dist.batch_isend_irecv(ops) if ops else []
        return Pending(works, self.stats)

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """In-place sum over workers (no-op for one worker); time and bytes are booked."""
        if self.world == 1:
            return tensor
        t0 = time.perf_counter()
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=self.group)
        self.stats.wait_s += time.perf_counter() - t0
        nbytes = tensor.numel() * tensor.element_size()
        # ring all-reduce moves ~2 (world-1)/world of the buffer each way
        moved = int(2 * (self.world - 1) / self.world * nbytes)
        self.stats.bytes_sent += moved
        self.stats.bytes_recv += moved
        return tensor

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier(group=self.group)
