"""What ``sarlab.run`` / ``sarlab.gradients`` take as a graph, and a saved model loaded back for predictions.

Masks kept through a PyG ``Data`` or a networkx graph are checked independently: the distributed loss must be the
cross-entropy of the returned logits over the *given* training nodes (a replaced split gives another loss).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import sarlab
from sarlab.data.graphs import synthetic_graph
from sarlab.training.trainer import TrainConfig


def _quiet(_msg: str) -> None:
    pass


@pytest.mark.timeout(300)
def test_run_on_a_shipped_dataset_spec():
    result = sarlab.run("planetoid:cora", workers=2, model="gcn", epochs=20, log=_quiet)
    assert isinstance(result.records, pd.DataFrame)
    assert sorted(result.records.epoch.unique()) == list(range(20))
    assert sorted(result.records["rank"].unique()) == [0, 1]
    assert result.records.test_acc.iloc[-1] > 1 / 7  # a trained GCN beats chance on Cora's public split


def _odd_split(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A split no random splitter makes: every third node trains, a few validate, the rest test."""
    train = np.arange(n) % 3 == 0
    val = np.arange(n) % 3 == 1
    return train, val, ~(train | val)


def _expected_loss(logits: torch.Tensor, labels: np.ndarray, train: np.ndarray) -> float:
    mask = torch.from_numpy(train)
    return float(torch.nn.functional.cross_entropy(logits[mask], torch.from_numpy(labels)[mask]))


@pytest.mark.timeout(300)
def test_gradients_take_a_pyg_data_and_keep_its_masks():
    from torch_geometric.data import Data

    g = synthetic_graph(nodes=120, degree=5, features=6, classes=3, seed=2)
    train, val, test = _odd_split(g.num_nodes)
    data = Data(x=torch.from_numpy(g.features), edge_index=torch.from_numpy(np.stack([g.src, g.dst])),
                y=torch.from_numpy(g.labels), train_mask=torch.from_numpy(train), val_mask=torch.from_numpy(val),
                test_mask=torch.from_numpy(test))
    out = sarlab.gradients(data, workers=2, model="gcn", log=_quiet)
    assert out.logits.shape == (120, 3)
    assert out.loss == pytest.approx(_expected_loss(out.logits, g.labels, train), rel=1e-9)
    assert out.loss != pytest.approx(_expected_loss(out.logits, g.labels, g.train_mask), rel=1e-6)


@pytest.mark.timeout(300)
def test_gradients_take_a_networkx_graph():
    import networkx as nx

    g = synthetic_graph(nodes=90, degree=4, features=5, classes=3, seed=4)
    train, val, test = _odd_split(g.num_nodes)
    G = nx.DiGraph()
    for i in range(g.num_nodes):
        G.add_node(i, x=g.features[i], y=int(g.labels[i]), train_mask=bool(train[i]), val_mask=bool(val[i]),
                   test_mask=bool(test[i]))
    G.add_edges_from(zip(g.src.tolist(), g.dst.tolist()))
    out = sarlab.gradients(G, workers=2, model="gcn", log=_quiet)
    assert out.loss == pytest.approx(_expected_loss(out.logits, g.labels, train), rel=1e-9)


def test_a_wrong_graph_object_is_one_clear_error():
    with pytest.raises(sarlab.data.validate_data.InputError, match="PyG Data or a networkx graph, got int"):
        sarlab.run(3, workers=1)


@pytest.mark.timeout(300)
def test_saved_model_predicts_what_the_run_predicted(tmp_path):
    path = str(tmp_path / "gcn.pt")
    result = sarlab.run("planetoid:cora", workers=2, model="gcn", train=TrainConfig(dtype="float64"), epochs=5,
                        predict=True, save_model=path, log=_quiet)
    model = sarlab.load_model(path)
    assert model.in_dim == 1433 and model.num_classes == 7
    logits = sarlab.predict(model, "planetoid:cora")
    assert logits.shape == (2708, 7) and logits.dtype == torch.float64
    torch.testing.assert_close(logits, result.predictions, atol=1e-6, rtol=0)
    torch.testing.assert_close(sarlab.predict(result.model, sarlab.datasets.load("cora")), result.predictions,
                               atol=1e-6, rtol=0)
    with pytest.raises(sarlab.data.validate_data.InputError, match="takes 1433 inputs per node"):
        sarlab.predict(model, "planetoid:citeseer")


@pytest.mark.timeout(300)
def test_public_split_accuracy_code_path(tmp_path):
    """The public-split comparison (results/accuracy_public_split.md) runs end to end on 1 seed, 3 epochs."""
    from sarlab.real.reproduce.accuracy_pyg import PublicSplitConfig, run_public_split, write_public_split
    from sarlab.real.reproduce.accuracy_table import AccuracyConfig

    assert AccuracyConfig.graphs[0][1] == "planetoid:cora"  # the shipped public split, no path outside the package
    cfg = PublicSplitConfig(graphs=(("Cora", "planetoid:cora"),), workers=2, seeds=(0,), inits=("pyg",),
                            protocol=AccuracyConfig(epochs=3))
    runs = run_public_split(cfg, log=_quiet)
    assert list(runs.impl) == ["sarlab N=2", "pyg GCNConv init=pyg"]
    assert runs.test_acc.between(0, 1).all() and (runs.loss > 0).all()
    summary = write_public_split(runs, cfg, tmp_path, "test")
    sarlab_acc, pyg_acc = runs.test_acc
    assert summary.diff_vs_sarlab_points.tolist() == pytest.approx([0.0, 100 * (pyg_acc - sarlab_acc)])
    assert "| Cora | pyg GCNConv init=pyg | 1 |" in (tmp_path / "accuracy_public_split.md").read_text()
    assert len(open(tmp_path / "accuracy_public_split.csv").read().splitlines()) == 3
