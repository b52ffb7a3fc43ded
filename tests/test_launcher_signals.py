"""Workers die with their launcher: SIGINT/SIGTERM stop every worker, remove the run's temporary files (and its
emulated network) and end with one line, no traceback; after SIGKILL the workers exit by themselves and the next
run removes what was left. Every case ends with no process of the run alive (checked for up to 60 s).

The processes of a run are found by the launcher pid every worker carries in its environment. Each case runs under
gloo and under ccl (SIGTERM by default, the others with -m slow); none leaves a file in its working directory.
"""
from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from backends_common import BACKENDS_CCL_SLOW, built, needs_ccl
from faults_common import processes_of, workers_of

from sarlab.data.graphs import synthetic_graph
from sarlab.data.partition import partition
from sarlab.real.launch import netns

WHY_NO_NETWORK = ("needs root (network namespaces)" if os.geteuid() != 0 else
                  "needs ip and tc (iproute2)" if not (shutil.which("ip") and shutil.which("tc")) else None)


@pytest.fixture(scope="module")
def pdir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("signals") / "p2")
    partition(synthetic_graph(nodes=300, degree=6, features=8, classes=3, seed=0), 2, path)
    return path


def _start(pdir: str, tmp_path, net: str, backend: str = "gloo") -> tuple[subprocess.Popen, str]:
    """A long `sarlab train` in a session of its own (as a shell runs a foreground job), in the empty working
    directory ``tmp_path/cwd``; returns once it trains."""
    log = str(tmp_path / "launcher.log")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    cmd = [sys.executable, "-m", "sarlab", "train", "--graph", pdir, "--workers", "2", "--epochs", "1000000",
           "--hidden", "8", "--eval-every", "0", "--timeout", "30", "--net", net, "--backend", built(backend)]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 180
    while "epoch 2/" not in _read(log):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the run did not start training (exit {proc.poll()}):\n{_read(log)[-3000:]}")
        time.sleep(0.2)
    assert len(workers_of(proc.pid)) == 2
    return proc, log


def _read(path: str) -> str:
    with open(path, errors="replace") as f:
        return f.read()


def _none_alive_within(launcher_pid: int, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while processes_of(launcher_pid):
        if time.monotonic() > deadline:
            pytest.fail(f"processes of the run still alive {seconds:g}s later: {processes_of(launcher_pid)}")
        time.sleep(0.2)


def _rundirs(pid: int) -> list[str]:
    return glob.glob(os.path.join(tempfile.gettempdir(), f"{netns.PREFIX}-run-{pid}-*"))


def _namespaces(pid: int) -> list[str]:
    return [n for n in netns.namespaces() if n.startswith(f"{netns.PREFIX}-{pid}-")]


def _interrupt(pdir, tmp_path, net: str, sig: int, backend: str = "gloo") -> None:
    proc, log = _start(pdir, tmp_path, net, backend)
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)  # Ctrl-C on a terminal: the whole foreground group
    else:
        proc.send_signal(sig)
    try:
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = _read(log)
    tail = text[text.rindex("epoch"):]
    assert code == 128 + sig, text[-3000:]
    assert f"sarlab: interrupted by {signal.Signals(sig).name}" in tail, tail
    assert "Traceback" not in tail and "KeyboardInterrupt" not in tail, tail
    _none_alive_within(proc.pid)
    assert not _rundirs(proc.pid), "the run directory was not removed"
    assert not _namespaces(proc.pid), "the network was not removed"
    assert not os.listdir(tmp_path / "cwd"), f"files left in the working directory: {os.listdir(tmp_path / 'cwd')}"


def _sigkill(pdir, tmp_path, net: str, backend: str = "gloo") -> None:
    proc, _ = _start(pdir, tmp_path, net, backend)
    proc.kill()
    assert proc.wait(timeout=60) == -signal.SIGKILL
    _none_alive_within(proc.pid)  # the workers notice and exit by themselves
    notes: list[str] = []
    netns.remove_leftovers(notes.append)  # what the next run does first
    assert not _rundirs(proc.pid) and not _namespaces(proc.pid)
    assert any(f"dead launcher (pid {proc.pid})" in note for note in notes), notes
    assert not os.listdir(tmp_path / "cwd"), f"files left in the working directory: {os.listdir(tmp_path / 'cwd')}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("sig, backend", [
    (signal.SIGINT, "gloo"), (signal.SIGTERM, "gloo"),
    # the launcher SIGTERMs its workers: under ccl that once left a crash file python.*.btr in the working directory
    pytest.param(signal.SIGTERM, "ccl", marks=needs_ccl),
    pytest.param(signal.SIGINT, "ccl", marks=[needs_ccl, pytest.mark.slow]),
], ids=["SIGINT-gloo", "SIGTERM-gloo", "SIGTERM-ccl", "SIGINT-ccl"])
def test_interrupted_launcher_stops_workers_and_cleans_up(pdir, tmp_path, sig, backend):
    _interrupt(pdir, tmp_path, "loopback", sig, backend)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", BACKENDS_CCL_SLOW)
def test_sigkilled_launcher_takes_its_workers_along(pdir, tmp_path, backend):
    _sigkill(pdir, tmp_path, "loopback", backend)


@pytest.mark.skipif(WHY_NO_NETWORK is not None, reason=WHY_NO_NETWORK or "")
@pytest.mark.timeout(300)
def test_sigterm_on_an_emulated_network_removes_it(pdir, tmp_path):
    _interrupt(pdir, tmp_path, "veth:rate=100mbit", signal.SIGTERM)


@pytest.mark.skipif(WHY_NO_NETWORK is not None, reason=WHY_NO_NETWORK or "")
@pytest.mark.timeout(300)
def test_sigkill_on_an_emulated_network_is_cleaned_by_the_next_run(pdir, tmp_path):
    _sigkill(pdir, tmp_path, "veth:rate=100mbit")
