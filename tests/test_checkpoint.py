"""Checkpoint and resume (engine side), final weights and predictions.

References: the uninterrupted run of the same trainer (a resume must reproduce it bit for bit at the same
world size, to 1e-10 in fp64 at another), and PyG's layers on the whole graph for predictions. The
multi-process cases run the engine's Trainer on real gloo process groups spawned here (not through the
launcher/worker, whose --checkpoint/--resume wiring is tested in test_resume_distributed.py).
"""
from __future__ import annotations

import datetime
import os
import traceback

import numpy as np
import pytest
import torch
import torch.distributed as dist
from conftest import spawn_ranks

from sarlab.core.comm import Comm
from sarlab.core.config import EngineConfig
from sarlab.core.shards import ShardedGraph
from sarlab.data.graphs import synthetic_graph
from sarlab.data.partition import load_manifest, load_part, partition
from sarlab.nn.model import ModelConfig
from sarlab.training import checkpoint as ck
from sarlab.training.reference import ReferenceModel
from sarlab.training.trainer import TrainConfig, Trainer

MODEL = ModelConfig(model="sage", layers=3, hidden=16, dropout=0.5, batchnorm=True, seed=1)
TRAIN = TrainConfig(epochs=6, lr=0.02, dtype="float64", eval_every=2)


@pytest.fixture(scope="module")
def graph():
    return synthetic_graph(nodes=400, degree=6, features=10, classes=4, noise=3.0, seed=5)


@pytest.fixture(scope="module")
def parts(graph, tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt-parts")
    out = {}
    for n in (1, 2, 4):
        partition(graph, n, str(root / f"p{n}"))
        out[n] = str(root / f"p{n}")
    return out


def _trainer(pdir: str, model: ModelConfig = MODEL, train: TrainConfig = TRAIN, rank: int = 0,
             world: int = 1) -> Trainer:
    part = load_part(pdir, rank)
    return Trainer(ShardedGraph.from_partition(part, Comm(rank, world), EngineConfig()), part, model, train)


def _run(trainer: Trainer, epochs: range) -> list[tuple]:
    out = []
    for epoch in epochs:
        rec = trainer.step(epoch, 0)
        out.append((rec["loss"], rec["train_acc"], rec["val_acc"]))
    return out


def _same(a: list, b: list) -> bool:
    """Bit-identical curves (NaN, an epoch without evaluation, equals NaN)."""
    return np.array_equal(np.array(a, dtype=np.float64), np.array(b, dtype=np.float64), equal_nan=True)


def _facts(pdir: str) -> dict:
    return ck.graph_facts(load_manifest(pdir))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_resume_is_bit_identical_in_one_process(parts, tmp_path, dtype):
    train = TrainConfig(epochs=6, lr=0.02, dtype=dtype, eval_every=2)
    whole = _trainer(parts[1], train=train)
    reference = _run(whole, range(6))
    first = _trainer(parts[1], train=train)
    curve = _run(first, range(3))
    ck.save_checkpoint(str(tmp_path / "ck"), first, 3, _facts(parts[1]), history=[list(r) for r in curve])
    payload = torch.load(str(tmp_path / "ck" / ck.CHECKPOINT_FILE), weights_only=True)  # plain tensors/dicts only
    assert payload["epochs_done"] == 3 and payload["history"][2][0] == curve[2][0]
    second = _trainer(parts[1], train=train)
    start = ck.restore(second, ck.load_checkpoint(str(tmp_path / "ck")), _facts(parts[1]))
    assert start == 3
    curve += _run(second, range(start, 6))
    assert _same(curve, reference)  # loss, train and val accuracy, bit for bit
    for (name, a), b in zip(whole.model.state_dict().items(), second.model.state_dict().values()):
        assert torch.equal(a, b), name
    for name, state in whole.state_dict()["optimizer"].items():
        for key, value in state.items():
            assert torch.equal(value, second.state_dict()["optimizer"][name][key]), (name, key)


def test_resume_without_optimizer_state_would_differ(parts, tmp_path):
    """The check above can fail: dropping Adam's moments changes the resumed curve."""
    whole = _trainer(parts[1])
    reference = _run(whole, range(5))
    first = _trainer(parts[1])
    _run(first, range(3))
    state = first.state_dict()
    state["optimizer"] = {}
    second = _trainer(parts[1])
    second.load_state_dict(state)
    assert not _same(_run(second, range(3, 5)), reference[3:])


def test_resume_refuses_another_model_graph_or_finished_run(parts, tmp_path, graph):
    first = _trainer(parts[1])
    _run(first, range(2))
    ck.save_checkpoint(str(tmp_path / "ck"), first, 2, _facts(parts[1]))
    payload = ck.load_checkpoint(str(tmp_path / "ck"))
    other = ModelConfig(model="sage", layers=3, hidden=32, dropout=0.5, batchnorm=True, seed=1)
    with pytest.raises(ck.CheckpointError, match=r"model\.hidden: checkpoint 16, this run 32"):
        ck.restore(_trainer(parts[1], model=other), payload, _facts(parts[1]))
    with pytest.raises(ck.CheckpointError, match="dtype: checkpoint 'float64', this run 'float32'"):
        ck.check_compatible(payload, MODEL, "float32", _facts(parts[1]))
    facts = dict(_facts(parts[1]), num_edges=1)
    with pytest.raises(ck.CheckpointError, match="graph.num_edges"):
        ck.check_compatible(payload, MODEL, "float64", facts)
    with pytest.raises(ck.CheckpointError, match="already done 2 epochs"):
        ck.check_compatible(payload, MODEL, "float64", _facts(parts[1]), epochs=2)
    ck.check_compatible(payload, MODEL, "float64", _facts(parts[1]), epochs=3)
    with pytest.raises(ck.CheckpointError, match="does not exist"):
        ck.load_checkpoint(str(tmp_path / "nothing"))
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / ck.CHECKPOINT_FILE).write_bytes(b"not a checkpoint")
    with pytest.raises(ck.CheckpointError, match="no readable checksum"):
        ck.load_checkpoint(str(tmp_path / "junk"))


