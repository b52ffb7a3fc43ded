"""Running ``sarlab`` as a fault test does: in a fresh working directory and ``$TMPDIR``, bounded by a timeout
that fails the test with the output, and checking afterwards that the run left nothing behind (processes, network
namespaces, files)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest


def processes_of(launcher_pid: int) -> list[int]:
    """Live processes started by the launcher ``launcher_pid`` (they carry SARLAB_LAUNCHER_PID=pid)."""
    tag = f"SARLAB_LAUNCHER_PID={launcher_pid}".encode()
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if tag in f.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def workers_of(launcher_pid: int) -> list[int]:
    """The live workers among :func:`processes_of` (named ``sarlab-rankN`` in /proc/PID/comm; a run's zygote,
    ``sarlab-zygote``, is not one)."""
    found = []
    for pid in processes_of(launcher_pid):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().startswith("sarlab-rank"):
                    found.append(pid)
        except OSError:
            continue
    return found


@dataclass
class Finished:
    """A finished ``sarlab`` process: its exit status, output, wall time, pid, working directory and $TMPDIR."""

    returncode: int
    stdout: str
    stderr: str
    elapsed: float
    pid: int
    cwd: str
    tmpdir: str

    @property
    def text(self) -> str:
        return self.stdout + self.stderr


def fresh_dirs(tmp_path) -> tuple[str, str]:
    """An empty working directory and an empty $TMPDIR for one run (what it leaves there is what it left)."""
    cwd, tmpdir = tmp_path / "cwd", tmp_path / "tmp"
    cwd.mkdir(exist_ok=True)
    tmpdir.mkdir(exist_ok=True)
    return str(cwd), str(tmpdir)


def run_sarlab(args: list[str], tmp_path, timeout: float, env: dict | None = None) -> Finished:
    """``sarlab ARGS`` in a fresh working directory and $TMPDIR (see :func:`fresh_dirs`); fails the test with the
    output if it runs past ``timeout``."""
    cwd, tmpdir = fresh_dirs(tmp_path)
    full_env = dict(os.environ, TMPDIR=tmpdir, **(env or {}))
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "sarlab", *args], cwd=cwd, env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"`sarlab {' '.join(args)}` did not finish in {timeout}s\nstdout:\n{out}\nstderr:\n{err}")
    return Finished(proc.returncode, out, err, time.monotonic() - t0, proc.pid, cwd, tmpdir)


def assert_nothing_left(run: Finished, wait_s: float = 10.0) -> None:
    """No process of the run alive (within ``wait_s``), none of its network namespaces, nothing in its working
    directory or $TMPDIR (run directories, temporary partitions, crash files)."""
    from sarlab.real.launch import netns

    deadline = time.monotonic() + wait_s
    while processes_of(run.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not processes_of(run.pid), f"processes of the run still alive: {processes_of(run.pid)}\n{run.text}"
    left = [n for n in netns.namespaces() if n.startswith(f"{netns.PREFIX}-{run.pid}-")]
    assert not left, f"network namespaces left: {left}"
    assert not os.listdir(run.cwd), f"files left in the working directory: {os.listdir(run.cwd)}\n{run.text}"
    assert not ours_in(run.tmpdir), f"left in $TMPDIR: {ours_in(run.tmpdir)}"


def ours_in(tmpdir: str) -> list[str]:
    """What is in a run's $TMPDIR but torch's own per-user cache (``torchinductor_USER``, which importing
    ``torch._dynamo`` creates, e.g. through ``torch.optim``, and every later torch program reuses)."""
    return sorted(name for name in os.listdir(tmpdir) if not name.startswith("torchinductor_"))
