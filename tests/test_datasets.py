"""The shipped Planetoid datasets and the converters: checked against the raw npz arrays read with numpy alone."""
from __future__ import annotations

import os

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import sarlab
from sarlab.data import datasets
from sarlab.data.convert import fill_masks, from_networkx, from_pyg, from_scipy
from sarlab.data.graphs import load_graph, npz_graph
from sarlab.data.validate_data import InputError

#: name -> (nodes, features, classes, directed edges, train, val, test)
FACTS = {"cora": (2708, 1433, 7, 10556, 140, 500, 1000), "citeseer": (3327, 3703, 6, 9104, 120, 500, 1000)}


def _raw(name: str) -> dict:
    """The npz's arrays, decoded with numpy only: edge pairs from the CSR rows, dense features."""
    with np.load(datasets.path(name), allow_pickle=False) as z:
        raw = {k: z[k] for k in z.files}
    indptr = raw["adj_indptr"]
    rows = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))
    raw["pairs"] = set(zip(rows.tolist(), raw["adj_indices"].tolist()))
    n, f = raw["attr_shape"]
    dense = np.zeros((n, f), dtype=np.float32)
    arows = np.repeat(np.arange(n), np.diff(raw["attr_indptr"]))
    dense[arows, raw["attr_indices"]] = raw["attr_data"]
    raw["dense"] = dense
    return raw


@pytest.mark.parametrize("name", sorted(FACTS))
def test_shipped_dataset_matches_the_raw_arrays(name):
    nodes, feats, classes, edges, n_train, n_val, n_test = FACTS[name]
    raw = _raw(name)
    g = datasets.load(name)
    assert (g.num_nodes, g.feature_dim, g.num_classes, g.num_edges) == (nodes, feats, classes, edges)
    assert [int(m.sum()) for m in (g.train_mask, g.val_mask, g.test_mask)] == [n_train, n_val, n_test]
    assert len(raw["pairs"]) == edges and set(zip(g.src.tolist(), g.dst.tolist())) == raw["pairs"]
    np.testing.assert_array_equal(g.features, raw["dense"])
    np.testing.assert_array_equal(g.labels, raw["labels"])
    for split in ("train", "val", "test"):
        np.testing.assert_array_equal(getattr(g, f"{split}_mask"), raw[f"{split}_mask"])
    assert "stored" in g.name
    spec = load_graph(f"planetoid:{name}")
    assert spec.num_edges == edges and np.array_equal(spec.test_mask, g.test_mask)


def test_dataset_files_are_inside_the_package():
    root = os.path.dirname(os.path.abspath(sarlab.__file__))
    assert datasets.names() == ["citeseer", "cora"]
    for name in datasets.names():
        assert os.path.commonpath([root, str(datasets.path(name))]) == root
    with pytest.raises(InputError, match="sarlab ships citeseer, cora"):
        datasets.load("pubmed")
    with pytest.raises(InputError, match="unknown shipped dataset"):
        load_graph("planetoid:nope")


def _write_npz(path, raw: dict, masks: tuple[str, ...]) -> str:
    keep = {k: v for k, v in raw.items() if k.startswith(("adj_", "attr_")) or k == "labels"}
    keep.update({f"{k}_mask": raw[f"{k}_mask"] for k in masks})
    np.savez(path, **keep)
    return str(path)


def test_npz_keeps_stored_masks_and_splits_at_random_without(tmp_path):
    raw = _raw("cora")
    stored = npz_graph(_write_npz(tmp_path / "with.npz", raw, ("train", "val", "test")))
    for split in ("train", "val", "test"):
        np.testing.assert_array_equal(getattr(stored, f"{split}_mask"), raw[f"{split}_mask"])
    assert stored.name == "with [split: stored]"
    random = npz_graph(_write_npz(tmp_path / "without.npz", raw, ()), seed=1)
    assert random.name == "without [split: random, seed 1]"
    assert int(random.train_mask.sum()) == round(0.6 * 2708)  # the default fractions, not the stored 140
    partial = npz_graph(_write_npz(tmp_path / "train_only.npz", raw, ("train",)))
    np.testing.assert_array_equal(partial.train_mask, raw["train_mask"])
    assert not (partial.val_mask & partial.test_mask).any()
    np.testing.assert_array_equal(partial.val_mask | partial.test_mask, ~raw["train_mask"])


