"""Label augmentation (masked label prediction) against PyG layers fed the augmented inputs, the same training
curve on 1 and 4 workers, and the distributed Correct & Smooth against PyG's ``CorrectAndSmooth``."""
from __future__ import annotations

import datetime
import json
import math
import traceback

import numpy as np
import pandas as pd
import pytest
import torch
import torch.distributed as dist
from conftest import cli_here, spawn_ranks

from sarlab.core.comm import Comm
from sarlab.core.config import EngineConfig
from sarlab.core.shards import ShardedGraph
from sarlab.data.graphs import synthetic_graph
from sarlab.data.partition import load_part, partition
from sarlab.data.validate_data import InputError
from sarlab.nn.functional import uniform_by_id
from sarlab.nn.model import GNN, ModelConfig
from sarlab.real.commands.verify import Comparison, compare, format_table
from sarlab.real.launch.jobs import Job
from sarlab.real.launch.launcher import launch
from sarlab.strategies.correct_smooth import PRESETS, CSConfig, correct_and_smooth
from sarlab.strategies.label_aug import LABEL_STREAM, label_input_mask
from sarlab.training.checkpoint import load_model
from sarlab.training.reference import reference_step
from sarlab.training.trainer import DTYPES, TrainConfig

RATE = 0.5


@pytest.fixture(scope="module")
def graph():
    return synthetic_graph(nodes=500, degree=5, features=8, classes=4, noise=3.0, seed=4, train=0.4)


def _shown(graph, seed: int, epoch: int) -> np.ndarray:
    """Reference label mask: the training nodes whose hash draw of (seed, epoch, node id) is below the rate."""
    draw = uniform_by_id(torch.arange(graph.num_nodes), 1, (seed, epoch, LABEL_STREAM))[:, 0].numpy()
    return graph.train_mask & (draw < RATE)


def test_label_mask_rate_and_partition_independence(graph):
    ids = torch.arange(graph.num_nodes)
    train = torch.from_numpy(graph.train_mask)
    shown = label_input_mask(ids, train, RATE, 7, 3)
    assert not (shown & ~train).any()
    assert abs(float(shown.sum()) / float(train.sum()) - RATE) < 0.1
    perm = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(0))  # another "partition"
    assert torch.equal(label_input_mask(ids[perm], train[perm], RATE, 7, 3), shown[perm])
    assert not torch.equal(label_input_mask(ids, train, RATE, 7, 4), shown)  # a new draw every epoch


@pytest.mark.timeout(900)
@pytest.mark.parametrize("workers", [1, 3])
def test_label_augmented_step_matches_pyg(tmp_path, graph, workers):
    """Epoch 0's forward/backward with label inputs equals PyG on [features, one-hot labels of the shown nodes] with
    the loss on the other training nodes: fp64 1e-10, fp32 1e-5 (or 10x the fp32 reference's own distance from the
    fp64 one, as ``sarlab verify``'s conditioning allows for GAT), every mode."""
    variants = [(ModelConfig(model=m, layers=2, hidden=8, dropout=0.2, seed=5), EngineConfig(mode=mode), dtype)
                for dtype in ("float64", "float32") for mode in ("sar", "oneshot") for m in ("gcn", "sage", "gat")]
    partition(graph, workers, str(tmp_path / "p"))
    job = Job("verify", str(tmp_path / "p"), variants[0][0], TrainConfig(dtype="float64", label_aug=RATE),
              variants[0][1], timeout_s=300, variants=tuple(variants))
    gathered = launch(job, workers)
    shown = _shown(graph, 5, 0)
    onehot = np.zeros((graph.num_nodes, graph.num_classes))
    onehot[np.flatnonzero(shown), graph.labels[shown]] = 1.0
    inputs = torch.from_numpy(np.concatenate([graph.features, onehot], 1))
    rows = []
    for i, (model_cfg, engine_cfg, dtype) in enumerate(variants):
        model = GNN(model_cfg, graph.feature_dim + graph.num_classes, graph.num_classes).to(DTYPES[dtype])
        model.load_state_dict(gathered[0][i]["init"])
        loss_mask = graph.train_mask & ~shown
        ref = reference_step(model, graph, DTYPES[dtype], inputs=inputs, loss_mask=loss_mask)
        noise = 0.0
        if dtype == "float32":  # GAT's softmax is ill-conditioned in fp32: allow 10x the fp32 reference's own error
            exact = reference_step(model, graph, torch.float64, inputs=inputs, loss_mask=loss_mask)
            exact = [{"orig_ids": torch.arange(graph.num_nodes), "logits": exact["logits"].float(),
                      "loss": exact["loss"], "grads": {k: v.float() for k, v in exact["grads"].items()}}]
            noise = compare(exact, ref, "", dtype, 0.0).max_err
        row = compare([g[i] for g in gathered], ref, f"{model_cfg.model} {engine_cfg.mode} N={workers}", dtype,
                      1e-5 if dtype == "float32" else 1e-10)
        rows.append(Comparison(**{**row.__dict__, "ref_noise": noise}))
    assert all(r.ok for r in rows), "\n" + format_table(rows)


