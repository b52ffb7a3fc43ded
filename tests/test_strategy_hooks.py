"""Training strategies as hooks (:mod:`sarlab.strategies.hooks`, :mod:`sarlab.strategies.registry`).

A toy strategy defined here, outside the package, plugs in through the registry alone (no change to the trainer):
it appends a column of ones to the inputs, takes the loss on the odd-numbered training nodes only and records how
many there were. Its training step is checked against PyG's layers with the same weights on the
whole graph, fed those inputs with that loss mask (:func:`~sarlab.training.reference.reference_step`). The
combinations the built-in strategies refuse are still refused, with the same messages.
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from sarlab.core.comm import Comm
from sarlab.core.config import EngineConfig, SamplingConfig
from sarlab.core.shards import ShardedGraph
from sarlab.data.graphs import synthetic_graph
from sarlab.data.partition import load_part, partition
from sarlab.data.validate_data import InputError
from sarlab.nn.model import GNN, ModelConfig
from sarlab.strategies import registry
from sarlab.strategies.hooks import Strategy
from sarlab.training.minibatch import MiniBatchTrainer
from sarlab.training.reference import reference_step
from sarlab.training.trainer import TrainConfig, Trainer

MODEL = ModelConfig(model="sage", layers=2, hidden=8, dropout=0.2, seed=3)
EPOCHS = 2


@dataclass(frozen=True)
class OddNodesConfig:
    """The toy's settings: keep the training nodes whose original id has this parity in the loss."""

    parity: int = 1


class OddNodes(Strategy):
    """A strategy from outside sarlab: a column of ones appended to the inputs, the loss on the training nodes of
    one id parity, their number (over all workers) in the last epoch's record; refuses MFG pruning."""

    name = "odd_nodes"
    config_type = OddNodesConfig
    record_fields = ("odd_loss_nodes",)

    @classmethod
    def columns(cls, config):
        return {"odd_nodes": config is not None}

    def check(self, model_cfg, active):
        if "mfg" in active:
            raise InputError("odd_nodes keeps some training nodes out of the loss: drop --mfg")

    def input_width(self, width, num_classes):
        return width + 1

    def inputs(self, run, x, epoch, training):
        return torch.cat([x, torch.ones(x.shape[0], 1, dtype=x.dtype)], 1)

    def loss_mask(self, run, mask, epoch):
        return mask & (run.graph.orig_ids % 2 == self.config.parity)

    def after_training(self, run, eval_logits):
        kept = self.loss_mask(run, run.masks["train"], 0).sum().to(torch.float64).reshape(1)
        return {"odd_loss_nodes": float(run.graph.all_reduce(kept)[0])}


@pytest.fixture
def with_toy(monkeypatch):
    """The toy in the registry for this test only."""
    monkeypatch.setitem(registry.STRATEGIES, OddNodes.name, OddNodes)


@pytest.fixture(scope="module")
def graph():
    return synthetic_graph(nodes=240, degree=5, features=6, classes=3, noise=2.0, seed=11, train=0.5)


def _train_toy(part, comm: Comm) -> dict:
    """Epoch 0's forward/backward with the toy switched on, then ``EPOCHS`` steps' records and config columns."""
    graph = ShardedGraph.from_partition(part, comm, EngineConfig(mode="sar"))
    trainer = Trainer(graph, part, MODEL, TrainConfig(epochs=EPOCHS, lr=0.05, dtype="float64",
                                                      strategies=(OddNodesConfig(),)))
    names = [n for n, _ in trainer.model.named_parameters()]
    init = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    logits, loss, grads = trainer.forward_backward(0)
    records = [trainer.step(epoch, 0) for epoch in range(EPOCHS)]
    return {"orig_ids": graph.orig_ids.clone(), "logits": logits.detach().clone(), "loss": loss,
            "grads": {n: g.clone() for n, g in zip(names, grads)}, "init": init, "in_dim": trainer.in_dim,
            "records": records, "columns": trainer.config_columns()}


