"""Communication: process-group set-up, pairwise ring exchanges, all-reduce, byte and wait counters.

Round ``r`` of the ring schedule sends to ``(rank + r) % world`` and receives from ``(rank - r) % world``;
every worker posts the same rounds in the same order, so the exchanges pair up without a coordinator.

What the engine asks of a backend: ``batch_isend_irecv`` of the point-to-point ops of :meth:`Comm.exchange`
(tags ``TAG_*``; several exchanges may be in flight, e.g. the next ring round is posted before the current one is
waited on), ``all_reduce`` (SUM; float64/float32 and int64 tensors), ``barrier`` and, in the worker,
``all_gather_object``. Tags are not needed for correctness: for every ordered pair (A, B), the k-th message A
posts to B is the k-th message B posts to receive from A, because all ranks run the same sequence of exchanges
and both ends of a message skip it alike when it is empty (its size comes from the shared partition). Matching
in posting order per pair and direction, which the ``ccl`` backend guarantees in place of tags
(:mod:`sarlab.kernels.ccl`), is therefore enough.

Backends: ``gloo`` (built into torch), ``ccl`` (oneCCL, :mod:`sarlab.kernels.ccl`; :func:`prepare_backend` builds, loads
and registers it with torch.distributed in each process, before the process group is created; nothing happens at
import),
``nccl`` and ``mpi`` when this torch has them.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from sarlab.common.records import BACKENDS
from sarlab.data.validate_data import InputError

# message kinds, folded into the point-to-point tag so concurrent exchanges never match each other
TAG_FEATURES, TAG_GRADS, TAG_HALO, TAG_HALO_GRADS = 1, 2, 3, 4


class BackendUnavailable(InputError, RuntimeError):
    """A backend this torch build or machine cannot run: a user's choice to change (exit 2), and a RuntimeError as
    it always was."""


def check_backend(name: str) -> None:
    """Raise a clear one-line error when a backend is unknown or unusable here; for ``ccl``, build its extension
    now (once, cached) so that the workers find it ready."""
    if name not in BACKENDS:
        raise InputError(f"unknown backend {name!r}: choose one of {', '.join(BACKENDS)}")
    if name == "nccl":
        raise InputError("backend 'nccl' moves tensors between GPUs, and this engine runs on CPUs: use --backend "
                         "gloo (or ccl)")
    ccl_ok, ccl_why = _ccl_available()
    available = {
        "gloo": dist.is_gloo_available(),
        "nccl": dist.is_nccl_available() and torch.cuda.is_available(),
        "mpi": dist.is_mpi_available(),
        "ccl": ccl_ok,
    }
    if not available[name]:
        hints = {
            "nccl": "NCCL needs a CUDA build of torch and a GPU",
            "mpi": "this torch was built without MPI support (build torch from source with MPI)",
            "ccl": ccl_why,
            "gloo": "this torch was built without gloo",
        }
        where = "" if name == "ccl" else " in this torch build"
        usable = [b for b in BACKENDS if available[b]]
        raise BackendUnavailable(f"backend {name!r} is not available{where}: {hints[name]}. "
                           f"Available here: {', '.join(usable) or 'none'}")
    prepare_backend(name)


def prepare_backend(name: str) -> str:
    """Make backend ``name`` ready for ``dist.init_process_group(name, ...)`` in this process; returns ``name``.

    For ``ccl``: build (first time, about a minute; cached) and load the extension, register it. Other backends
    need nothing. Raises RuntimeError (one line) when the ccl libraries are missing or the build fails.
    """
    if name != "ccl":
        return name
    from sarlab.kernels import ccl

    try:
        ccl.load()
    except (RuntimeError, OSError, ImportError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else err.__class__.__name__
        raise RuntimeError(f"backend 'ccl' could not be built or loaded: {first}") from err
    ccl.register()
    return name


def _ccl_available() -> tuple[bool, str]:
    """(True, "") when oneCCL, its headers, the Intel runtime, libfabric and a compiler are installed, else (False,
    what is missing and the pip/apt command that installs it)."""
    from sarlab.kernels import ccl

    return ccl.available()


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
