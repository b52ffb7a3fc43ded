"""Launch N worker processes on loopback or on an emulated cluster network, watch them, and report which rank failed
and why; on every way out (success, a failed rank, SIGINT/SIGTERM) stop every worker and remove what the run made.

Workers run :func:`sarlab.real.launch.worker.main` in sessions of their own (a Ctrl-C on the terminal reaches only
the launcher, which stops them), each asking the kernel to kill it when the launcher dies. On loopback they are forked
from a preloaded process (:mod:`sarlab.real.launch.zygote`: no worker imports torch again); on an emulated network,
or when no zygote can serve, they are fresh interpreters, ``python -m sarlab.real.launch.worker_entry RUNDIR RANK``.
They rendezvous with env:// semantics: on ``loopback`` at a store the launcher hosts on 127.0.0.1, on ``veth`` at rank
0's store on host 0's address, as torchrun ranks on real hosts do.
"""
from __future__ import annotations

import datetime
import json
import logging
import math
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import replace

import torch
import torch.distributed as dist

from sarlab.common.paths import package_parent
from sarlab.core.comm import check_backend
from sarlab.data.partition import PartitionError, check_partition, load_manifest
from sarlab.data.validate_data import InputError, check_int
from sarlab.kernels.ccl import MACHINE_RANKS_ENV
from sarlab.real.launch import netns, zygote
from sarlab.real.launch.jobs import Fault, Job
from sarlab.real.launch.lifecycle import signals_deferred, signals_raise
from sarlab.real.launch.netspec import NetSpec

_log = logging.getLogger(__name__)

_PACKAGE_ROOT = str(package_parent())  # what a worker needs on PYTHONPATH


class LaunchError(RuntimeError):
    """The run could not start (bad input, busy port, unavailable backend)."""


class WorkerError(RuntimeError):
    """A worker failed; ``rank`` and ``reason`` say which and why (with the child's traceback)."""

    def __init__(self, rank: int, reason: str):
        super().__init__(f"rank {rank} failed: {reason}")
        self.rank, self.reason = rank, reason

    def __reduce__(self):  # picklable (a process pool returns it to its parent), with both arguments
        return (type(self), (self.rank, self.reason))


def validate(job: Job, world: int, net: NetSpec | None = None) -> dict:
    """Check everything that can be checked before any compute or network set-up; returns the manifest."""
    check_int("workers", world, 1)
    check_backend(job.backend)
    manifest = load_manifest(job.partition_dir)
    if manifest["num_parts"] != world:
        raise PartitionError(f"{job.partition_dir} has {manifest['num_parts']} parts but {world} workers were "
                             f"requested; use --workers {manifest['num_parts']} or re-partition into {world} parts")
    check_partition(job.partition_dir, manifest)  # one part at a time: files, checksums, arrays, labels
    preflight(world, net, job.fault, job.timeout_s)
    return manifest


def preflight(world: int, net: NetSpec | None = None, fault: Fault | None = None,
              timeout_s: float | None = None) -> None:
    """The checks of a launch that need no partition: ``world`` and ``timeout_s`` are sane, the network spec fits
    ``world`` workers and this machine can build it (root, ``ip``, ``tc``, kernel features), and the fault names a
    rank and a network it can use."""
    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        raise InputError(f"workers must be an integer >= 1, got {world!r}")
    if timeout_s is not None and not (math.isfinite(timeout_s) and timeout_s > 0):
        raise InputError(f"timeout must be a finite number > 0 (seconds), got {timeout_s!r}")
    net = net or NetSpec()
    net.hosts_for(world)
    if fault is not None and not 0 <= fault.rank < world:
        raise InputError(f"fault on rank {fault.rank}, but the ranks are 0..{world - 1}")
    if fault is not None and fault.kind == "cut" and not net.emulated:
        raise InputError("the `cut` fault takes a link down, so it needs an emulated network: add "
                         "--net veth:rate=RATE")
    if net.emulated:
        netns.check_host()


def _open_store(host: str, port: int, timeout_s: float):
    try:
        return dist.TCPStore(host, port, world_size=None, is_master=True,
                             timeout=datetime.timedelta(seconds=timeout_s), wait_for_workers=False)
    except (RuntimeError, OSError) as err:
        text = str(err).splitlines()[0] if str(err) else err.__class__.__name__
        raise LaunchError(f"cannot open the rendezvous port {host}:{port} ({text}); the port is busy or not "
                          "bindable: pass --port 0 to pick a free one, or another port") from err


