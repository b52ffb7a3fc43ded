"""Launch N local worker processes over loopback, watch them, and report which rank failed and why."""
from __future__ import annotations

import datetime
import json
import multiprocessing as mp
import os
import shutil
import signal
import socket
import tempfile
import time

import torch
import torch.distributed as dist

from sarlab.comm import check_backend
from sarlab.partition import PartitionError, load_manifest, verify_files

from .jobs import Job
from .worker import spawned_entry


class LaunchError(RuntimeError):
    """The run could not start (bad input, busy port, unavailable backend)."""


class WorkerError(RuntimeError):
    """A worker failed; ``rank`` and ``reason`` say which and why (with the child's traceback)."""

    def __init__(self, rank: int, reason: str):
        super().__init__(f"rank {rank} failed: {reason}")
        self.rank, self.reason = rank, reason


def validate(job: Job, world: int) -> dict:
    """Check everything that can be checked before any compute; returns the manifest."""
    check_backend(job.backend)
    manifest = load_manifest(job.partition_dir)
    if manifest["num_parts"] != world:
        raise PartitionError(f"{job.partition_dir} has {manifest['num_parts']} parts but {world} workers were "
                             f"requested; use --workers {manifest['num_parts']} or re-partition into {world} parts")
    verify_files(job.partition_dir, manifest)
    return manifest


def _open_store(host: str, port: int, timeout_s: float):
    try:
        return dist.TCPStore(host, port, world_size=None, is_master=True,
                             timeout=datetime.timedelta(seconds=timeout_s), wait_for_workers=False)
    except (RuntimeError, OSError) as err:
        text = str(err).splitlines()[0] if str(err) else err.__class__.__name__
        raise LaunchError(f"cannot open the rendezvous port {host}:{port} ({text}); the port is busy or not "
                          "bindable: pass --port 0 to pick a free one, or another port") from err


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def launch(job: Job, world: int, host: str = "127.0.0.1", port: int = 0, grace_s: float = 5.0,
           run_timeout_s: float | None = None):
    """Run ``job`` on ``world`` local processes; returns rank 0's gathered result.

    If a worker fails (exception or signal), the others are terminated at once and :class:`WorkerError`
    names the rank, how it ended and its traceback. ``run_timeout_s`` bounds the whole run.
    """
    validate(job, world)
    store = _open_store(host, port, job.timeout_s)
    port = store.port
    rundir = tempfile.mkdtemp(prefix="sarlab-run-")
    ctx = mp.get_context("spawn")
    procs = []
    try:
        for rank in range(world):
            proc = ctx.Process(target=spawned_entry, args=(job, rank, world, host, port, rundir),
                               name=f"sarlab-rank{rank}", daemon=False)
            proc.start()
            procs.append(proc)
        start = time.monotonic()
        while True:
            codes = [p.exitcode for p in procs]
            failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                _stop(procs, grace_s)
                raise _failure(failed, codes, rundir)
            if all(c == 0 for c in codes):
                break
            if run_timeout_s is not None and time.monotonic() - start > run_timeout_s:
                _stop(procs, grace_s)
                raise WorkerError(-1, f"run exceeded {run_timeout_s:g}s and was stopped")
            time.sleep(0.05)
        result = os.path.join(rundir, "result")
        if job.kind == "verify":
            return torch.load(result, weights_only=True)
        with open(result) as f:
            return json.load(f)
    finally:
        _stop(procs, grace_s)
        del store
        shutil.rmtree(rundir, ignore_errors=True)


def _failure(failed: list[int], codes: list, rundir: str) -> WorkerError:
    """Prefer the rank that raised (it has a traceback) over ranks that died of the aftermath."""
    def traceback_of(rank: int) -> str | None:
        path = os.path.join(rundir, f"rank{rank}.err")
        if os.path.exists(path):
            with open(path) as f:
                return f.read()
        return None

    aftermath = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")
    signalled = [r for r in failed if codes[r] < 0]
    root = [r for r in failed if codes[r] > 0 and not any(m in (traceback_of(r) or "") for m in aftermath)]
    rank = (signalled or root or failed)[0]
    reason = _describe_exit(codes[rank])
    text = traceback_of(rank)
    if text:
        reason += "\n" + text.rstrip()
    others = [r for r in failed if r != rank]
    if others:
        reason += f"\n(rank(s) {others} also exited non-zero)"
    return WorkerError(rank, reason)


def _stop(procs, grace_s: float) -> None:
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.terminate()
    deadline = time.monotonic() + grace_s
    for p in alive:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(5)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
