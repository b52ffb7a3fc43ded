"""Bad input through the real command line: one clear line on stderr, exit code 2, nothing written or changed.

Table-driven: each row is a command line (placeholders filled from the fixture's files), the text the error
must contain, and the exit code. The rows run in this process (``cli.main``, what the ``sarlab`` script calls: every
row is refused before any work starts, so nothing is launched); the DGL and --force cases run ``sarlab`` in a
subprocess with a timeout, the exit status through the script included.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil

import numpy as np
import pytest
from conftest import cli_here, run_cli
from test_data_safety import _npz, _tree

from sarlab.data.graphs import synthetic_graph
from sarlab.data.partition import file_sha256, manifest_digest, partition

SYN = "synthetic:nodes=200,degree=4,features=6,classes=3,seed=1"
TRAIN = ["train", "--epochs", "2", "--hidden", "8", "--eval-every", "0", "--workers", "2"]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    """Inputs of every kind of bad, in one folder that no row may change."""
    root = tmp_path_factory.mktemp("bad-inputs")
    out = {"root": str(root)}
    (root / "a_file").write_text("keep me")
    out["file"] = str(root / "a_file")
    (root / "foreign").mkdir()
    (root / "foreign" / "thesis.tex").write_text("keep me")
    out["foreign"] = str(root / "foreign")
    g = synthetic_graph(nodes=200, degree=4, features=6, classes=3, seed=1)
    for name in ("parts", "edited", "nan_parts"):
        partition(g, 2, str(root / name))
        out[name] = str(root / name)
    manifest_path = root / "edited" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["num_classes"] = 100001  # by hand, checksum left as it was
    manifest_path.write_text(json.dumps(manifest))
    features = root / "nan_parts" / "part1" / "features.npy"  # NaN behind consistent checksums
    x = np.load(features)
    x[4, 1] = np.nan
    np.save(features, x)
    manifest_path = root / "nan_parts" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["files"]["part1/features.npy"] = file_sha256(str(features))
    manifest["manifest_sha256"] = manifest_digest(manifest)
    manifest_path.write_text(json.dumps(manifest))
    labels = np.arange(40) % 3
    x = np.ones((40, 3), dtype=np.float32)
    x[7, 2] = np.inf
    out["nan_npz"] = _npz(root / "nan.npz", labels, x)
    out["frac_npz"] = _npz(root / "frac.npz", np.where(np.arange(40) == 5, 1.5, labels).astype(np.float64))
    out["outlier_npz"] = _npz(root / "outlier.npz", np.where(np.arange(40) == 9, 100000, labels))
    out["negative_npz"] = _npz(root / "negative.npz", np.where(np.arange(40) == 3, -5, labels))
    hetero = {"graph_name": "h", "num_nodes": 4, "num_edges": 2, "num_parts": 1,
              "node_map": {"paper": [[0, 2]], "author": [[0, 2]]}}
    (root / "hetero.json").write_text(json.dumps(hetero))
    out["hetero_json"] = str(root / "hetero.json")
    return out


PARTITION = ["partition", "--graph", SYN, "--parts", "2"]
#: (command line with {placeholders}, text the error must contain, exit code)
ROWS = [
    # sarlab partition: never lose a file
    ([*PARTITION, "--out", "{file}"], "is a file, not a directory", 2),
    ([*PARTITION, "--out", "{file}", "--force"], "is a file, not a directory", 2),
    ([*PARTITION, "--out", "{foreign}", "--force"], "is not a sarlab partition", 2),
    ([*PARTITION, "--out", "{parts}"], "already holds a sarlab partition; pass --force", 2),
    # sarlab partition: data checked before compute
    (["partition", "--graph", "npz:{nan_npz}", "--parts", "2", "--out", "{new}"],
     "1 node(s) have NaN or infinite features (first: node 7, feature 2 = inf)", 2),
    (["partition", "--graph", "npz:{frac_npz}", "--parts", "2", "--out", "{new}"],
     "are fractional (first: node 5 has label 1.5)", 2),
    (["partition", "--graph", "npz:{outlier_npz}", "--parts", "2", "--out", "{new}"],
     "which makes a 100001-class model", 2),
    (["partition", "--graph", "npz:{negative_npz}", "--parts", "2", "--out", "{new}"],
     "label -5 of node 3 is negative", 2),
    (["partition", "--graph", SYN + ",train=0", "--parts", "2", "--out", "{new}"], "split fractions need", 2),
    (["partition", "--graph", "{root}/no_such_dir", "--parts", "2", "--out", "{new}"], "no such directory", 2),
    (["partition", "--graph", "ogb:ogbn-arxiv:{root}/no_such_root", "--parts", "2", "--out", "{new}"],
     "no such directory", 2),
    (["partition", "--graph", SYN, "--parts", "0", "--out", "{new}"], "--graph needs --parts N with N >= 1", 2),
    (["partition", "--from-dgl", "{root}/missing.json", "--out", "{new}"], "DGL partition config not found", 2),
    (["partition", "--from-dgl", "{hetero_json}", "--out", "{new}"], "a heterogeneous graph", 2),
    # sarlab train: argument ranges
    ([*TRAIN, "--graph", "{parts}", "--epochs", "0"], "epochs must be an integer >= 1, got 0", 2),
    ([*TRAIN, "--graph", "{parts}", "--lr", "-0.01"], "learning rate must be a finite number > 0", 2),
    ([*TRAIN, "--graph", "{parts}", "--weight-decay", "-1"], "weight decay must be a finite number >= 0", 2),
    ([*TRAIN, "--graph", "{parts}", "--eval-every", "-1"], "eval_every (0: never) must be an integer >= 0", 2),
    ([*TRAIN, "--graph", "{parts}", "--prefetch", "-1"], "prefetch depth must be an integer >= 0", 2),
    ([*TRAIN, "--graph", "{parts}", "--dropout", "1.0"], "dropout must be in [0, 1)", 2),
    ([*TRAIN, "--graph", "{parts}", "--layers", "0"], "must be >= 1", 2),
    ([*TRAIN, "--graph", "{parts}", "--hidden", "0"], "must be >= 1", 2),
    ([*TRAIN, "--graph", "{parts}", "--heads", "0"], "must be >= 1", 2),
    ([*TRAIN, "--graph", "{parts}", "--timeout", "0"], "timeout must be a finite number > 0", 2),
    ([*TRAIN, "--graph", "{parts}", "--workers", "0"], "workers must be an integer >= 1", 2),
    # sarlab train: data
    ([*TRAIN, "--graph", "{edited}"], "was edited after sarlab wrote it", 2),
    ([*TRAIN, "--graph", "{nan_parts}"], "have NaN or infinite features", 2),
    ([*TRAIN, "--graph", "npz:{nan_npz}"], "NaN or infinite features", 2),
    ([*TRAIN, "--graph", "{root}/no_such_dir"], "no such directory", 2),
    # sarlab train: never lose a file (--partition-dir)
    ([*TRAIN, "--graph", SYN, "--partition-dir", "{parts}"], "already holds a sarlab partition; pass --force", 2),
    ([*TRAIN, "--graph", SYN, "--partition-dir", "{foreign}"], "is not a sarlab partition", 2),
    ([*TRAIN, "--graph", SYN, "--partition-dir", "{file}"], "is a file, not a directory", 2),
]


def _fill(args: list[str], files: dict, new: str) -> list[str]:
    return [a.format(new=new, **files) for a in args]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("args, needle, code", ROWS, ids=[f"{r[0][0]}-{i}" for i, r in enumerate(ROWS)])
def test_bad_input(files, tmp_path, args, needle, code):
    before = _tree(files["root"])
    new = str(tmp_path / "new_out")
    res = cli_here(_fill(args, files, new))
    text = res.stdout + res.stderr
    assert needle in res.stderr, f"expected {needle!r} on stderr:\n{text}"
    assert res.returncode == code, f"exit code {res.returncode}, expected {code}:\n{text}"
    assert "Traceback" not in text, text  # one clear line, not a worker's traceback
    assert _tree(files["root"]) == before  # nothing of the user's changed
    assert not os.path.exists(new)  # nothing half-written


def test_from_dgl_says_how_to_get_dgl(files, tmp_path):
    """Where DGL does not import, the message says why DGL is needed and how to install it."""
    config = {"graph_name": "g", "num_nodes": 4, "num_edges": 2, "num_parts": 1, "node_map": {"_N": [[0, 4]]},
              "part-0": {"part_graph": "part0/graph.dgl", "node_feats": "part0/node_feat.dgl"}}
    (tmp_path / "g.json").write_text(json.dumps(config))
    res = run_cli(["partition", "--from-dgl", str(tmp_path / "g.json"), "--out", str(tmp_path / "out")], timeout=120)
    if importlib.util.find_spec("dgl") is None:
        assert res.returncode != 0 and "needs the 'dgl' package" in res.stderr and "numpy<2" in res.stderr, \
            res.stderr
    else:
        assert res.returncode == 2 and "DGL partition file missing" in res.stderr, res.stderr
    assert not os.path.exists(tmp_path / "out")


def test_force_replaces_only_a_partition(files, tmp_path):
    target = str(tmp_path / "parts")
    shutil.copytree(files["parts"], target)
    res = run_cli(["partition", "--graph", SYN, "--parts", "3", "--out", target, "--force"], timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.load(open(os.path.join(target, "manifest.json")))["num_parts"] == 3
    assert sorted(os.listdir(tmp_path)) == ["parts"]