def test_checkpoint_write_is_atomic(parts, tmp_path, monkeypatch):
    trainer = _trainer(parts[1])
    _run(trainer, range(1))
    directory = str(tmp_path / "ck")
    ck.save_checkpoint(directory, trainer, 1, _facts(parts[1]))
    before = open(os.path.join(directory, ck.CHECKPOINT_FILE), "rb").read()
    real_save = torch.save

    def dies_halfway(obj, f, *args, **kwargs):
        real_save(obj, f, *args, **kwargs)
        f.truncate(100)
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(torch, "save", dies_halfway)
    _run(trainer, range(1, 2))
    with pytest.raises(OSError, match="disk full"):
        ck.save_checkpoint(directory, trainer, 2, _facts(parts[1]))
    assert open(os.path.join(directory, ck.CHECKPOINT_FILE), "rb").read() == before
    assert sorted(os.listdir(directory)) == sorted([ck.CHECKPOINT_FILE, ck.SUMS_FILE])
    ck.verify_checkpoint(directory)  # the digest of the checkpoint that is still there


def test_checkpoint_directory_rules(tmp_path, parts):
    ck.check_checkpoint_dir(str(tmp_path / "new"))
    (tmp_path / "empty").mkdir()
    ck.check_checkpoint_dir(str(tmp_path / "empty"))
    (tmp_path / "a_file").write_text("keep me")
    with pytest.raises(ck.CheckpointError, match="is a file or a link"):
        ck.check_checkpoint_dir(str(tmp_path / "a_file"))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(ck.CheckpointError, match="holds files sarlab did not write"):
        ck.check_checkpoint_dir(str(tmp_path / "mine"), force=True)
    trainer = _trainer(parts[1])
    ck.save_checkpoint(str(tmp_path / "ck"), trainer, 0, _facts(parts[1]))
    with pytest.raises(ck.CheckpointError, match="already holds a checkpoint"):
        ck.check_checkpoint_dir(str(tmp_path / "ck"))
    ck.check_checkpoint_dir(str(tmp_path / "ck"), resume_from=str(tmp_path / "ck"))
    ck.check_checkpoint_dir(str(tmp_path / "ck"), force=True)
    assert (tmp_path / "a_file").read_text() == "keep me" and (tmp_path / "mine" / "notes.txt").exists()


