"""Graph sources and the partition format: invariants checked against the whole graph."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from conftest import ROOT

from sarlab.data.graphs import load_graph, synthetic_graph
from sarlab.data.partition import PartitionError, load_manifest, load_part, partition, report, verify_files


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
    ("ogb:ogbn-arxiv:/no/such/root", "no such directory"),
    ("/no/such/partition_dir", "no such directory"),
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
    import sarlab.data.partition as sp

    pdir = tmp_path / "p"
    partition(small_graph, 2, str(pdir))
    before = json.loads((pdir / "manifest.json").read_text())

    def boom(*a, **k):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(sp.np, "save", boom)
    with pytest.raises(OSError, match="disk full"):
        partition(small_graph, 3, str(pdir), force=True)
    assert json.loads((pdir / "manifest.json").read_text()) == before  # old partition untouched
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".partition-")]  # no half-written leftovers


# ---- DGL partitions in ---------------------------------------------------------------------------------------------


def _dgl_layout(g, num_parts: int, seed: int = 0):
    """The graph as DGL's partition_graph lays it out (built by hand, for where DGL does not import): nodes
    reshuffled so each part owns a range, per part a local graph of owned + halo nodes in scrambled local order,
    owned in-edges flagged ``inner_edge`` plus some foreign edges that are not, node data in range order."""
    from sarlab.data.dgl_import import DGLPart

    rng = np.random.default_rng(seed)
    assignment = rng.integers(num_parts, size=g.num_nodes)
    orig_nids = np.argsort(assignment, kind="stable")  # reshuffled id -> original id
    new_id = np.empty(g.num_nodes, dtype=np.int64)
    new_id[orig_nids] = np.arange(g.num_nodes)
    counts = np.bincount(assignment, minlength=num_parts)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    src, dst = new_id[g.src], new_id[g.dst]
    parts = []
    for p in range(num_parts):
        lo, hi = bounds[p], bounds[p + 1]
        own = (dst >= lo) & (dst < hi)
        foreign = np.flatnonzero(~own)[:5]  # edges DGL may replicate into a part without owning them
        e_src, e_dst = np.concatenate([src[own], src[foreign]]), np.concatenate([dst[own], dst[foreign]])
        nodes = np.unique(np.concatenate([np.arange(lo, hi), e_src, e_dst]))
        nodes = nodes[rng.permutation(nodes.size)]
        local = {int(v): i for i, v in enumerate(nodes)}
        old = orig_nids[lo:hi]
        data = {"feat": g.features[old], "label": g.labels[old], "train_mask": g.train_mask[old].astype(np.uint8),
                "val_mask": g.val_mask[old], "test_mask": g.test_mask[old]}
        parts.append(DGLPart(nodes, (nodes >= lo) & (nodes < hi), np.array([local[int(v)] for v in e_src]),
                             np.array([local[int(v)] for v in e_dst]),
                             np.arange(e_src.size) < int(own.sum()), data))
    config = {"graph_name": "handmade", "num_nodes": g.num_nodes, "num_edges": g.num_edges, "num_parts": num_parts,
              "node_map": {"_N": [[int(bounds[p]), int(bounds[p + 1])] for p in range(num_parts)]}}
    return config, parts, orig_nids, assignment


def _edge_keys(pdir: str, parts: int, n: int) -> np.ndarray:
    """Sorted ``dst * n + src`` (original ids) of every edge stored in a sarlab partition."""
    loaded = [load_part(pdir, p).arrays for p in range(parts)]
    keys = []
    for p, a in enumerate(loaded):
        for q in range(parts):
            lo, hi = a["edge_ptr"][q], a["edge_ptr"][q + 1]
            rows = a["edge_src"][lo:hi]
            if q != p:
                rows = a["recv_rows"][a["recv_ptr"][q]:a["recv_ptr"][q + 1]][rows]
            keys.append(a["orig_ids"][a["edge_dst"][lo:hi]] * n + loaded[q]["orig_ids"][rows])
    return np.sort(np.concatenate(keys))


def test_dgl_conversion_of_a_handmade_layout(tmp_path, small_graph):
    from sarlab.data.dgl_import import assemble
    from sarlab.data.partition import write_partition

    g = small_graph
    config, parts, orig_nids, assignment = _dgl_layout(g, 3)
    whole, part_of = assemble(config, parts, orig_ids=orig_nids)
    for name in ("features", "labels", "train_mask", "val_mask", "test_mask"):
        assert np.array_equal(getattr(whole, name), getattr(g, name)), name
    assert np.array_equal(np.sort(whole.dst * g.num_nodes + whole.src), np.sort(g.dst * g.num_nodes + g.src))
    assert np.array_equal(part_of, assignment)
    write_partition(whole, part_of, str(tmp_path / "p"))
    assert np.array_equal(_edge_keys(str(tmp_path / "p"), 3, g.num_nodes), np.sort(g.dst * g.num_nodes + g.src))
    for p in range(3):  # sarlab part p owns exactly DGL part p's nodes
        owned = load_part(str(tmp_path / "p"), p).arrays["orig_ids"]
        assert np.array_equal(np.sort(owned), np.flatnonzero(assignment == p))
    reshuffled, _ = assemble(config, parts)  # without orig_nids: DGL's reshuffled ids
    assert np.array_equal(reshuffled.features, g.features[orig_nids])
    with pytest.raises(ValueError, match="no labels among the node data"):
        assemble(config, parts, keys={"labels": "nope"})


_DGL_SCRIPT = """
import sys
import numpy as np, torch, dgl
from sarlab.data.graphs import synthetic_graph
from sarlab.real.commands.partition_cmd import main
g = synthetic_graph(nodes=300, degree=6, features=12, classes=4, seed=3)
d = dgl.graph((torch.from_numpy(g.src), torch.from_numpy(g.dst)), num_nodes=g.num_nodes)
d.ndata["feat"] = torch.from_numpy(g.features)
d.ndata["label"] = torch.from_numpy(g.labels)
for k in ("train_mask", "val_mask", "test_mask"):
    d.ndata[k] = torch.from_numpy(getattr(g, k))
