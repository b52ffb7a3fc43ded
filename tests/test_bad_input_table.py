"""Every command as safe as ``train`` (issue 41): a table of bad inputs, each with its exit code and message, through
the command line and through ``sarlab.run``; faults and signals with leftover checks (processes, the temporary
directory, network namespaces) after each.

The refusals run in this process (``cli.main``: the checks come before any work, so nothing starts); faults and
signals run ``sarlab`` in subprocesses with timeouts, and a failure shows the child's output.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import ROOT

import sarlab
from sarlab.data.graphs import synthetic_graph
from sarlab.data.partition import manifest_digest, partition
from sarlab.nn.model import ModelConfig
from sarlab.real.commands.cli import main as cli_main
from sarlab.real.launch import sizing
from sarlab.training.trainer import TrainConfig

EIGHT_GIB = str(8 * 2**30)


def _npz(folder: str, name: str, **over) -> str:
    """A small Cora-style npz with ``over`` replacing arrays."""
    adj = sp.random(50, 50, density=0.1, format="csr", random_state=0)
    attr = sp.random(50, 8, density=0.5, format="csr", random_state=1)
    arrays = dict(adj_data=adj.data, adj_indices=adj.indices, adj_indptr=adj.indptr, adj_shape=np.array(adj.shape),
                  attr_data=attr.data, attr_indices=attr.indices, attr_indptr=attr.indptr,
                  attr_shape=np.array(attr.shape), labels=np.arange(50) % 3)
    arrays.update(over)
    path = os.path.join(folder, name)
    np.savez(path, **arrays)
    return path


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A folder with a 2-part partition, a user's notes.json, bad npz files and two edited partitions."""
    root = tmp_path_factory.mktemp("table")
    d = str(root)
    pdir = os.path.join(d, "p2")
    partition(synthetic_graph(nodes=200, degree=4, features=4, classes=3, seed=0), 2, pdir)
    with open(os.path.join(d, "notes.json"), "w") as f:
        f.write('{"mine": true}\n')
    idx = sp.random(50, 50, density=0.1, format="csr", random_state=0).indices.copy()
    idx[3] = 999
    _npz(d, "object.npz", labels=np.array([object()] * 50, dtype=object))
    _npz(d, "bigshape.npz", adj_shape=np.array([10**9, 10**9]))
    _npz(d, "badindex.npz", adj_indices=idx)
    _npz(d, "strings.npz", attr_data=np.array(["x"] * 200))
    _npz(d, "wide.npz", attr_shape=np.array([50, 10**8]))
    link = os.path.join(d, "linked")  # part1 a symbolic link to a copy of itself
    shutil.copytree(pdir, link)
    shutil.move(os.path.join(link, "part1"), os.path.join(d, "part1-elsewhere"))
    os.symlink(os.path.join(d, "part1-elsewhere"), os.path.join(link, "part1"))
    classes = os.path.join(d, "classes")  # num_classes 3 -> 9, checksum recomputed: a consistent edit
    shutil.copytree(pdir, classes)
    mpath = os.path.join(classes, "manifest.json")
    manifest = json.load(open(mpath))
    manifest.update(num_classes=9, source="edited")
    manifest["manifest_sha256"] = manifest_digest(manifest)
    json.dump(manifest, open(mpath, "w"))
    return d


