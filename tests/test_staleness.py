"""Bounded-staleness halos (``--staleness S``, :mod:`sarlab.strategies.stale`).

References are independent of the code under test: PyG's layers with the same weights on the whole graph. For a
stale epoch the reference builds, for every worker ``p``, the input of each layer with ``p``'s own rows as
computed this epoch and every other row as computed ``S`` epochs before (held constant), runs the PyG layer on it
and keeps ``p``'s rows. Multi-worker cases run real gloo processes.
"""
from __future__ import annotations

import datetime
import json
import traceback

import numpy as np
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
from sarlab.nn.model import GNN, ModelConfig
from sarlab.training.reference import ReferenceModel, reference_step
from sarlab.training.trainer import TrainConfig, Trainer

WORKERS = 3
EPOCHS = 4
MODELS = (("sage", "mean", True), ("sage", "max", True), ("gcn", "mean", True))


@pytest.fixture(scope="module")
def graph():
    return synthetic_graph(nodes=360, degree=6, features=10, classes=4, seed=8)


def _epochs(part, comm: Comm, model_cfg: ModelConfig, mode: str, staleness: int, fused: bool) -> dict:
    """``EPOCHS`` training steps; per epoch the weights it started from, its logits and reduced gradients."""
    graph = ShardedGraph.from_partition(part, comm, EngineConfig(mode=mode, staleness=staleness, fused=fused))
    trainer = Trainer(graph, part, model_cfg, TrainConfig(epochs=EPOCHS, lr=0.05, dtype="float64"))
    names = [n for n, _ in trainer.model.named_parameters()]
    out = {"orig_ids": graph.orig_ids.clone(), "states": [], "logits": [], "grads": [], "losses": []}
    for epoch in range(EPOCHS):
        out["states"].append({k: v.detach().clone() for k, v in trainer.model.state_dict().items()})
        logits, loss, grads = trainer.forward_backward(epoch)
        out["logits"].append(logits.detach().clone())
        out["grads"].append({n: g.clone() for n, g in zip(names, grads)})
        out["losses"].append(loss)
        for p, g in zip(trainer.params, grads):
            p.grad = g
        trainer.opt.step()
        trainer.opt.zero_grad(set_to_none=True)
    if trainer.stale is not None:
        out["left_in_cache"] = trainer.stale.cached_bytes()
    return out


def _rank_entry(rank: int, world: int, port: int, pdir: str, cases: list, out: str) -> None:
    try:
        torch.set_num_threads(1)
        timeout = datetime.timedelta(seconds=120)
        store = dist.TCPStore("127.0.0.1", port, world_size=None, is_master=False, timeout=timeout)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)
        part = load_part(pdir, rank)
        torch.save([_epochs(part, Comm(rank, world), *case) for case in cases], f"{out}.rank{rank}.pt")
        dist.barrier()
        dist.destroy_process_group()
    except BaseException:
        with open(f"{out}.rank{rank}.err", "w") as f:
            f.write(traceback.format_exc())
        raise


def run_cases(graph, cases: list, tmp_path, timeout: float = 400) -> list[list[dict]]:
    """[rank][case] results of :func:`_epochs` on ``WORKERS`` gloo processes."""
    pdir = str(tmp_path / "parts")
    partition(graph, WORKERS, pdir)
    out = str(tmp_path / "stale")
    spawn_ranks(_rank_entry, WORKERS, (pdir, cases, out), out, timeout)
    return [torch.load(f"{out}.rank{r}.pt", weights_only=True) for r in range(WORKERS)]


def _model(model_cfg: ModelConfig, graph, state: dict) -> GNN:
    model = GNN(model_cfg, graph.features.shape[1], graph.num_classes).to(torch.float64)
    model.load_state_dict(state)
    return model


def _stale_reference(model_cfg: ModelConfig, graph, states: list, owner: torch.Tensor, epoch: int,
                     staleness: int) -> dict:
    """Dense logits, loss and gradients of ``epoch`` with halo rows from epoch ``max(epoch - S, 0)``.

    ``owner[i]``: the worker that owns original node ``i``. Layer inputs of the epochs the halo comes from are
    computed the same way (recursively), without gradient.
    """
    edge_index = torch.from_numpy(np.stack([graph.src, graph.dst])).long()
    x = torch.from_numpy(graph.features).to(torch.float64)
    refs = {e: ReferenceModel(_model(model_cfg, graph, states[e]), torch.float64) for e in range(epoch + 1)}
    layers = model_cfg.layers

    def hidden(e: int) -> list[torch.Tensor]:
        """Inputs of every layer (and the logits last) as the workers computed them at epoch ``e``."""
        source = max(e - staleness, 0)
        old = None if source == e else [h.detach() for h in hidden(source)]
        inputs = [x]
        for i, conv in enumerate(refs[e].convs):
            h, out = inputs[-1], None
            for p in range(WORKERS):
                mine = (owner == p).unsqueeze(1)
                if old is None:
                    rows = conv(h, edge_index)
                elif model_cfg.model == "gcn":  # halo messages are the rows lin(h) of epoch `source`
                    rows = _gcn_mixed(conv, refs[source].convs[i], h, old[i], edge_index, owner, p)
                else:  # SAGE aggregates its input rows
                    rows = conv(torch.where(mine, h, old[i]), edge_index)
                out = torch.where(mine, rows, torch.zeros_like(rows) if out is None else out)
            inputs.append(torch.relu(out) if i < layers - 1 else out)
        return inputs

    for ref in refs.values():
        ref.train()
    logits = hidden(epoch)[-1]
    train = torch.from_numpy(graph.train_mask)
    labels = torch.from_numpy(graph.labels)
    loss = torch.nn.functional.cross_entropy(logits[train], labels[train], reduction="sum") / int(train.sum())
    loss.backward()
    return {"logits": logits.detach(), "loss": float(loss), "grads": refs[epoch].gradients_by_sarlab_name()}


