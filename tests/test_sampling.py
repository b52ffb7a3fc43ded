"""Mini-batch training with distributed neighbour sampling (``sarlab.strategies.sampling``,
``sarlab.training.minibatch``).

References are independent of the code under test: PyG's layers with the same weights on the whole graph (fan-out
``all``) or on the sampled blocks rebuilt from the edges the workers report, counts over the graph's edge list,
numpy's bit packing, and a plain-Python sampler written from the semantics in :mod:`sarlab.strategies.sampling` (its
hash, Floyd's draws over each node's in-edges by source id, the blocks a batch gets hop by hop).
Multi-worker cases run real gloo processes.
"""
from __future__ import annotations

import datetime
import json
import os
import traceback

import numpy as np
import pytest
import torch
import torch.distributed as dist
from conftest import cli_here, spawn_ranks

from sarlab.core.comm import Comm
from sarlab.core.config import ALL_NEIGHBOURS, EngineConfig, SamplingConfig, parse_fanouts
from sarlab.core.shards import ShardedGraph
from sarlab.data.graphs import synthetic_graph
from sarlab.data.partition import load_manifest, load_part, partition
from sarlab.data.validate_data import InputError
from sarlab.nn.functional import dropout_by_id
from sarlab.nn.model import GNN, ModelConfig
from sarlab.strategies.sampling import GraphStore, pack_mask, unpack_mask
from sarlab.training.minibatch import MiniBatchTrainer
from sarlab.training.reference import ReferenceModel, reference_step
from sarlab.training.trainer import TrainConfig

MODELS = (("gcn", "mean"), ("sage", "mean"), ("sage", "max"), ("gat", "mean"))
STEP_KEY = 7  # the dropout key of the checked step


@pytest.fixture(scope="module")
def graph():
    return synthetic_graph(nodes=400, degree=6, features=10, classes=4, seed=5)  # a few isolated nodes


def test_fanouts_are_parsed_per_layer():
    assert parse_fanouts("15,10,5", 3) == (15, 10, 5)
    assert parse_fanouts("all", 2) == (ALL_NEIGHBOURS, ALL_NEIGHBOURS)
    assert parse_fanouts("4,all", 2) == (4, ALL_NEIGHBOURS)
    for text, layers in (("15,10", 3), ("0,1", 2), ("x", 1)):
        with pytest.raises(InputError):
            parse_fanouts(text, layers)
    with pytest.raises(InputError):
        SamplingConfig(batch_size=0)


def test_samples_are_uniform_without_replacement(graph):
    """Each node gets min(k, degree) distinct in-edges of the graph; over many keys every in-neighbour of a node
    is drawn with probability k / degree."""
    store = GraphStore.single(graph.src, graph.dst, graph.num_nodes)
    nodes = torch.arange(graph.num_nodes)
    degree = np.bincount(graph.dst, minlength=graph.num_nodes)
    in_nbrs = [set(graph.src[graph.dst == v].tolist()) for v in range(graph.num_nodes)]
    k = 3
    sample = store.sample(nodes, k, key=11)
    assert sample.counts.tolist() == np.minimum(degree, k).tolist()
    first = 0
    for v, count in enumerate(sample.counts.tolist()):
        chosen = sample.neighbours[first:first + count].tolist()
        first += count
        assert len(set(chosen)) == count and set(chosen) <= in_nbrs[v]
    assert torch.equal(store.sample(nodes, k, key=11).neighbours, sample.neighbours)  # deterministic
    assert not torch.equal(store.sample(nodes, k, key=12).neighbours, sample.neighbours)
    assert store.sample(nodes, ALL_NEIGHBOURS, key=1).neighbours.numel() == graph.num_edges
    v = int(np.argmax(degree))
    rounds = 3000
    hits = torch.zeros(graph.num_nodes)
    for key in range(rounds):
        hits.index_add_(0, store.sample(torch.tensor([v]), k, key).neighbours, torch.ones(k))
    freq = hits[sorted(in_nbrs[v])] / rounds
    sigma = (k / degree[v] * (1 - k / degree[v]) / rounds) ** 0.5
    assert float((freq - k / degree[v]).abs().max()) < 5 * sigma, (freq, k / degree[v])
    star = GraphStore.single(np.arange(1, 6), np.zeros(5, dtype=np.int64), 6)  # node 0 has 5 in-neighbours
    pairs: dict = {}
    for key in range(rounds):
        pair = tuple(sorted(star.sample(torch.tensor([0]), 2, key).neighbours.tolist()))
        pairs[pair] = pairs.get(pair, 0) + 1
    sigma = (0.1 * 0.9 / rounds) ** 0.5
    assert len(pairs) == 10 and all(abs(c / rounds - 0.1) < 5 * sigma for c in pairs.values()), pairs