def _cases(d: str) -> list[tuple[list[str], int, str, dict]]:
    """(argv, exit code, text the one line holds, environment)."""
    p2, long_name, notes = os.path.join(d, "p2"), "n" * 300, os.path.join(d, "notes.json")
    deep = os.path.join(d, *["d" * 200] * 21)  # over 4096 bytes
    part = ["partition", "--parts", "2", "--graph", "synthetic:nodes=100"]
    train = ["train", "--epochs", "1", "--workers", "2"]
    return [
        ([*part, "--out", os.path.join(d, long_name)], 2, "over the 255-byte limit of a file name", {}),
        ([*part, "--out", deep], 2, "over the 4095-byte limit of Linux paths", {}),
        ([*part, "--out", "/proc/sarlab-nowhere/p"], 2, "cannot write into", {}),
        ([*part, "--out", os.path.join(d, "new1"), "--json", notes], 2, "already exists and this run did not", {}),
        ([*part, "--out", os.path.join(d, "new2"), "--json", os.path.join(d, long_name + ".json")], 2,
         "255-byte limit", {}),
        ([*part, "--out", os.path.join(d, "new3"), "--json", d], 2, "is a directory", {}),
        (["partition", "--parts", "2", "--graph", "synthetic:nodes=1000000000", "--out", os.path.join(d, "x")], 2,
         "needs about", {}),
        (["partition", "--parts", "2", "--graph", "synthetic:nodes=1000,features=100000000", "--out",
          os.path.join(d, "x")], 2, "needs about", {}),
        *[(["partition", "--parts", "2", "--graph", f"npz:{os.path.join(d, name)}", "--out", os.path.join(d, "x")],
           2, text, {}) for name, text in (
              ("object.npz", "array 'labels' holds Python objects"),
              ("bigshape.npz", "array 'adj_shape' says 1000000000 rows"),
              ("badindex.npz", "array 'adj_indices' holds 999"),
              ("strings.npz", "array 'attr_data' holds strings"),
              ("wide.npz", "needs about"))],
        (["verify", "--graph", "synthetic:nodes=1000000000"], 2, "needs about", {}),
        (["verify", "--graph", "planetoid:cora", "--json", notes], 2, "already exists", {}),
        ([*train, "--graph", p2, "--json", notes], 2, "already exists and this run did not write it", {}),
        ([*train, "--graph", p2, "--fault", "explode"], 2, "fault must be RANK:EPOCH:KIND", {}),
        ([*train, "--graph", p2, "--fault", "1:2:garbage"], 2, "fault kind must be one of", {}),
        ([*train, "--graph", p2, "--fault", "1:0:raise"], 2, "epoch >= 1", {}),
        ([*train, "--graph", p2, "--net", "veth:rate=100mbit,hosts=3"], 2, "cannot be spread evenly", {}),
        ([*train, "--graph", p2, "--backend", "foo"], 2, "unknown backend 'foo'", {}),
        ([*train, "--graph", p2, "--backend", "nccl"], 2, "this engine runs on CPUs", {}),
        ([*train, "--graph", p2, "--backend", "mpi"], 2, "backend 'mpi' is not available", {}),
        ([*train, "--graph", "synthetic:nodes=1000000000"], 2, "this run needs about", {}),
        (["train", "--graph", "planetoid:cora", "--workers", "64"], 2, "this run needs about",
         {sizing.AVAILABLE_ENV: EIGHT_GIB}),
        ([*train, "--graph", os.path.join(d, "linked")], 2, f"{os.path.join(d, 'linked', 'part1')} is a link", {}),
        ([*train, "--graph", os.path.join(d, "classes")], 2, "manifest.json says num_classes 9", {}),
    ]


def test_bad_inputs_exit_2_with_one_line(work, capsys, monkeypatch):
    """Each case: exit 2, one line naming what is wrong (a warning line may precede it), no traceback, and nothing
    written in the work folder."""
    before = sorted(os.listdir(work))
    failures = []
    for argv, code, text, env in _cases(work):
        with monkeypatch.context() as m:
            for k, v in env.items():
                m.setenv(k, v)
            try:
                got = cli_main(argv)
            except SystemExit as done:  # argparse
                got = done.code
        err = capsys.readouterr().err
        lines = [line for line in err.strip().splitlines() if not line.startswith(("warning:", "loading graph"))]
        if got != code or text not in err or len(lines) != 1 or "Traceback" in err:
            failures.append(f"{' '.join(a[:60] for a in argv)}: exit {got} (want {code}), wanted {text!r} in:\n{err}")
    assert not failures, "\n\n".join(failures)
    assert sorted(os.listdir(work)) == before
    assert json.load(open(os.path.join(work, "notes.json"))) == {"mine": True}  # the user's file untouched


def test_sizes_admit_what_fits_and_refuse_what_does_not():
    """--hidden 100000 on Cora (no hidden x hidden weight in a 2-layer model) fits a machine of 24 GiB; a billion
    nodes do not; 64 Cora workers do not fit 8 GiB."""
    cora = sizing.graph_sizes("planetoid:cora")
    wide = sizing.estimate(cora, 2, ModelConfig(hidden=100000), TrainConfig())
    assert wide["total"] < 20 * 2**30, wide
    huge = sizing.estimate(sizing.graph_sizes("synthetic:nodes=1000000000"), 2, ModelConfig(), TrainConfig())
    assert huge["total"] > 100 * 2**30, huge
    assert sizing.estimate(cora, 64, ModelConfig(), TrainConfig())["total"] > 8 * 2**30


