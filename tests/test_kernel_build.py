"""The kernel build never blocks a first result: with no build, a process starts one in the background (once: a
lock), runs on the exact torch kernels meanwhile and says so; compiling logs its progress; a failed background build
is not retried on every run; an explicit ``backend='cpp'`` still builds in the foreground. No test here compiles."""
from __future__ import annotations

import fcntl
import logging
import os
import stat
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest
import torch
from conftest import ROOT, run_cli

from sarlab import kernels
from sarlab.kernels import _loader


@pytest.fixture
def unbuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty build directory and a loader that has not looked for the extension yet in this process."""
    monkeypatch.setenv("SARLAB_KERNEL_BUILD_DIR", str(tmp_path / "kernels"))
    monkeypatch.delenv("SARLAB_KERNEL_BUILD", raising=False)
    monkeypatch.setenv("SARLAB_KERNELS", "auto")
    for name, value in (("_ext", None), ("_ext_error", None), ("_warned", False), ("_announced", False),
                        ("_loaded_from", None)):
        monkeypatch.setattr(_loader, name, value)
    return tmp_path / "kernels"


class _Spawned:
    """Stands in for subprocess.Popen: records the builds it would have started (other commands run)."""

    def __init__(self) -> None:
        self.commands: list[list[str]] = []
        self.popen = subprocess.Popen

    def __call__(self, command, **kwargs):
        if "--background" not in command:  # platform.processor() runs uname
            return self.popen(command, **kwargs)
        self.commands.append(list(command))
        assert kwargs.get("start_new_session") and kwargs.get("pass_fds"), kwargs  # detached, holding the lock
        return type("Child", (), {"pid": 4242})()


def test_first_use_runs_exact_torch_kernels_and_starts_one_background_build(unbuilt, monkeypatch, caplog):
    spawned = _Spawned()
    monkeypatch.setattr(_loader.subprocess, "Popen", spawned)
    rowptr, col = torch.tensor([0, 2, 3, 3]), torch.tensor([0, 2, 1])
    x = torch.randn(3, 4, dtype=torch.float64)
    with caplog.at_level(logging.INFO, logger="sarlab"), warnings.catch_warnings():
        warnings.simplefilter("error")  # a build in progress is not a failure: no warning
        assert kernels.backend() == "torch"
        out = kernels.spmm_csr(rowptr, col, x)
    dense = torch.zeros(3, 3, dtype=torch.float64)
    dense[0, 0] = dense[0, 2] = dense[1, 1] = 1.0
    torch.testing.assert_close(out, dense @ x, rtol=0, atol=1e-12)  # independent reference: a dense product
    assert len(spawned.commands) == 1 and spawned.commands[0][-2:] == [f"{_loader.__package__}.build", "--background"]
    assert isinstance(kernels.extension_error(), kernels.BuildPending)
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert "torch" in said and "pid 4242" in said and "sarlab build-kernels" in said, said
    assert not kernels.alloc.available()  # the counting allocator waits for the build too


def test_a_running_background_build_is_not_started_twice(unbuilt, monkeypatch):
    unbuilt.mkdir(parents=True)
    spawned = _Spawned()
    monkeypatch.setattr(_loader.subprocess, "Popen", spawned)
    with open(unbuilt / "background.flock", "a") as held:  # another process's background build holds it
        fcntl.flock(held, fcntl.LOCK_EX)
        assert _loader.start_background_build() is None
        assert kernels.backend() == "torch"
    assert spawned.commands == []
    assert "another process" in str(kernels.extension_error())


def test_the_detached_builder_keeps_the_lock_until_it_exits(unbuilt, tmp_path, monkeypatch):
    """The lock passes to the child: while it runs nobody else starts a build; once it exits the lock is free."""
    fake = tmp_path / "fake-python"
    fake.write_text("#!/bin/sh\nsleep 2\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(sys, "executable", str(fake))
    pid = _loader.start_background_build()
    assert pid is not None and os.getpgid(pid) == pid  # its own session: the run's Ctrl-C does not reach it
    assert _loader.start_background_build() is None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with open(unbuilt / "background.flock", "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                time.sleep(0.1)
    else:
        pytest.fail("the background.flock was still held 60 s after the fake builder should have exited")
    os.waitpid(pid, 0)


def test_build_off_never_compiles(unbuilt, monkeypatch):
    monkeypatch.setenv("SARLAB_KERNEL_BUILD", "off")
    spawned = _Spawned()
    monkeypatch.setattr(_loader.subprocess, "Popen", spawned)
    assert kernels.backend() == "torch" and spawned.commands == []
    assert "SARLAB_KERNEL_BUILD=off" in str(kernels.extension_error())
    monkeypatch.setenv("SARLAB_KERNEL_BUILD", "sometimes")
    monkeypatch.setattr(_loader, "_ext_error", None)
    with pytest.raises(ValueError, match="background, foreground, off"):
        kernels.backend()


def test_a_failed_background_build_warns_once_and_is_not_retried(unbuilt, monkeypatch):
    unbuilt.mkdir(parents=True)
    (unbuilt / "build.failed").write_text("no compiler\n")
    spawned = _Spawned()
    monkeypatch.setattr(_loader.subprocess, "Popen", spawned)
    with pytest.warns(UserWarning, match="background build failed"):
        assert kernels.backend() == "torch"
    assert spawned.commands == []


def test_explicit_cpp_builds_in_the_foreground_while_pending(unbuilt, monkeypatch):
    monkeypatch.setenv("SARLAB_KERNEL_BUILD", "off")
    assert kernels.backend() == "torch"
    sentinel = object()
    monkeypatch.setattr(_loader, "_compile", lambda verbose: sentinel)
    assert kernels.backend("cpp") == "cpp" and _loader.extension() is sentinel


def test_explicit_cpp_first_builds_in_the_foreground(unbuilt, monkeypatch):
    spawned, sentinel = _Spawned(), object()
    monkeypatch.setattr(_loader.subprocess, "Popen", spawned)
    monkeypatch.setattr(_loader, "_compile", lambda verbose: sentinel)
    assert kernels.backend("cpp") == "cpp" and _loader.extension() is sentinel and spawned.commands == []


def test_compiling_logs_progress_with_elapsed_time(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(_loader, "TICK_S", 0.05)
    with caplog.at_level(logging.INFO, logger="sarlab"), _loader._ticking(tmp_path):
        time.sleep(0.3)
    ticks = [r.getMessage() for r in caplog.records if "elapsed" in r.getMessage()]
    assert len(ticks) >= 2 and "of 5 translation units done" in ticks[0], ticks


def test_build_kernels_command_is_documented():
    """Listed in ``sarlab --help`` and answering ``--help`` itself, with the options every command takes."""
    listed = subprocess.run([sys.executable, "-m", "sarlab", "--help"], capture_output=True, text=True, cwd=ROOT,
                            timeout=120)
    assert "build-kernels" in listed.stdout and "--quiet" in listed.stdout, listed.stdout
    res = run_cli(["build-kernels", "--help"], timeout=120)
    assert res.returncode == 0 and "background" in res.stdout and "-q, --quiet" in res.stdout, res.stdout


def test_a_build_waiting_for_another_says_so(tmp_path, caplog):
    """A process whose build must wait for another's (the directory's flock) logs that it waits, and for whom."""
    with caplog.at_level(logging.INFO, logger="sarlab"), open(tmp_path / "build.flock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        entered = threading.Event()

        def build_turn() -> None:
            with _loader._build_turn(tmp_path):
                entered.set()

        waiter = threading.Thread(target=build_turn)
        waiter.start()
        deadline = time.monotonic() + 30
        while not any("waiting" in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not entered.is_set()
        fcntl.flock(held, fcntl.LOCK_UN)
        waiter.join(timeout=30)
    assert entered.is_set()
    assert any("another process is building" in r.getMessage() for r in caplog.records), caplog.text
