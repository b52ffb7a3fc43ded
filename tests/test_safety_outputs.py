"""Nothing lost (issue 28): outputs checked before any compute, size checks before allocation, the checkpoint
directory locked and sha256-verified, a restarted command line that resumes, manifest paths confined.

Through the real command line: the refusals before any compute in this process (``cli.main``, what the ``sarlab``
script calls; nothing starts), the runs in subprocesses with timeouts (a failure shows the child's output).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT, cli_here

from sarlab.data.graphs import synthetic_graph
from sarlab.data.partition import PartitionError, load_manifest, manifest_digest, partition
from sarlab.real.launch import outputs
from sarlab.training import checkpoint as ck

TRAIN = ["train", "--epochs", "3", "--hidden", "8", "--eval-every", "0", "--workers", "2"]


@pytest.fixture(scope="module")
def pdir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("safety") / "p2")
    partition(synthetic_graph(nodes=400, degree=6, features=8, classes=3, seed=0), 2, path)
    return path


def _refused(res: subprocess.CompletedProcess, needle: str) -> str:
    text = res.stdout + res.stderr
    assert res.returncode == 2, text
    assert needle in res.stderr, f"expected {needle!r} in:\n{text}"
    assert len(res.stderr.strip().splitlines()) <= 2, text  # one line (a warning line may precede it)
    assert "epoch 1/" not in text and "Traceback" not in text, text
    return text


def _cases(tmp: str, pdir: str) -> list[tuple[list[str], str, dict]]:
    os.makedirs(os.path.join(tmp, "out.json"), exist_ok=True)
    unwritable = "/proc/sarlab-nowhere"  # not writable even for root, unlike a chmod-ed folder
    return [
        (["--graph", pdir, "--json", f"{unwritable}/r.json"], "cannot write into", {}),
        (["--graph", pdir, "--json", os.path.join(tmp, "out.json")], "is a directory", {}),
        (["--graph", pdir, "--json", os.path.join(tmp, "r.txt")], "must end in .json", {}),
        (["--graph", pdir, "--save-model", f"{unwritable}/m.pt"], "cannot write into", {}),
        (["--graph", pdir, "--save-model", os.path.join(tmp, "m.bin")], "must end in .pt", {}),
        (["--graph", pdir, "--predict", os.path.join(tmp, "x.csv")], "must end in .pt or .npz", {}),
        (["--graph", pdir, "--predict", f"{unwritable}/p.npz"], "cannot write into", {}),
        (["--graph", pdir, "--checkpoint", f"{unwritable}/ck"], "cannot write into", {}),
        (["--graph", pdir, "--resume", "auto"], "--resume auto continues the checkpoint of --checkpoint", {}),
        (["--graph", pdir, "--fault", "1:9:raise"], "fault at epoch 9, but the run has 3 epoch(s)", {}),
        (["--graph", "synthetic:nodes=1000000000"], "this run needs about", {}),
        (["--graph", "synthetic:nodes=1000,features=100000000"], "this run needs about", {}),
        (["--graph", "planetoid:cora", "--hidden", "1000000"], "this run needs about", {}),
        (["--graph", "planetoid:cora", "--workers", "64"], "this run needs about",
         {"SARLAB_MEMORY_AVAILABLE": str(8 * 2**30)}),
        (["--graph", "synthetic:nodes=100,degree=inf"], "degree='inf' is not a finite number", {}),
        (["--graph", "synthetic:nodes=100,nodes=200"], "nodes is given twice", {}),
    ]


def test_bad_outputs_sizes_and_specs_are_refused_before_any_compute(pdir, tmp_path):
    """Table: each case exits 2 with one line, before the first epoch (the sizes before anything is allocated)."""
    for args, needle, env in _cases(str(tmp_path), pdir):
        t0 = time.monotonic()
        _refused(cli_here([*TRAIN, *args], env=env), needle)
        print(f"{needle!r}: refused in {time.monotonic() - t0:.1f}s")
    assert sorted(os.listdir(tmp_path)) == ["out.json"]  # nothing written


def test_second_run_on_a_locked_checkpoint_dir_is_refused(pdir, tmp_path):
    ck_dir, log = str(tmp_path / "ck"), str(tmp_path / "a.log")
    with open(log, "w") as out:
        first = subprocess.Popen([sys.executable, "-m", "sarlab", *TRAIN, "--epochs", "1000000", "--graph", pdir,
                                  "--checkpoint", ck_dir], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while "epoch 2/" not in open(log).read():
            assert first.poll() is None and time.monotonic() < deadline, open(log).read()
            time.sleep(0.2)
        res = cli_here([*TRAIN, "--graph", pdir, "--checkpoint", ck_dir])
        _refused(res, f"is in use by another run (pid {first.pid} on host")
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(60)
    assert first.returncode == 128 + signal.SIGTERM, open(log).read()


def test_checkpoint_is_verified_resumed_automatically_and_temporaries_swept(pdir, tmp_path):
    ck_dir = str(tmp_path / "ck")
    res = cli_here([*TRAIN, "--graph", pdir, "--checkpoint", ck_dir])
    assert res.returncode == 0, res.stdout + res.stderr
    # the same command line again: the checkpoint has done all 3 epochs, so the run says so and ends, exit 0
    res = cli_here([*TRAIN, "--graph", pdir, "--checkpoint", ck_dir])  # nothing starts: in this process
    assert res.returncode == 0 and "already done 3 epochs" in res.stderr, res.stdout + res.stderr
    assert "epoch" not in res.stdout.split("final:")[0], res.stdout
    # a killed write's temporary is removed by the next run that owns the lock, and it says so
    open(os.path.join(ck_dir, ".checkpoint-deadbeef.tmp"), "wb").write(b"half")
    res = cli_here([*TRAIN, "--graph", pdir, "--checkpoint", ck_dir, "--epochs", "4"])
    assert res.returncode == 0 and "removed 1 temporary file(s)" in res.stderr, res.stdout + res.stderr
    assert "epoch 4/4" in res.stdout and "epoch 3/4" not in res.stdout, res.stdout  # resumed after epoch 3
    assert not [e for e in os.listdir(ck_dir) if e.endswith(".tmp")]
    # one flipped bit: refused before training
    path = os.path.join(ck_dir, ck.CHECKPOINT_FILE)
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x10
    open(path, "wb").write(bytes(data))
    _refused(cli_here([*TRAIN, "--graph", pdir, "--checkpoint", ck_dir, "--epochs", "6"]),
             "checkpoint corrupt (sha256 mismatch)")
    # another model is still refused
    shutil.rmtree(ck_dir)
    assert cli_here([*TRAIN, "--graph", pdir, "--checkpoint", ck_dir]).returncode == 0
    _refused(cli_here([*TRAIN, "--graph", pdir, "--checkpoint", ck_dir, "--hidden", "16", "--epochs", "5"]),
             "model.hidden: checkpoint 8, this run 16")


def test_a_failed_write_at_the_end_keeps_the_results(tmp_path):
    """deliver(): the file that could not be written and the records go to a fallback the error names."""
    src = tmp_path / "model.pt"
    src.write_bytes(b"weights")
    records = [{"epoch": 0, "loss": 1.5}]
    with pytest.raises(outputs.OutputError, match="the run finished") as err:
        outputs.deliver([(str(src), "/proc/sarlab-nowhere/model.pt", "--save-model")], records)
    kept = str(err.value).split("records -> ")[1]
    try:
        assert json.load(open(kept)) == records
        assert open(os.path.join(os.path.dirname(kept), "model.pt"), "rb").read() == b"weights"
    finally:
        shutil.rmtree(os.path.dirname(kept))
    good = tmp_path / "out" / "m.pt"
    outputs.deliver([(str(src), str(good), "--save-model")], records)
    assert good.read_bytes() == b"weights" and os.listdir(tmp_path / "out") == ["m.pt"]  # no temporary left


def test_manifest_files_are_confined_to_the_partition(pdir, tmp_path):
    copy = str(tmp_path / "p")
    shutil.copytree(pdir, copy)
    manifest = load_manifest(copy)
    first = sorted(manifest["files"])[0]
    for bad in ("part0/../../etc/passwd", "/etc/passwd", "part0/sub/x.npy", "../x.npy"):
        m = json.loads(json.dumps(manifest))
        m["files"] = {**{k: v for k, v in m["files"].items() if k != first}, bad: m["files"][first]}
        m["manifest_sha256"] = manifest_digest(m)
        with open(os.path.join(copy, "manifest.json"), "w") as f:
            json.dump(m, f)
        with pytest.raises(PartitionError, match="not a file of a part folder"):
            load_manifest(copy)


def test_free_space_is_checked_before_training(tmp_path, monkeypatch):
    """Outputs whose size is known (predictions: nodes x classes; a built-in model's weights; a checkpoint's weights
    and Adam moments) are refused before any worker starts when their file system has less room; sizes on one file
    system add up."""
    from collections import namedtuple

    import sarlab
    from sarlab.real.launch import outputs

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(outputs.shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(outputs.OutputError, match=r"--predict, --save-model: about 0\.0 MiB will be written"):
        outputs.check_free_space([(str(tmp_path / "p.pt"), 600, "--predict"), (str(tmp_path / "m.pt"), 400,
                                                                                "--save-model")])
    outputs.check_free_space([(str(tmp_path / "p.pt"), 600, "--predict"), (None, 10**9, "--save-model")])
    with pytest.raises(outputs.OutputError, match="--predict: about"):  # 2708 x 7 x 4 bytes > 1000
        sarlab.run("planetoid:cora", workers=2, model="gcn", epochs=1, predict_path=str(tmp_path / "pred.pt"))
    assert not list(tmp_path.iterdir())  # refused before anything was written
