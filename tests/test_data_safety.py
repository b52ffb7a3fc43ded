"""Never lose a file, and validate data before compute (engine side; the CLI table is test_bad_inputs.py)."""
from __future__ import annotations

import gzip
import json
import os
import warnings
from dataclasses import replace

import numpy as np
import pytest

import sarlab.data.partition as sp
from sarlab.core.config import EngineConfig
from sarlab.data.graphs import load_graph, npz_graph, ogb_missing_files
from sarlab.data.partition import (
    PartitionError,
    UnverifiedManifestWarning,
    check_partition,
    load_manifest,
    load_part,
    manifest_digest,
    partition,
)
from sarlab.data.validate_data import InputError, check_graph
from sarlab.training.trainer import TrainConfig


def _tree(path) -> dict:
    """Every file under ``path`` with its bytes (to show nothing changed)."""
    out = {}
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            out[os.path.relpath(full, path)] = open(full, "rb").read()
    return out


# ---- never lose a file ----------------------------------------------------------------------------------------


def test_output_directory_rules(tmp_path, small_graph):
    (tmp_path / "a_file").write_text("keep me")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "thesis.tex").write_text("keep me")
    os.symlink(str(tmp_path / "foreign"), str(tmp_path / "link"))
    for name, needle in (("a_file", "is a file, not a directory"), ("foreign", "is not a sarlab partition"),
                         ("link", "symbolic link")):
        for force in (False, True):
            with pytest.raises(PartitionError, match=needle):
                partition(small_graph, 2, str(tmp_path / name), force=force)
    assert (tmp_path / "a_file").read_text() == "keep me"
    assert (tmp_path / "foreign" / "thesis.tex").read_text() == "keep me"
    (tmp_path / "empty").mkdir()
    partition(small_graph, 2, str(tmp_path / "empty"))  # an empty directory is used
    assert load_manifest(str(tmp_path / "empty"))["num_parts"] == 2
    assert sorted(os.listdir(tmp_path)) == ["a_file", "empty", "foreign", "link"]  # no temporary leftovers


def test_existing_partition_needs_force_and_nothing_else_inside(tmp_path, small_graph):
    pdir = str(tmp_path / "p")
    partition(small_graph, 2, pdir)
    before = _tree(pdir)
    with pytest.raises(PartitionError, match="already holds a sarlab partition; pass --force"):
        partition(small_graph, 3, pdir)
    assert _tree(pdir) == before
    partition(small_graph, 3, pdir, force=True)
    assert load_manifest(pdir)["num_parts"] == 3 and not os.path.exists(os.path.join(pdir, "part0", "stale"))
    assert sorted(os.listdir(tmp_path)) == ["p"]
    (tmp_path / "p" / "part1" / "notes.txt").write_text("mine")
    with pytest.raises(PartitionError, match=r"holds files sarlab did not write \(part1/notes.txt\)"):
        partition(small_graph, 2, pdir, force=True)
    assert (tmp_path / "p" / "part1" / "notes.txt").read_text() == "mine"


def test_failed_swap_puts_the_old_partition_back(tmp_path, small_graph, monkeypatch):
    pdir = str(tmp_path / "p")
    partition(small_graph, 2, pdir)
    before = _tree(pdir)
    real_replace, calls = os.replace, []

    def second_rename_fails(a, b):
        calls.append((a, b))
        if len(calls) == 2:
            raise OSError("rename failed (simulated)")
        return real_replace(a, b)

    monkeypatch.setattr(sp.os, "replace", second_rename_fails)
    with pytest.raises(OSError, match="simulated"):
        partition(small_graph, 3, pdir, force=True)
    monkeypatch.undo()
    assert _tree(pdir) == before
    assert sorted(os.listdir(tmp_path)) == ["p"]


# ---- the manifest checks itself -------------------------------------------------------------------------------


