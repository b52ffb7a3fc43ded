"""Unmodified PyG models train on sarlab's workers: gradients equal single-process PyG on the same weights.

One model holds a branch per layer kind (two layers each: the second layer's input gradient flows back to remote
rows), summed into the logits, so one launch per worker count checks every layer in every mode. The reference is
the same model, plain PyG on the whole graph in this process, at the weights the workers started from (fp64,
1e-10 on every parameter's gradient, the loss and every node's logits).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch_geometric.nn as pyg
from torch import nn
from torch_geometric.utils import softmax

from sarlab.core.config import EngineConfig
from sarlab.core.shards import ShardedGraph
from sarlab.data.graphs import synthetic_graph
from sarlab.data.partition import partition
from sarlab.data.validate_data import InputError
from sarlab.nn.model import ModelConfig
from sarlab.nn.pyg import message_passing_layers, sharded
from sarlab.real.launch import custom_model
from sarlab.real.launch.jobs import Job
from sarlab.real.launch.launcher import launch
from sarlab.training.trainer import TrainConfig

MODES = ("sar", "sa", "oneshot")
#: (fused attention kernels, mode): GAT's fused and unfused online softmax in every mode
VARIANTS = tuple((fused, mode) for fused in (True, False) for mode in MODES)
RELATIONS = 3
TOL = 1e-10


class GatedMean(pyg.MessagePassing):
    """A user's own layer: ``out_i = h_i + mean_{j -> i} sigmoid(a . h_j + b . h_i) h_j`` (message reads a
    parameter and ``x_i``; ``update`` adds the root term)."""

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__(aggr="mean")
        self.lin = nn.Linear(in_dim, out_dim)
        self.att = nn.Parameter(torch.randn(2, out_dim) * 0.5)

    def forward(self, x, edge_index):
        h = self.lin(x)
        return self.propagate(edge_index, x=h)

    def message(self, x_j, x_i):
        return torch.sigmoid(x_j @ self.att[0] + x_i @ self.att[1]).unsqueeze(-1) * x_j

    def update(self, aggr_out, x):
        return aggr_out + x


def _mlp(i: int, o: int) -> nn.Module:
    return nn.Sequential(nn.Linear(i, o), nn.Tanh(), nn.Linear(o, o))


#: layer kind -> (first layer, second layer) given (in, hidden, out)
LAYERS = {
    "GCNConv": lambda i, h, o: (pyg.GCNConv(i, h), pyg.GCNConv(h, o)),
    "SAGEConv-mean": lambda i, h, o: (pyg.SAGEConv(i, h), pyg.SAGEConv(h, o)),
    "SAGEConv-max": lambda i, h, o: (pyg.SAGEConv(i, h, aggr="max"), pyg.SAGEConv(h, o, aggr="max")),
    "GATConv": lambda i, h, o: (pyg.GATConv(i, h // 2, heads=2), pyg.GATConv(h, o, heads=2, concat=False)),
    "GINConv": lambda i, h, o: (pyg.GINConv(_mlp(i, h), train_eps=True), pyg.GINConv(_mlp(h, o))),
    "GraphConv": lambda i, h, o: (pyg.GraphConv(i, h), pyg.GraphConv(h, o, aggr="mean")),
    "RGCNConv": lambda i, h, o: (pyg.RGCNConv(i, h, RELATIONS, num_bases=2), pyg.RGCNConv(h, o, RELATIONS)),
    "custom": lambda i, h, o: (GatedMean(i, h), GatedMean(h, o)),
}


def _key(kind: str) -> str:
    return kind.replace("-", "_")


class Branches(nn.Module):
    """Every layer kind side by side: ``logits = sum_k conv_k2(tanh(conv_k1(x)))`` (a PyG model: forward takes
    ``(x, edge_index, edge_type)``)."""

    def __init__(self, in_dim: int, num_classes: int):
        super().__init__()
        self.branches = nn.ModuleDict({_key(k): nn.ModuleList(make(in_dim, 6, num_classes))
                                       for k, make in LAYERS.items()})

    def forward(self, x, edge_index, edge_type):
        out = 0
        for name, (first, second) in self.branches.items():
            extra = (edge_type,) if name == "RGCNConv" else ()
            out = out + second(torch.tanh(first(x, edge_index, *extra)), edge_index, *extra)
        return out


@pytest.fixture(scope="module")
def graph():
    g = synthetic_graph(nodes=240, degree=5, features=8, classes=4, seed=5)
    # relations for R-GCN (the other layers ignore them): a pair and its reverse share one
    rel = ((np.minimum(g.src, g.dst) * 7 + np.maximum(g.src, g.dst)) % RELATIONS).astype(np.int64)
    return dataclasses.replace(g, edge_type=rel, relation_names=tuple(f"r{i}" for i in range(RELATIONS)),
                               node_type=np.zeros(g.num_nodes, dtype=np.int64), node_type_names=("node",),
                               name="typed-synthetic")


def _reference(graph, init: dict) -> tuple[torch.Tensor, float, dict]:
    """Plain PyG on the whole graph at ``init``: logits, loss and gradients by parameter name."""
    model = Branches(graph.feature_dim, graph.num_classes).double()
    model.load_state_dict(init)
    x = torch.from_numpy(graph.features).double()
    edge_index = torch.from_numpy(np.stack([graph.src, graph.dst])).long()
    logits = model(x, edge_index, torch.from_numpy(graph.edge_type))
    train = torch.from_numpy(graph.train_mask)
    loss = nn.functional.cross_entropy(logits[train], torch.from_numpy(graph.labels)[train])
    names = [n for n, _ in model.named_parameters()]
    grads = torch.autograd.grad(loss, [p for _, p in model.named_parameters()])
    return logits.detach(), float(loss.detach()), dict(zip(names, grads))


def _table(errors: dict) -> str:
    kinds = list(LAYERS)
    lines = ["layer          " + "".join(f"{m:>11}" for m in MODES)]
    for kind in kinds:
        lines.append(f"{kind:15}" + "".join(f"{errors[(kind, m)]:11.1e}" for m in MODES))
    return "\n".join(lines)


def _distributed(graph, workers: int, tmp_path) -> list[dict]:
    """One launch of ``workers`` processes: a training forward/backward of ``Branches`` in every variant (mode, fused
    attention or not: the verify job's variants, as ``sarlab.gradients`` runs one); per variant the loss, gradients,
    logits by node and the initial weights."""
    pdir = str(tmp_path / f"parts{workers}")
    partition(graph, workers, pdir)
    cfg = ModelConfig(seed=3)
    variants = tuple((cfg, EngineConfig(mode=mode, fused=fused), "float64") for fused, mode in VARIANTS)
    job = Job("verify", pdir, cfg, TrainConfig(dtype="float64"), variants[0][1], timeout_s=120, variants=variants,
              model_factory=custom_model.pack(Branches), quiet=True)
    gathered = launch(job, workers, log=lambda m: None, run_timeout_s=300)
    out = []
    for i in range(len(VARIANTS)):
        ranks = [rank[i] for rank in gathered]
        logits = torch.zeros(graph.num_nodes, graph.num_classes, dtype=torch.float64)
        for r in ranks:
            logits[r["orig_ids"]] = r["logits"]
        out.append({"loss": float(ranks[0]["loss"]), "grads": ranks[0]["grads"], "init": ranks[0]["init"],
                    "logits": logits, "bytes_sent": [int(r["bytes_sent"]) for r in ranks]})
    return out


@pytest.mark.timeout(400)
@pytest.mark.parametrize("workers", [2, pytest.param(3, marks=pytest.mark.slow), 4])  # 3 with -m slow, as elsewhere
def test_pyg_layers_gradients_equal_single_process(graph, workers, tmp_path):
    errors, problems = {}, []
    for (fused, mode), got in zip(VARIANTS, _distributed(graph, workers, tmp_path)):
        logits, loss, grads = _reference(graph, got["init"])
        assert set(got["grads"]) == set(grads)
        assert abs(got["loss"] - loss) < TOL, (mode, got["loss"], loss)
        if (got["logits"] - logits).abs().max() > TOL:
            problems.append(f"{mode} (fused={fused}): logits differ by {(got['logits'] - logits).abs().max():.2e}")
        for kind in LAYERS:
            prefix = f"branches.{_key(kind)}."
            err = max(float((got["grads"][n] - g).abs().max()) for n, g in grads.items() if n.startswith(prefix))
            errors[(kind, mode)] = max(errors.get((kind, mode), 0.0), err)  # the worse of fused and unfused
        assert all(b > 0 for b in got["bytes_sent"]), "no rows exchanged: not a distributed check"
    table = _table(errors)
    print(f"\nN = {workers}, max |grad - PyG grad| per layer kind (fused and unfused attention):\n{table}")
    bad = [k for k, e in errors.items() if not e <= TOL]
    assert not bad and not problems, f"{problems}\n{table}"


class SoftmaxMessage(pyg.MessagePassing):
    """A message that normalises over each node's in-edges (reads ``index``): not decomposable into blocks."""

    def forward(self, x, edge_index):
        return self.propagate(edge_index, x=x)

    def message(self, x_j, index):
        return softmax(x_j, index) * x_j


class One(nn.Module):
    def __init__(self, conv):
        super().__init__()
        self.conv = conv

    def forward(self, x, edge_index):
        return self.conv(x, edge_index)


REFUSED = [
    (lambda: pyg.SAGEConv(8, 4, aggr="min"), "conv (SAGEConv): aggr='min'"),
    (lambda: pyg.GCNConv(8, 4, decomposed_layers=2), "conv (GCNConv): decomposed_layers=2"),
    (lambda: SoftmaxMessage(), "conv (SoftmaxMessage): its message reads `index`"),
    (lambda: pyg.GATConv(8, 4, dropout=0.5), "conv (GATConv): GATConv(dropout=0.5) drops attention weights"),
    (lambda: pyg.GATConv(8, 4, edge_dim=3), "conv (GATConv): GATConv with edge_dim"),
    (lambda: pyg.RGCNConv(8, 4, 2, num_blocks=2), "conv (RGCNConv): RGCNConv with num_blocks"),
]


@pytest.mark.parametrize("make, message", REFUSED, ids=[m.split(":")[1].strip()[:24] for _, m in REFUSED])
def test_refused_layers_say_which_and_why_in_one_line(graph, make, message):
    model = One(make()).double()
    single = ShardedGraph.single(graph.src, graph.dst, graph.num_nodes, EngineConfig(), edge_type=graph.edge_type,
                                 num_relations=RELATIONS)
    x = torch.from_numpy(graph.features).double()
    before = dict(model.conv.__dict__)
    with pytest.raises(InputError) as err:
        with sharded(model):  # refused when attached, or at the first call of the layer
            model(single, x)
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)
    assert model.conv.__dict__.keys() == before.keys(), "left patched"


