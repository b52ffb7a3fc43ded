"""Mini-batch training with distributed neighbour sampling (``--mode sampling``).

Every step, each worker takes a batch of its own training nodes (the seeds), samples their ``L``-hop
neighbourhood across partitions (:class:`~sarlab.sampling.DistSampler`), fetches the input nodes' features from
their owners, and runs the ordinary model on the sampled blocks, one :class:`Block` per layer (DGL's message flow
graphs): layer ``l`` reads source rows ``S_l`` and writes destination rows ``S_{l+1}``, the first rows of
``S_l``; every destination of layer ``l`` has its own sample for that layer. The gradient of

.. math::
    \\mathcal{L} = \\frac{1}{|B|} \\sum_{i \\in B} \\mathrm{CE}(f(x)_i, y_i), \\qquad B = \\bigcup_p B_p

(the batches of all workers in this step) is all-reduced, as DDP does, and Adam steps once per step. With
``prefetch`` the next batch is sampled and its remote features are in flight while this one computes.

The sampled aggregation keeps each layer's full-graph meaning: ``mean``, ``max`` and GAT's softmax run over the
sampled neighbours; a ``sum`` (GCN's normalised sum) is scaled by ``deg(i) / k_i`` (in-degree over neighbours
sampled), the unbiased estimate of the full sum, and GCN's normalisation uses the full in-degrees. So with fan-out
``all`` and one batch holding every training node, loss and gradients are full-batch training's.

Evaluation runs the trained model on the whole graph with the exact engine (the trainer's
:class:`~sarlab.shards.ShardedGraph`), as PyG's and DGL's examples evaluate layer-wise on the full graph.
"""
from __future__ import annotations

import math
import time
from typing import NamedTuple

import torch
import torch.distributed as dist

from . import memory
from .aggregate import run_aggregation
from .comm import Comm
from .config import SamplingConfig
from .nn.model import ModelConfig
from .partition import Partition
from .sampling import DistSampler, FeatureFetch, GraphStore, key_of, node_keys
from .shards import Shard, ShardedGraph, ShardIndex
from .train import TrainConfig, Trainer
from .validate_data import InputError

#: key of the per-epoch shuffle of the training nodes (hops use their layer number, 0..L-1)
_SHUFFLE = 1 << 20


class Block:
    """Layer ``l`` of a mini-batch as the layers see a graph: ``num_src`` source rows, ``num_nodes`` destination
    rows (the first source rows), the sampled in-edges, the full graph's in-degrees.

    Args:
        comm: the trainer's communicator (BatchNorm's all-reduces).
        config: the engine config (kernels, fused attention).
        edge_src, edge_dst: sampled edges as (source row, destination row).
        num_dst, num_src: rows.
        dst_degree: full in-degree of the destinations.
        dst_orig: original ids of the destinations (dropout masks).
    """

    def __init__(self, comm: Comm, config, edge_src: torch.Tensor, edge_dst: torch.Tensor, num_dst: int,
                 num_src: int, dst_degree: torch.Tensor, dst_orig: torch.Tensor):
        shard = Shard(0, edge_src, edge_dst, num_dst, num_src)
        empty = torch.zeros(0, dtype=torch.long)
        # the sampled edges as a one-worker graph: its in-degree is the number of neighbours sampled
        self.local = ShardedGraph(Comm(0, 1), config, num_dst, 0, num_dst, [shard], ShardIndex([empty], [0]),
                                  dst_orig, num_src=num_src)
        self.comm, self.config, self.rank, self.world = comm, config, comm.rank, comm.world
        self.num_nodes, self.num_src, self.orig_ids = num_dst, num_src, dst_orig
        self.in_degree = dst_degree
        self.src_in_degree = dst_degree  # replaced by the sources' degrees once known (see MiniBatch)
        sampled = self.local.in_degree
        self.sum_scale = None if torch.equal(sampled, dst_degree) else \
            dst_degree.to(torch.float64) / sampled.clamp(min=1).to(torch.float64) * (sampled > 0)

    @property
    def num_edges(self) -> int:
        return self.local.local_shard.num_edges

    def dst(self, x: torch.Tensor) -> torch.Tensor:
        return x[:self.num_nodes]

    def layer(self, index: int) -> Block:
        return self

    def aggregate(self, aggregator, src_x: torch.Tensor, dst_x: torch.Tensor | None = None,
                  params: tuple = ()) -> torch.Tensor:
        """Aggregate over the sampled in-edges; a ``sum`` is scaled by ``deg / sampled`` (module docstring)."""
        out = run_aggregation(self.local, aggregator, src_x, dst_x, tuple(params))
        if self.sum_scale is not None and getattr(aggregator, "reduce", None) == "sum":
            out = out * self.sum_scale.to(out.dtype).view(-1, *([1] * (out.dim() - 1)))
        return out

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.comm.all_reduce(tensor)


