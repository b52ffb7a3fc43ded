"""Nothing blamed on the wrong rank (issue 28): a stopped rank is named, a killed launcher's temporary partition is
swept by the next run, and one torchrun command line survives a restart (resuming bit-exactly).

Real processes with timeouts; failures show the children's output. Bounds allow for a loaded machine.
"""
from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from backends_common import BACKENDS_CCL_SLOW, built
from conftest import ROOT, cli_here, run_cli

from sarlab.data.graphs import synthetic_graph
from sarlab.data.partition import partition

TRAIN = ["train", "--hidden", "8", "--eval-every", "0", "--workers", "2"]


@pytest.fixture(scope="module")
def pdir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("safety_faults") / "p2")
    partition(synthetic_graph(nodes=400, degree=6, features=8, classes=3, seed=0), 2, path)
    return path


def _start(args: list[str], log: str, env: dict | None = None) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen([sys.executable, "-m", "sarlab", *args], cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT, env=dict(os.environ, **(env or {})))


def _wait_for(proc: subprocess.Popen, log: str, needle: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while needle not in open(log).read():
        assert proc.poll() is None and time.monotonic() < deadline, open(log).read()
        time.sleep(0.2)


def _worker_pid(launcher: int, rank: int) -> int:
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            ppid = int(open(stat).read().rsplit(")", 1)[1].split()[1])
            name = open(stat.replace("stat", "comm")).read().strip()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == launcher and name == f"sarlab-rank{rank}":  # a worker names itself (forked or a fresh one)
            return int(stat.split("/")[2])
    raise AssertionError(f"no rank {rank} worker of launcher {launcher}")


def test_sigstopped_rank_is_named(pdir, tmp_path):
    log = str(tmp_path / "run.log")
    proc = _start([*TRAIN, "--graph", pdir, "--epochs", "1000000", "--timeout", "20"], log)
    try:
        _wait_for(proc, log, "epoch 2/")
        os.kill(_worker_pid(proc.pid, 1), signal.SIGSTOP)
        t0 = time.monotonic()
        proc.wait(120)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = open(log).read()
    assert proc.returncode == 1 and "rank 1 failed: stopped making progress" in text, text
    print(f"SIGSTOP of rank 1 with --timeout 20: ended {took:.1f}s later naming rank 1")
    assert took < 20 + 60, text  # the issue asks for 20 + 30 s; the margin is for a loaded machine


def test_killed_launchers_temporary_partition_is_swept(pdir, tmp_path):
    env = {"TMPDIR": str(tmp_path)}  # this test's own temporary folder: other runs' directories are not touched
    log = str(tmp_path / "run.log")
    # --no-cache: a temporary partition (a cached one lives in the user cache and is meant to stay)
    proc = _start([*TRAIN, "--graph", "synthetic:nodes=300,degree=4,features=4,classes=3", "--epochs", "1000000",
                   "--no-cache"], log, env)
    try:
        _wait_for(proc, log, "epoch 2/")
        assert glob.glob(str(tmp_path / f"sarlab-parts-{proc.pid}-*")), os.listdir(tmp_path)
    finally:
        proc.kill()
        proc.wait()
    res = run_cli([*TRAIN, "--graph", pdir, "--epochs", "1"], timeout=180, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert not glob.glob(str(tmp_path / "sarlab-*")), os.listdir(tmp_path)
    assert f"removed leftovers of a dead launcher (pid {proc.pid})" in res.stderr, res.stderr


@pytest.mark.timeout(600)
@pytest.mark.parametrize("backend", BACKENDS_CCL_SLOW)
def test_torchrun_restart_resumes_with_one_command_line(pdir, tmp_path, backend):
    """torchrun --max-restarts 1: rank 1 is killed at epoch 5, torchrun restarts both ranks, the same command line
    resumes from the checkpoint of epoch 4 and ends with the loss of an uninterrupted run.

    The restarted round rendezvouses through the same agent store as the first: it once read the first round's
    keys (rank 1 connected to rank 0's dead address, gloo 'Connection refused'); a prefix per round keeps them
    apart (:func:`sarlab.real.launch.worker._round_store`)."""
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    model = ["--epochs", "6", "--hidden", "8", "--dtype", "float64", "--dropout", "0.5", "--seed", "3", "--backend",
             built(backend)]

    def run(name: str, *extra: str) -> list[dict]:
        out = str(tmp_path / f"{name}.json")
        res = subprocess.run([torchrun, "--standalone", "--nproc-per-node", "2", "--max-restarts", "1", "-m",
                              "sarlab", "train", "--graph", pdir, *model, "--json", out, *extra], cwd=ROOT,
                             capture_output=True, text=True, timeout=400)
        assert res.returncode == 0, res.stdout + res.stderr
        return json.load(open(out)), res.stdout + res.stderr

    # the uninterrupted run: sarlab's launcher in this process, whose workers train as torchrun's ranks do (the same
    # fp64 curve: tests/test_network.py::test_torchrun_across_two_emulated_hosts_matches_the_launcher), without a
    # second torchrun's three fresh interpreters
    out = tmp_path / "whole.json"
    res = cli_here(["train", "--graph", pdir, *model, "--workers", "2", "--json", str(out)])
    assert res.returncode == 0, res.stdout + res.stderr
    whole = json.loads(out.read_text())
    ck = str(tmp_path / "ck")
    restarted, text = run("restarted", "--checkpoint", ck, "--checkpoint-every", "1", "--fault", "1:5:sigkill")
    last = {r["epoch"]: r["loss"] for r in whole if r["rank"] == 0}
    again = {r["epoch"]: r["loss"] for r in restarted if r["rank"] == 0}
    assert sorted(again) == [4, 5], text  # the restart resumed after epoch 4 and did epochs 5 and 6
    assert abs(again[5] - last[5]) <= 1e-10, (again, last)
