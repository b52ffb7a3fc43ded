"""Workers forked from the preloaded zygote (:mod:`sarlab.real.launch.zygote`) run as fresh interpreters do.

Checked here: a run whose workers the zygote forked gives the records of the same run on fresh interpreters
(``SARLAB_WORKER_START=spawn``), losses and accuracies equal to the last bit; the workers are the launcher's own
children (it reads their exit status), named ``sarlab-rankN``, with the launcher's working directory and
environment; one zygote serves the runs of a process, a changed environment gets a new one, a dead one is
replaced, and when none can serve the run still goes on fresh interpreters. Fault handling through the zygote
(a rank that raises, one killed by a signal, a launcher killed) is in test_faults_cli.py,
test_launcher_signals.py and test_safety_faults.py, which run with the default (the zygote).
"""
from __future__ import annotations

import os
import signal
import time

import pytest

import sarlab
from sarlab.common.paths import package_parent
from sarlab.data.graphs import synthetic_graph
from sarlab.data.partition import partition
from sarlab.real.launch import zygote

COLUMNS = ["rank", "epoch", "loss", "train_acc", "val_acc", "bytes_sent"]


@pytest.fixture(scope="module")
def pdir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("zygote") / "p2")
    partition(synthetic_graph(nodes=400, degree=6, features=8, classes=3, seed=1), 2, path)
    return path


def _records(pdir: str, **kw):
    result = sarlab.run(pdir, workers=2, model="gcn", epochs=3, run_timeout_s=240, **kw)
    return result.records.sort_values(["rank", "epoch"])[COLUMNS].reset_index(drop=True)


def _ours() -> zygote.Zygote:
    assert zygote._CURRENT, "no zygote was started"
    return zygote._CURRENT[0]


def test_forked_workers_train_as_fresh_ones(pdir, monkeypatch):
    zygote.discard()
    forked = _records(pdir)
    first = _ours()
    assert first.proc.poll() is None
    with open(f"/proc/{first.proc.pid}/comm") as f:
        assert f.read().strip() == "sarlab-zygote"
    assert _records(pdir).equals(forked)  # a second run: the same zygote
    assert _ours() is first
    monkeypatch.setenv(zygote.START_ENV, "spawn")
    fresh = _records(pdir)
    assert fresh.equals(forked), f"forked:\n{forked}\nfresh:\n{fresh}"


def test_workers_are_adopted_named_and_see_the_launchers_cwd(tmp_path, monkeypatch):
    zygote.discard()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SARLAB_ZYGOTE_TEST", "1")  # after the zygote started: it must be replaced
    preloaded = zygote.current(str(package_parent()))
    rundir = tmp_path / "run"
    rundir.mkdir()  # an empty run directory: the worker fails at once (no job.pkl) and says so in rank0.err
    env = dict(os.environ, SARLAB_LAUNCHER_PID=str(os.getpid()), MASTER_ADDR="127.0.0.1", MASTER_PORT="1")
    worker = preloaded.fork([str(rundir), "0"], env)
    assert worker.wait(60) == 1
    text = (rundir / "rank0.err").read_text()
    assert "job.pkl" in text and "Traceback" in text  # the worker's own failure path, in the launcher's cwd's file
    monkeypatch.setenv("SARLAB_ZYGOTE_TEST", "2")
    assert not preloaded.usable()
    replacement = zygote.current(str(package_parent()))
    assert replacement is not preloaded
    assert preloaded.proc.poll() is not None  # the old one was stopped


def test_a_dead_zygote_is_replaced_and_a_refusing_one_falls_back(pdir, monkeypatch):
    zygote.discard()
    reference = _records(pdir)
    dead = _ours()
    os.kill(dead.proc.pid, signal.SIGKILL)
    dead.proc.wait(10)
    assert _records(pdir).equals(reference)
    assert _ours() is not dead

    def refuse(self, argv, env):
        raise RuntimeError("refused (test)")

    monkeypatch.setattr(zygote.Zygote, "fork", refuse)
    assert _records(pdir).equals(reference)  # on fresh interpreters
    zygote.discard()
    assert not zygote._CURRENT