def _describe_exit(code: int) -> str:
    if code == -signal.SIGKILL:
        return ("killed by signal SIGKILL (the kernel's OOM killer sends it when memory runs out: compare the size "
                "check's estimate with the memory available, or use fewer workers or a smaller model)")
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def launch(job: Job, world: int, host: str = "127.0.0.1", port: int = 0, grace_s: float = 5.0,
           run_timeout_s: float | None = None, net: NetSpec | str | None = None, log=_log.info):
    """Run ``job`` on ``world`` local processes; returns rank 0's gathered result.

    If a worker fails (exception or signal), the others are stopped at once and :class:`WorkerError` names the
    rank, how it ended and its traceback; with an emulated network, a rank whose link is down is named as
    unreachable. ``run_timeout_s`` bounds the whole run. SIGINT/SIGTERM raise
    :class:`~sarlab.real.launch.lifecycle.Interrupted` after the same clean-up.

    Args:
        net: ``loopback`` (default: ``host``/``port`` are the rendezvous store's) or an emulated network spec
            ``veth:rate=R[,hosts=H]`` (needs root; ``host``/``port`` are then unused).
        log: where the launcher's one-line notes go (network set-up, leftovers it removed).
    """
    net = NetSpec.parse(net)
    validate(job, world, net)
    job = replace(job, net=str(net))
    network = None
    if net.emulated:
        netns.remove_leftovers(log)
        network = netns.EmulatedNetwork(net, world)
    else:
        netns.remove_stale_rundirs(log)
    procs: list[subprocess.Popen] = []
    store = None
    rundir = tempfile.mkdtemp(prefix=f"{netns.PREFIX}-run-{os.getpid()}-")
    try:
        with signals_raise():
            if network is not None:
                network.create()
                if not job.quiet:
                    log(f"network: {network.describe()}")
            else:
                store = _open_store(host, port, job.timeout_s)
                port = store.port
            with open(os.path.join(rundir, "job.pkl"), "wb") as f:
                pickle.dump({"job": job, "world": world}, f)
            preloaded = zygote.current(_PACKAGE_ROOT) if network is None else None  # emulated: in the namespaces
            for rank in range(world):
                procs.append(_start(rank, world, rundir, network, host, port, preloaded))
                if preloaded is not None and not isinstance(procs[-1], zygote.ForkedWorker):
                    preloaded = None  # it failed (and was stopped): this run's other ranks start fresh too
            _watch(procs, network, rundir, grace_s, run_timeout_s, job.timeout_s)
            result = os.path.join(rundir, "result")
            if job.kind == "verify":
                return torch.load(result, weights_only=True)
            with open(result) as f:
                return json.load(f)
    finally:
        with signals_deferred():  # a second signal must not cut the clean-up short
            try:
                stop_workers(procs, grace_s)
            finally:
                del store
                if network is not None:
                    network.destroy()
                shutil.rmtree(rundir, ignore_errors=True)


def worker_env(rank: int, world: int, host: str, port: int) -> dict[str, str]:
    """The environment of a process this launcher starts: ours, plus the env:// variables of ``rank``, the
    launcher's pid (the process dies with it), how many ranks it starts on this machine (every one, whatever
    emulated host it is on: :data:`sarlab.kernels.ccl.MACHINE_RANKS_ENV`) and a PYTHONPATH that finds this
    package."""
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
               **{MACHINE_RANKS_ENV: str(world)},
               MASTER_ADDR=host, MASTER_PORT=str(port), LOCAL_RANK=str(rank),
               SARLAB_LAUNCHER_PID=str(os.getpid()),
               PYTHONPATH=os.pathsep.join(filter(None, [_PACKAGE_ROOT, os.environ.get("PYTHONPATH")])))
    for key in ("SARLAB_STORE_HOST_RANK0", "TORCHELASTIC_USE_AGENT_STORE", *netns.IFACE_ENV):
        env.pop(key, None)
    return env


def _start(rank: int, world: int, rundir: str, network: netns.EmulatedNetwork | None, host: str, port: int,
           preloaded: zygote.Zygote | None = None) -> subprocess.Popen | zygote.ForkedWorker:
    """Rank ``rank``'s worker: forked from ``preloaded`` when given and it serves, else a fresh interpreter (inside
    its host's namespace on an emulated network)."""
    env = worker_env(rank, world, host, port)
    forked = preloaded.fork_or_stop(f"rank {rank}", [rundir, str(rank)], env) if preloaded is not None else None
    if forked is not None:
        return forked
    prefix: list[str] = []
    if network is not None:
        env.update(network.env(rank), LOCAL_WORLD_SIZE=str(network.per_host), SARLAB_STORE_HOST_RANK0="1")
        prefix = network.command(rank)
    return subprocess.Popen([*prefix, sys.executable, "-m", "sarlab.real.launch.worker_entry", rundir,
                             str(rank)], env=env,
                            start_new_session=True)