class MiniBatch(NamedTuple):
    """One step's blocks (layer 0 first), the global ids of its input rows ``S_0`` and its seeds' local rows."""

    blocks: list
    input_ids: torch.Tensor
    seed_rows: torch.Tensor

    def layer(self, index: int) -> Block:
        return self.blocks[index]

    @property
    def num_edges(self) -> int:
        return sum(b.num_edges for b in self.blocks)


def _positions(sources: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Position of every id in ``sources`` (all present, ``sources`` without repeats)."""
    ordered, order = torch.sort(sources)
    return order[torch.searchsorted(ordered, ids)]


def sample_batch(sampler: DistSampler, comm: Comm, config, seed_rows: torch.Tensor, fanouts: tuple,
                 seed: int, epoch: int) -> MiniBatch:
    """Sample the blocks of the seeds (local rows); every worker calls it at once (hop ``h`` samples layer
    ``L - h`` with ``fanouts[h - 1]``, keyed by (seed, epoch, layer))."""
    layers = len(fanouts)
    level = seed_rows + sampler.store.node_start  # S_{l+1}, global ids
    blocks: list[Block] = []
    for hop, fanout in enumerate(fanouts):
        layer = layers - 1 - hop
        sample = sampler.hop(level, fanout, key_of(seed, epoch, layer))
        new = sample.edge_src[~torch.isin(sample.edge_src, level)]
        sources = torch.cat([level, torch.unique(new)])
        block = Block(comm, config, _positions(sources, sample.edge_src), sample.edge_dst, level.numel(),
                      sources.numel(), sample.degree, sample.orig)
        if blocks:
            blocks[0].src_in_degree = sample.degree  # the sources of the layer above are this layer's destinations
        blocks.insert(0, block)
        level = sources
    return MiniBatch(blocks, level, seed_rows)


class MiniBatchTrainer(Trainer):
    """A :class:`~sarlab.train.Trainer` whose epoch is mini-batch steps with neighbour sampling.

    The exact engine's graph (``graph``) serves the all-reduces and the full-graph evaluation; the sampler talks
    over a process group of its own. Every worker builds its trainer at the same time.

    Args:
        graph: the worker's :class:`~sarlab.shards.ShardedGraph`.
        part: its partition.
        model_cfg, train_cfg: the model and the optimisation (no MFG, label augmentation or C&S).
        sampling: fan-outs, batch size, prefetch.
    """

    def __init__(self, graph: ShardedGraph, part: Partition, model_cfg: ModelConfig, train_cfg: TrainConfig,
                 sampling: SamplingConfig):
        if train_cfg.mfg or train_cfg.label_aug or train_cfg.correct_smooth:
            raise InputError("sampling trains on sampled mini-batches: MFG pruning, label augmentation and "
                             "Correct & Smooth are full-batch options; drop them or use mode sar/sa/oneshot")
        if model_cfg.model not in ("gcn", "sage", "gat"):
            raise InputError(f"sampling supports gcn, sage and gat, not {model_cfg.model!r}")
        if len(sampling.fanouts) != model_cfg.layers:
            raise InputError(f"{len(sampling.fanouts)} fan-out(s) for a {model_cfg.layers}-layer model: give one per "
                             "layer, or 'all'")
        super().__init__(graph, part, model_cfg, train_cfg)
        self.sampling = sampling
        comm = graph.comm
        group = dist.new_group(list(range(comm.world))) if comm.world > 1 else None
        self.sample_comm = Comm(comm.rank, comm.world, group)
        self.sampler = DistSampler(GraphStore.from_partition(part, self.sample_comm), self.sample_comm)
        self.train_rows = torch.nonzero(self.masks["train"]).view(-1)
        counts = torch.zeros(comm.world, dtype=torch.long)
        counts[comm.rank] = self.train_rows.numel()
        graph.all_reduce(counts)
        self.steps = max(1, math.ceil(int(counts.max()) / sampling.batch_size))

    def batches(self, epoch: int) -> list[torch.Tensor]:
        """This worker's training rows of ``epoch`` in :attr:`steps` near-equal batches (shuffled by a hash of
        the seed, the epoch and the node's original id)."""
        keys = node_keys(key_of(self.model.cfg.seed, epoch, _SHUFFLE), self.graph.orig_ids[self.train_rows])
        shuffled = self.train_rows[torch.argsort(keys, stable=True)]
        return list(torch.tensor_split(shuffled, self.steps))

    def prepare(self, seed_rows: torch.Tensor, epoch: int) -> tuple[MiniBatch, FeatureFetch]:
        """Sample a batch and post the fetch of its input features."""
        batch = sample_batch(self.sampler, self.graph.comm, self.graph.config, seed_rows, self.sampling.fanouts,
                             self.model.cfg.seed, epoch)
        return batch, self.sampler.fetch(batch.input_ids, self.x)

    def batch_gradients(self, batch: MiniBatch, x: torch.Tensor, num_seeds: float, key: int):
        """Forward and backward of one step: (logits of the seeds, this worker's summed loss, all-reduced grads of
        the loss summed over the step's seeds of all workers over ``num_seeds``)."""
        self.model.train()
        logits = self.model(batch, x, key)
        loss_sum = torch.nn.functional.cross_entropy(logits, self.y[batch.seed_rows], reduction="sum")
        grads = torch.autograd.grad(loss_sum / max(num_seeds, 1.0), self.params, allow_unused=True)
        flat = torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1) for p, g in zip(self.params, grads)])
        self.graph.all_reduce(flat)
        reduced, offset = [], 0
        for p in self.params:
            reduced.append(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        return logits.detach(), float(loss_sum.detach()), reduced

    def _stats_reset(self) -> None:
        self.graph.comm.stats.reset()
        self.sample_comm.stats.reset()

    def step(self, epoch: int, baseline: int) -> dict:
        """One epoch of mini-batch steps (timed, peak memory measured), then optional full-graph evaluation."""
        for group in self.opt.param_groups:
            group["lr"] = self.train_cfg.lr_at(epoch)
        self._stats_reset()
        memory.reset_peak()
        t0 = time.perf_counter()
        batches = self.batches(epoch)
        sizes = self.graph.all_reduce(torch.tensor([float(b.numel()) for b in batches], dtype=torch.float64))
        prefetch = self.sampling.prefetch
        t_sample = time.perf_counter()
        pending = self.prepare(batches[0], epoch)
        sample_s, fetch_wait_s = time.perf_counter() - t_sample, 0.0
        totals = torch.zeros(2, dtype=torch.float64)  # summed loss, correct predictions
        shape = torch.zeros(4, dtype=torch.float64)  # input rows, remote input rows, sampled edges, seeds
        for s in range(self.steps):
            batch, fetch = pending
            t_wait = time.perf_counter()
            x, degree = fetch.wait()
            fetch_wait_s += time.perf_counter() - t_wait
            batch.blocks[0].src_in_degree = degree
            owned = self.sampler.store.owner(batch.input_ids) == self.graph.rank
            shape += torch.tensor([batch.input_ids.numel(), float((~owned).sum()), batch.num_edges,
                                   batch.seed_rows.numel()], dtype=torch.float64)
            if prefetch and s + 1 < self.steps:
                t_sample = time.perf_counter()
                pending = self.prepare(batches[s + 1], epoch)
                sample_s += time.perf_counter() - t_sample
            logits, loss_sum, grads = self.batch_gradients(batch, x, float(sizes[s]), epoch * self.steps + s)
            del x, batch
            for p, g in zip(self.params, grads):
                p.grad = g
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            totals += torch.tensor([loss_sum, float((logits.argmax(1) == self.y[batches[s]]).sum())],
                                   dtype=torch.float64)
            if not prefetch and s + 1 < self.steps:
                t_sample = time.perf_counter()
                pending = self.prepare(batches[s + 1], epoch)
                sample_s += time.perf_counter() - t_sample
        epoch_time = time.perf_counter() - t0
        peak = memory.peak_bytes()
        waits = self.graph.comm.stats.wait_s + self.sample_comm.stats.wait_s
        sent = self.graph.comm.stats.bytes_sent + self.sample_comm.stats.bytes_sent
        recv = self.graph.comm.stats.bytes_recv + self.sample_comm.stats.bytes_recv
        self.graph.all_reduce(totals)
        num_train = float(self.global_counts[0])
        val_acc = test_acc = float("nan")
        every = self.train_cfg.eval_every
        if every and (epoch + 1) % every == 0:
            _, val_acc, test_acc = self.accuracy(self.eval_logits(epoch))
        cfg = self.model.cfg
        return {
            "mode": "sampling", "model": cfg.model, "workers": self.graph.world, "rank": self.graph.rank,
            "epoch": epoch, "epoch_time_s": epoch_time, "compute_s": epoch_time - waits, "comm_wait_s": waits,
            "bytes_sent": sent, "bytes_recv": recv, "peak_mem_bytes": peak, "baseline_mem_bytes": baseline,
            "loss": float(totals[0]) / max(num_train, 1.0), "train_acc": float(totals[1]) / max(num_train, 1.0),
            "val_acc": val_acc, "test_acc": test_acc, "lr": self.train_cfg.lr_at(epoch), "steps": self.steps,
            "sample_s": sample_s, "fetch_wait_s": fetch_wait_s, "input_rows": float(shape[0]),
            "remote_input_rows": float(shape[1]), "sampled_edges": float(shape[2]), "seeds": float(shape[3]),
        }

    def config_columns(self) -> dict:
        out = super().config_columns()
        out.update(fanouts=self.sampling.label(), batch_size=self.sampling.batch_size,
                   sampling_prefetch=self.sampling.prefetch)
        return out