def test_kernel_preload_loads_a_finished_build_and_leaves_an_unbuilt_one_to_the_first_run(tmp_path):
    """The zygote's :func:`sarlab.kernels.preload` never builds: with an empty build directory it says False and
    leaves the loader as it was (the workers' first :func:`~sarlab.kernels.backend` starts the build, as before)."""
    import subprocess
    import sys

    code = ("from sarlab import kernels; from sarlab.kernels import _loader; "
            "print(kernels.preload(), kernels.extension_error(), _loader._ext is None, "
            "(kernels.build_dir() / 'build.log').exists())")
    env = dict(os.environ, SARLAB_KERNEL_BUILD_DIR=str(tmp_path), SARLAB_KERNEL_BUILD="off")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "None", "True", "False"], out.stdout
    from sarlab import kernels

    if kernels.backend("auto") == "cpp":  # this checkout's finished build (make test builds it): preload loads it
        code = ("from sarlab import kernels; from sarlab.kernels import _loader; "
                "print(kernels.preload(), _loader._ext is not None, _loader._announced)")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["True", "True", "False"], out.stdout


def test_a_module_runs_forked_with_its_argv_cwd_and_streams(tmp_path, monkeypatch):
    """:func:`zygote.start_module` forks ``python -m MODULE ARGS`` from the zygote (a stdlib module here, whose output
    is known without sarlab): it is this process's child, named after the module, runs in the given working
    directory with the given argv, writes to the given stdout/stderr files and exits with the module's status."""
    zygote.discard()
    monkeypatch.setenv("SARLAB_ZYGOTE_TEST", "module")
    (tmp_path / "in.json").write_text('{"b": [1, 2], "a": null}')
    (tmp_path / "bad.json").write_text("{not json")
    root = str(package_parent())
    with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:
        good = zygote.start_module("json.tool", ["--sort-keys", "--compact", "in.json"], dict(os.environ),
                                   str(tmp_path), root, stdout=out, stderr=err)
        assert isinstance(good, zygote.ForkedWorker)
        with open(f"/proc/{good.pid}/stat") as f:  # adopted: our child (or already a zombie of ours)
            assert int(f.read().rsplit(")", 1)[1].split()[1]) == os.getpid()
        assert good.wait(60) == 0
        bad = zygote.start_module("json.tool", ["bad.json"], dict(os.environ), str(tmp_path), root, stdout=out,
                                  stderr=err)
        assert bad.wait(60) == 1
    assert (tmp_path / "out").read_text() == '{"a":null,"b":[1,2]}\n'
    assert "Expecting property name" in (tmp_path / "err").read_text()
    read, write = os.pipe()  # a stdin nobody writes to: json.tool waits on it until killed
    try:
        sleeper = zygote.start_module("json.tool", [], dict(os.environ), str(tmp_path), root, stdin=read)
        deadline = time.monotonic() + 30
        while _comm(sleeper.pid) != "sarlab-tool" and time.monotonic() < deadline:  # named as it starts
            time.sleep(0.01)
        assert _comm(sleeper.pid) == "sarlab-tool"
        assert sleeper.poll() is None
        sleeper.kill()
        assert sleeper.wait(10) == -signal.SIGKILL
    finally:
        os.close(read)
        os.close(write)
        zygote.discard()


def _comm(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as f:
        return f.read().strip()


def test_the_cli_starts_the_zygote_only_where_it_will_launch_workers(monkeypatch):
    """A rank that torchrun or another env:// launcher started (RANK, WORLD_SIZE, MASTER_ADDR set, with or without
    torchrun's own TORCHELASTIC_RUN_ID) trains in-process: no zygote for workers it will never start."""
    from sarlab.real.commands.cli import _launches_workers

    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(key, raising=False)
    assert _launches_workers(["train", "--graph", "g"])
    assert not _launches_workers(["train", "--help"]) and not _launches_workers(["simulate", "--graph", "g"])
    assert not _launches_workers(["train", "--net", "veth:2"])
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert _launches_workers(["train", "--graph", "g"])  # RANK alone is not a launcher
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    assert not _launches_workers(["train", "--graph", "g"])
