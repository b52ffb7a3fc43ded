"""Message-flow-graph pruning: the active sets against a breadth-first search, and a pruned run's loss, logits and
gradients against PyG's layers on the whole graph (and against the unpruned engine's training curve)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import cli_here

from sarlab.core.comm import Comm
from sarlab.core.config import EngineConfig
from sarlab.core.shards import ShardedGraph
from sarlab.data.graphs import synthetic_graph
from sarlab.data.hetero import hetero_graph
from sarlab.data.partition import load_part, partition
from sarlab.data.validate_data import InputError
from sarlab.nn.model import GNN, ModelConfig
from sarlab.real.launch.jobs import Job
from sarlab.real.launch.launcher import launch
from sarlab.strategies.mfg import PrunedGraph
from sarlab.training.reference import reference_step
from sarlab.training.trainer import DTYPES, TrainConfig, Trainer


def _bfs_levels(src: np.ndarray, dst: np.ndarray, seeds: np.ndarray, layers: int) -> list[np.ndarray]:
    """Reference: level L = seeds, level l-1 = level l plus the sources of every edge into level l."""
    levels = [seeds.copy()]
    for _ in range(layers):
        prev = levels[0].copy()
        prev[src[levels[0][dst]]] = True
        levels.insert(0, prev)
    return levels


def test_active_sets_are_the_l_hop_in_neighbourhoods():
    rng = np.random.default_rng(0)
    n = 400
    src, dst = rng.integers(n, size=900), rng.integers(n, size=900)  # directed: direction matters
    keep = src != dst
    src, dst = src[keep], dst[keep]
    seeds = rng.random(n) < 0.02
    graph = ShardedGraph.single(src, dst, n, EngineConfig())
    plan = PrunedGraph(graph, torch.from_numpy(seeds), 3)
    expected = _bfs_levels(src, dst, seeds, 3)
    for level, (mine, ref) in enumerate(zip(plan.active, expected)):
        assert np.array_equal(mine.numpy(), ref), level
    assert plan.active_rows()[0] < n and plan.output_rows.tolist() == np.flatnonzero(seeds).tolist()
    for i in range(3):  # each view keeps every in-edge of its destinations
        view = plan.layer(i)
        assert view.num_src == int(expected[i].sum()) and view.num_nodes == int(expected[i + 1].sum())
        assert view.local_shard.num_edges == int(expected[i + 1][dst].sum())
    whole = PrunedGraph(graph, torch.ones(n, dtype=torch.bool), 2)
    assert all(whole.layer(i) is graph for i in range(2))  # nothing to prune: the graph itself


MODELS = [("gcn", "mean", True), ("sage", "mean", True), ("sage", "max", True), ("gat", "mean", True),
          ("gat", "mean", False)]


@pytest.fixture(scope="module")
def low_label_graph():
    return synthetic_graph(nodes=700, degree=4, features=6, classes=4, seed=1, train=0.04, val=0.3)


@pytest.fixture(scope="module")
def mag_graph():
    return hetero_graph(nodes=600, features=6, classes=4, reverse=1, seed=2, train=0.08)


def _check_against_reference(graph, gathered, variants, tol_by_dtype):
    train = torch.from_numpy(graph.train_mask)
    failures = []
    for i, (model_cfg, engine_cfg, dtype) in enumerate(variants):
        model = GNN(model_cfg, graph.feature_dim, graph.num_classes, num_relations=graph.num_relations)
        model = model.to(DTYPES[dtype])
        model.load_state_dict(gathered[0][i]["init"])
        ref = reference_step(model, graph, DTYPES[dtype])
        logits = torch.full_like(ref["logits"], float("nan"))
        for rank in gathered:
            logits[rank[i]["orig_ids"]] = rank[i]["logits"].to(logits.dtype)
        errors = {"logits": float((logits[train] - ref["logits"][train]).abs().max()
                                  / ref["logits"][train].abs().max()),
                  "loss": abs(gathered[0][i]["loss"] - ref["loss"]) / abs(ref["loss"])}
        scale = max(float(g.abs().max()) for g in ref["grads"].values())
        for name, g_ref in ref["grads"].items():
            errors[name] = float((gathered[0][i]["grads"][name] - g_ref).abs().max()) / max(
                float(g_ref.abs().max()), 1e3 * torch.finfo(g_ref.dtype).eps * scale)
        worst = max(errors, key=errors.get)
        if not errors[worst] <= tol_by_dtype[dtype]:  # NaN fails too
            failures.append(f"{model_cfg.model}-{model_cfg.aggr} {engine_cfg.mode} fused={engine_cfg.fused} "
                            f"{dtype}: {worst} {errors[worst]:.2e}")
    assert not failures, "\n".join(failures)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("workers", [1, pytest.param(2, marks=pytest.mark.slow), 4])
def test_pruned_gradients_equal_the_whole_graph(tmp_path, low_label_graph, mag_graph, workers):
    """With 4 % (8 % on the mag-like graph) of nodes labelled, a pruned forward/backward gives the whole graph's
    training logits, loss and every parameter gradient (PyG reference): fp64 1e-10, fp32 1e-5."""
    tol = {"float64": 1e-10, "float32": 1e-5}
    for graph, models in ((low_label_graph, MODELS), (mag_graph, [("rgcn", "mean", True)])):
        variants = [(ModelConfig(model=m, aggr=a, layers=3, hidden=8, heads=2, dropout=0.3, seed=3),
                     EngineConfig(mode=mode, fused=fused), dtype)
                    for dtype in ("float64", "float32") for mode in ("sar", "sa", "oneshot") for m, a, fused in models]
        pdir = str(tmp_path / graph.name)
        partition(graph, workers, pdir)
        job = Job("verify", pdir, variants[0][0], TrainConfig(dtype="float64", mfg=True), variants[0][1],
                  timeout_s=300, variants=tuple(variants))
        _check_against_reference(graph, launch(job, workers), variants, tol)


def _curve(pdir: str, workers: int, mfg: bool, model: str) -> tuple[np.ndarray, float]:
    job = Job("train", pdir, ModelConfig(model=model, layers=3, hidden=16, dropout=0.4, seed=1),
              TrainConfig(epochs=8, lr=0.02, dtype="float64", eval_every=4, mfg=mfg), EngineConfig(mode="sar"),
              timeout_s=300, quiet=True)
    records = launch(job, workers)
    losses = np.array([r["loss"] for r in sorted(records, key=lambda r: r["epoch"]) if r["rank"] == 0])
    sent = np.median([sum(r["bytes_sent"] for r in records if r["epoch"] == e) for e in range(1, 8)])
    return losses, sent


@pytest.mark.timeout(900)
@pytest.mark.parametrize("model", ["sage", "rgcn"])
def test_pruned_training_curve_is_the_unpruned_one(tmp_path, low_label_graph, mag_graph, model):
    graph = mag_graph if model == "rgcn" else low_label_graph
    partition(graph, 3, str(tmp_path / "p"))
    whole, sent_whole = _curve(str(tmp_path / "p"), 3, False, model)
    pruned, sent_pruned = _curve(str(tmp_path / "p"), 3, True, model)
    assert whole[-1] < whole[0]
    assert np.abs(pruned - whole).max() <= 1e-10 * np.abs(whole).max(), (pruned, whole)
    assert sent_pruned < sent_whole  # only the halo rows that reach a label travel


def test_mfg_refuses_batchnorm(tmp_path, small_graph):
    partition(small_graph, 1, str(tmp_path / "p"))
    part = load_part(str(tmp_path / "p"), 0)
    graph = ShardedGraph.from_partition(part, Comm(0, 1), EngineConfig())
    with pytest.raises(InputError, match="BatchNorm normalises over every node"):
        Trainer(graph, part, ModelConfig(batchnorm=True), TrainConfig(mfg=True))


@pytest.mark.timeout(300)
def test_mfg_through_the_train_cli_gives_the_unpruned_losses(tmp_path):
    """`sarlab train --mfg` on 2 workers at a 5 % label rate: the loss of every epoch equals the run without --mfg
    (fp64, 1e-10) and fewer bytes travel."""
    spec = "synthetic:nodes=800,degree=5,features=8,classes=4,seed=1,train=0.05"
    runs = {}
    for flag in ([], ["--mfg"]):
        out = tmp_path / f"r{len(flag)}.json"
        res = cli_here(["train", "--graph", spec, "--workers", "2", "--layers", "3", "--hidden", "8", "--epochs", "3",
                        "--dtype", "float64", "--eval-every", "0", "--json", str(out), *flag])
        assert res.returncode == 0, res.stdout + res.stderr
        runs[bool(flag)] = pd.DataFrame(json.loads(out.read_text()))
    whole, pruned = (runs[m][runs[m]["rank"] == 0].sort_values("epoch") for m in (False, True))
    assert set(pruned.mfg) == {True} and set(whole.mfg) == {False}
    np.testing.assert_allclose(pruned.loss.to_numpy(), whole.loss.to_numpy(), rtol=1e-10, atol=0)
    assert pruned.bytes_sent.sum() < whole.bytes_sent.sum()