orig_nids, _ = dgl.distributed.partition_graph(d, "syn", 3, sys.argv[1], part_method="metis", return_mapping=True)
np.save(sys.argv[1] + "/orig_nids.npy", orig_nids.numpy())
sys.exit(main(["--from-dgl", sys.argv[1] + "/syn.json", "--dgl-orig-ids", sys.argv[1] + "/orig_nids.npy",
               "--out", sys.argv[2]]))
"""


def test_dgl_round_trip(tmp_path, small_graph):
    """DGL's own partition_graph output, converted by `sarlab partition --from-dgl`. Runs where DGL imports:
    in this interpreter, or with SARLAB_DGL_PYTHONPATH naming a folder with dgl==1.1.3 and numpy<2 (pip
    install --target DIR 'dgl==1.1.3' 'numpy<2' 'setuptools<71' --no-deps)."""
    import importlib.util
    import subprocess
    import sys

    side = os.environ.get("SARLAB_DGL_PYTHONPATH")
    if importlib.util.find_spec("dgl") is None and not side:
        pytest.skip("DGL is not installed here and SARLAB_DGL_PYTHONPATH is not set")
    env = dict(os.environ, DGLBACKEND="pytorch")
    if side:
        env["PYTHONPATH"] = os.pathsep.join([side, ROOT])
    res = subprocess.run([sys.executable, "-c", _DGL_SCRIPT, str(tmp_path / "dgl"), str(tmp_path / "sar")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    g = small_graph
    config = json.load(open(tmp_path / "dgl" / "syn.json"))
    orig_nids = np.load(tmp_path / "dgl" / "orig_nids.npy")
    for p, (lo, hi) in enumerate(config["node_map"]["_N"]):
        a = load_part(str(tmp_path / "sar"), p).arrays
        assert np.array_equal(np.sort(a["orig_ids"]), np.sort(orig_nids[lo:hi]))  # DGL's parts kept
        assert np.array_equal(a["features"], g.features[a["orig_ids"]])
        assert np.array_equal(a["labels"], g.labels[a["orig_ids"]])
        assert np.array_equal(a["train_mask"], g.train_mask[a["orig_ids"]])
    manifest = load_manifest(str(tmp_path / "sar"))
    assert manifest["num_edges"] == g.num_edges and manifest["method"] == "dgl:metis"
    assert np.array_equal(_edge_keys(str(tmp_path / "sar"), 3, g.num_nodes), np.sort(g.dst * g.num_nodes + g.src))