@pytest.mark.timeout(900)
def test_protocol_gives_the_same_numbers_on_1_and_4_workers(tmp_path, graph):
    """Label augmentation, cosine learning rate and C&S after the last epoch: the loss curve (1e-10 in fp64),
    the accuracies and C&S's accuracies do not depend on the number of workers."""
    out = {}
    for workers in (1, 4):
        partition(graph, workers, str(tmp_path / f"p{workers}"))
        job = Job("train", str(tmp_path / f"p{workers}"), ModelConfig(model="sage", layers=2, hidden=16, dropout=0.3),
                  TrainConfig(epochs=6, lr=0.02, dtype="float64", eval_every=3, lr_schedule="cosine", label_aug=RATE,
                              correct_smooth="arxiv"), EngineConfig(mode="sar"), timeout_s=300, quiet=True)
        out[workers] = sorted((r for r in launch(job, workers) if r["rank"] == 0), key=lambda r: r["epoch"])
    one, four = out[1], out[4]
    loss_1, loss_4 = np.array([r["loss"] for r in one]), np.array([r["loss"] for r in four])
    assert np.abs(loss_1 - loss_4).max() <= 1e-10 * np.abs(loss_1).max()
    assert [r["lr"] for r in one] == pytest.approx([0.02 * (1 + math.cos(math.pi * e / 6)) / 2 for e in range(6)])
    for key in ("val_acc", "test_acc", "cs_train_acc", "cs_val_acc", "cs_test_acc"):
        assert one[-1][key] == four[-1][key], key
    assert 0 <= one[-1]["cs_test_acc"] <= 1 and math.isnan(one[0]["cs_test_acc"])


CS_CONFIGS = {"fixed": CSConfig(correction_layers=20, smoothing_layers=20),
              "autoscale": CSConfig(correction_layers=20, correction_alpha=0.8, smoothing_layers=20,
                                    smoothing_alpha=0.7, autoscale=True)}


def _probabilities(num_nodes: int, num_classes: int) -> torch.Tensor:
    """Base predictions of every node (a fixed function of the node id)."""
    logits = torch.randn(num_nodes, num_classes, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    return torch.softmax(2 * logits, 1)


def _cs_on_part(pdir: str, rank: int, world: int, num_train: int) -> dict:
    part = load_part(pdir, rank)
    graph = ShardedGraph.from_partition(part, Comm(rank, world), EngineConfig(mode="sar"))
    probs = _probabilities(part.num_nodes_global, part.num_classes)[graph.orig_ids]
    labels, train = torch.from_numpy(part.arrays["labels"]), torch.from_numpy(part.arrays["train_mask"])
    return {"orig_ids": graph.orig_ids, **{name: correct_and_smooth(graph, probs, labels, train, num_train, cfg)
                                            for name, cfg in CS_CONFIGS.items()}}


def _rank_entry(rank: int, world: int, port: int, pdir: str, num_train: int, out: str) -> None:
    try:
        torch.set_num_threads(1)
        store = dist.TCPStore("127.0.0.1", port, world_size=None, is_master=False,
                              timeout=datetime.timedelta(seconds=120))
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=120))
        torch.save(_cs_on_part(pdir, rank, world, num_train), f"{out}.rank{rank}.pt")
        dist.barrier()
        dist.destroy_process_group()
    except BaseException:
        with open(f"{out}.rank{rank}.err", "w") as f:
            f.write(traceback.format_exc())
        raise


def _spawn_cs(pdir: str, world: int, num_train: int, out: str, timeout: float = 300) -> list[dict]:
    spawn_ranks(_rank_entry, world, (pdir, num_train, out), out, timeout)
    return [torch.load(f"{out}.rank{r}.pt", weights_only=True) for r in range(world)]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("workers", [1, 3])
