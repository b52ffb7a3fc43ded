"""Round trips between sarlab and PyG: a PyG model trained with model_fn= saved, reloaded and predicting; its state
dict loading into plain PyG and back; to_pyg of a graph and of predictions; ``import sarlab.datasets``.

References: the same PyG model in this process (plain ``model(x, edge_index)``) with the weights in question.
"""
from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch
import torch_geometric.nn as pyg
from torch import nn

import sarlab
from sarlab.data.graphs import synthetic_graph
from sarlab.data.validate_data import InputError
from sarlab.training.trainer import TrainConfig


class GCN(nn.Module):
    """A PyG model as PyG's examples write it."""

    def __init__(self, in_dim: int, num_classes: int):
        super().__init__()
        self.conv1 = pyg.GCNConv(in_dim, 8, cached=True)
        self.conv2 = pyg.GCNConv(8, num_classes, cached=True)

    def forward(self, x, edge_index, edge_weight=None):
        x = self.conv1(x, edge_index, edge_weight).relu()
        return self.conv2(x, edge_index, edge_weight)


class DropGCN(GCN):
    """The same model with PyG examples' F.dropout (the global RNG) before each layer."""

    def forward(self, x, edge_index, edge_weight=None):
        x = nn.functional.dropout(x, p=0.5, training=self.training)
        x = self.conv1(x, edge_index, edge_weight).relu()
        return self.conv2(nn.functional.dropout(x, p=0.5, training=self.training), edge_index, edge_weight)


@pytest.fixture(scope="module")
def graph():
    return synthetic_graph(nodes=200, degree=4, features=6, classes=3, seed=2)


def _plain(model: nn.Module, graph) -> torch.Tensor:
    x = torch.from_numpy(graph.features).to(next(model.parameters()).dtype)
    edge_index = torch.from_numpy(np.stack([graph.src, graph.dst])).long()
    with torch.no_grad():
        return model.eval()(x, edge_index)


@pytest.mark.timeout(300)
def test_pyg_model_saved_reloaded_and_state_dicts_both_ways(graph, tmp_path):
    path = str(tmp_path / "gcn.pt")
    res = sarlab.run(graph, workers=2, model_fn=GCN, train=TrainConfig(epochs=3, dtype="float64"), predict=True,
                     save_model=path, run_timeout_s=240)
    assert (res.records.model == "custom:GCN").all()
    # trained in sarlab -> plain PyG: the state loads strictly and PyG's own forward gives the run's predictions
    plain = GCN(graph.feature_dim, graph.num_classes).double()
    plain.load_state_dict(res.state)
    torch.testing.assert_close(_plain(plain, graph), res.predictions, rtol=0, atol=1e-10)
    # the saved model: defined in a test module the workers could not import, so load_model asks for model_fn
    with pytest.raises(InputError, match="pass it again"):
        sarlab.load_model(path)
    loaded = sarlab.load_model(path, model_fn=GCN)
    assert not loaded.training and loaded.in_dim == graph.feature_dim
    torch.testing.assert_close(sarlab.predict(loaded, graph), res.predictions, rtol=0, atol=1e-10)
    # plain PyG -> sarlab: other weights trained nowhere near sarlab load into the reloaded model
    torch.manual_seed(11)
    other = GCN(graph.feature_dim, graph.num_classes).double()
    loaded.load_state_dict(other.state_dict())
    torch.testing.assert_close(sarlab.predict(loaded, graph), _plain(other, graph), rtol=0, atol=1e-12)
    assert "propagate" not in loaded.conv1.__dict__, "predict left the layers patched"


def test_load_model_imports_a_recorded_model_function(graph, tmp_path):
    """A file whose model function is importable (``module:qualname``) rebuilds without model_fn."""
    from sarlab.real.launch import custom_model

    assert custom_model.factory_path(GCN) == f"{__name__}:GCN"
    assert custom_model.import_factory(f"{__name__}:GCN") is GCN
    assert custom_model.factory_path(lambda: GCN(2, 2)) is None
    with pytest.raises(InputError, match="cannot be imported here"):
        custom_model.import_factory("no_such_module_here:GCN")


def test_to_pyg_round_trip_and_predictions(graph):
    data = sarlab.to_pyg(graph)
    assert data.num_nodes == graph.num_nodes and data.edge_index.shape == (2, graph.num_edges)
    back = sarlab.from_pyg(data)
    assert np.array_equal(back.src, graph.src) and np.array_equal(back.dst, graph.dst)
    assert np.array_equal(back.labels, graph.labels) and np.allclose(back.features, graph.features)
    for split in ("train", "val", "test"):
        assert np.array_equal(getattr(back, f"{split}_mask"), getattr(graph, f"{split}_mask"))
    logits = torch.randn(graph.num_nodes, graph.num_classes)
    with_pred = sarlab.to_pyg(graph, logits)
    assert torch.equal(with_pred.pred, logits.argmax(1)) and torch.equal(with_pred.logits, logits)
    with pytest.raises(InputError, match="predictions must be"):
        sarlab.to_pyg(graph, logits[:-1])


def test_datasets_is_a_module():
    module = importlib.import_module("sarlab.datasets")
    assert module is sarlab.datasets
    g = module.load("cora")
    assert (g.num_nodes, int(g.train_mask.sum())) == (2708, 140)


@pytest.mark.timeout(300)
def test_a_models_own_dropout_repeats_exactly_however_the_workers_start(graph, monkeypatch):
    """F.dropout draws from each worker's global RNG, which the run seeds from (seed, rank): the same losses on
    workers forked from the zygote, on a second run and on fresh interpreters; another seed changes them."""
    from sarlab.real.launch import zygote

    def losses(seed: int = 0) -> list[float]:
        res = sarlab.run(graph, workers=2, model_fn=DropGCN, model=sarlab.ModelConfig(seed=seed),
                         train=TrainConfig(epochs=4, dtype="float64"), run_timeout_s=240)
        return res.records.sort_values(["rank", "epoch"]).loss.tolist()

    forked = losses()
    assert losses() == forked
    monkeypatch.setenv(zygote.START_ENV, "spawn")
    assert losses() == forked
    monkeypatch.delenv(zygote.START_ENV)
    assert losses(seed=1) != forked