def test_save_model_predict_and_write_predictions(parts, graph, tmp_path):
    model = ModelConfig(model="sage", layers=2, hidden=8, dropout=0.5, seed=2)
    trainer = _trainer(parts[1], model=model)
    _run(trainer, range(3))
    path = str(tmp_path / "model.pt")
    ck.save_model(path, trainer)
    with pytest.raises(ck.CheckpointError, match="already holds a sarlab model"):
        ck.save_model(path, trainer)
    ck.save_model(path, trainer, force=True)
    (tmp_path / "precious.pt").write_bytes(b"user data")
    with pytest.raises(ck.CheckpointError, match="not a file sarlab wrote"):
        ck.save_model(str(tmp_path / "precious.pt"), trainer, force=True)
    assert (tmp_path / "precious.pt").read_bytes() == b"user data"
    # reference: PyG layers with the same weights on the whole graph in original node order
    loaded = ck.load_model(path)
    ref = ReferenceModel(loaded, torch.float64).eval()
    x = torch.from_numpy(graph.features).double()
    edge_index = torch.from_numpy(np.stack([graph.src, graph.dst]))
    captured = []
    ref.convs[-1].register_forward_pre_hook(lambda module, args: captured.append(args[0]))
    with torch.no_grad():
        expected = ref(x, edge_index)
    torch.testing.assert_close(trainer.predict(), expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(trainer.predict(embeddings=True), captured[-1], rtol=1e-12, atol=1e-12)
    for name in ("pred.pt", "pred.npz"):
        ck.write_predictions(str(tmp_path / name), trainer.predict(), "logits")
    assert torch.equal(torch.load(str(tmp_path / "pred.pt"), weights_only=True)["outputs"], trainer.predict())
    with np.load(str(tmp_path / "pred.npz")) as z:
        assert np.array_equal(z["outputs"], trainer.predict().numpy()) and str(z["what"]) == "logits"
    with pytest.raises(ck.CheckpointError, match="already holds a sarlab predictions"):
        ck.write_predictions(str(tmp_path / "pred.npz"), trainer.predict())
    with pytest.raises(ck.CheckpointError, match="must end in .pt"):
        ck.write_predictions(str(tmp_path / "pred.csv"), trainer.predict())


# ---- several processes: the engine's Trainer on real gloo process groups ----------------------------------------


def _rank_entry(rank: int, world: int, port: int, pdir: str, plan: dict, out: str) -> None:
    """One rank: optionally resume, train, optionally checkpoint mid-way; rank 0 saves what it saw."""
    try:
        torch.set_num_threads(1)
        store = dist.TCPStore("127.0.0.1", port, world_size=None, is_master=False,
                              timeout=datetime.timedelta(seconds=120))
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=120))
        trainer = _trainer(pdir, rank=rank, world=world)
        facts = _facts(pdir)
        start = ck.restore(trainer, ck.load_checkpoint(plan["resume"]), facts) if plan.get("resume") else 0
        curve = []
        for epoch in range(start, TRAIN.epochs):
            curve += _run(trainer, range(epoch, epoch + 1))
            if plan.get("save") and epoch + 1 == plan["save_at"] and rank == 0:
                ck.save_checkpoint(plan["save"], trainer, epoch + 1, facts)
        result = {"curve": curve, "state": trainer.state_dict(), "predict": trainer.predict()}
        dist.barrier()
        if rank == 0:
            torch.save(result, out)
        dist.destroy_process_group()
    except BaseException:
        with open(f"{out}.rank{rank}.err", "w") as f:
            f.write(traceback.format_exc())
        raise


def _spawn(pdir: str, world: int, plan: dict, out: str, timeout: float = 240) -> dict:
    spawn_ranks(_rank_entry, world, (pdir, plan, out), out, timeout)
    return torch.load(out, weights_only=True)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_resume_across_world_sizes(parts, graph, tmp_path):
    """2 workers for 6 epochs, checkpointing after 3; resumed on 2 workers (bit-identical) and on 4 (1e-10).

    Slow (~75 s) and, but for the PyG check of the gathered predictions, the same as
    tests/test_resume_distributed.py, which the default run keeps (through the CLI)."""
    ckdir = str(tmp_path / "ck")
    whole = _spawn(parts[2], 2, {"save": ckdir, "save_at": 3}, str(tmp_path / "whole.pt"))
    same = _spawn(parts[2], 2, {"resume": ckdir}, str(tmp_path / "same.pt"))
    more = _spawn(parts[4], 4, {"resume": ckdir}, str(tmp_path / "more.pt"))
    assert _same(same["curve"], whole["curve"][3:])
    for name, value in whole["state"]["model"].items():
        assert torch.equal(value, same["state"]["model"][name]), name
    assert torch.equal(same["predict"], whole["predict"])
    losses = np.array([c[0] for c in whole["curve"][3:]])
    rel = np.abs(np.array([c[0] for c in more["curve"]]) - losses).max() / np.abs(losses).max()
    assert rel <= 1e-10, rel
    # absolute: the conv biases before BatchNorm have a zero true gradient (BatchNorm removes them), so Adam
    # turns rounding noise into steps; they drift apart by ~1e-11 and change no output
    for name, value in whole["state"]["model"].items():
        torch.testing.assert_close(more["state"]["model"][name], value, rtol=0, atol=1e-10, msg=name)
    torch.testing.assert_close(more["predict"], whole["predict"], rtol=1e-9, atol=1e-10)
    # predictions gathered from 2 ranks are in original node order: PyG on the whole graph agrees
    model = _trainer(parts[1]).model
    model.load_state_dict(whole["state"]["model"])
    ref = ReferenceModel(model, torch.float64)
    for conv, norm in zip(ref.norms, model.norms):
        ref_state = {"running_mean": norm.running_mean, "running_var": norm.running_var}
        conv.load_state_dict({**conv.state_dict(), **ref_state})
    with torch.no_grad():
        expected = ref.eval()(torch.from_numpy(graph.features).double(),
                              torch.from_numpy(np.stack([graph.src, graph.dst])))
    torch.testing.assert_close(whole["predict"], expected, rtol=1e-10, atol=1e-10)