def _gcn_mixed(conv, old_conv, h: torch.Tensor, h_old: torch.Tensor, edge_index: torch.Tensor, owner: torch.Tensor,
               p: int) -> torch.Tensor:
    """GCN with worker ``p``'s messages ``norm_ij W h_j`` current and the others' ``norm_ij W_old h_old_j``:
    PyG's normalisation (self-loops, symmetric degrees) on the whole graph, messages summed by hand."""
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    loops, weight = gcn_norm(edge_index, None, h.shape[0], add_self_loops=True, dtype=h.dtype)
    src, dst = loops
    own = owner[src] == p
    messages = torch.where(own.unsqueeze(1), conv.lin(h)[src], old_conv.lin(h_old)[src]) * weight.unsqueeze(1)
    out = torch.zeros(h.shape[0], messages.shape[1], dtype=h.dtype).index_add(0, dst, messages)
    return out + conv.bias


def _owner(results: list) -> torch.Tensor:
    total = sum(r[0]["orig_ids"].numel() for r in results)
    owner = torch.full((total,), -1, dtype=torch.long)
    for rank, rank_results in enumerate(results):
        owner[rank_results[0]["orig_ids"]] = rank
    assert (owner >= 0).all()
    return owner


def _rel(ours: torch.Tensor, ref: torch.Tensor) -> float:
    return float((ours - ref).abs().max()) / max(float(ref.abs().max()), 1e-300)


@pytest.mark.timeout(900)
def test_stale_epochs_use_rows_from_s_epochs_ago_and_zero_is_exact(graph, tmp_path):
    """S = 1, 2: every epoch's logits and gradients equal the dense reference whose halo rows are those of
    epoch ``max(e - S, 0)``; S = 0 equals PyG on the whole graph and the mode without the field, bit for bit."""
    cases = []
    for model, aggr, fused in MODELS:
        cfg = ModelConfig(model=model, aggr=aggr, layers=3, hidden=8, heads=2, seed=2)
        for mode, staleness in (("sar", 1), ("oneshot", 2)):
            cases.append((cfg, mode, staleness, fused))
    cfg = ModelConfig(model="sage", layers=3, hidden=8, seed=2)
    cases += [(cfg, "sar", 0, True), (cfg, "oneshot", 0, True)]
    gat = ModelConfig(model="gat", layers=3, hidden=8, heads=2, seed=2)
    gat_cases = len(cases), len(cases) + 1
    cases += [(gat, "sar", 1, True), (gat, "oneshot", 1, False)]
    results = run_cases(graph, cases, tmp_path)
    owner = _owner(results)
    for i, (cfg, mode, staleness, fused) in enumerate(cases):
        if i in gat_cases:
            continue
        states = results[0][i]["states"]
        for epoch in range(EPOCHS):
            if staleness:
                ref = _stale_reference(cfg, graph, states, owner, epoch, staleness)
            else:
                ref = reference_step(_model(cfg, graph, states[epoch]), graph, torch.float64, epoch=epoch)
            for rank_results in results:
                res = rank_results[i]
                what = (cfg.model, fused, mode, staleness, epoch)
                assert _rel(res["logits"][epoch], ref["logits"][res["orig_ids"]]) < 1e-10, what
                assert abs(res["losses"][epoch] - ref["loss"]) < 1e-10 * max(1.0, abs(ref["loss"])), what
                for name, g in ref["grads"].items():
                    assert _rel(res["grads"][epoch][name], g) < 1e-10, (*what, name)
                if staleness:
                    assert res["left_in_cache"] == 0, what  # the last epoch drained every fetch
        if staleness:  # the stale epochs differ from exact training (the test can tell them apart)
            exact = _stale_reference(cfg, graph, states, owner, 1, 0)
            assert _rel(results[0][i]["logits"][1], exact["logits"][results[0][i]["orig_ids"]]) > 1e-6
    # GAT (halo rows: projected features and source scores of the stale epoch): epoch 0 is exact, and the fused
    # kernels and plain autograd agree on every stale epoch
    fused_case, plain_case = gat_cases
    ref = reference_step(_model(gat, graph, results[0][fused_case]["states"][0]), graph, torch.float64, epoch=0)
    for rank_results in results:
        fused, plain = rank_results[fused_case], rank_results[plain_case]
        assert _rel(fused["logits"][0], ref["logits"][fused["orig_ids"]]) < 1e-10
        for name, g in ref["grads"].items():
            assert _rel(fused["grads"][0][name], g) < 1e-10 and _rel(plain["grads"][0][name], g) < 1e-10, name
        for epoch in range(1, EPOCHS):
            assert _rel(fused["logits"][epoch], plain["logits"][epoch]) < 1e-10, epoch
            for name, g in plain["grads"][epoch].items():
                assert _rel(fused["grads"][epoch][name], g) < 1e-10, (epoch, name)