def test_masks_pack_as_numpy_packbits():
    rng = np.random.default_rng(0)
    for n in (0, 1, 7, 8, 9, 100):
        mask = rng.random(n) < 0.3
        packed = pack_mask(torch.from_numpy(mask))
        assert packed.dtype == torch.uint8
        assert packed.numpy().tolist() == np.packbits(mask, bitorder="little").tolist()
        assert unpack_mask(packed, n).numpy().tolist() == mask.tolist()


# ----------------------------------------------------------------------- a plain-Python sampler, the reference
_M32 = 0xFFFFFFFF


def _py_mix(x: int) -> int:
    x = ((x ^ (x >> 16)) * 0x45D9F3B) & _M32
    x = ((x ^ (x >> 16)) * 0x45D9F3B) & _M32
    return x ^ (x >> 16)


def _py_key(*parts: int) -> int:
    key = 0x9E3779B9
    for part in parts:
        key = _py_mix(key ^ _py_mix(part & _M32))
    return key


def _py_sample(in_nbrs: dict, v: int, k: int, key: int) -> list:
    """Node ``v``'s sample (original ids): all in-edges, or Floyd's ``k`` draws over them listed by source id."""
    srcs = in_nbrs.get(v, [])
    d = len(srcs)
    if k == ALL_NEIGHBOURS or d <= k:
        return list(srcs)
    node_key = _py_mix(_py_mix((v & _M32) ^ key) ^ (key >> 3))
    chosen: list = []
    for i in range(k):
        top = d - k + i
        t = (_py_mix(_py_mix(node_key ^ i) ^ 0x5BD1E995) * (top + 1)) >> 32
        chosen.append(top if t in chosen else t)
    return [srcs[t] for t in chosen]


def _py_blocks(in_nbrs: dict, seeds: list, fanouts: tuple, seed: int, epoch: int) -> list:
    """The blocks of a batch sampled alone, layer 0 first: destinations, sampled edges (dst, src), sources."""
    level, out = list(seeds), []
    for hop, k in enumerate(fanouts):
        key = _py_key(seed, epoch, len(fanouts) - 1 - hop)
        edges = [(v, u) for v in level for u in _py_sample(in_nbrs, v, k, key)]
        new = sorted({u for _, u in edges} - set(level))
        out.insert(0, {"dst": set(level), "edges": sorted(edges), "src": set(level) | set(new)})
        level = level + new
    return out


def _in_neighbours(graph) -> dict:
    order = np.lexsort((graph.src, graph.dst))
    in_nbrs: dict = {}
    for u, v in zip(graph.src[order].tolist(), graph.dst[order].tolist()):
        in_nbrs.setdefault(v, []).append(u)
    return in_nbrs


# ------------------------------------------------------------------------------------------- distributed steps
def _one_step(part, comm: Comm, model_cfg: ModelConfig, sampling: SamplingConfig, dtype: str) -> dict:
    """One mini-batch step on this worker's first batch: reduced gradients and the batch in global ids."""
    graph = ShardedGraph.from_partition(part, comm, EngineConfig(mode="sar"))
    trainer = MiniBatchTrainer(graph, part, model_cfg, TrainConfig(dtype=dtype), sampling)
    seeds = trainer.batches(0)[0]
    batch, x = trainer.batch_inputs(trainer.prepare([seeds], 0), seeds)
    total = float(graph.all_reduce(torch.tensor([float(seeds.numel())], dtype=torch.float64))[0])
    _, _, grads = trainer.batch_gradients(batch, x, total, STEP_KEY)
    levels, sources = [], batch.input_ids
    for block in batch.blocks:  # global ids of every level's rows and of every sampled edge
        shard = block.local.local_shard
        levels.append({"src": sources.clone(), "edge_src": sources[shard.src].clone(),
                       "edge_dst": sources[shard.dst].clone(), "num_dst": block.num_nodes})
        sources = sources[:block.num_nodes]
    names = [n for n, _ in trainer.model.named_parameters()]
    return {"grads": {n: g.clone() for n, g in zip(names, grads)}, "levels": levels,
            "init": {k: v.clone() for k, v in trainer.model.state_dict().items()}}