def test_cgroup_limit_is_read_from_this_process_path(tmp_path):
    """v1: the memory controller's path in /proc/self/cgroup, the smallest room along it; v2: the unified path."""
    root = tmp_path / "cg"
    leaf = root / "memory" / "job" / "step"
    leaf.mkdir(parents=True)
    (root / "memory" / "memory.limit_in_bytes").write_text(str(2**63 - 4096))
    (root / "memory" / "memory.usage_in_bytes").write_text("0")
    (root / "memory" / "job" / "memory.limit_in_bytes").write_text(str(8 * 2**30))
    (root / "memory" / "job" / "memory.usage_in_bytes").write_text(str(2**30))
    (leaf / "memory.limit_in_bytes").write_text(str(2**62))
    (leaf / "memory.usage_in_bytes").write_text("0")
    proc = tmp_path / "cgroup"
    proc.write_text("4:memory:/job/step\n0::/\n")
    assert sizing.cgroup_limit(str(proc), str(root)) == 7 * 2**30
    v2 = tmp_path / "v2"
    (v2 / "x").mkdir(parents=True)
    (v2 / "cgroup.controllers").write_text("memory")
    (v2 / "x" / "memory.max").write_text(str(8 * 2**30))
    (v2 / "x" / "memory.current").write_text(str(2**30))
    proc.write_text("0::/x\n")
    assert sizing.cgroup_limit(str(proc), str(v2)) == 7 * 2**30