def test_attached_model_still_runs_plain_pyg_and_is_restored(graph):
    torch.manual_seed(0)
    model = Branches(graph.feature_dim, graph.num_classes).double()
    x = torch.from_numpy(graph.features).double()
    edge_index = torch.from_numpy(np.stack([graph.src, graph.dst])).long()
    edge_type = torch.from_numpy(graph.edge_type)
    before = model(x, edge_index, edge_type)
    single = ShardedGraph.single(graph.src, graph.dst, graph.num_nodes, EngineConfig(), edge_type=graph.edge_type,
                                 num_relations=RELATIONS)
    with sharded(model):
        torch.testing.assert_close(model(x, edge_index, edge_type), before, rtol=0, atol=0)  # a real edge_index
        torch.testing.assert_close(model(single, x), before, rtol=0, atol=1e-12)  # the sharded graph
    for _, layer in message_passing_layers(model):
        assert not {"propagate", "edge_updater", "forward"} & set(layer.__dict__)
    assert not model._forward_pre_hooks


class ByData(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = pyg.GCNConv(8, 4)

    def forward(self, data):
        return self.conv(data.x, data.edge_index)


def test_a_forward_taking_data_is_refused():
    with pytest.raises(InputError, match=r"not forward\(data\)"):
        sharded(ByData()).__enter__()
