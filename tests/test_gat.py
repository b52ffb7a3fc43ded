"""GAT in every mode, fused and unfused, against PyG ``GATConv`` with copied weights."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.nn import GATConv as PyGGATConv

import sarlab.nn.gat as gat_module
from real.verify import format_table, verify
from sarlab.aggregate import ShardAggregate
from sarlab.config import EngineConfig
from sarlab.graphs import Graph, synthetic_graph
from sarlab.nn import GATConv
from sarlab.nn.model import ModelConfig
from sarlab.shards import ShardedGraph

HEADS = (1, 2, 4, 8)


def _check(rows):
    table = format_table(rows)
    assert all(r.ok for r in rows), "\n" + table
    print("\n" + table)


def _variants(dtypes=("float64", "float32"), self_loops=True, **kw):
    out, i = [], 0
    for dtype in dtypes:
        for mode in ("sar", "sa", "oneshot"):
            for fused in (True, False):
                cfg = dict(model="gat", layers=3, hidden=16, heads=HEADS[i % 4], dropout=0.3, batchnorm=True,
                           self_loops=self_loops, seed=7)
                cfg.update(kw)
                out.append((ModelConfig(**cfg), EngineConfig(mode=mode, fused=fused), dtype))
                i += 1
    return out


@pytest.fixture(scope="module")
def graph():
    return synthetic_graph(nodes=300, degree=6, features=12, classes=4, seed=5)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("workers", [1, 2, 3, 4])
def test_gat_all_modes_heads_fused_unfused(graph, workers):
    rows = verify(graph, workers, _variants(), timeout_s=120, progress=lambda m: None)
    assert {r.label.split()[0].split("-")[1] for r in rows} == {f"h{h}" for h in HEADS}
    _check(rows)


def _isolated_and_huge(g: Graph, scale: float) -> Graph:
    """Nodes 0..29 lose every edge (isolated); features scaled so attention logits reach ~1e4."""
    keep = (g.src >= 30) & (g.dst >= 30)
    return Graph(g.name + "-isolated-huge", g.num_nodes, g.src[keep], g.dst[keep],
                 (g.features * scale).astype(np.float32), g.labels, g.train_mask, g.val_mask, g.test_mask,
                 g.num_classes)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("self_loops", [True, False])
def test_gat_isolated_nodes_and_huge_logits(graph, self_loops):
    """Logits up to ~800 (exp overflows even fp64 without the running max).

    The softmax saturates, so the attention-vector gradients are tiny differences of large terms:
    ill-conditioned for any implementation. Outputs and loss are held to the usual tolerance; gradients to
    max(tol, 10x the reference's own rounding sensitivity: fp32 PyG against fp64 PyG; in fp64, how far
    PyG's gradients move when every weight moves by one unit in the last place).
    """
    g = _isolated_and_huge(graph, 120.0)
    kw = dict(self_loops=self_loops, batchnorm=False, dropout=0.0, layers=2, hidden=8)
    rows = verify(g, 3, _variants(**kw), timeout_s=120, progress=lambda m: None, conditioning=True)
    _check(rows)
    assert all(r.output_err <= r.tol and r.loss_err <= r.tol for r in rows), format_table(rows)


def test_logits_really_are_huge(graph):
    """The fixture above does reach logits that would overflow exp() without the running max."""
    g = _isolated_and_huge(graph, 120.0)
    torch.manual_seed(7)
    conv = GATConv(g.feature_dim, 4, heads=2)
    z = conv.lin(torch.from_numpy(g.features)).view(g.num_nodes, 2, 4)
    logits = (z * conv.att_src).sum(-1)[g.src] + (z * conv.att_dst).sum(-1)[g.dst]
    assert float(logits.abs().max()) > 710  # exp(710) overflows even float64 (max ~1.8e308 = e^709.8)


def test_unfused_sar_chunks_equal_one_pass(graph, monkeypatch):
    """The unfused per-shard path processes edges in chunks; the result must not depend on the chunking."""
    sg = ShardedGraph.single(graph.src, graph.dst, graph.num_nodes, EngineConfig(fused=False))
    agg = gat_module.AttentionAggregation(4, 3, 0.2, True, False, None)
    gen = torch.Generator().manual_seed(0)
    rows = torch.randn(graph.num_nodes, 16, dtype=torch.float64, generator=gen, requires_grad=True)
    dst = torch.cat([rows, torch.randn(graph.num_nodes, 4, dtype=torch.float64, generator=gen)], 1)
    weight = torch.randn(graph.num_nodes, 4, 3, dtype=torch.float64, generator=gen)
    results = []
    for chunk in (1 << 20, 7):
        monkeypatch.setattr(gat_module, "UNFUSED_CHUNK_EDGES", chunk)
        out = ShardAggregate.apply(sg, agg, sg.local_shard, rows, dst)
        results.append((out.detach(), torch.autograd.grad((out * weight).sum(), rows)[0]))
    assert len(gat_module._row_chunks(sg.local_shard.rowptr, 7)) > 100
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(results[0][1], results[1][1], rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("kernels_backend", ["cpp", "torch"])
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("self_loops", [True, False])
def test_gatconv_layer_matches_pyg_on_one_process(graph, kernels_backend, fused, self_loops):
    """One ``sarlab.nn.GATConv`` (the layer ``sarlab bench kernels`` times) against PyG's with the same weights,
    fp64: outputs and the gradients of the input and every parameter (random bias, isolated nodes included)."""
    keep = (graph.src >= 10) & (graph.src != graph.dst)  # nodes 0..9 send nothing; PyG drops self-edges itself
    src, dst = graph.src[keep], graph.dst[keep]
    torch.manual_seed(4)
    ours = GATConv(graph.feature_dim, 3, heads=4, add_self_loops=self_loops).double()
    theirs = PyGGATConv(graph.feature_dim, 3, heads=4, add_self_loops=self_loops).double()
    with torch.no_grad():
        ours.bias.normal_()
        for name, pyg_name in ours.pyg_parameter_map().items():
            target = dict(theirs.named_parameters())[pyg_name]
            target.copy_(dict(ours.named_parameters())[name].view_as(target))
    sharded = ShardedGraph.single(src, dst, graph.num_nodes, EngineConfig(fused=fused, kernels=kernels_backend))
    x = torch.from_numpy(graph.features).double().requires_grad_(True)
    out = ours(sharded, x)
    want = theirs(x, torch.as_tensor(np.stack([src, dst])))
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-10)
    upstream = torch.randn_like(out)
    names = list(ours.pyg_parameter_map().items())
    got = torch.autograd.grad((out * upstream).sum(), [x] + [dict(ours.named_parameters())[a] for a, _ in names])
    expected = torch.autograd.grad((want * upstream).sum(),
                                   [x] + [dict(theirs.named_parameters())[b] for _, b in names])
    for (name, _), a, b in zip([("x", "x")] + names, got, expected):
        torch.testing.assert_close(a, b.view_as(a), rtol=1e-10, atol=1e-10, msg=name)