def test_fill_masks_fills_only_what_is_missing():
    n = 10
    train = np.arange(n) < 3
    test = np.arange(n) >= 8
    (tr, va, te), how = fill_masks(n, {"train": train, "test": test})
    np.testing.assert_array_equal(tr, train)
    np.testing.assert_array_equal(te, test)
    np.testing.assert_array_equal(va, ~(train | test))
    assert how == "train+test stored, val = the rest"
    (tr, va, te), how = fill_masks(n, {"train": torch.tensor(train)}, seed=0, train=0.6, val=0.2)
    np.testing.assert_array_equal(tr, train)
    assert int(va.sum()) + int(te.sum()) == 7 and not (va & te).any() and not ((va | te) & train).any()
    assert "val/test = the rest split 0.5:0.5" in how
    with pytest.raises(InputError, match="one entry per node"):
        fill_masks(n, {"train": np.ones(n + 1, dtype=bool)})


def _cora_data(masks: tuple[str, ...]):
    """A PyG Data built by hand from the raw Cora arrays, carrying ``masks``."""
    from torch_geometric.data import Data

    raw = _raw("cora")
    pairs = np.array(sorted(raw["pairs"])).T
    data = Data(x=torch.from_numpy(raw["dense"]), edge_index=torch.from_numpy(pairs), y=torch.from_numpy(raw["labels"]))
    for k in masks:
        data[f"{k}_mask"] = torch.from_numpy(raw[f"{k}_mask"])
    return data, raw


def test_from_pyg_keeps_the_data_masks():
    data, raw = _cora_data(("train", "val", "test"))
    g = from_pyg(data, name="cora")
    assert (g.num_nodes, g.num_edges, g.feature_dim) == (2708, 10556, 1433)
    for split in ("train", "val", "test"):
        np.testing.assert_array_equal(getattr(g, f"{split}_mask"), raw[f"{split}_mask"])
    assert g.name == "cora [split: stored]"
    assert set(zip(g.src.tolist(), g.dst.tolist())) == raw["pairs"]
    only_train, _ = _cora_data(("train",))
    g = from_pyg(only_train)
    np.testing.assert_array_equal(g.train_mask, raw["train_mask"])  # kept, not replaced by a random split
    np.testing.assert_array_equal(g.val_mask | g.test_mask, ~raw["train_mask"])
    assert "train stored" in g.name
    g = load_graph(data)  # the front door converts a Data too
    np.testing.assert_array_equal(g.test_mask, raw["test_mask"])


def test_from_scipy_and_from_networkx_give_the_npz_graph():
    import networkx as nx

    raw = _raw("cora")
    reference = datasets.load("cora")
    adj = sp.csr_matrix((raw["adj_data"], raw["adj_indices"], raw["adj_indptr"]), shape=tuple(raw["adj_shape"]))
    attr = sp.csr_matrix((raw["attr_data"], raw["attr_indices"], raw["attr_indptr"]), shape=tuple(raw["attr_shape"]))
    masks = (raw["train_mask"], raw["val_mask"], raw["test_mask"])
    from_csr = from_scipy(adj, attr, raw["labels"], *masks, name="cora")
    G = nx.Graph()
    G.add_nodes_from(range(adj.shape[0]))
    G.add_edges_from(raw["pairs"])
    from_nx = from_networkx(G, raw["dense"], raw["labels"], *masks, name="cora")
    for split, m in zip(("train", "val", "test"), masks):  # node attributes instead of arrays
        nx.set_node_attributes(G, dict(enumerate(m.tolist())), f"{split}_mask")
    nx.set_node_attributes(G, {i: row for i, row in enumerate(raw["dense"])}, "x")
    nx.set_node_attributes(G, dict(enumerate(raw["labels"].tolist())), "y")
    from_attrs = from_networkx(G, name="cora")
    for g in (from_csr, from_nx, from_attrs):
        assert g.name == reference.name and g.num_nodes == reference.num_nodes
        for field in ("src", "dst", "features", "labels", "train_mask", "val_mask", "test_mask"):
            np.testing.assert_array_equal(getattr(g, field), getattr(reference, field), err_msg=field)


def test_from_networkx_errors_and_random_split():
    import networkx as nx

    G = nx.path_graph(6)
    with pytest.raises(InputError, match="has no attribute 'x'"):
        from_networkx(G)
    g = from_networkx(G, features=np.eye(6), labels=np.arange(6) % 2)
    assert g.num_edges == 10 and "random, seed 0" in g.name
    D = nx.DiGraph([(0, 1), (1, 2)])
    d = from_networkx(D, features=np.eye(3), labels=np.array([0, 1, 0]))
    assert sorted(zip(d.src.tolist(), d.dst.tolist())) == [(0, 1), (1, 2)]  # directed edges kept as they are
