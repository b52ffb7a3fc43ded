"""Graph sources and the partition format: invariants checked against the whole graph."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from sarlab.graphs import load_graph, synthetic_graph
from sarlab.partition import PartitionError, load_manifest, load_part, partition, report, verify_files


def test_synthetic_is_deterministic_clean_and_homophilous():
    a = synthetic_graph(nodes=2000, degree=12, features=8, classes=5, homophily=0.8, seed=7)
    b = synthetic_graph(nodes=2000, degree=12, features=8, classes=5, homophily=0.8, seed=7)
    assert np.array_equal(a.src, b.src) and np.array_equal(a.features, b.features)
    assert not np.any(a.src == a.dst)
    keys = a.dst * a.num_nodes + a.src
    assert np.unique(keys).size == keys.size  # no duplicate edges
    rev = np.sort(a.src * a.num_nodes + a.dst)
    assert np.array_equal(np.sort(keys), rev)  # undirected: every edge has its reverse
    assert 10 <= a.num_edges / a.num_nodes <= 14
    assert (a.labels[a.src] == a.labels[a.dst]).mean() > 0.6
    # features carry class signal: nearest class centroid beats chance by far
    cent = np.stack([a.features[a.labels == c].mean(0) for c in range(5)])
    pred = np.argmin(((a.features[:, None, :] - cent[None]) ** 2).sum(-1), 1)
    assert (pred == a.labels).mean() > 0.4
    assert a.train_mask.sum() + a.val_mask.sum() + a.test_mask.sum() == a.num_nodes
    assert not (a.train_mask & a.test_mask).any()


def test_npz_cora(cora_path):
    g = load_graph(f"npz:{cora_path}")
    assert g.num_nodes == 2708 and g.feature_dim == 1433 and g.num_classes == 7
    assert g.num_edges == 10556  # symmetrized, self-loops and duplicates removed (as PyG's Cora)


@pytest.mark.parametrize("spec, message", [
    ("synthetic:nodes=10,bogus=3", "unknown parameter 'bogus'"),
    ("synthetic:nodes=ten", "not a valid int"),
    ("nope:abc", "unknown graph spec"),
    ("npz:/no/such/file.npz", "not found"),
    ("ogb:ogbn-arxiv:/no/such/root", "missing"),
])
def test_bad_specs(spec, message):
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        load_graph(spec)


@pytest.mark.parametrize("method, parts", [("metis", 3), ("random", 4)])
def test_partition_reassembles_the_graph(tmp_path, small_graph, method, parts):
    g = small_graph
    manifest = partition(g, parts, str(tmp_path / "p"), method=method)
    assert "edge cut" in report(manifest)
    seen = []
    ranges = manifest["node_ranges"]
    assert ranges[0][0] == 0 and ranges[-1][1] == g.num_nodes
    loaded = [load_part(str(tmp_path / "p"), p) for p in range(parts)]
    for p, part in enumerate(loaded):
        a = part.arrays
        orig = a["orig_ids"]
        assert np.array_equal(a["features"], g.features[orig]) and np.array_equal(a["labels"], g.labels[orig])
        for q in range(parts):
            lo, hi = a["edge_ptr"][q], a["edge_ptr"][q + 1]
            assert hi - lo == manifest["edges_per_shard"][p][q]
            dst_orig = orig[a["edge_dst"][lo:hi]]
            if q == p:
                src_orig = orig[a["edge_src"][lo:hi]]
            else:
                rows = a["recv_rows"][a["recv_ptr"][q]:a["recv_ptr"][q + 1]]
                assert rows.size == manifest["halo_rows"][p][q]
                # what p receives from q is exactly what q sends to p
                qa = loaded[q].arrays
                assert np.array_equal(rows, qa["send_rows"][qa["send_ptr"][p]:qa["send_ptr"][p + 1]])
                src_orig = loaded[q].arrays["orig_ids"][rows[a["edge_src"][lo:hi]]]
            seen.append(dst_orig * g.num_nodes + src_orig)
    seen = np.sort(np.concatenate(seen))
    assert np.array_equal(seen, np.sort(g.dst * g.num_nodes + g.src))


def test_partition_corruption_and_missing_files(tmp_path, small_graph):
    pdir = str(tmp_path / "p")
    manifest = partition(small_graph, 2, pdir)
    verify_files(pdir, manifest)
    target = os.path.join(pdir, "part1", "features.npy")
    with open(target, "r+b") as f:
        f.seek(200)
        f.write(b"\x00\x01\x02")
    with pytest.raises(PartitionError, match="sha256 mismatch"):
        load_part(pdir, 1)
    load_part(pdir, 0)  # the other part is intact
    os.remove(os.path.join(pdir, "part0", "edge_src.npy"))
    with pytest.raises(PartitionError, match="missing"):
        load_part(pdir, 0)
    with pytest.raises(PartitionError, match="not a partition directory"):
        load_manifest(str(tmp_path))
    with open(os.path.join(pdir, "manifest.json"), "w") as f:
        f.write("{broken")
    with pytest.raises(PartitionError, match="not valid JSON"):
        load_manifest(pdir)


def test_partition_write_is_atomic(tmp_path, small_graph, monkeypatch):
    import sarlab.partition as sp

    pdir = tmp_path / "p"
    partition(small_graph, 2, str(pdir))
    before = json.loads((pdir / "manifest.json").read_text())

    def boom(*a, **k):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(sp.np, "save", boom)
    with pytest.raises(OSError, match="disk full"):
        partition(small_graph, 3, str(pdir))
    assert json.loads((pdir / "manifest.json").read_text()) == before  # old partition untouched
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".partition-")]  # no half-written leftovers
