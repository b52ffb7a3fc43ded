"""Heterogeneous graphs and R-GCN: the ogbn-mag-like generator, OGB's ogbn-mag layout, typed partitions, and the
R-GCN layer against PyG's ``RGCNConv``/``FastRGCNConv`` with the same weights (one process and N = 1..4)."""
from __future__ import annotations

import json
import os
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import cli_here

from sarlab.core.config import EngineConfig
from sarlab.core.shards import ShardedGraph
from sarlab.data.graphs import load_graph, synthetic_graph
from sarlab.data.hetero import MAG_NODES, NODE_TYPES, RELATIONS, hetero_graph
from sarlab.data.partition import check_partition, load_manifest, load_part, partition
from sarlab.data.validate_data import InputError, check_graph, check_manifest_fields, check_part_arrays
from sarlab.nn import RGCNConv
from sarlab.nn.model import GNN, ModelConfig
from sarlab.nn.rgcn import EdgeRelationalAggregation, inverse_relation_degree
from sarlab.real.commands.verify import compare, format_table
from sarlab.real.launch.jobs import Job
from sarlab.real.launch.launcher import launch
from sarlab.training.checkpoint import load_model
from sarlab.training.reference import reference_step
from sarlab.training.trainer import DTYPES, TrainConfig


@pytest.fixture(scope="module")
def mag():
    return hetero_graph(nodes=500, features=6, classes=5, reverse=1, seed=3)


def test_hetero_generator_is_mag_shaped_and_deterministic():
    g = hetero_graph(nodes=6000, features=8, classes=6, seed=1)
    again = load_graph("hetero:nodes=6000,features=8,classes=6,seed=1")
    assert np.array_equal(g.src, again.src) and np.array_equal(g.edge_type, again.edge_type)
    assert np.array_equal(g.features, again.features)
    assert g.node_type_names == NODE_TYPES and g.num_relations == 4
    counts = np.bincount(g.node_type, minlength=4)
    shares = np.array([MAG_NODES[t] for t in NODE_TYPES]) / sum(MAG_NODES.values())
    assert np.allclose(counts / g.num_nodes, shares, atol=0.01)
    for r, (head, _, tail) in enumerate(RELATIONS):  # every relation joins the types its name says
        sel = g.edge_type == r
        assert sel.sum() > 0
        assert (g.node_type[g.src[sel]] == NODE_TYPES.index(head)).all()
        assert (g.node_type[g.dst[sel]] == NODE_TYPES.index(tail)).all()
    triples = (g.edge_type * g.num_nodes + g.dst) * g.num_nodes + g.src
    assert np.unique(triples).size == triples.size and not (g.src == g.dst).any()
    paper = g.node_type == NODE_TYPES.index("paper")
    assert (g.labels[~paper] == -1).all() and (g.labels[paper] >= 0).all()
    assert not (g.train_mask | g.val_mask | g.test_mask)[~paper].any()
    assert (g.train_mask | g.val_mask | g.test_mask)[paper].all()
    assert (g.features[~paper, :8] == 0).all()
    assert np.array_equal(g.features[:, 8:].argmax(1), g.node_type)  # one-hot node type columns
    cites = g.edge_type == 2
    assert (g.labels[g.src[cites]] == g.labels[g.dst[cites]]).mean() > 0.5  # homophilous citations
    rev = hetero_graph(nodes=6000, features=8, classes=6, seed=1, reverse=1)
    assert rev.num_relations == 8 and rev.num_edges == 2 * g.num_edges
    assert rev.relation_names[5] == "paper/rev_writes/author"


def _write_csv(path: str, frame: pd.DataFrame, header: bool = False) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    frame.to_csv(path, index=False, header=header, compression="gzip")