def test_distributed_correct_and_smooth_matches_pyg(tmp_path, workers):
    from torch_geometric.nn import CorrectAndSmooth

    g = synthetic_graph(nodes=400, degree=4, features=4, classes=5, seed=6, train=0.3)  # some isolated nodes
    pdir = str(tmp_path / "p")
    partition(g, workers, pdir)
    num_train = int(g.train_mask.sum())
    if workers == 1:
        parts = [_cs_on_part(pdir, 0, 1, num_train)]
    else:
        parts = _spawn_cs(pdir, workers, num_train, str(tmp_path / "cs"))
    probs = _probabilities(g.num_nodes, g.num_classes)
    edge_index = torch.from_numpy(np.stack([g.src, g.dst]))
    train, labels = torch.from_numpy(g.train_mask), torch.from_numpy(g.labels)
    for name, cfg in CS_CONFIGS.items():
        ref = CorrectAndSmooth(cfg.correction_layers, cfg.correction_alpha, cfg.smoothing_layers, cfg.smoothing_alpha,
                               autoscale=cfg.autoscale, scale=cfg.scale)
        corrected = ref.correct(probs, labels[train], train, edge_index)
        expected = ref.smooth(corrected, labels[train], train, edge_index)
        ours = torch.full_like(expected, float("nan"))
        for part in parts:
            ours[part["orig_ids"]] = part[name]
        assert not torch.equal(expected, probs)
        err = float((ours - expected).abs().max())
        assert err <= 1e-6, (name, err)


@pytest.mark.parametrize("field, value, message", [("lr_schedule", "step", "unknown learning-rate schedule"),
                                                    ("label_aug", 1.0, "label augmentation rate"),
                                                    ("correct_smooth", "cora", "unknown Correct & Smooth preset")])
def test_protocol_settings_are_checked(field, value, message):
    with pytest.raises(InputError, match=message):
        TrainConfig(**{field: value})


@pytest.mark.timeout(300)
def test_train_cli_with_label_aug_mfg_and_correct_smooth(tmp_path, graph):
    """`sarlab train --label-aug --mfg --correct-smooth arxiv --lr-schedule cosine` on 2 workers: the records carry
    the settings, the cosine learning rate and C&S's accuracies (last epoch only); the saved model takes the label
    columns, and as PyG layers on [features, one-hot training labels] gives the predicted logits, whose C&S by PyG's
    CorrectAndSmooth has the recorded accuracies."""
    from torch_geometric.nn import CorrectAndSmooth

    spec = "synthetic:nodes=500,degree=5,features=8,classes=4,noise=3.0,seed=4,train=0.4"  # the `graph` fixture
    model_path, pred_path, rec_path = tmp_path / "m.pt", tmp_path / "p.pt", tmp_path / "r.json"
    epochs, lr = 3, 0.02
    res = cli_here(["train", "--graph", spec, "--workers", "2", "--model", "sage", "--hidden", "8", "--epochs",
                    str(epochs), "--lr", str(lr), "--lr-schedule", "cosine", "--label-aug", str(RATE), "--mfg",
                    "--correct-smooth", "arxiv", "--dtype", "float64", "--save-model", str(model_path),
                    "--predict", str(pred_path), "--json", str(rec_path)])
    assert res.returncode == 0, res.stdout + res.stderr
    assert "after Correct & Smooth" in res.stdout, res.stdout
    records = pd.DataFrame(json.loads(rec_path.read_text()))
    assert set(records.mfg) == {True} and set(records.label_aug) == {RATE} and set(records.correct_smooth) == {"arxiv"}
    for e, lr_e in records.groupby("epoch").lr.first().items():
        assert lr_e == pytest.approx(lr * (1 + math.cos(math.pi * e / epochs)) / 2, rel=1e-12)
    last = records.epoch == epochs - 1
    cs = ["cs_train_acc", "cs_val_acc", "cs_test_acc"]
    assert records.loc[~last, cs].isna().all().all() and records.loc[last, cs].notna().all().all()
    model = load_model(str(model_path))
    onehot = np.zeros((graph.num_nodes, graph.num_classes))
    onehot[np.flatnonzero(graph.train_mask), graph.labels[graph.train_mask]] = 1.0
    inputs = torch.from_numpy(np.concatenate([graph.features, onehot], 1))
    ref = reference_step(model, graph, torch.float64, inputs=inputs)  # dropout 0: train mode = eval mode
    predicted = torch.load(pred_path, weights_only=True)["outputs"]
    torch.testing.assert_close(predicted, ref["logits"], rtol=1e-10, atol=1e-10)
    cfg = PRESETS["arxiv"]
    cands = CorrectAndSmooth(cfg.correction_layers, cfg.correction_alpha, cfg.smoothing_layers, cfg.smoothing_alpha,
                             autoscale=cfg.autoscale, scale=cfg.scale)
    train, labels = torch.from_numpy(graph.train_mask), torch.from_numpy(graph.labels)
    edge_index = torch.from_numpy(np.stack([graph.src, graph.dst]))
    probs = cands.correct(torch.softmax(predicted, 1), labels[train], train, edge_index)
    probs = cands.smooth(probs, labels[train], train, edge_index)
    row = records[last & (records["rank"] == 0)].iloc[0]
    for col, mask in zip(cs, (graph.train_mask, graph.val_mask, graph.test_mask)):
        m = torch.from_numpy(mask)
        assert row[col] == pytest.approx(float((probs[m].argmax(1) == labels[m]).double().mean()), abs=1e-12), col
