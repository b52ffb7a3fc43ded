"""Start ``N`` benchmark ranks as child processes and wait for all of them, or fail with the first one's stderr.

Shared by the probes that run gloo ranks without the engine (:mod:`sarlab.real.calibration.roundbench`,
:mod:`sarlab.real.calibration.progressbench`): every rank's stderr goes to a temporary file; the first rank to exit
non-zero, or the deadline, ends the run with a :class:`RuntimeError` that carries every rank's stderr tail; on the way
out every rank still running is killed (no orphans).
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Callable

from sarlab.common.paths import package_parent

ROOT = package_parent()  # the directory holding the sarlab package


def run_ranks(world: int, command: Callable[[int], list[str]], env: Callable[[int], dict[str, str]], what: str,
              timeout_s: float = 300.0) -> None:
    """Run ``command(rank)`` with environment ``env(rank)`` for every rank (cwd: the repository root) until all
    have exited 0.

    Args:
        world: number of ranks.
        command: the argv of a rank.
        env: the environment of a rank.
        what: the probe's name, for the error message.
        timeout_s: seconds before the ranks still running are killed and the run fails.
    """
    procs: list[subprocess.Popen] = []
    logs = [tempfile.TemporaryFile() for _ in range(world)]

    def failure(message: str) -> RuntimeError:
        tails = []
        for rank, log in enumerate(logs):
            log.seek(0)
            text = log.read().decode(errors="replace").strip()
            if text:
                tails.append(f"--- rank {rank} stderr:\n{text[-4000:]}")
        return RuntimeError("\n".join([message, *tails]))

    try:
        for rank in range(world):
            procs.append(subprocess.Popen(command(rank), env=env(rank), cwd=ROOT, stderr=logs[rank]))
        deadline = time.monotonic() + timeout_s
        while True:  # the first rank to fail ends the run (the others would hang)
            failed = [(rank, proc.returncode) for rank, proc in enumerate(procs) if proc.poll()]
            if failed:
                raise failure(f"{what} rank {failed[0][0]} exited with {failed[0][1]}")
            if all(proc.returncode is not None for proc in procs):
                return
            if time.monotonic() > deadline:
                raise failure(f"{what} ranks still running after {timeout_s:g} s")
            time.sleep(0.05)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for log in logs:
            log.close()