def _edit(pdir: str, rehash: bool, **fields) -> None:
    path = os.path.join(pdir, "manifest.json")
    manifest = json.load(open(path))
    manifest.update(fields)
    if rehash:
        manifest["manifest_sha256"] = manifest_digest(manifest)
    else:
        manifest.pop("manifest_sha256", None)
    json.dump(manifest, open(path, "w"))


@pytest.fixture()
def pdir(tmp_path, small_graph):
    path = str(tmp_path / "p")
    partition(small_graph, 2, path)
    return path


def test_hand_edited_manifest_is_refused(pdir):
    _edit(pdir, rehash=True)
    load_manifest(pdir)  # rewriting the same content keeps the checksum valid
    manifest = json.load(open(os.path.join(pdir, "manifest.json")))
    manifest["num_classes"] = 100001
    json.dump(manifest, open(os.path.join(pdir, "manifest.json"), "w"))
    with pytest.raises(PartitionError, match="was edited after sarlab wrote it"):
        load_manifest(pdir)


def test_manifest_without_checksum_is_accepted_with_a_warning(pdir):
    _edit(pdir, rehash=False)
    with pytest.warns(UnverifiedManifestWarning, match="no checksum of its own"):
        manifest = load_manifest(pdir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnverifiedManifestWarning)
        check_partition(pdir, manifest)


@pytest.mark.parametrize("fields, needle", [
    ({"num_classes": 2}, "out of range for 2 classes"),
    ({"num_classes": 100001}, "100001-class model"),
    ({"feature_dim": 5}, "features have shape"),
    ({"node_ranges": [[0, 100], [100, 300]]}, "features have shape"),
    ({"node_ranges": [[0, 100], [120, 300]]}, "do not split 0..300"),
    ({"train_nodes": 0}, "empty train split"),
    ({"num_parts": 3}, "node_ranges must list 3"),
    ({"edges_per_shard": [[1, 2], [3, 4]]}, "edges_per_shard adds up to 10"),
])
def test_edited_fields_of_an_unchecksummed_manifest_are_caught(pdir, fields, needle):
    """A manifest without checksum (older sarlab) still cannot make the arrays lie: its fields are checked
    against each other and against the arrays before any compute."""
    _edit(pdir, rehash=False, **fields)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnverifiedManifestWarning)
        with pytest.raises(PartitionError, match=needle):
            check_partition(pdir)


def test_bad_arrays_behind_a_consistent_manifest_are_caught(pdir):
    """Features edited to NaN, with every checksum recomputed: the part's own check still refuses it."""
    target = os.path.join(pdir, "part1", "features.npy")
    x = np.load(target)
    x[3, 2] = np.nan
    np.save(target, x)
    manifest = json.load(open(os.path.join(pdir, "manifest.json")))
    manifest["files"]["part1/features.npy"] = sp.file_sha256(target)
    manifest["manifest_sha256"] = manifest_digest(manifest)
    json.dump(manifest, open(os.path.join(pdir, "manifest.json"), "w"))
    load_part(pdir, 0)
    node = int(np.load(os.path.join(pdir, "part1", "orig_ids.npy"))[3])
    with pytest.raises(PartitionError, match=f"1 node\\(s\\) have NaN or infinite features \\(first: node {node}, "
                                             "feature 2"):
        load_part(pdir, 1)


# ---- graphs are checked where they enter ----------------------------------------------------------------------


def _labels_with(graph, node: int, value) -> np.ndarray:
    labels = graph.labels.copy()
    labels[node] = value
    return labels