@pytest.mark.parametrize("kwargs, error, name", [
    ({"workers": "2"}, TypeError, "workers"),
    ({"epochs": 0}, ValueError, "epochs"),
    ({"timeout_s": -1.0}, ValueError, "timeout must be a finite number > 0"),
    ({"run_timeout_s": 0}, ValueError, "run_timeout_s"),
    ({"port": 70000}, ValueError, "port"),
    ({"method": "spectral"}, ValueError, "method"),
    ({"memory": "lots"}, ValueError, "memory"),
    ({"fault": "1:1:raise"}, TypeError, "fault"),
    ({"predict": "yes"}, TypeError, "predict"),
    ({"partition_dir": 5}, TypeError, "partition_dir"),
    ({"train": {"epochs": 2}}, TypeError, "train"),
    ({"backend": "nccl"}, ValueError, "nccl"),
    ({"net": "veth:rate=100mbit,hosts=3"}, ValueError, "hosts=3"),
])
def test_run_names_the_bad_argument_before_anything_starts(kwargs, error, name, tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    with pytest.raises(error, match=name):
        sarlab.run("planetoid:cora", **kwargs)
    assert os.listdir(tmp_path) == []  # nothing was made


# ------------------------------------------------------------------ faults and signals, in subprocesses

def _ours(pid: int) -> list[int]:
    """Live descendants of ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if stat[0] not in ("Z", "X"):
                children.setdefault(int(stat[1]), []).append(int(entry))
    out, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def _netns() -> set[str]:
    ip = shutil.which("ip")
    if not ip:
        return set()
    res = subprocess.run([ip, "netns", "list"], capture_output=True, text=True)
    return {line.split()[0] for line in res.stdout.splitlines() if line.strip()}


def _spawn(args: list[str], tmp: str) -> subprocess.Popen:
    env = dict(os.environ, TMPDIR=tmp)
    return subprocess.Popen([sys.executable, "-m", "sarlab", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _finish(proc: subprocess.Popen, timeout: float = 240) -> tuple[int, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{proc.args} did not finish in {timeout}s\n{out}\n{err}")
    return proc.returncode, out + err


def _wait_for(predicate, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None or time.monotonic() > deadline:
            code, text = _finish(proc)
            pytest.fail(f"the condition never held (exit {code}):\n{text}")
        time.sleep(0.1)


def _mentioning(text: str) -> list[int]:
    """Live processes whose command line holds ``text`` (a worker's names its run directory, under TMPDIR)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if text in open(f"/proc/{entry}/cmdline", "rb").read().decode(errors="replace"):
                    found.append(int(entry))
            except OSError:
                continue
    return found


def _leftovers(tmp: str, pid: int, namespaces: set[str]) -> list[str]:
    time.sleep(0.5)  # a SIGKILLed worker's exit is reaped by init
    left = [f"process {p}" for p in set(_ours(pid)) | set(_mentioning(tmp))]
    left += [f"{tmp}/{e}" for e in os.listdir(tmp) if e not in ("p2", "sig") and not e.startswith("torchinductor")]
    left += [f"netns {n}" for n in _netns() - namespaces if f"-{pid}-" in n]  # ours: named with the launcher pid
    return left


def test_faults_fail_one_line_naming_rank_and_epoch_and_leave_nothing(work, tmp_path):
    """raise and hang on rank 1 in epoch 2: exit 1, the rank and the epoch named; no process, temporary file or
    network namespace left."""
    tmp, namespaces = str(tmp_path), _netns()
    shutil.copytree(os.path.join(work, "p2"), os.path.join(tmp, "p2"))
    base = ["train", "--graph", os.path.join(tmp, "p2"), "--workers", "2", "--epochs", "3", "--hidden", "8",
            "--eval-every", "0", "--timeout", "6"]
    for fault, text in (("1:2:raise", "injected fault on rank 1 at epoch 2"), ("1:2:hang", "in epoch 2")):
        proc = _spawn([*base, "--fault", fault], tmp)
        code, out = _finish(proc)
        assert code == 1 and "rank 1 failed" in out and text in out, out
        assert _leftovers(tmp, proc.pid, namespaces) == [], out


def test_signals_end_partition_and_train_cleanly(work, tmp_path):
    """SIGTERM mid-partition: exit 143, one line, no staging directory; SIGKILL mid-partition: the next run sweeps
    what it left; SIGHUP to a training launcher: exit 129, workers gone, nothing left in the temporary dir."""
    tmp, namespaces = str(tmp_path), _netns()
    out_dir = os.path.join(tmp, "sig")
    os.makedirs(out_dir)
    spec = ["partition", "--graph", "synthetic:nodes=200000,features=64", "--parts", "4", "--method", "random",
            "--out", os.path.join(out_dir, "p")]

    def staged() -> bool:
        return any(e.startswith(".partition-") for e in os.listdir(out_dir))

    for sig, want in ((signal.SIGTERM, 143), (signal.SIGKILL, -9)):
        proc = _spawn(spec, tmp)
        _wait_for(staged, proc)
        os.kill(proc.pid, sig)
        code, out = _finish(proc)
        assert code == want, out
        if sig == signal.SIGTERM:
            assert "interrupted by SIGTERM" in out and "Traceback" not in out and not staged(), out
    assert staged()  # the SIGKILLed run's staging directory, until the next run
    code, out = _finish(_spawn(["partition", "--graph", "synthetic:nodes=500", "--parts", "2", "--out",
                                os.path.join(out_dir, "q")], tmp))
    assert code == 0 and not staged(), out
    shutil.copytree(os.path.join(work, "p2"), os.path.join(tmp, "p2"))
    proc = _spawn(["train", "--graph", os.path.join(tmp, "p2"), "--workers", "2", "--epochs", "100000", "--hidden",
                   "8", "--eval-every", "0"], tmp)
    _wait_for(lambda: len(_ours(proc.pid)) >= 2, proc)
    time.sleep(1.0)
    os.kill(proc.pid, signal.SIGHUP)
    code, out = _finish(proc)
    assert code == 129 and "interrupted by SIGHUP" in out and "Traceback" not in out, out
    assert _leftovers(tmp, proc.pid, namespaces) == [], out


def test_a_whole_job_suspended_past_its_timeout_continues_or_says_so(work, tmp_path):
    """SIGSTOP to the launcher and its workers for longer than --timeout, then SIGCONT: the run goes on, or ends
    saying the job was suspended; it never blames a rank."""
    tmp = str(tmp_path)
    shutil.copytree(os.path.join(work, "p2"), os.path.join(tmp, "p2"))
    proc = _spawn(["train", "--graph", os.path.join(tmp, "p2"), "--workers", "2", "--epochs", "100000", "--hidden",
                   "8", "--eval-every", "0", "--timeout", "3"], tmp)
    _wait_for(lambda: len(_ours(proc.pid)) >= 2 and any(  # both workers past their start-up
        os.path.exists(os.path.join(tmp, e, "rank1.progress")) for e in os.listdir(tmp) if "-run-" in e), proc)
    time.sleep(2.0)
    job = [proc.pid, *_ours(proc.pid)]
    for pid in job:
        os.kill(pid, signal.SIGSTOP)
    time.sleep(8.0)
    for pid in job:
        os.kill(pid, signal.SIGCONT)
    time.sleep(6.0)
    if proc.poll() is None:  # it went on: end it
        os.kill(proc.pid, signal.SIGTERM)
        code, out = _finish(proc)
        assert code == 143, out
    else:
        code, out = _finish(proc)
        assert code == 1 and "the job was suspended for" in out, out
    assert "rank 0 failed" not in out and "rank 1 failed" not in out, out


def test_a_full_disk_during_a_write_says_so_in_one_line_and_keeps_the_old_file(tmp_path):
    """atomic_write on ENOSPC: one line naming the file, the previous version whole, no temporary file left; the
    launcher shows that line alone (no traceback)."""
    import errno

    from sarlab.real.launch.launcher import FULL_DISK_MARKERS
    from sarlab.training.checkpoint import atomic_write

    target = tmp_path / "state.json"
    target.write_text("old")

    def fill(f):
        f.write(b"new")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(OSError, match="writing .*state.json failed and the previous file, if any, is whole") as err:
        atomic_write(str(target), fill)
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["state.json"]
    assert any(m in f"OSError: {err.value}" for m in FULL_DISK_MARKERS)