#: a pause of the launcher's watch loop (it wakes every 50 ms) longer than this is a suspension, not load
SUSPEND_GAP_S = 2.0


class Suspension:
    """How long the job was suspended as a whole: the launcher itself stopped (its watch loop paused) or every
    live worker stopped (SIGSTOP, a scheduler's suspend, a cgroup freezer) at once; the longest such pause."""

    def __init__(self):
        self.longest, self._last, self._all_stopped_since = 0.0, time.monotonic(), None

    def tick(self, procs: list[subprocess.Popen]) -> None:
        now = time.monotonic()
        gap = now - self._last if now - self._last > SUSPEND_GAP_S else 0.0
        alive = [p for p in procs if p.poll() is None]
        if alive and all(_stopped(p.pid) for p in alive):
            self._all_stopped_since = self._all_stopped_since or now
            gap = max(gap, now - self._all_stopped_since)
        else:
            self._all_stopped_since = None
        self.longest, self._last = max(self.longest, gap), now

    def explains(self, timeout_s: float | None, failed: list[int], rundir: str) -> bool:
        """Whether a timeout after a suspension of at least the wait timeout explains the failure."""
        timed_out = any(m in _traceback_of(rundir, r).lower() for r in failed for m in TIMEOUT_MARKERS)
        return timeout_s is not None and timed_out and self.longest >= 0.9 * timeout_s


def _watch(procs: list[subprocess.Popen], network, rundir: str, grace_s: float,
           run_timeout_s: float | None, timeout_s: float | None = None) -> None:
    start = time.monotonic()
    suspension = Suspension()
    while True:
        suspension.tick(procs)
        codes = [p.poll() for p in procs]
        failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            failed = _settle(procs, failed, rundir)
            down = network.hosts_down() if network is not None else []
            stalled = stalled_ranks(procs, failed, rundir)  # before they are stopped
            stop_workers(procs, grace_s)
            if suspension.explains(timeout_s, failed, rundir) and not down:
                raise LaunchError(f"the job was suspended for {suspension.longest:.0f}s as a whole (stopped and "
                                  f"continued), longer than the {timeout_s:g}s a wait may block (--timeout): the "
                                  "ranks' waits timed out when it continued, no rank failed; run again with a "
                                  "larger --timeout (with --checkpoint the run resumes where it was)")
            if stalled and not down:
                raise _stall_failure(stalled, failed, [p.returncode for p in procs], rundir)
            raise _failure(failed, [p.returncode for p in procs], rundir, network, down)
        if all(c == 0 for c in codes):
            return
        if run_timeout_s is not None and time.monotonic() - start > run_timeout_s:
            stop_workers(procs, grace_s)
            raise WorkerError(-1, f"run exceeded {run_timeout_s:g}s and was stopped")
        time.sleep(0.05)


#: what a rank's traceback says when it failed only because a peer went away (the peer is the one to name)
AFTERMATH_MARKERS = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")


def _settle(procs: list, failed: list[int], rundir: str, settle_s: float = 3.0) -> list[int]:
    """The failed ranks, once the one that caused the failure is among them: when every rank that failed so far
    only lost a peer, wait up to ``settle_s`` for that peer (a rank that raised closes its connections before it
    has written its traceback and exited, so its peers can exit first)."""
    deadline = time.monotonic() + settle_s
    while time.monotonic() < deadline and all(
            any(m in _traceback_of(rundir, r) for m in AFTERMATH_MARKERS) for r in failed):
        time.sleep(0.05)
        failed = [r for r, p in enumerate(procs) if p.poll() not in (None, 0)]
    return failed


#: the last line of a rank's traceback when a disk filled (shown alone: the atomic writes keep the old files whole)
FULL_DISK_MARKERS = ("No space left on device", "Disk quota exceeded")
#: what a rank's traceback says when a wait of its timed out (gloo, c10d, the store)
TIMEOUT_MARKERS = ("timed out", "timeout")


def _traceback_of(rundir: str, rank: int) -> str:
    try:
        with open(os.path.join(rundir, f"rank{rank}.err")) as f:
            return f.read()
    except OSError:
        return ""