def _fake_ogbn_mag(root: str, rng: np.random.Generator) -> dict:
    """A tiny dataset in ogbn-mag's OGB layout; returns what it holds in per-type local ids."""
    folder = os.path.join(root, "ogbn_mag")
    counts = {"author": 7, "field_of_study": 3, "institution": 2, "paper": 9}
    _write_csv(f"{folder}/raw/num-node-dict.csv.gz", pd.DataFrame([counts]), header=True)
    _write_csv(f"{folder}/raw/triplet-type-list.csv.gz", pd.DataFrame(list(RELATIONS)[::-1]))
    edges = {}
    for head, rel, tail in RELATIONS:
        e = np.stack([rng.integers(counts[head], size=12), rng.integers(counts[tail], size=12)], 1)
        edges[(head, rel, tail)] = e
        _write_csv(f"{folder}/raw/relations/{head}___{rel}___{tail}/edge.csv.gz", pd.DataFrame(e))
    feat = rng.standard_normal((9, 4)).astype(np.float32)
    label = rng.integers(3, size=9)
    _write_csv(f"{folder}/raw/node-feat/paper/node-feat.csv.gz", pd.DataFrame(feat))
    _write_csv(f"{folder}/raw/node-label/paper/node-label.csv.gz", pd.DataFrame(label))
    has = pd.DataFrame([{t: t == "paper" for t in counts}])
    _write_csv(f"{folder}/raw/nodetype-has-label.csv.gz", has, header=True)
    _write_csv(f"{folder}/split/time/nodetype-has-split.csv.gz", has, header=True)
    splits = {"train": [0, 1, 2, 3, 4], "valid": [5, 6], "test": [7, 8]}
    for key, ids in splits.items():
        _write_csv(f"{folder}/split/time/paper/{key}.csv.gz", pd.DataFrame(ids))
    open(f"{folder}/RELEASE_v2.txt", "w").close()
    return {"counts": counts, "edges": edges, "feat": feat, "label": label, "splits": splits, "folder": folder}


def test_ogbn_mag_local_layout(tmp_path):
    fake = _fake_ogbn_mag(str(tmp_path), np.random.default_rng(0))
    g = load_graph(f"ogb:ogbn-mag:{tmp_path}")
    offset = dict(zip(NODE_TYPES, np.cumsum([0] + [fake["counts"][t] for t in NODE_TYPES])[:-1]))
    assert g.num_nodes == 21 and g.num_relations == 4 and g.num_classes == 3
    expected = set()
    for triplet in sorted(RELATIONS):
        head, _, tail = triplet
        for s, d in fake["edges"][triplet]:
            if offset[head] + s != offset[tail] + d:
                expected.add((g.relation_names.index("/".join(triplet)), offset[head] + s, offset[tail] + d))
    assert set(zip(g.edge_type.tolist(), g.src.tolist(), g.dst.tolist())) == expected
    papers = slice(offset["paper"], offset["paper"] + 9)
    assert np.array_equal(g.features[papers, :4], fake["feat"]) and (g.features[:offset["paper"], :4] == 0).all()
    assert np.array_equal(g.labels[papers], fake["label"]) and (g.labels[:offset["paper"]] == -1).all()
    for mask, key in ((g.train_mask, "train"), (g.val_mask, "valid"), (g.test_mask, "test")):
        assert np.flatnonzero(mask).tolist() == [offset["paper"] + i for i in fake["splits"][key]]
    rev = load_graph(f"ogb:ogbn-mag+rev:{tmp_path}")
    assert rev.num_relations == 8 and rev.num_edges == 2 * g.num_edges
    os.remove(f"{fake['folder']}/raw/relations/paper___cites___paper/edge.csv.gz")
    with pytest.raises(InputError, match="missing: raw/relations/paper___cites___paper/edge.csv.gz"):
        load_graph(f"ogb:ogbn-mag:{tmp_path}")
    with pytest.raises(InputError, match="only a heterogeneous dataset"):
        load_graph(f"ogb:ogbn-arxiv+rev:{tmp_path}")


