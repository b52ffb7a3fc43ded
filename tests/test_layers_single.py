"""Single-process checks of layers and aggregators against PyG and dense torch (independent references)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from sarlab.core.aggregators import Aggregation
from sarlab.core.config import EngineConfig
from sarlab.core.shards import ShardedGraph
from sarlab.nn import DistBatchNorm, GATConv, GCNConv, SAGEConv
from sarlab.nn.functional import dropout_by_id, uniform_by_id
from sarlab.nn.model import GNN, ModelConfig
from sarlab.training.reference import reference_step


def _single(g):
    return ShardedGraph.single(g.src, g.dst, g.num_nodes, EngineConfig())


@pytest.mark.parametrize("model, aggr", [("gcn", "mean"), ("sage", "mean"), ("sage", "max"), ("sage", "pool")])
def test_model_matches_pyg_fp64(small_graph, model, aggr):
    g = small_graph
    cfg = ModelConfig(model=model, aggr=aggr, layers=3, hidden=12, dropout=0.25, batchnorm=True, seed=5)
    m = GNN(cfg, g.feature_dim, g.num_classes).double()
    m.train()
    logits = m(_single(g), torch.from_numpy(g.features).double())
    train, y = torch.from_numpy(g.train_mask), torch.from_numpy(g.labels)
    loss = torch.nn.functional.cross_entropy(logits[train], y[train], reduction="sum") / int(train.sum())
    names, params = zip(*m.named_parameters())
    grads = torch.autograd.grad(loss, params)
    ref = reference_step(m, g, torch.float64)
    torch.testing.assert_close(logits, ref["logits"], rtol=1e-12, atol=1e-12)
    for name, grad in zip(names, grads):
        torch.testing.assert_close(grad, ref["grads"][name], rtol=1e-10, atol=1e-12, msg=name)


def test_max_aggregation_splits_ties_evenly():
    """Integer features give many exact ties; the reference is an explicit per-(node, feature) loop.

    (torch's own ``scatter_reduce(amax, include_self=False)`` backward also counts the zero-initialised
    output as a tie when the maximum is exactly 0; sarlab splits among the in-edges only. In GNNs the
    difference never reaches a parameter: a 0 maximum after ReLU or dropout has zero gradient.)"""
    rng = np.random.default_rng(0)
    n, e, f = 40, 200, 3
    src, dst = rng.integers(n, size=e), rng.integers(n, size=e)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    xs = rng.integers(1, 4, size=(n, f)).astype(np.float64)
    x = torch.tensor(xs, requires_grad=True)
    g = ShardedGraph.single(src, dst, n, EngineConfig())
    out = g.aggregate(Aggregation("max"), x)
    w = rng.standard_normal((n, f))
    (gx,) = torch.autograd.grad((out * torch.tensor(w)).sum(), x)
    ref_out = np.zeros((n, f))
    ref_grad = np.zeros((n, f))
    for i in range(n):
        nbrs = src[dst == i]
        for c in range(f):
            if nbrs.size == 0:
                continue
            best = xs[nbrs, c].max()
            ref_out[i, c] = best
            tied = nbrs[xs[nbrs, c] == best]  # an edge listed twice counts twice
            for j in tied:
                ref_grad[j, c] += w[i, c] / tied.size
    np.testing.assert_allclose(out.detach().numpy(), ref_out)
    np.testing.assert_allclose(gx.numpy(), ref_grad, rtol=1e-12, atol=1e-12)


def test_custom_message_extension_point_matches_dense():
    """A user layer: m_ij = tanh(x_j W + x_i), mean-reduced; compared with a dense formulation."""
    rng = np.random.default_rng(1)
    n, f = 30, 4
    adj = rng.random((n, n)) < 0.2
    np.fill_diagonal(adj, False)
    dst, src = np.nonzero(adj)
    x = torch.randn(n, f, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(f, f, dtype=torch.float64, requires_grad=True)
    agg = Aggregation("mean", message=lambda xj, xi, params: torch.tanh(xj @ params[0] + xi))
    g = ShardedGraph.single(src, dst, n, EngineConfig())
    out = g.aggregate(agg, x, dst_x=x, params=(weight,))
    # dense: M[i, j] = tanh(x_j W + x_i) for every pair, masked by adjacency, averaged over in-neighbours
    pair = torch.tanh((x @ weight).unsqueeze(0) + x.unsqueeze(1))
    mask = torch.as_tensor(adj, dtype=torch.float64).unsqueeze(-1)
    dense = (pair * mask).sum(1) / mask.sum(1).clamp(min=1)
    torch.testing.assert_close(out, dense)
    up = torch.randn_like(out)
    g1 = torch.autograd.grad((out * up).sum(), (x, weight))
    g2 = torch.autograd.grad((dense * up).sum(), (x, weight))
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b)


def test_dropout_depends_only_on_global_ids():
    ids = torch.arange(1000)
    u = uniform_by_id(ids, 16, (0, 3, 1))
    perm = torch.randperm(1000)
    torch.testing.assert_close(uniform_by_id(ids[perm], 16, (0, 3, 1)), u[perm])
    assert abs(float(u.mean()) - 0.5) < 0.02 and float(u.min()) >= 0 and float(u.max()) < 1
    assert not torch.equal(u, uniform_by_id(ids, 16, (0, 4, 1)))  # another epoch, another mask
    x = torch.ones(1000, 16)
    kept = dropout_by_id(x, 0.3, ids, (0, 0, 0))
    assert abs(float((kept > 0).float().mean()) - 0.7) < 0.02
    torch.testing.assert_close(kept.mean(), torch.tensor(1.0), atol=0.03, rtol=0)


def test_batchnorm_matches_torch(small_graph):
    g = _single(small_graph)
    x = torch.randn(small_graph.num_nodes, 5, dtype=torch.float64, requires_grad=True)
    ours = DistBatchNorm(5).double()
    ref = torch.nn.BatchNorm1d(5).double()
    with torch.no_grad():
        ours.weight.uniform_(0.5, 1.5)
        ours.bias.uniform_(-1, 1)
        ref.weight.copy_(ours.weight)
        ref.bias.copy_(ours.bias)
    y1, y2 = ours(g, x), ref(x)
    torch.testing.assert_close(y1, y2)
    up = torch.randn_like(y1)
    for a, b in zip(torch.autograd.grad((y1 * up).sum(), (x, ours.weight, ours.bias)),
                    torch.autograd.grad((y2 * up).sum(), (x, ref.weight, ref.bias))):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(ours.running_mean, ref.running_mean)
    torch.testing.assert_close(ours.running_var, ref.running_var)
    ours.eval()
    ref.eval()
    torch.testing.assert_close(ours(g, x), ref(x))


def test_shard_spmm_accumulates_in_place_without_autograd():
    """``Shard.spmm(out=...)`` adds A @ x into ``out`` in place when no gradient is recorded (sar's forward
    streams shards into one buffer) and out of place under autograd; both equal a dense numpy product."""
    from sarlab.core.shards import Shard

    rng = np.random.default_rng(3)
    src, dst = rng.integers(0, 7, 40), rng.integers(0, 5, 40)
    order = np.argsort(dst, kind="stable")
    shard = Shard(1, torch.as_tensor(src[order]), torch.as_tensor(dst[order]), 5, 7)  # num_dst, num_src
    dense = np.zeros((5, 7))
    np.add.at(dense, (dst, src), 1.0)
    x, start = rng.standard_normal((7, 3)), rng.standard_normal((5, 3))
    want = start + dense @ x
    out = torch.tensor(start)
    with torch.no_grad():
        got = shard.spmm(torch.tensor(x), out=out)
    assert got is out and np.allclose(out.numpy(), want, atol=1e-12)
    xt = torch.tensor(x, requires_grad=True)
    out = torch.tensor(start)
    got = shard.spmm(xt, out=out)
    assert got is not out and np.allclose(out.numpy(), start) and np.allclose(got.detach().numpy(), want)
    got.sum().backward()
    assert np.allclose(xt.grad.numpy(), dense.sum(0)[:, None].repeat(3, 1))
    t = shard.spmm(torch.tensor(start), transpose=True)  # A^T g
    assert np.allclose(t.numpy(), dense.T @ start)


@pytest.mark.parametrize("make", [
    lambda: GCNConv(7, 5), lambda: GCNConv(7, 5, bias=False), lambda: SAGEConv(7, 5, "mean"),
    lambda: SAGEConv(7, 5, "pool"), lambda: GATConv(7, 3, heads=2),
    lambda: GATConv(7, 3, heads=2, concat=False, residual=True), lambda: DistBatchNorm(6)],
    ids=["gcn", "gcn-nobias", "sage", "sage-pool", "gat", "gat-residual", "batchnorm"])
def test_reset_parameters_is_the_whole_initialisation(make):
    """A layer built under a seed equals the same layer reset under that seed (all random draws happen in
    ``reset_parameters``), and a reset restores every parameter and buffer after they were overwritten."""
    torch.manual_seed(11)
    layer = make()
    built = {name: t.clone() for name, t in layer.state_dict().items()}
    after_build = torch.rand(1)
    with torch.no_grad():
        for t in layer.state_dict().values():
            t.add_(1.0)
    torch.manual_seed(11)
    layer.reset_parameters()
    assert torch.equal(torch.rand(1), after_build)  # the same number of random draws as the constructor
    for name, t in layer.state_dict().items():
        assert torch.equal(t, built[name]), name