def _progress_of(rundir: str, rank: int) -> int:
    """The epoch ``rank`` last began (0: none yet)."""
    try:
        with open(os.path.join(rundir, f"rank{rank}.progress")) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (SIGSTOP, SIGTSTP, a debugger)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


def stalled_ranks(procs: list[subprocess.Popen], failed: list[int], rundir: str, settle_s: float = 2.0) -> list[int]:
    """When a rank failed because a wait timed out: the ranks that stopped making progress (the ones it waited for),
    else [].

    A stopped process (SIGSTOP) is stalled; otherwise the live ranks furthest behind in epochs are, once the ranks
    that were only waiting too have had ``settle_s`` to time out and exit."""
    if not any(m in _traceback_of(rundir, r).lower() for r in failed for m in TIMEOUT_MARKERS):
        return []
    alive = [r for r, p in enumerate(procs) if p.poll() is None]
    stopped = [r for r in alive if _stopped(procs[r].pid)]
    if stopped:
        return stopped
    deadline = time.monotonic() + settle_s
    while time.monotonic() < deadline:
        progress = {r: _progress_of(rundir, r) for r in alive if procs[r].poll() is None}
        if progress and len(set(progress.values())) > 1:
            break
        time.sleep(0.1)
    progress = {r: _progress_of(rundir, r) for r in alive if procs[r].poll() is None}
    if not progress:
        return []
    least = min(progress.values())
    return [r for r, e in sorted(progress.items()) if e == least]


def _stall_failure(stalled: list[int], failed: list[int], codes: list, rundir: str) -> WorkerError:
    rank = stalled[0]
    waiters = [r for r in failed if r not in stalled]
    epoch = _progress_of(rundir, rank)
    where = f"in epoch {epoch}" if epoch else "before its first epoch"
    reason = (f"stopped making progress {where} (rank(s) {stalled} did not answer); rank(s) {waiters} timed out "
              f"waiting for it and exited (exit codes {dict(enumerate(codes))})")
    tail = _traceback_of(rundir, waiters[0]).strip().splitlines()[-1:] if waiters else []
    if tail:
        reason += f"\nrank {waiters[0]}: {tail[0]}"
    return WorkerError(rank, reason)


def _failure(failed: list[int], codes: list, rundir: str, network=None, down: list[int] | None = None) -> WorkerError:
    """Name the rank(s) whose link is down first; else prefer the rank that raised (it has a traceback) over ranks
    that died of the aftermath."""
    def traceback_of(rank: int) -> str | None:
        path = os.path.join(rundir, f"rank{rank}.err")
        if os.path.exists(path):
            with open(path) as f:
                return f.read()
        return None

    if down:
        unreachable = [r for h in down for r in network.ranks_on(h)]
        hosts = ", ".join(f"host {h} ({network.namespace(h)})" for h in down)
        reason = (f"unreachable: the network link of {hosts} is down; rank(s) {unreachable} could not be reached "
                  f"and every rank stopped (exit codes {dict(enumerate(codes))})")
        return WorkerError(unreachable[0], reason)
    signalled = [r for r in failed if codes[r] < 0]
    root = [r for r in failed if codes[r] > 0 and not any(m in (traceback_of(r) or "") for m in AFTERMATH_MARKERS)]
    rank = (signalled or root or failed)[0]
    reason = _describe_exit(codes[rank])
    text = traceback_of(rank)
    last = text.strip().splitlines()[-1] if text and text.strip() else ""
    if any(m in last for m in FULL_DISK_MARKERS):  # not a bug: the line says all (the old file is whole)
        reason += f": {last}"
    elif text:
        reason += "\n" + text.rstrip()
    others = [r for r in failed if r != rank]
    if others:
        reason += f"\n(rank(s) {others} also exited non-zero)"
    return WorkerError(rank, reason)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # the worker leads its own session: this reaches anything it started
    except ProcessLookupError:
        pass


def stop_workers(procs: list[subprocess.Popen], grace_s: float = 5.0) -> None:
    """SIGTERM every running worker, SIGKILL what is left after ``grace_s``, and reap them all."""
    alive = [p for p in procs if p.poll() is None]
    for p in alive:
        _signal_group(p, signal.SIGTERM)
        if _stopped(p.pid):
            _signal_group(p, signal.SIGCONT)  # a stopped process acts on the SIGTERM only once continued
    deadline = time.monotonic() + grace_s
    for p in alive:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(p, signal.SIGKILL)
            p.wait(10)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