SAMPLED_EPOCH = 1


def _sampled_epoch(part, comm: Comm, model_cfg: ModelConfig, sampling: SamplingConfig, round_batches: int) -> list:
    """Every batch of one epoch, sampled in rounds of ``round_batches``: its blocks in global ids, its input rows
    and their in-degrees, the in-degrees of every block's destinations."""
    graph = ShardedGraph.from_partition(part, comm, EngineConfig(mode="sar"))
    trainer = MiniBatchTrainer(graph, part, model_cfg, TrainConfig(dtype="float64"), sampling, round_batches)
    batches, out = trainer.batches(SAMPLED_EPOCH), []
    for steps in trainer.rounds():
        sampled = trainer.prepare([batches[s] for s in steps], SAMPLED_EPOCH)
        for s in steps:
            batch, x = trainer.batch_inputs(sampled, batches[s])
            levels, sources = [], batch.input_ids
            for block in batch.blocks:
                shard = block.local.local_shard
                levels.append({"src": sources.clone(), "edge_src": sources[shard.src].clone(),
                               "edge_dst": sources[shard.dst].clone(), "num_dst": block.num_nodes,
                               "dst_degree": block.in_degree.clone()})
                sources = sources[:block.num_nodes]
            out.append({"levels": levels, "x": x.clone(), "degree": batch.blocks[0].src_in_degree.clone()})
    return out


def _rank_entry(rank: int, world: int, port: int, pdir: str, cases: list, out: str, fn=_one_step) -> None:
    try:
        torch.set_num_threads(1)
        timeout = datetime.timedelta(seconds=120)
        store = dist.TCPStore("127.0.0.1", port, world_size=None, is_master=False, timeout=timeout)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)
        part = load_part(pdir, rank)
        torch.save([fn(part, Comm(rank, world), *case) for case in cases], f"{out}.rank{rank}.pt")
        dist.barrier()
        dist.destroy_process_group()
    except BaseException:
        with open(f"{out}.rank{rank}.err", "w") as f:
            f.write(traceback.format_exc())
        raise


def run_steps(graph, workers: int, cases: list, tmp_path, timeout: float = 300, fn=_one_step) -> list[list]:
    """Partition ``graph`` into ``workers`` parts and run ``fn`` (every case's first step) on each; [rank][case]
    results with the blocks' ids mapped to original node ids."""
    pdir = str(tmp_path / f"parts{workers}")
    if not os.path.isdir(pdir):
        partition(graph, workers, pdir)
    if workers == 1:
        results = [[fn(load_part(pdir, 0), Comm(0, 1), *case) for case in cases]]
    else:
        out = str(tmp_path / f"{fn.__name__}{workers}")
        spawn_ranks(_rank_entry, workers, (pdir, cases, out, fn), out, timeout)
        results = [torch.load(f"{out}.rank{r}.pt", weights_only=True) for r in range(workers)]
    manifest = load_manifest(pdir)
    to_orig = torch.from_numpy(np.concatenate([np.load(os.path.join(pdir, f"part{p}", "orig_ids.npy"))
                                               for p in range(manifest["num_parts"])])).long()
    for rank_results in results:
        for res in rank_results:
            for step in (res if isinstance(res, list) else [res]):
                for level in step["levels"]:
                    for key in ("src", "edge_src", "edge_dst"):
                        level[key] = to_orig[level[key]]
    return results


def _max_rel_err(ours: dict, ref: dict) -> float:
    scale = max(float(g.abs().max()) for g in ref.values())
    return max(float((ours[n] - g).abs().max()) / scale for n, g in ref.items())


def _model(model_cfg: ModelConfig, graph, init: dict, dtype) -> GNN:
    model = GNN(model_cfg, graph.features.shape[1], graph.num_classes).to(dtype)
    model.load_state_dict(init)
    return model


