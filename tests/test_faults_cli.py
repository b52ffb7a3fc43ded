"""Bad input and faults: a clear error before any compute, bounded exits, the failing rank named.

All through the real command line: the refusals before any work in this process (``cli.main``, what the ``sarlab``
script calls; nothing starts), the rest in subprocesses with timeouts (a hang fails the test with output). The fault
tests run under every backend (gloo, and ccl where :func:`sarlab.kernels.ccl.available` says oneCCL is installed;
skipped with its reason elsewhere), each in a fresh working directory and ``$TMPDIR``, and check that the run leaves
nothing behind: no process of the run, no network namespace, no run directory, no file in the working directory
(oneCCL's libraries once wrote crash backtraces ``python.*.btr`` there).
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest
from backends_common import BACKENDS, BACKENDS_CCL_SLOW, CCL_OK, built, needs_ccl
from conftest import cli_here, run_cli
from faults_common import assert_nothing_left, fresh_dirs, ours_in, run_sarlab

from sarlab.data.graphs import synthetic_graph
from sarlab.data.partition import partition

TRAIN = ["train", "--epochs", "3", "--hidden", "8", "--eval-every", "0"]

@pytest.fixture(scope="module")
def pdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    g = synthetic_graph(nodes=400, degree=6, features=8, classes=3, seed=0)
    path = str(root / "p3")
    partition(g, 3, path)
    return path


def _copy(pdir, tmp_path):
    dst = str(tmp_path / "copy")
    shutil.copytree(pdir, dst)
    return dst


def _fails(result, *needles):
    text = result.stdout + result.stderr
    assert result.returncode != 0, text
    for needle in needles:
        assert needle in text, f"expected {needle!r} in:\n{text}"
    return text


def test_missing_partition_file(pdir, tmp_path):
    path = _copy(pdir, tmp_path)
    os.remove(os.path.join(path, "part2", "edge_dst.npy"))
    _fails(cli_here([*TRAIN, "--graph", path, "--workers", "3"]), "partition file missing",
           "part2/edge_dst.npy")


def test_corrupt_partition_file(pdir, tmp_path):
    path = _copy(pdir, tmp_path)
    with open(os.path.join(path, "part1", "features.npy"), "r+b") as f:
        f.seek(-8, 2)
        f.write(b"\xff" * 8)
    _fails(cli_here([*TRAIN, "--graph", path, "--workers", "3"]), "sha256 mismatch", "part1/features.npy")


def test_world_size_mismatch(pdir):
    _fails(cli_here([*TRAIN, "--graph", pdir, "--workers", "2"]), "has 3 parts but 2 workers")


def test_feature_and_label_dims_mismatch(pdir):
    _fails(cli_here([*TRAIN, "--graph", pdir, "--workers", "3", "--in-dim", "99"]),
           "expects 99 input features but the graph has 8")
    _fails(cli_here([*TRAIN, "--graph", pdir, "--workers", "3", "--num-classes", "5"]),
           "expects 5 classes but the graph has 3")


@pytest.mark.parametrize("flag, value, needle", [
    ("--mode", "turbo", "unknown mode 'turbo'"),
    ("--model", "gin", "unknown model 'gin'"),
    ("--backend", "smoke", "unknown backend 'smoke'"),
    ("--backend", "nccl", "this engine runs on CPUs"),
    ("--backend", "mpi", "backend 'mpi' is not available"),
    # where oneCCL is installed `--backend ccl` trains (tests/test_ccl_training.py); the one-line message of a
    # missing library is tested there too
    pytest.param("--backend", "ccl", "backend 'ccl' is not available",
                 marks=pytest.mark.skipif(CCL_OK, reason="oneCCL is installed here: ccl trains")),
    ("--aggr", "median", "unknown SAGE aggregator"),
])
def test_unknown_choices(pdir, flag, value, needle):
    _fails(cli_here([*TRAIN, "--graph", pdir, "--workers", "3", flag, value]), needle)


def test_busy_port(pdir):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        _fails(cli_here([*TRAIN, "--graph", pdir, "--workers", "3", "--port", str(port)]),
               f"cannot open the rendezvous port 127.0.0.1:{port}", "--port 0")


def test_unreachable_rendezvous_is_bounded(pdir):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"RANK": "1", "WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
           "TORCHELASTIC_USE_AGENT_STORE": "True"}
    t0 = time.monotonic()
    _fails(run_cli([*TRAIN, "--graph", pdir, "--timeout", "4"], timeout=90, env=env),
           "could not reach the rendezvous store at 127.0.0.1")
    assert time.monotonic() - t0 < 60


RAISED = ("raise", "injected fault on rank 1 at epoch 1", "--fault")
KILLED = ("sigkill", "killed by signal SIGKILL", "--inject-fault")


@pytest.mark.parametrize("kind, needle, option, backend", [
    (*RAISED, "gloo"), (*KILLED, "gloo"),
    pytest.param(*RAISED, "ccl", marks=[needs_ccl, pytest.mark.slow]), pytest.param(*KILLED, "ccl", marks=needs_ccl),
])
def test_worker_death_is_reported_and_bounded(pdir, tmp_path, kind, needle, option, backend):
    """The default --timeout is 60 s: the run ends well within it + 30 s, naming the rank, leaving nothing."""
    run = run_sarlab([*TRAIN, "--graph", pdir, "--workers", "3", "--backend", built(backend), option,
                      f"1:1:{kind}"], tmp_path, timeout=120)
    text = _fails(run, "rank 1 failed", needle)
    assert run.elapsed < 90, text
    if kind == "raise":
        assert "Traceback" in text  # the child's traceback reaches the user
    assert_nothing_left(run)


@pytest.mark.parametrize("fault, needle", [("7:1:raise", "fault on rank 7, but the ranks are 0..2"),
                                           ("1:x:raise", "fault must be RANK:EPOCH:KIND"),
                                           ("1:1:melt", "fault kind must be one of raise, sigkill, hang, cut"),
                                           ("1:0:raise", "epoch >= 1 (epochs count from 1"),
                                           ("1:4:raise", "fault at epoch 4, but the run has 3 epoch(s)")])
def test_bad_fault_is_refused_before_any_work(pdir, fault, needle):
    text = _fails(cli_here([*TRAIN, "--graph", pdir, "--workers", "3", "--fault", fault]), needle)
    assert "[sar " not in text  # no epoch ran


@pytest.mark.parametrize("backend", BACKENDS)
def test_hung_worker_times_out(pdir, tmp_path, backend):
    """A rank that stops answering: the others give up after --timeout, the run ends non-zero and the hung rank
    (not the one whose wait timed out) is named. The bound allows for a loaded machine (start-up alone has taken
    20 s at a load of 4-12)."""
    run = run_sarlab([*TRAIN, "--graph", pdir, "--workers", "3", "--backend", built(backend), "--inject-fault",
                      "2:1:hang", "--timeout", "5"], tmp_path, timeout=180)
    _fails(run, "rank 2 failed: stopped making progress")
    assert run.elapsed < 150, run.text
    assert_nothing_left(run)


def _env_rank(rank: int, world: int, port: int, pdir: str, extra: list[str], cwd: str,
              env: dict) -> subprocess.Popen:
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               **env)
    env.pop("TORCHELASTIC_USE_AGENT_STORE", None)
    return subprocess.Popen([sys.executable, "-m", "sarlab", *TRAIN, "--graph", pdir, *extra], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.parametrize("backend", BACKENDS_CCL_SLOW)
def test_peer_death_without_our_launcher_is_bounded(pdir, tmp_path, backend):
    """torchrun-style ranks (env://): one is SIGKILLed, the survivors exit with an error by themselves (a timed-out
    wait, not a crash), leaving nothing but what the killed rank could not remove (its output directory in $TMPDIR,
    which the next run sweeps)."""
    from sarlab.real.launch import netns

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cwd, tmpdir = fresh_dirs(tmp_path)
    extra = ["--epochs", "200", "--timeout", "10", "--inject-fault", "2:2:sigkill", "--backend", built(backend)]
    procs = [_env_rank(r, 3, port, pdir, extra, cwd, {"TMPDIR": tmpdir}) for r in range(3)]
    t0 = time.monotonic()
    outputs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=120)
            outputs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    text = "\n".join(outputs)
    assert procs[2].returncode == -9, text
    assert procs[0].returncode == 1 and procs[1].returncode == 1, text
    assert time.monotonic() - t0 < 100, text
    assert not os.listdir(cwd), f"files left in the working directory: {os.listdir(cwd)}\n{text}"
    left = ours_in(tmpdir)
    assert all(name.startswith(f"{netns.PREFIX}-run-{procs[2].pid}-") for name in left), left


@pytest.mark.parametrize("backend", BACKENDS)
def test_torchrun_launch(pdir, tmp_path, backend):
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    cwd, tmpdir = fresh_dirs(tmp_path)
    out = tmp_path / "records.json"
    res = subprocess.run([torchrun, "--standalone", "--nproc-per-node", "3", "-m", "sarlab", *TRAIN, "--graph",
                          pdir, "--backend", built(backend), "--json", str(out)], cwd=cwd, capture_output=True,
                         text=True, timeout=180, env=dict(os.environ, TMPDIR=tmpdir))
    assert res.returncode == 0, res.stdout + res.stderr
    records = json.loads(out.read_text())
    assert len(records) == 9 and {r["rank"] for r in records} == {0, 1, 2}
    assert {r["backend"] for r in records} == {backend} and {r["net"] for r in records} == {"env"}
    assert not os.listdir(cwd), os.listdir(cwd)
    # torchrun's own log directory (torchelastic_*) stays, as after any torchrun program; nothing of sarlab's does
    assert not [name for name in ours_in(tmpdir) if not name.startswith("torchelastic_")], ours_in(tmpdir)


def test_worker_error_survives_a_process_pool():
    """A WorkerError raised in a process-pool child (the accuracy table runs rows in a pool) reaches the parent
    whole: rank, reason and message."""
    import pickle

    from sarlab.real.launch.launcher import WorkerError

    err = pickle.loads(pickle.dumps(WorkerError(3, "killed by SIGKILL")))
    assert (err.rank, err.reason, str(err)) == (3, "killed by SIGKILL", "rank 3 failed: killed by SIGKILL")
