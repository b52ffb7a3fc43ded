"""The Python API (sarlab.run, sarlab.gradients) and users' own models (model_fn).

References: PyG's layers with the trained weights for the built-in model's state and predictions, and for the
custom model a dense single-process computation written here (an adjacency matrix, no sarlab code): its loss
and gradients at the initial weights (fp64, 1e-10), and its weights after the same epochs of Adam.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from conftest import ROOT
from torch import nn

import sarlab
from sarlab.common.records import RECORD_COLUMNS
from sarlab.core.aggregators import Aggregation
from sarlab.data.graphs import synthetic_graph
from sarlab.data.partition import partition
from sarlab.data.validate_data import InputError
from sarlab.nn.model import GNN, ModelConfig
from sarlab.training.reference import ReferenceModel
from sarlab.training.trainer import TrainConfig

RUN_TIMEOUT_S = 240  # the launcher stops the workers and raises WorkerError (with their traceback) after this


def _gate(h_j: torch.Tensor, h_i: torch.Tensor, params: tuple) -> torch.Tensor:
    att = params[0]
    return torch.sigmoid(h_j @ att[0] + h_i @ att[1]).unsqueeze(-1) * h_j


class GatedConv(nn.Module):
    """``h = W x + b``; ``out_i = h_i + mean_{j -> i} sigmoid(a_src . h_j + a_dst . h_i) h_j``."""

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.lin = nn.Linear(in_dim, out_dim)
        self.att = nn.Parameter(torch.randn(2, out_dim) * 0.5)
        self.agg = Aggregation("mean", message=_gate)

    def forward(self, graph, x):
        h = self.lin(x)
        return graph.dst(h) + graph.aggregate(self.agg, h, graph.dst(h), (self.att,))


class TwoGated(nn.Module):
    def __init__(self, in_dim: int, num_classes: int):
        super().__init__()
        self.conv1 = GatedConv(in_dim, 8)
        self.conv2 = GatedConv(8, num_classes)

    def forward(self, graph, x):
        return self.conv2(graph, torch.relu(self.conv1(graph, x)))


def dense_forward(params: dict, x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
    """TwoGated on the whole graph as dense matrices: ``adj[i, j] = 1`` for an edge ``j -> i``."""
    deg = adj.sum(1, keepdim=True).clamp(min=1)
    for i, name in enumerate(("conv1", "conv2")):
        h = x @ params[f"{name}.lin.weight"].T + params[f"{name}.lin.bias"]
        att = params[f"{name}.att"]
        gate = torch.sigmoid((h @ att[0]).unsqueeze(0) + (h @ att[1]).unsqueeze(1)) * adj  # [i, j]
        x = h + gate @ h / deg
        if i == 0:
            x = torch.relu(x)
    return x


@pytest.fixture(scope="module")
def graph():
    return synthetic_graph(nodes=240, degree=5, features=10, classes=4, seed=7)


def _dense_inputs(graph):
    adj = torch.zeros(graph.num_nodes, graph.num_nodes, dtype=torch.float64)
    adj[torch.from_numpy(graph.dst), torch.from_numpy(graph.src)] = 1.0
    x = torch.from_numpy(graph.features).double()
    train = torch.from_numpy(graph.train_mask)
    return adj, x, train, torch.from_numpy(graph.labels)


def _dense_loss(params, graph):
    adj, x, train, y = _dense_inputs(graph)
    logits = dense_forward(params, x, adj)
    return logits, nn.functional.cross_entropy(logits[train], y[train])


def _initial(graph, seed: int = 0) -> dict:
    """The documented contract: model_fn is called under torch.manual_seed(seed), then cast to the dtype."""
    torch.manual_seed(seed)
    return {k: v.detach().double().clone() for k, v in TwoGated(graph.feature_dim, graph.num_classes)
            .state_dict().items()}


@pytest.mark.timeout(300)
def test_run_returns_records_state_and_predictions(graph):
    cfg = ModelConfig(model="gcn", layers=2, hidden=8, seed=2)
    res = sarlab.run(graph, workers=2, model=cfg, train=TrainConfig(epochs=3, dtype="float64"), predict=True,
                   run_timeout_s=RUN_TIMEOUT_S)
    assert set(RECORD_COLUMNS) <= set(res.records.columns)
    assert len(res.records) == 2 * 3 and sorted(res.records["rank"].unique()) == [0, 1]
    assert (res.records.model == "gcn").all()
    fresh = GNN(cfg, graph.feature_dim, graph.num_classes).double()
    fresh.load_state_dict(res.state)  # strict: every key, every shape
    assert not torch.equal(fresh.convs[0].lin.weight, GNN(cfg, graph.feature_dim, graph.num_classes)
                           .double().convs[0].lin.weight), "the returned state is not the trained one"
    ref = ReferenceModel(fresh, torch.float64).eval()
    edge_index = torch.from_numpy(np.stack([graph.src, graph.dst])).long()
    expected = ref(torch.from_numpy(graph.features).double(), edge_index)
    torch.testing.assert_close(res.predictions, expected.detach(), rtol=0, atol=1e-10)
    for name, value in res.model.state_dict().items():
        assert torch.equal(value, res.state[name])


@pytest.mark.timeout(300)
def test_custom_model_gradients_match_dense_reference(graph):
    got = sarlab.gradients(graph, workers=2, model_fn=TwoGated, dtype="float64", run_timeout_s=RUN_TIMEOUT_S)
    init = _initial(graph)
    assert set(got.init) == set(init)
    for name, value in init.items():
        assert torch.equal(got.init[name], value), name
    params = {k: v.clone().requires_grad_(True) for k, v in init.items()}
    logits, loss = _dense_loss(params, graph)
    grads = torch.autograd.grad(loss, list(params.values()))
    assert abs(got.loss - float(loss.detach())) < 1e-10
    torch.testing.assert_close(got.logits, logits.detach(), rtol=0, atol=1e-10)
    for (name, _), expected in zip(params.items(), grads):
        torch.testing.assert_close(got.grads[name], expected, rtol=0, atol=1e-10, msg=name)
    assert all(b > 0 for b in got.bytes_sent), "the two ranks exchanged no rows: not a distributed check"


@pytest.mark.timeout(300)
def test_custom_model_trains_as_dense_adam(graph):
    epochs, lr = 3, 0.05
    res = sarlab.run(graph, workers=2, model_fn=TwoGated, train=TrainConfig(epochs=epochs, lr=lr, dtype="float64"),
                   run_timeout_s=RUN_TIMEOUT_S)
    assert set(RECORD_COLUMNS) <= set(res.records.columns)
    assert (res.records.model == "custom:TwoGated").all()
    params = {k: v.clone().requires_grad_(True) for k, v in _initial(graph).items()}
    opt = torch.optim.Adam(list(params.values()), lr=lr)
    losses = []
    for _ in range(epochs):
        _, loss = _dense_loss(params, graph)
        losses.append(float(loss))
        opt.zero_grad()
        loss.backward()
        opt.step()
    rank0 = res.records[res.records["rank"] == 0].sort_values("epoch")
    np.testing.assert_allclose(rank0.loss.to_numpy(), losses, rtol=0, atol=1e-10)
    for name, value in params.items():
        torch.testing.assert_close(res.state[name], value.detach(), rtol=0, atol=1e-9, msg=name)
    assert isinstance(res.model, TwoGated)
    fresh = TwoGated(graph.feature_dim, graph.num_classes).double()
    fresh.load_state_dict(res.state)


def _raises(message):
    raise RuntimeError(message)


@pytest.mark.parametrize("model_fn, expected", [
    (lambda: _raises("no such layer"), "failed when called with no arguments: RuntimeError: no such layer"),
    (lambda in_dim, num_classes: "not a module", "returned str, not a torch.nn.Module"),
    (lambda in_dim: nn.Linear(in_dim, 2), "takes one argument"),
    (42, "model_fn must be callable, got int"),
])
@pytest.mark.timeout(120)
def test_bad_model_fn_is_an_input_error_before_any_worker(graph, model_fn, expected, tmp_path):
    """A model_fn that fails, returns no module or takes the wrong arguments is an InputError; one that is no callable
    at all a TypeError naming the argument (issue 41's rule for sarlab.run); both before any worker starts."""
    refusal = TypeError if model_fn == 42 else InputError
    with pytest.raises(refusal, match=expected.replace("(", r"\(").replace(")", r"\)")):
        sarlab.run(graph, workers=2, model_fn=model_fn, partition_dir=str(tmp_path / "parts"), run_timeout_s=60)


@pytest.mark.timeout(300)
def test_script_without_main_guard_and_under_torchrun(graph, tmp_path):
    """A model class defined in a script's __main__, run without a main guard locally and under torchrun (each
    torchrun rank runs itself in-process and gets every rank's records; rank 0 the weights)."""
    parts = str(tmp_path / "parts")
    partition(graph, 2, parts)
    script = tmp_path / "train_script.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys, torch
        from torch import nn
        import sarlab
        from sarlab.core.aggregators import Aggregation
        from sarlab.training.trainer import TrainConfig

        class Mean(nn.Module):
            def __init__(self, in_dim, num_classes):
                super().__init__()
                self.lin = nn.Linear(in_dim, num_classes)

            def forward(self, graph, x):
                h = self.lin(x)
                return h + graph.aggregate(Aggregation("mean"), h)

        res = sarlab.run({parts!r}, model_fn=Mean, train=TrainConfig(epochs=2), run_timeout_s=200)
        rank = int(os.environ.get("RANK", "0"))
        print(f"rank {{rank}}: {{len(res.records)}} records {{sorted(set(res.records.model))}} "
              f"state {{None if res.state is None else sorted(res.state)}}", flush=True)
    """))
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("RANK", None)
    for cmd in ([sys.executable, str(script)],
                [os.path.join(os.path.dirname(sys.executable), "torchrun"), "--standalone", "--nproc-per-node", "2",
                 str(script)]):
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=str(tmp_path), env=env)
        except subprocess.TimeoutExpired as err:
            pytest.fail(f"{cmd[-1]} did not finish in 240s\n{err.stdout}\n{err.stderr}")
        assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stdout}\n{done.stderr}"
        assert "rank 0: 4 records ['custom:Mean'] state ['lin.bias', 'lin.weight']" in done.stdout, done.stdout
        if "torchrun" in cmd[0]:
            assert "rank 1: 4 records ['custom:Mean'] state None" in done.stdout, done.stdout