@pytest.mark.timeout(600)
@pytest.mark.parametrize("workers", [1, 3])
def test_fanout_all_one_batch_equals_full_batch_gradients(graph, tmp_path, workers):
    """Fan-out ``all`` with one batch holding every training node: the gradients of PyG on the whole graph."""
    cases = [(ModelConfig(model=m, aggr=a, layers=3, hidden=8, heads=2, dropout=0.3, seed=4),
              SamplingConfig(fanouts=(ALL_NEIGHBOURS,) * 3, batch_size=10**6), "float64") for m, a in MODELS]
    results = run_steps(graph, workers, cases, tmp_path)
    for i, (model_cfg, _, _) in enumerate(cases):
        ref = reference_step(_model(model_cfg, graph, results[0][i]["init"], torch.float64), graph, torch.float64,
                             epoch=STEP_KEY)
        for rank_results in results:
            err = _max_rel_err(rank_results[i]["grads"], ref["grads"])
            assert err < 1e-10, (model_cfg.model, model_cfg.aggr, err)


def _block_reference(model_cfg: ModelConfig, graph, init: dict, per_rank_levels: list) -> dict:
    """Gradients of the step on the sampled blocks, computed with PyG's layers (GCN: its unnormalised
    propagation with the sampled estimator's edge weights) over every worker's blocks."""
    from torch_geometric.nn import GCNConv

    dtype = torch.float64
    ref = ReferenceModel(_model(model_cfg, graph, init, dtype), dtype)
    ref.train()
    x_all = torch.from_numpy(graph.features).to(dtype)
    labels = torch.from_numpy(graph.labels)
    degree = torch.from_numpy(np.bincount(graph.dst, minlength=graph.num_nodes)).to(dtype)
    total, seeds_total = 0.0, sum(levels[-1]["num_dst"] for levels in per_rank_levels)
    for levels in per_rank_levels:
        x = x_all[levels[0]["src"]]
        for i, (conv, level) in enumerate(zip(ref.convs, levels)):
            src, n_dst = level["src"], level["num_dst"]
            pos = {int(v): j for j, v in enumerate(src.tolist())}
            e_src = torch.tensor([pos[int(v)] for v in level["edge_src"].tolist()], dtype=torch.long)
            e_dst = torch.tensor([pos[int(v)] for v in level["edge_dst"].tolist()], dtype=torch.long)
            if model_cfg.model == "gcn":
                sampled = torch.bincount(e_dst, minlength=n_dst).to(dtype)
                d_hat = degree[src] + 1
                weight = degree[src[e_dst]] / sampled[e_dst] / (d_hat[e_dst] * d_hat[e_src]).sqrt()
                loops = torch.arange(n_dst)
                index = torch.stack([torch.cat([e_src, loops]), torch.cat([e_dst, loops])])
                plain = GCNConv(conv.in_channels, conv.out_channels, normalize=False, add_self_loops=False).to(dtype)
                plain.lin, plain.bias = conv.lin, conv.bias  # the reference's own parameters
                x = plain(x, index, torch.cat([weight, 1.0 / d_hat[:n_dst]]))[:n_dst]
            else:
                x = conv((x, x[:n_dst]), torch.stack([e_src, e_dst]))
            if i < len(levels) - 1:
                x = torch.relu(x)
                x = dropout_by_id(x, model_cfg.dropout, src[:n_dst], (model_cfg.seed, STEP_KEY, i), True)
        seeds = levels[-1]["src"][:levels[-1]["num_dst"]]
        total = total + torch.nn.functional.cross_entropy(x, labels[seeds], reduction="sum")
    (total / seeds_total).backward()
    return ref.gradients_by_sarlab_name()


@pytest.mark.timeout(600)
def test_sampled_steps_match_pyg_on_their_blocks_and_samples_do_not_depend_on_workers(graph, tmp_path):
    """Fan-outs 3, 2 with small batches on 1 and 3 workers: (a) each step's gradients are PyG's on the blocks
    the workers sampled; (b) every (layer, node) sampled on both runs got the same neighbours."""
    cases = [(ModelConfig(model=m, aggr=a, layers=2, hidden=8, heads=2, dropout=0.2, seed=3),
              SamplingConfig(fanouts=(3, 2), batch_size=40), "float64") for m, a in MODELS]
    runs = {n: run_steps(graph, n, cases, tmp_path) for n in (1, 3)}
    for results in runs.values():
        for i, (model_cfg, _, _) in enumerate(cases):
            expected = _block_reference(model_cfg, graph, results[0][i]["init"], [r[i]["levels"] for r in results])
            for rank_results in results:
                err = _max_rel_err(rank_results[i]["grads"], expected)
                assert err < 1e-10, (model_cfg.model, model_cfg.aggr, err)

    def samples(results) -> dict:
        out = {}
        for rank_results in results:
            mine: dict = {}
            for layer, level in enumerate(rank_results[0]["levels"]):
                for v in level["src"][:level["num_dst"]].tolist():
                    mine[(layer, v)] = []
                for v, u in zip(level["edge_dst"].tolist(), level["edge_src"].tolist()):
                    mine[(layer, v)].append(u)
            for key, nbrs in mine.items():  # a node two workers both needed got the same sample on both
                assert out.setdefault(key, sorted(nbrs)) == sorted(nbrs)
        return out

    one, three = samples(runs[1]), samples(runs[3])
    common = set(one) & set(three)
    assert len(common) >= 20
    assert all(one[k] == three[k] for k in common)