def test_typed_partition_holds_every_typed_edge_once(tmp_path, mag):
    manifest = partition(mag, 3, str(tmp_path / "p"))
    assert manifest["num_relations"] == 8 and sum(manifest["edges_per_relation"]) == mag.num_edges
    check_partition(str(tmp_path / "p"))
    parts = [load_part(str(tmp_path / "p"), p) for p in range(3)]
    seen = []
    for p, part in enumerate(parts):
        a = part.arrays
        assert part.num_relations == 8
        assert np.array_equal(a["node_type"], mag.node_type[a["orig_ids"]])
        for q in range(3):
            lo, hi = a["edge_ptr"][q], a["edge_ptr"][q + 1]
            rows = parts[q].arrays["orig_ids"] if q == p else \
                parts[q].arrays["orig_ids"][a["recv_rows"][a["recv_ptr"][q]:a["recv_ptr"][q + 1]]]
            seen += zip(a["edge_type"][lo:hi].tolist(), rows[a["edge_src"][lo:hi]].tolist(),
                        a["orig_ids"][a["edge_dst"][lo:hi]].tolist())
    assert sorted(seen) == sorted(zip(mag.edge_type.tolist(), mag.src.tolist(), mag.dst.tolist()))
    bad = dict(parts[0].arrays, edge_type=parts[0].arrays["edge_type"] + 1)  # relation 8 does not exist
    with pytest.raises(InputError, match="relation 8 is out of range"):
        check_part_arrays(bad, load_manifest(str(tmp_path / "p")), 0, "part 0")


def test_untyped_partitions_load_as_one_relation(tmp_path, small_graph):
    manifest = partition(small_graph, 2, str(tmp_path / "p"))
    assert "num_relations" not in manifest and "part0/edge_type.npy" not in manifest["files"]
    assert load_part(str(tmp_path / "p"), 1).num_relations == 1
    with open(os.path.join(tmp_path, "p", "manifest.json")) as f:
        assert "edge_type" not in f.read()
    typed = dict(load_manifest(str(tmp_path / "p")), num_relations=2)  # type fields must come together
    with pytest.raises(InputError, match="type fields"):
        check_manifest_fields(typed, ("features",), "m")


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
@pytest.mark.parametrize("bases, fused, block", [(None, True, 8192), (3, True, 8192), (None, False, 8192),
                                                 (None, True, 7), (None, False, 7)])
def test_rgcn_layer_matches_pyg(mag, dtype, tol, bases, fused, block, monkeypatch):
    """Both orders (aggregate then W_r; per-edge messages), plain and basis weights, relations in one block of
    destination rows or in many, against RGCNConv and FastRGCNConv: the output and the gradients of the input
    and of every parameter."""
    from torch_geometric.nn import FastRGCNConv
    from torch_geometric.nn import RGCNConv as PygRGCNConv

    monkeypatch.setattr("sarlab.core.shards.RELATION_BLOCK_ROWS", block)
    monkeypatch.setattr("sarlab.nn.rgcn.EDGE_CHUNK", 50 if block == 7 else 1 << 15)

    graph = ShardedGraph.single(mag.src, mag.dst, mag.num_nodes, EngineConfig(fused=fused), mag.edge_type,
                                mag.num_relations)
    conv = RGCNConv(mag.feature_dim, 5, mag.num_relations, num_bases=bases).to(dtype)
    x = torch.from_numpy(mag.features).to(dtype).requires_grad_(True)
    out = conv(graph, x)
    weight = torch.randn(out.shape, dtype=dtype, generator=torch.Generator().manual_seed(0))
    grads = torch.autograd.grad((out * weight).sum(), [x, *conv.parameters()])
    edge_index, edge_type = torch.from_numpy(np.stack([mag.src, mag.dst])), torch.from_numpy(mag.edge_type)
    for kind in (PygRGCNConv, FastRGCNConv):
        ref = kind(mag.feature_dim, 5, mag.num_relations, num_bases=bases).to(dtype)
        ref.load_state_dict(conv.state_dict())
        x_ref = x.detach().clone().requires_grad_(True)
        ref_out = ref(x_ref, edge_index, edge_type)
        ref_grads = torch.autograd.grad((ref_out * weight).sum(), [x_ref, *ref.parameters()])
        scale = ref_out.abs().max()
        assert (out - ref_out).abs().max() <= tol * scale, kind.__name__
        for name, mine, theirs in zip(["x"] + [n for n, _ in conv.named_parameters()], grads, ref_grads):
            assert (mine - theirs).abs().max() <= tol * theirs.abs().max().clamp(min=1e-30), (kind.__name__, name)


