"""Run a group of benchmark processes (ranks of a probe), wait for all of them, or fail with the first one's stderr.

Shared by every probe of the calibration that starts processes: the gloo ranks without the engine
(:mod:`sarlab.real.calibration.roundbench`, :mod:`sarlab.real.calibration.progressbench`), netbench, commbench and
sharebench (:mod:`sarlab.real.calibration.hostbench`). Every process's stdout and stderr go to temporary files; the
first process to exit non-zero, or the deadline, ends the run with a :class:`RuntimeError` that carries every
process's stderr tail; on the way out every process still running is killed (no orphans).

A command ``[sys.executable, "-m", MODULE, ARGS...]`` is forked from the zygote (:func:`sarlab.real.launch.zygote.
start_module`) with ``fork=True``: ready in milliseconds instead of the 1.5-3 s of CPU a fresh interpreter spends
importing torch, which a calibration that starts some 50 processes would pay about 50 times (most of a quick
calibration's minute on the 2-core VM). The benchmarks set their own threads (``torch.set_num_threads``), which a
forked child needs (the zygote's OpenMP read ``OMP_NUM_THREADS`` when it imported torch), and they time work, not
their own start; a command with a prefix (a network namespace's ``ip netns exec``) stays a fresh interpreter.

What the ranks themselves import lives here too (joining their process group: :func:`join_group`; their random
inputs: :func:`random_csr`, :func:`random_shard`), so that a forked rank imports nothing the zygote has not: a rank
that imported :mod:`sarlab.real.calibration.harness` or :mod:`~sarlab.real.calibration.opbench` (and with them
``sarlab.simulator``, pandas and scipy) spent 0.6-0.9 s of CPU on it before its work, most of a commbench or
progressbench group's length on the 2-core VM (results/host_model/budget/cuts2/README.md).
"""

from __future__ import annotations

import datetime
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from sarlab.common.paths import package_parent
from sarlab.real.launch import zygote

if TYPE_CHECKING:
    import torch

    from sarlab.core.shards import Shard

ROOT = package_parent()  # the directory holding the sarlab package
#: the torch.distributed backends the message benchmarks run over (``sarlab.core.comm.BACKENDS`` measured here)
BENCH_BACKENDS = ("gloo", "ccl")


def start(command: list[str], env: dict[str, str], stdout=None, stderr=None, fork: bool = True):
    """Start ``command`` in the repository root with ``env``: forked from the zygote where it is ``python -m MODULE
    ...`` and ``fork`` is set, else a fresh process. ``stdout``/``stderr``: open files or None. Returns a handle with
    ``pid``, ``poll``, ``wait`` and ``kill`` (:class:`subprocess.Popen` or :class:`~sarlab.real.launch.zygote.
    ForkedWorker`)."""
    if fork and command[:2] == [sys.executable, "-m"] and len(command) > 2:
        return zygote.start_module(command[2], command[3:], env, str(ROOT), str(ROOT), stdin=subprocess.DEVNULL,
                                   stdout=stdout, stderr=stderr)
    return subprocess.Popen(command, env=env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr)


def preload() -> None:
    """Start the zygote now and wait until it has imported the engine (a few seconds of CPU, once), so that the
    first step that forks from it does not time the import as another process's load. Nothing where no zygote
    serves (the commands then start fresh interpreters)."""
    preloaded = zygote.current(str(ROOT))
    if preloaded is not None:
        try:
            preloaded.wait_ready()
        except RuntimeError:
            zygote.discard()


def run_group(commands: list[list[str]], envs: list[dict[str, str]], what: str, timeout_s: float = 300.0,
              fork: bool = True) -> list[str]:
    """Run every ``commands[i]`` with ``envs[i]`` at once (:func:`start`) until all have exited 0; their stdout.

    Args:
        commands: the argv of each process.
        envs: the environment of each process.
        what: the probe's name, for the error message.
        timeout_s: seconds before the processes still running are killed and the run fails.
        fork: fork ``python -m`` commands from the zygote (:func:`start`).
    """
    procs: list = []
    outs = [tempfile.TemporaryFile() for _ in commands]
    logs = [tempfile.TemporaryFile() for _ in commands]

    def failure(message: str) -> RuntimeError:
        tails = []
        for rank, log in enumerate(logs):
            log.seek(0)
            text = log.read().decode(errors="replace").strip()
            if text:
                tails.append(f"--- {what} process {rank} stderr:\n{text[-4000:]}")
        return RuntimeError("\n".join([message, *tails]))

    try:
        for command, env, out, log in zip(commands, envs, outs, logs, strict=True):
            procs.append(start(command, env, stdout=out, stderr=log, fork=fork))
        deadline = time.monotonic() + timeout_s
        while True:  # the first process to fail ends the run (the others would hang)
            failed = [(rank, proc.returncode) for rank, proc in enumerate(procs) if proc.poll()]
            if failed:
                raise failure(f"{what} process {failed[0][0]} exited with {failed[0][1]}")
            if all(proc.returncode is not None for proc in procs):
                texts = []
                for out in outs:
                    out.seek(0)
                    texts.append(out.read().decode(errors="replace"))
                return texts
            if time.monotonic() > deadline:
                raise failure(f"{what} processes still running after {timeout_s:g} s")
            time.sleep(0.02)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for f in (*outs, *logs):
            f.close()


def run_ranks(world: int, command: Callable[[int], list[str]], env: Callable[[int], dict[str, str]], what: str,
              timeout_s: float = 300.0, fork: bool = False) -> None:
    """Run ``command(rank)`` with environment ``env(rank)`` for every rank until all have exited 0
    (:func:`run_group`; ``fork``: ``python -m`` commands forked from the zygote)."""
    run_group([command(rank) for rank in range(world)], [env(rank) for rank in range(world)], what, timeout_s,
              fork=fork)


def join_group(backend: str, port: int, rank: int, world: int, timeout_s: float = 120.0) -> None:
    """Join a ``world``-rank process group of ``backend`` on ``127.0.0.1:port`` as the engine's workers do
    (``ccl``: :func:`sarlab.core.comm.prepare_backend` loads and registers oneCCL first)."""
    import torch.distributed as dist

    from sarlab.core.comm import prepare_backend

    if backend not in BENCH_BACKENDS:
        raise ValueError(f"backend {backend!r} is not benchmarked here: choose one of {', '.join(BENCH_BACKENDS)}")
    prepare_backend(backend)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s))


def random_csr(num_dst: int, num_src: int, degree: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A random CSR (rowptr, col) with ``degree`` in-edges per destination, sources uniform."""
    import torch

    col = torch.randint(0, num_src, (num_dst * degree,), generator=gen)
    col = col.view(num_dst, degree).sort(dim=1).values.reshape(-1)
    rowptr = torch.arange(0, num_dst * degree + 1, degree, dtype=torch.long)
    return rowptr, col


def random_shard(n: int, degree: int, gen: torch.Generator, transpose: bool = True) -> Shard:
    """An engine :class:`~sarlab.core.shards.Shard` over ``n`` rows with ``degree`` random in-edges per row
    (:func:`random_csr`), its transposed index built unless ``transpose`` is off (the engine caches it with the
    shard; a forward product alone does not read it)."""
    import torch

    from sarlab.core.shards import Shard

    _, col = random_csr(n, n, degree, gen)
    shard = Shard(0, col, torch.repeat_interleave(torch.arange(n), degree), n, n)
    if transpose:
        shard.transpose_index()
    return shard