@pytest.mark.timeout(600)
def test_rounds_give_every_batch_the_reference_samplers_blocks_and_input_rows(graph, tmp_path):
    """3 workers, 4-5 batches each: sampled in rounds of 1, 2 and all batches (2 and 3 layers, a fan-out ``all``),
    every batch's blocks are what a plain-Python sampler draws for its seeds alone, its input rows the graph's
    features and its in-degrees the graph's; the batches split the training nodes."""
    cases = [(ModelConfig(model="sage", layers=len(fanouts), hidden=4, seed=9), SamplingConfig(fanouts, 20), rounds)
             for fanouts, rounds in (((3, 2), 1), ((3, 2), 2), ((3, 2), 0), ((2, ALL_NEIGHBOURS), 3),
                                     ((3, 2, 2), 0))]
    results = run_steps(graph, 3, cases, tmp_path, fn=_sampled_epoch)
    in_nbrs = _in_neighbours(graph)
    in_degree = np.bincount(graph.dst, minlength=graph.num_nodes)
    features = torch.from_numpy(graph.features).to(torch.float64)
    for i, (model_cfg, sampling, _) in enumerate(cases):
        seeds_seen = []
        for rank_results in results:
            assert len(rank_results[i]) >= 3  # several batches, so rounds of 1, 2 and all differ
            for step in rank_results[i]:
                levels = step["levels"]
                seeds = levels[-1]["src"][:levels[-1]["num_dst"]].tolist()
                seeds_seen += seeds
                expected = _py_blocks(in_nbrs, seeds, sampling.fanouts, model_cfg.seed, SAMPLED_EPOCH)
                for level, ref in zip(levels, expected):
                    dst = level["src"][:level["num_dst"]].tolist()
                    assert set(dst) == ref["dst"] and len(dst) == len(ref["dst"])
                    assert sorted(zip(level["edge_dst"].tolist(), level["edge_src"].tolist())) == ref["edges"]
                    assert set(level["src"].tolist()) == ref["src"] and level["src"].numel() == len(ref["src"])
                    assert level["dst_degree"].tolist() == in_degree[dst].tolist()
                inputs = levels[0]["src"]
                assert torch.equal(step["x"], features[inputs])
                assert step["degree"].tolist() == in_degree[inputs.numpy()].tolist()
        assert sorted(seeds_seen) == np.flatnonzero(graph.train_mask).tolist()


@pytest.mark.timeout(600)
def test_train_cli_sampling_mode(tmp_path):
    out = tmp_path / "records.json"
    res = cli_here(["train", "--graph", "synthetic:nodes=1200,degree=6,features=8,classes=3,seed=1", "--workers", "2",
                    "--mode", "sampling", "--fanouts", "4,3", "--batch-size", "100", "--epochs", "3", "--threads", "1",
                    "--json", str(out)])
    assert res.returncode == 0, res.stderr
    records = json.loads(out.read_text())
    assert len(records) == 6 and {r["mode"] for r in records} == {"sampling"}
    assert all(r["steps"] == records[0]["steps"] > 1 and r["fanouts"] == "4,3" for r in records)
    assert all(r["bytes_sent"] > 0 and r["remote_input_rows"] > 0 for r in records)
    last = [r for r in records if r["epoch"] == 2]
    assert last[0]["val_acc"] > 0.5 and last[0]["loss"] < records[0]["loss"]
    bad = cli_here(["train", "--graph", "synthetic:nodes=200,degree=4,features=4,classes=2,seed=1", "--workers", "1",
                    "--mode", "sampling", "--fanouts", "4,3,2", "--epochs", "1"])  # refused before any work
    assert bad.returncode == 2 and "fan-out" in bad.stderr
