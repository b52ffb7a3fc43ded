"""SAGE-max through the kernels' running max: the per-shard streaming API (as ``sar`` drives it), messages, and the
layer against PyG, on both kernel backends.

References are independent of the code under test: an explicit per-(node, feature) loop in numpy for ties,
a dense masked ``torch.amax`` (autograd splits its gradient evenly among ties) and PyG's ``SAGEConv``.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.nn import SAGEConv as PyGSAGEConv

from sarlab import kernels
from sarlab.core.aggregators import Aggregation
from sarlab.core.config import EngineConfig
from sarlab.core.shards import Shard, ShardedGraph
from sarlab.kernels import torch_backend
from sarlab.nn import SAGEConv

BACKENDS = ("cpp", "torch")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "cpp":
        kernels.build()  # a failed build is a failure, as in test_kernels.py
    return request.param


def loop_reference(src: np.ndarray, dst: np.ndarray, x: np.ndarray, weight: np.ndarray):
    """Max over in-edges (0 without any) and the gradient of sum(out * weight), split among tied in-edges."""
    n, features = x.shape
    out, grad = np.zeros((n, features)), np.zeros((n, features))
    for i in range(n):
        neighbours = src[dst == i]
        for f in range(features):
            if neighbours.size == 0:
                continue
            best = x[neighbours, f].max()
            out[i, f] = best
            tied = neighbours[x[neighbours, f] == best]  # an edge listed twice counts twice
            for j in tied:
                grad[j, f] += weight[i, f] / tied.size
    return out, grad


def source_shards(src: np.ndarray, dst: np.ndarray, n: int, bounds: list[int]) -> list[tuple[slice, Shard]]:
    """The in-edges of all n nodes split by source range, as ``sar`` splits them by owner: (rows, shard)."""
    shards = []
    for peer, (first, end) in enumerate(zip(bounds[:-1], bounds[1:])):
        keep = (src >= first) & (src < end)
        shard = Shard(peer, torch.as_tensor(src[keep] - first), torch.as_tensor(dst[keep]), n, end - first)
        shards.append((slice(first, end), shard))
    return shards


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_streamed_max_over_shards_matches_loop_with_ties(backend: str, dtype: torch.dtype) -> None:
    """init / accumulate per shard / finalize, then shard_vjp per shard: the path of ``sar`` and ``sa``;
    integer features give many exact ties, some edges are duplicated, some nodes have no in-edge."""
    rng = np.random.default_rng(0)
    n, features = 50, 4
    src, dst = rng.integers(0, n, 300), rng.integers(5, n, 300)  # nodes 0..4: no in-edges
    src, dst = np.concatenate([src, src[:20]]), np.concatenate([dst, dst[:20]])  # duplicated edges
    x = rng.integers(1, 4, size=(n, features)).astype(np.float64)
    weight = rng.standard_normal((n, features))
    want_out, want_grad = loop_reference(src, dst, x, weight)
    rows = torch.tensor(x, dtype=dtype)
    grad_out = torch.tensor(weight, dtype=dtype)
    aggregation = Aggregation("max", backend=backend)
    graph = None  # max's finalize and shard_vjp do not read the graph
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    shards = source_shards(src, dst, n, [0, 17, 30, n])
    for order in ([1, 0, 2], [2, 1, 0]):  # the local shard first, then the ring: any order gives the same
        state = aggregation.init(n, rows, None, (), shards[order[0]][1])
        for k in order:
            state = aggregation.accumulate(state, shards[k][1], rows[shards[k][0]].contiguous(), None, ())
        out, saved = aggregation.finalize(graph, state, None, ())
        np.testing.assert_allclose(out.numpy(), want_out)
        grad = torch.zeros_like(rows)
        for sources, shard in shards:
            grad_rows, grad_dst, grad_params = aggregation.shard_vjp(graph, saved, out, shard,
                                                                     rows[sources].contiguous(), None, (), grad_out)
            assert grad_dst is None and grad_params == ()
            grad[sources] += grad_rows
        torch.testing.assert_close(grad, torch.tensor(want_grad, dtype=dtype), **tol)


def test_max_of_messages_matches_dense_amax(backend: str) -> None:
    """``Aggregation('max', message=...)``: per-edge messages through the running max (columns = edge ids),
    gradients through the surrogate; reference: a dense masked amax over all pairs."""
    rng = np.random.default_rng(1)
    n, features = 30, 5
    adjacency = rng.random((n, n)) < 0.2
    adjacency[:3] = False  # isolated destinations give 0
    dst, src = np.nonzero(adjacency)
    x = torch.randn(n, features, dtype=torch.float64, requires_grad=True)
    scale = torch.randn(features, dtype=torch.float64, requires_grad=True)
    aggregation = Aggregation("max", message=lambda x_j, x_i, params: torch.tanh(x_j * params[0]), backend=backend)
    graph = ShardedGraph.single(src, dst, n, EngineConfig(kernels=backend))
    out = graph.aggregate(aggregation, x, params=(scale,))
    pair = torch.tanh(x * scale).unsqueeze(0).expand(n, n, features)
    mask = torch.as_tensor(adjacency).unsqueeze(-1)
    dense = torch.where(mask, pair, torch.full_like(pair, -torch.inf)).amax(1)
    dense = torch.where(mask.any(1), dense, torch.zeros_like(dense))
    torch.testing.assert_close(out, dense, rtol=1e-12, atol=1e-12)
    upstream = torch.randn_like(out)
    got = torch.autograd.grad((out * upstream).sum(), (x, scale))
    want = torch.autograd.grad((dense * upstream).sum(), (x, scale))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("aggr", ["max", "pool"])
def test_sage_layer_matches_pyg_on_the_configured_backend(backend: str, aggr: str, monkeypatch) -> None:
    """One SAGEConv on one process against PyG's with the same weights; the engine config's ``kernels`` picks the
    backend that runs (the torch kernels are counted)."""
    calls = {"forward": 0, "backward": 0}
    for name, key in (("csr_max_shard", "forward"), ("csr_max_backward", "backward")):
        original = getattr(torch_backend, name)

        def counted(*args, _original=original, _key=key):
            calls[_key] += 1
            return _original(*args)

        monkeypatch.setattr(torch_backend, name, counted)
    rng = np.random.default_rng(2)
    n, width = 60, 6
    src, dst = rng.integers(0, n, 400), rng.integers(4, n, 400)
    torch.manual_seed(3)
    ours = SAGEConv(width, 5, aggr).double()
    theirs = PyGSAGEConv(width, 5, aggr="max", project=aggr == "pool").double()
    ours_by_name, theirs_by_name = dict(ours.named_parameters()), dict(theirs.named_parameters())
    assert ours_by_name.keys() == theirs_by_name.keys()
    names = sorted(ours_by_name)
    with torch.no_grad():
        for name in names:
            theirs_by_name[name].copy_(ours_by_name[name])
    x = torch.randn(n, width, dtype=torch.float64, requires_grad=True)
    graph = ShardedGraph.single(src, dst, n, EngineConfig(kernels=backend))
    out = ours(graph, x)
    want = theirs(x, torch.as_tensor(np.stack([src, dst])))
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    upstream = torch.randn_like(out)
    got = torch.autograd.grad((out * upstream).sum(), (x, *(ours_by_name[name] for name in names)))
    expected = torch.autograd.grad((want * upstream).sum(), (x, *(theirs_by_name[name] for name in names)))
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    ran_torch = calls["forward"] > 0 and calls["backward"] > 0
    assert ran_torch == (backend == "torch"), calls