def _records(path) -> list[dict]:
    return sorted(json.loads(path.read_text()), key=lambda r: (r["epoch"], r["rank"]))


@pytest.mark.timeout(900)
def test_cli_staleness_zero_is_bit_for_bit_the_exact_mode_and_bad_combinations_fail(tmp_path):
    spec = "synthetic:nodes=900,degree=6,features=8,classes=3,seed=1"
    common = ["train", "--graph", spec, "--workers", "2", "--epochs", "4", "--threads", "1", "--mode", "sar"]
    runs = {}
    for name, extra in (("plain", []), ("zero", ["--staleness", "0"]), ("one", ["--staleness", "1"])):
        out = tmp_path / f"{name}.json"
        res = cli_here([*common, *extra, "--json", str(out)])
        assert res.returncode == 0, res.stderr
        runs[name] = _records(out)
    keys = ("loss", "train_acc", "val_acc", "test_acc", "bytes_sent", "bytes_recv")
    for plain, zero in zip(runs["plain"], runs["zero"]):
        assert all(plain[k] == zero[k] for k in keys), (plain, zero)
        assert zero["staleness"] == 0
    assert all(r["staleness"] == 1 for r in runs["one"])
    assert runs["one"][0]["loss"] == runs["plain"][0]["loss"]  # epoch 0 is exact
    assert any(o["loss"] != p["loss"] for o, p in zip(runs["one"][2:], runs["plain"][2:]))
    for mode in ("sa", "sampling"):
        bad = cli_here(["train", "--graph", spec, "--workers", "1", "--epochs", "1", "--mode", mode,
                        "--staleness", "1"])  # refused before any work: in this process
        assert bad.returncode == 2 and "--staleness" in bad.stderr, (mode, bad.stderr)
    neg = cli_here(["train", "--graph", spec, "--workers", "1", "--epochs", "1", "--staleness", "-1"])
    assert neg.returncode == 2 and "staleness" in neg.stderr, neg.stderr


def test_config_rejects_bad_staleness():
    with pytest.raises(InputError, match="staleness"):
        EngineConfig(mode="sa", staleness=1)
    with pytest.raises(InputError, match="staleness"):
        EngineConfig(mode="sar", staleness=-1)
    assert EngineConfig(mode="oneshot", staleness=2).staleness == 2
    assert EngineConfig() == EngineConfig(staleness=0)


def test_strategies_plan_interleaves_and_tables_read_the_records():
    """The head-to-head driver's plan and per-run table, on hand-made records (no training)."""
    import pandas as pd

    from sarlab.real.bench.head_to_head import StrategiesConfig, default_strategies, plan, run_table

    strategies = default_strategies((5, 5), 64)
    order = plan(StrategiesConfig(seeds=(0, 1), nets=("loopback", "veth:rate=200mbit")), strategies)
    assert len(order) == 20 and [s.name for _, _, s in order[:5]] == [s.name for s in strategies]
    assert [s.name for _, _, s in order[5:10]] == [s.name for s in strategies[1:] + strategies[:1]]
    assert {(seed, net) for seed, net, _ in order[:10]} == {(0, "loopback"), (0, "veth:rate=200mbit")}
    rows = []
    for epoch, (times, val, test, sent) in enumerate([((1.0, 2.0), 0.5, 0.4, (10, 20)), ((3.0, 1.0), 0.7, 0.8, (5, 5)),
                                                      ((1.0, 1.5), 0.9, 0.6, (6, 6)), ((2.0, 2.5), 0.8, 0.9, (7, 9))]):
        for rank in (0, 1):
            rows.append({"strategy": "sar", "net": "loopback", "seed": 0, "epoch": epoch, "rank": rank,
                         "epoch_time_s": times[rank], "val_acc": val, "test_acc": test, "bytes_sent": sent[rank],
                         "peak_mem_bytes": 2**20 * (3 + rank + epoch), "baseline_mem_bytes": 2**20,
                         "load_1min_before": 1.5})
    row = run_table(pd.DataFrame(rows), target=0.85).iloc[0]
    assert row.epoch_time_s == 2.5  # median of the slowest rank's 3.0, 1.5, 2.5 (epoch 0 left out)
    assert row.time_to_target_s == 2.0 + 3.0 + 1.5 and row.epochs_to_target == 3
    assert row.best_val_acc == 0.9 and row.test_at_best_val == 0.6 and row.best_test_acc == 0.9
    assert row.peak_mem_mib == 6.0 and row.mib_per_epoch == 12 / 2**20
    assert run_table(pd.DataFrame(rows), target=0.95).time_to_target_s.isna().all()