@pytest.mark.parametrize("change, needle", [
    (lambda g: {"features": np.where(np.arange(g.num_nodes)[:, None] == 7, np.nan, g.features)},
     "have NaN or infinite features \\(first: node 7"),
    (lambda g: {"features": np.where(np.arange(g.num_nodes)[:, None] == 9, np.inf, g.features)},
     "first: node 9, feature 0 = inf"),
    (lambda g: {"labels": _labels_with(g, 5, 4)}, "label 4 of node 5 is out of range for 4 classes"),
    (lambda g: {"labels": _labels_with(g, 5, -3)}, "label -3 of node 5 is negative"),
    (lambda g: {"labels": _labels_with(g, int(np.flatnonzero(g.train_mask)[0]), -1)},
     "node\\(s\\) of the train split have no label"),
    (lambda g: {"labels": _labels_with(g, 5, 100000), "num_classes": 100001}, "100001-class model"),
    (lambda g: {"train_mask": np.zeros(g.num_nodes, dtype=bool)}, "the train split is empty"),
    (lambda g: {"num_classes": 1, "labels": np.zeros(g.num_nodes, dtype=np.int64)}, "needs at least 2"),
    (lambda g: {"src": np.append(g.src[:-1], g.num_nodes)}, f"edge source {300} is not a node id"),
    (lambda g: {"features": g.features[:-1]}, "299 feature rows for 300 nodes"),
])
def test_graph_checks(small_graph, tmp_path, change, needle):
    bad = replace(small_graph, **change(small_graph))
    with pytest.raises(InputError, match=needle):
        check_graph(bad)
    with pytest.raises(InputError, match=needle):
        partition(bad, 2, str(tmp_path / "p"))
    assert not os.listdir(tmp_path)  # nothing written


def _npz(path, labels, features=None):
    n = labels.shape[0]
    rows = np.arange(n)
    cols = (rows + 1) % n
    x = np.ones((n, 3), dtype=np.float32) if features is None else features
    np.savez(path, adj_data=np.ones(n), adj_indices=cols, adj_indptr=np.arange(n + 1), adj_shape=np.array([n, n]),
             attr_matrix=x, labels=labels)
    return str(path)


def test_npz_labels(tmp_path):
    whole = npz_graph(_npz(tmp_path / "whole.npz", np.array([0.0, 1.0, 2.0, 1.0] * 5)))
    assert whole.labels.dtype == np.int64 and whole.num_classes == 3  # whole-valued floats are class ids
    with pytest.raises(InputError, match="are fractional \\(first: node 2 has label 1.5\\)"):
        npz_graph(_npz(tmp_path / "frac.npz", np.array([0.0, 1.0, 1.5, 1.0] * 5)))
    x = np.ones((20, 3), dtype=np.float32)
    x[11, 1] = np.nan
    with pytest.raises(InputError, match="first: node 11, feature 1"):
        npz_graph(_npz(tmp_path / "nan.npz", np.arange(20) % 3, x))


def test_missing_directory_is_named(tmp_path):
    with pytest.raises(InputError, match="no such directory: "):
        load_graph(str(tmp_path / "nothing_here"))
    (tmp_path / "plain").mkdir()
    with pytest.raises(InputError, match="is a directory but not a partition directory"):
        load_graph(str(tmp_path / "plain"))


@pytest.mark.parametrize("make, needle", [
    (lambda: TrainConfig(epochs=0), "epochs must be an integer >= 1, got 0"),
    (lambda: TrainConfig(lr=-0.1), "learning rate must be a finite number > 0"),
    (lambda: TrainConfig(lr=0.0), "learning rate must be a finite number > 0"),
    (lambda: TrainConfig(lr=float("nan")), "learning rate must be a finite number > 0"),
    (lambda: TrainConfig(weight_decay=-1e-4), "weight decay must be a finite number >= 0"),
    (lambda: TrainConfig(eval_every=-1), "eval_every \\(0: never\\) must be an integer >= 0"),
    (lambda: TrainConfig(dtype="float16"), "unknown dtype"),
    (lambda: EngineConfig(prefetch=-1), "prefetch depth must be an integer >= 0"),
    (lambda: EngineConfig(prefetch=1.5), "prefetch depth must be an integer >= 0"),
    (lambda: EngineConfig(mode="turbo"), "unknown mode"),
])
def test_config_ranges(make, needle):
    with pytest.raises(InputError, match=needle):
        make()