@pytest.mark.timeout(120)
def test_a_strategy_from_outside_plugs_in_and_matches_pyg(tmp_path, graph, with_toy):
    """Loss, gradients and logits of the toy's step equal PyG's on [features, 1] with the loss on the odd training
    nodes (fp64, 1e-10; a loss over every training node would differ); the records carry its field (last epoch only)
    and its column beside the built-ins' columns. One worker: the strategies' multi-worker paths are the built-in
    ones' tests (tests/test_label_aug_cs.py counts a changed loss mask over 3 workers)."""
    pdir = str(tmp_path / "p")
    partition(graph, 1, pdir)
    run = _train_toy(load_part(pdir, 0), Comm(0, 1))
    model = GNN(MODEL, graph.feature_dim + 1, graph.num_classes).to(torch.float64)
    model.load_state_dict(run["init"])
    features = torch.from_numpy(graph.features).double()
    inputs = torch.cat([features, torch.ones(graph.num_nodes, 1, dtype=torch.float64)], 1)
    odd = graph.train_mask & (np.arange(graph.num_nodes) % 2 == 1)
    assert 0 < odd.sum() < graph.train_mask.sum()
    ref = reference_step(model, graph, torch.float64, epoch=0, inputs=inputs, loss_mask=odd)
    assert run["in_dim"] == graph.feature_dim + 1
    assert abs(run["loss"] - ref["loss"]) <= 1e-10 * abs(ref["loss"])
    for name, expected in ref["grads"].items():
        err = float((run["grads"][name] - expected).abs().max())
        assert err <= 1e-10 * max(1.0, float(expected.abs().max())), (name, err)
    err = float((run["logits"] - ref["logits"][run["orig_ids"]]).abs().max())
    assert err <= 1e-10 * float(ref["logits"].abs().max()), err
    first, last = run["records"]
    assert math.isnan(first["odd_loss_nodes"]) and last["odd_loss_nodes"] == float(odd.sum())
    assert math.isnan(last["cs_test_acc"])  # the built-ins' record fields are still there (C&S off)
    columns = run["columns"]
    assert columns["odd_nodes"] is True
    builtins = (columns["mfg"], columns["label_aug"], columns["staleness"], columns["correct_smooth"])
    assert builtins == (False, 0.0, 0, "")


def test_the_combinations_the_strategies_refuse_are_still_refused(tmp_path, small_graph, with_toy):
    partition(small_graph, 1, str(tmp_path / "p"))
    part = load_part(str(tmp_path / "p"), 0)
    graph = ShardedGraph.from_partition(part, Comm(0, 1), EngineConfig())
    with pytest.raises(InputError) as err:
        Trainer(graph, part, ModelConfig(batchnorm=True), TrainConfig(mfg=True))
    assert str(err.value) == ("MFG pruning computes only the rows that reach a training node, but BatchNorm "
                              "normalises over every node: drop --batchnorm or --mfg")
    stale = ShardedGraph.from_partition(part, Comm(0, 1), EngineConfig(staleness=1))
    with pytest.raises(InputError) as err:
        Trainer(stale, part, ModelConfig(), TrainConfig(mfg=True))
    assert str(err.value) == ("--staleness caches every halo row of the whole graph, MFG pruning keeps only the rows "
                              "that reach a training node: drop --staleness or --mfg")
    with pytest.raises(InputError) as err:  # checked before the trainer touches the graph
        MiniBatchTrainer(None, None, ModelConfig(), TrainConfig(label_aug=0.5), SamplingConfig(fanouts=(5, 5)))
    assert str(err.value) == ("sampling trains on sampled mini-batches: MFG pruning, label augmentation and "
                              "Correct & Smooth are full-batch options; drop them or use mode sar/sa/oneshot")
    with pytest.raises(InputError, match="odd_nodes keeps some training nodes out of the loss"):
        Trainer(graph, part, ModelConfig(), TrainConfig(mfg=True, strategies=(OddNodesConfig(),)))


def test_a_config_no_strategy_takes_is_refused(with_toy):
    @dataclass(frozen=True)
    class Unknown:
        rate: float = 0.1

    with pytest.raises(InputError, match="TrainConfig.strategies holds a Unknown that no strategy takes"):
        TrainConfig(strategies=(Unknown(),))
    with pytest.raises(InputError, match="no strategy takes"):  # one config per strategy
        TrainConfig(strategies=(OddNodesConfig(), OddNodesConfig(parity=0)))
    assert TrainConfig(strategies=[OddNodesConfig()]).strategies == (OddNodesConfig(),)


def test_the_trainer_names_no_strategy_module():
    """The trainer reaches the strategies through the registry and the hook protocol only."""
    source = Path(__file__).resolve().parents[1] / "sarlab" / "training" / "trainer.py"
    imported = {node.module for node in ast.walk(ast.parse(source.read_text()))
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sarlab.strategies")}
    imported |= {f"sarlab.strategies.{a.name}" for node in ast.walk(ast.parse(source.read_text()))
                 if isinstance(node, ast.ImportFrom) and node.module == "sarlab.strategies" for a in node.names}
    assert imported <= {"sarlab.strategies", "sarlab.strategies.registry", "sarlab.strategies.hooks"}, imported
