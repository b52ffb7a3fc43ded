"""Checkpoint and resume through `sarlab train` (--checkpoint/--checkpoint-every/--resume/--save-model/--predict).

A run interrupted after 3 of 6 epochs and resumed reproduces the uninterrupted run: bit for bit on the same
number of workers (2 -> 2), to 1e-10 in fp64 on another (2 -> 4). A run killed by a fault resumes from its
last checkpoint. Predictions come back in original node order whatever the number of workers.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from conftest import cli_here

from sarlab.data.graphs import synthetic_graph
from sarlab.data.partition import partition
from sarlab.training.checkpoint import load_checkpoint, load_model

MODEL = ["--model", "sage", "--layers", "3", "--hidden", "16", "--dropout", "0.5", "--batchnorm", "--seed", "1",
         "--dtype", "float64", "--lr", "0.02", "--eval-every", "2"]


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> dict:
    g = synthetic_graph(nodes=400, degree=6, features=10, classes=4, noise=3.0, seed=5)
    root = tmp_path_factory.mktemp("resume")
    out = {}
    for n in (2, 4):
        partition(g, n, str(root / f"p{n}"))
        out[n] = str(root / f"p{n}")
    return out


def _train(pdir: str, workers: int, epochs: int, tmp_path, name: str, *extra: str, ok: bool = True) -> list[dict]:
    out = str(tmp_path / f"{name}.json")
    res = cli_here(["train", "--graph", pdir, "--workers", str(workers), "--epochs", str(epochs), *MODEL,
                    "--json", out, *extra])
    if not ok:
        assert res.returncode != 0, res.stdout + res.stderr
        return []
    assert res.returncode == 0, res.stdout + res.stderr
    return json.load(open(out))


def _curve(records: list[dict]) -> dict:
    """epoch -> (loss, train_acc, val_acc) as rank 0 reported it."""
    return {r["epoch"]: (r["loss"], r["train_acc"], r["val_acc"]) for r in records if r["rank"] == 0}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and np.array_equal(np.array([a[k] for k in sorted(a)]),
                                                   np.array([b[k] for k in sorted(b)]), equal_nan=True)


@pytest.fixture(scope="module")
def whole(parts, tmp_path_factory) -> tuple[list[dict], object]:
    """The uninterrupted 6-epoch run on 2 workers that both resume tests compare with (records, its folder with
    whole_model.pt and whole_pred.pt): one run for both."""
    folder = tmp_path_factory.mktemp("whole")
    records = _train(parts[2], 2, 6, folder, "whole", "--save-model", str(folder / "whole_model.pt"),
                     "--predict", str(folder / "whole_pred.pt"))
    return records, folder


@pytest.mark.timeout(1200)
def test_resume_2_to_2_is_bit_identical_and_2_to_4_within_1e10(parts, whole, tmp_path):
    whole, folder = whole
    _train(parts[2], 2, 3, tmp_path, "first", "--checkpoint", str(tmp_path / "ck3"))
    assert load_checkpoint(str(tmp_path / "ck3"))["epochs_done"] == 3
    same = _train(parts[2], 2, 6, tmp_path, "same", "--resume", str(tmp_path / "ck3"),
                  "--save-model", str(tmp_path / "same_model.pt"), "--predict", str(tmp_path / "same_pred.pt"))
    more = _train(parts[4], 4, 6, tmp_path, "more", "--resume", str(tmp_path / "ck3"),
                  "--predict", str(tmp_path / "more_pred.pt"))
    reference = {e: v for e, v in _curve(whole).items() if e >= 3}
    assert _same(_curve(same), reference)
    losses = np.array([reference[e][0] for e in sorted(reference)])
    other = np.array([_curve(more)[e][0] for e in sorted(reference)])
    assert np.abs(other - losses).max() / np.abs(losses).max() <= 1e-10
    a = load_model(str(folder / "whole_model.pt")).state_dict()
    b = load_model(str(tmp_path / "same_model.pt")).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    pred = {k: torch.load(str((folder if k == "whole" else tmp_path) / f"{k}_pred.pt"), weights_only=True)["outputs"]
            for k in ("whole", "same", "more")}
    assert pred["whole"].shape == (400, 4) and torch.equal(pred["same"], pred["whole"])
    torch.testing.assert_close(pred["more"], pred["whole"], rtol=1e-9, atol=1e-10)


@pytest.mark.timeout(900)
def test_a_run_killed_mid_way_resumes_from_its_last_checkpoint(parts, whole, tmp_path):
    whole, _ = whole
    ck = str(tmp_path / "ck")
    _train(parts[2], 2, 6, tmp_path, "dies", "--checkpoint", ck, "--checkpoint-every", "2",
           "--inject-fault", "1:5:raise", ok=False)
    assert load_checkpoint(ck)["epochs_done"] == 4
    resumed = _train(parts[2], 2, 6, tmp_path, "resumed", "--resume", ck, "--checkpoint", ck)
    assert _same(_curve(resumed), {e: v for e, v in _curve(whole).items() if e >= 4})
    assert load_checkpoint(ck)["epochs_done"] == 6


@pytest.mark.timeout(600)
def test_checkpoint_and_outputs_never_overwrite(parts, tmp_path):
    ck = str(tmp_path / "ck")
    _train(parts[2], 2, 2, tmp_path, "first", "--checkpoint", ck, "--predict", str(tmp_path / "pred.npz"))
    before = open(os.path.join(ck, "checkpoint.pt"), "rb").read()
    for extra, needle in ((["--predict", str(tmp_path / "pred.npz")], "already holds a sarlab predictions"),
                          (["--checkpoint", ck, "--hidden", "32"], "model.hidden: checkpoint 16, this run 32"),
                          (["--resume", ck, "--hidden", "32"], "model.hidden: checkpoint 16, this run 32")):
        res = cli_here(["train", "--graph", parts[2], "--workers", "2", "--epochs", "3", *MODEL, *extra])
        assert res.returncode == 2 and needle in res.stderr, res.stdout + res.stderr
    for extra in (["--checkpoint", ck], ["--resume", ck], ["--checkpoint", ck, "--resume", "auto"]):
        res = cli_here(["train", "--graph", parts[2], "--workers", "2", "--epochs", "2", *MODEL, *extra])
        assert res.returncode == 0 and "already done 2 epochs" in res.stderr, res.stdout + res.stderr
    assert open(os.path.join(ck, "checkpoint.pt"), "rb").read() == before