def test_rgcn_on_an_untyped_graph_is_one_relation(small_graph):
    from torch_geometric.nn import RGCNConv as PygRGCNConv

    g = small_graph
    graph = ShardedGraph.single(g.src, g.dst, g.num_nodes, EngineConfig())
    conv = RGCNConv(g.feature_dim, 4, 1).double()
    ref = PygRGCNConv(g.feature_dim, 4, 1).double()
    ref.load_state_dict(conv.state_dict())
    x = torch.from_numpy(g.features).double()
    expected = ref(x, torch.from_numpy(np.stack([g.src, g.dst])), torch.zeros(g.num_edges, dtype=torch.long))
    torch.testing.assert_close(conv(graph, x), expected, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="built for 3 relations"):
        RGCNConv(g.feature_dim, 4, 3).double()(graph, x)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("workers", [pytest.param(1, marks=pytest.mark.slow), 2,
                                     pytest.param(3, marks=pytest.mark.slow), 4])  # 1 and 3 with -m slow
def test_rgcn_distributed_matches_pyg(tmp_path, mag, workers):
    """Outputs and every parameter gradient of a 3-layer R-GCN (dropout; plain and basis weights; aggregate-first
    and per-edge orders) in sar, sa and oneshot equal PyG's RGCNConv (fp64: also FastRGCNConv) with the same
    weights: fp64 1e-10, fp32 1e-5."""
    variants = [(ModelConfig(model="rgcn", layers=3, hidden=8, dropout=0.3, seed=2, bases=bases),
                 EngineConfig(mode=mode, prefetch=1 + i % 2, fused=fused), dtype)
                for dtype in ("float64", "float32") for i, mode in enumerate(("sar", "sa", "oneshot"))
                for bases, fused in ((0, True), (3, True), (0, False))]
    partition(mag, workers, str(tmp_path / "p"))
    job = Job("verify", str(tmp_path / "p"), variants[0][0], TrainConfig(dtype="float64"), variants[0][1],
              timeout_s=300, variants=tuple(variants))
    gathered = launch(job, workers)
    rows = []
    for i, (model_cfg, engine_cfg, dtype) in enumerate(variants):
        model = GNN(model_cfg, mag.feature_dim, mag.num_classes, num_relations=mag.num_relations).to(DTYPES[dtype])
        model.load_state_dict(gathered[0][i]["init"])
        for fast in (False, True) if dtype == "float64" else (False,):
            ref = reference_step(model, mag, DTYPES[dtype], fast_rgcn=fast)
            label = (f"rgcn b{model_cfg.bases} {'' if engine_cfg.fused else 'per-edge '}{engine_cfg.mode} N={workers}"
                     f"{' vs Fast' if fast else ''}")
            rows.append(compare([g[i] for g in gathered], ref, label, dtype, 1e-5 if dtype == "float32" else 1e-10))
    assert all(r.ok for r in rows), "\n" + format_table(rows)


def test_rgcn_model_refuses_a_graph_with_other_relations(tmp_path, small_graph):
    """A model built for the graph's relations; an untyped graph gives one relation (no silent mismatch)."""
    g = synthetic_graph(nodes=60, degree=3, features=4, classes=3, seed=0)
    model = GNN(ModelConfig(model="rgcn", layers=2, hidden=4), g.feature_dim, g.num_classes, num_relations=2)
    graph = ShardedGraph.single(g.src, g.dst, g.num_nodes, EngineConfig())
    with pytest.raises(ValueError, match="built for 2 relations, the graph has 1"):
        model(graph, torch.from_numpy(g.features))