# ---- OGB: never downloads ----------------------------------------------------------------------------------------

ARXIV_META = {"version": "1", "split": "time", "binary": "False", "additional node files": "node_year",
              "additional edge files": "None"}


def _csv_gz(path, rows) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with gzip.open(path, "wt") as f:
        for row in rows:
            f.write(",".join(str(v) for v in np.atleast_1d(row)) + "\n")


def _fake_arxiv(root, n: int = 30, skip: tuple = ()) -> dict:
    """A tiny dataset in ogbn-arxiv's layout (what the ogb package leaves after a download)."""
    rng = np.random.default_rng(0)
    folder = os.path.join(root, "ogbn_arxiv")
    src, dst = rng.integers(n, size=80), rng.integers(n, size=80)
    x = rng.standard_normal((n, 4)).round(3)
    y = np.arange(n) % 3
    files = {"RELEASE_v1.txt": None, "raw/edge.csv.gz": np.stack([src, dst], 1), "raw/num-node-list.csv.gz": [n],
             "raw/num-edge-list.csv.gz": [80], "raw/node-feat.csv.gz": x, "raw/node-label.csv.gz": y,
             "raw/node_year.csv.gz": np.full(n, 2020), "split/time/train.csv.gz": np.arange(0, 18),
             "split/time/valid.csv.gz": np.arange(18, 24), "split/time/test.csv.gz": np.arange(24, n)}
    for rel, rows in files.items():
        if rel in skip:
            continue
        if rows is None:
            os.makedirs(folder, exist_ok=True)
            open(os.path.join(folder, rel), "w").write("fake release marker\n")
        else:
            _csv_gz(os.path.join(folder, rel), rows)
    if "processed/" not in skip:
        os.makedirs(os.path.join(folder, "processed"))
    return {"src": src, "dst": dst, "x": x, "y": y, "folder": folder}


def test_ogb_missing_files_are_listed(tmp_path):
    data = _fake_arxiv(str(tmp_path), skip=("raw/node-feat.csv.gz", "processed/", "RELEASE_v1.txt"))
    assert ogb_missing_files(data["folder"], ARXIV_META) == ["RELEASE_v1.txt", "raw/node-feat.csv.gz", "processed/"]
    os.makedirs(os.path.join(data["folder"], "processed"))
    open(os.path.join(data["folder"], "processed", "data_processed"), "w").close()  # ogb's cache replaces raw/
    assert ogb_missing_files(data["folder"], ARXIV_META) == ["RELEASE_v1.txt"]


def test_ogb_loads_a_complete_folder_and_refuses_an_incomplete_one(tmp_path):
    pytest.importorskip("ogb.nodeproppred", reason="the ogb extra is not installed (pip install 'sarlab[ogb]')")
    data = _fake_arxiv(str(tmp_path / "good"))
    g = load_graph(f"ogb:ogbn-arxiv:{tmp_path / 'good'}")
    np.testing.assert_allclose(g.features, data["x"], rtol=1e-6)
    assert np.array_equal(g.labels, data["y"]) and g.train_mask[:18].all() and g.test_mask[24:].all()
    keep = data["src"] != data["dst"]
    both = np.concatenate([data["dst"][keep] * 30 + data["src"][keep], data["src"][keep] * 30 + data["dst"][keep]])
    assert np.array_equal(np.sort(g.dst * 30 + g.src), np.unique(both))  # symmetrized, as sarlab loads OGB
    bad = _fake_arxiv(str(tmp_path / "bad"), skip=("raw/node-feat.csv.gz",))
    before = _tree(str(tmp_path / "bad"))
    with pytest.raises(InputError, match="ogb would try to download it .*missing: raw/node-feat.csv.gz"):
        load_graph(f"ogb:ogbn-arxiv:{tmp_path / 'bad'}")
    assert _tree(str(tmp_path / "bad")) == before and bad["folder"]