def test_per_edge_blocks_give_the_unblocked_sums(mag, monkeypatch):
    """``sar``'s per-edge path works in blocks of edges (forward under no_grad, backward by hand): the same output
    and gradients as one autograd pass over all edges."""
    graph = ShardedGraph.single(mag.src, mag.dst, mag.num_nodes, EngineConfig(fused=False), mag.edge_type,
                                mag.num_relations)
    agg = EdgeRelationalAggregation(inverse_relation_degree(graph, torch.float64))
    gen = torch.Generator().manual_seed(0)
    rows = torch.randn(mag.num_nodes, 3, dtype=torch.float64, generator=gen).requires_grad_(True)
    weight = torch.randn(mag.num_relations, 3, 4, dtype=torch.float64, generator=gen).requires_grad_(True)
    shard = graph.local_shard
    expected = agg.accumulate(agg.init(mag.num_nodes, rows, None, (weight,), shard), shard, rows, None, (weight,))[0]
    grad_out = torch.randn(expected.shape, dtype=torch.float64, generator=gen)
    expected_grads = torch.autograd.grad(expected, [rows, weight], grad_out)
    monkeypatch.setattr("sarlab.nn.rgcn.EDGE_CHUNK", 37)
    with torch.no_grad():
        out = agg.accumulate(agg.init(mag.num_nodes, rows, None, (weight,), shard), shard, rows, None, (weight,))[0]
        grad_rows, _, (grad_weight,) = agg.shard_vjp(graph, (), out, shard, rows, None, (weight,), grad_out)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad_rows, expected_grads[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad_weight, expected_grads[1], rtol=1e-12, atol=1e-12)


def test_typed_graph_inputs_are_checked(mag):
    with pytest.raises(InputError, match="relation 8 is out of range"):
        check_graph(replace(mag, edge_type=mag.edge_type + 1))
    with pytest.raises(InputError, match="needs both node_type and edge_type"):
        check_graph(replace(mag, node_type=None))
    with pytest.raises(InputError, match="nodes>=20"):
        load_graph("hetero:nodes=10")
    with pytest.raises(InputError, match="unknown parameter 'bogus'"):
        load_graph("hetero:bogus=1")


@pytest.mark.timeout(300)
def test_rgcn_verify_through_the_cli(tmp_path):
    """`sarlab verify --model rgcn --bases B` on a hetero: graph, N = 2: every row within fp64 tolerance of PyG's
    RGCNConv, with the R-GCN order in the label."""
    out = tmp_path / "verify.json"
    res = cli_here(["verify", "--graph", "hetero:nodes=400,features=6,classes=4,reverse=1,seed=2", "--workers", "2",
                    "--model", "rgcn", "--bases", "2", "--mode", "sar,oneshot", "--unfused", "--layers", "2",
                    "--hidden", "6", "--dtype", "float64", "--json", str(out)])
    assert res.returncode == 0, res.stdout + res.stderr
    rows = json.loads(out.read_text())
    assert [r["label"] for r in rows] == ["rgcn-b2-per-edge sar N=2", "rgcn-b2-per-edge oneshot N=2"]
    assert all(r["ok"] and r["max_err"] <= 1e-10 for r in rows), rows


@pytest.mark.timeout(300)
def test_rgcn_trained_through_the_cli_saves_a_loadable_model(tmp_path, mag):
    """`sarlab train --model rgcn` with --save-model and --predict: the saved model, run as PyG's RGCNConv on
    the whole graph, gives the logits the distributed run predicted."""
    spec = "hetero:nodes=500,features=6,classes=5,reverse=1,seed=3"  # the `mag` fixture's graph
    model_path, pred_path, rec_path = tmp_path / "m.pt", tmp_path / "p.pt", tmp_path / "r.json"
    res = cli_here(["train", "--graph", spec, "--workers", "2", "--model", "rgcn", "--bases", "3", "--layers", "2",
                    "--hidden", "8", "--epochs", "2", "--dtype", "float64", "--save-model", str(model_path),
                    "--predict", str(pred_path), "--json", str(rec_path)])
    assert res.returncode == 0, res.stdout + res.stderr
    records = pd.DataFrame(json.loads(rec_path.read_text()))
    assert set(records.model) == {"rgcn"} and set(records.num_relations) == {mag.num_relations}
    assert set(records.bases) == {3}
    model = load_model(str(model_path))
    assert model.cfg.bases == 3
    ref = reference_step(model, mag, torch.float64)  # dropout 0: train mode = eval mode
    predicted = torch.load(pred_path, weights_only=True)["outputs"]
    torch.testing.assert_close(predicted, ref["logits"], rtol=1e-10, atol=1e-10)
