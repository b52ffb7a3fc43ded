"""Mini-batch training with distributed neighbour sampling (``--mode sampling``).

Every step, each worker takes a batch of its own training nodes (the seeds) and runs the ordinary model on the
``L``-hop neighbourhood sampled across partitions, one :class:`Block` per layer (DGL's message flow graphs): layer
``l`` reads source rows ``S_l`` and writes destination rows ``S_{l+1}``, the first rows of ``S_l``; every
destination of layer ``l`` has its own sample for that layer. The gradient of

.. math::
    \\mathcal{L} = \\frac{1}{|B|} \\sum_{i \\in B} \\mathrm{CE}(f(x)_i, y_i), \\qquad B = \\bigcup_p B_p

(the batches of all workers in this step) is all-reduced, as DDP does, and Adam steps once per step.

**Rounds.** A node's sample depends on (seed, epoch, layer, node) only (:mod:`sarlab.strategies.sampling`), so the
batches of a round (``round_batches`` consecutive steps; 0: the whole epoch) are sampled together: layer by layer the
union of their frontiers is sampled in one exchange (:meth:`~sarlab.strategies.sampling.DistSampler.sample_level`; the
last layer's frontier, the seeds, needs none), the union of their input rows is fetched in one exchange, and each
batch's blocks are then cut out of the round's tables without communication (:meth:`SampledRound.batch`). The blocks are
the ones a batch sampled alone would get, bit for bit. A round makes ``2 (L - 1) + 1`` blocking exchanges (a mask
and a reply per sampled layer, the fetch's mask) and posts one fetch of rows, however many batches it holds, and
samples and fetches each node once however many of its batches need it; the price is memory: the round's input rows
stay resident while its batches run, and the id maps (:class:`IdSpace`) take 9 bytes per node of the whole graph.
With ``prefetch`` the next round is sampled and its features are in flight while this one computes.

The sampled aggregation keeps each layer's full-graph meaning: ``mean``, ``max`` and GAT's softmax run over the
sampled neighbours; a ``sum`` (GCN's normalised sum) is scaled by ``deg(i) / k_i`` (in-degree over neighbours
sampled), the unbiased estimate of the full sum, and GCN's normalisation uses the full in-degrees. So with fan-out
``all`` and one batch holding every training node, loss and gradients are full-batch training's.

Evaluation runs the trained model on the whole graph with the exact engine (the trainer's
:class:`~sarlab.core.shards.ShardedGraph`), as PyG's and DGL's examples evaluate layer-wise on the full graph.
"""
from __future__ import annotations

import math
import time
from typing import NamedTuple

import torch
import torch.distributed as dist

from sarlab.core import memory
from sarlab.core.aggregate import run_aggregation
from sarlab.core.comm import Comm
from sarlab.core.config import SamplingConfig
from sarlab.core.shards import Shard, ShardedGraph, ShardIndex
from sarlab.data.partition import Partition
from sarlab.data.validate_data import InputError, check_int
from sarlab.nn.model import ModelConfig
from sarlab.strategies import registry
from sarlab.strategies.sampling import DistSampler, FeatureFetch, GraphStore, Level, key_of, node_keys, segments
from sarlab.training.trainer import TrainConfig, Trainer

#: key of the per-epoch shuffle of the training nodes (layers use their number, 0..L-1)
_SHUFFLE = 1 << 20
#: batches sampled together when the trainer is not told (0: one round per epoch)
DEFAULT_ROUND_BATCHES = 0


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
    """One step's blocks (layer 0 first), the global ids of its input rows ``S_0``, its seeds' local rows and where
    its input rows sit in its round's tables."""

    blocks: list
    input_ids: torch.Tensor
    seed_rows: torch.Tensor
    input_rows: torch.Tensor

    def layer(self, index: int) -> Block:
        return self.blocks[index]

    @property
    def num_edges(self) -> int:
        return sum(b.num_edges for b in self.blocks)


class LayerTable(NamedTuple):
    """One layer's samples of a round, over the round's input rows: ``row_of[i]`` is input ``i``'s row in the
    CSR (``-1``: not sampled at this layer), whose ``neighbours`` are input rows too."""

    row_of: torch.Tensor
    rowptr: torch.Tensor
    neighbours: torch.Tensor
    degree: torch.Tensor
    orig: torch.Tensor


class IdSpace:
    """Sets of global ids and their positions in linear time, over two arrays of one entry per node of the graph
    (reused: they are left clean after every call).

    Args:
        num_ids: nodes of the whole graph.
    """

    def __init__(self, num_ids: int):
        self.seen = torch.zeros(num_ids, dtype=torch.bool)
        self.position = torch.full((num_ids,), -1, dtype=torch.long)

    def union(self, parts: list[torch.Tensor]) -> torch.Tensor:
        """The sorted distinct ids of ``parts``."""
        for ids in parts:
            self.seen[ids] = True
        out = torch.nonzero(self.seen).view(-1)
        self.seen[out] = False
        return out

    def tables(self, levels: list[Level], inputs: torch.Tensor) -> list[LayerTable]:
        """``levels`` in positions of the sorted ``inputs`` (which hold every id of every level)."""
        self.position[inputs] = torch.arange(inputs.numel())
        out = []
        for level in levels:
            row_of = torch.full((inputs.numel(),), -1, dtype=torch.long)
            row_of[self.position[level.ids]] = torch.arange(level.ids.numel())
            out.append(LayerTable(row_of, level.rowptr, self.position[level.neighbours], level.degree, level.orig))
        self.position[inputs] = -1
        return out


class SampledRound:
    """The samples of a round of batches (the union of their frontiers, layer by layer) and the features of its
    input rows, in flight until :meth:`wait`.

    Args:
        inputs: sorted global ids of the round's input rows (every batch's ``S_0``, hence every ``S_l``).
        tables: one :class:`LayerTable` per hop (hop 1, the last layer, first).
        fetch: the posted fetch of the inputs' features and in-degrees.
        own_rows: ``(first, last)``: ``inputs[first:last]`` are this worker's nodes.
        node_start: this worker's first global id.
        num_local: its number of nodes.
    """

    def __init__(self, inputs: torch.Tensor, tables: list[LayerTable], fetch: FeatureFetch, own_rows: tuple,
                 node_start: int, num_local: int):
        self.inputs, self.tables, self.fetch = inputs, tables, fetch
        first, last = own_rows
        self.input_of_local = torch.full((num_local,), -1, dtype=torch.long)  # where a seed (local row) sits
        self.input_of_local[inputs[first:last] - node_start] = torch.arange(first, last)
        # scratch of batch(), clean between calls: a row's source slot, whether it is a source yet
        self.slot = torch.full((inputs.numel(),), -1, dtype=torch.long)
        self.seen = torch.zeros(inputs.numel(), dtype=torch.bool)

    def wait(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(features [inputs, F], in-degree [inputs])`` once they have arrived."""
        return self.fetch.wait()

    def batch(self, seed_rows: torch.Tensor, comm: Comm, config) -> MiniBatch:
        """The blocks of the batch of seeds ``seed_rows`` (local rows of this round's seeds): hop by hop, the
        level's sampled in-edges, its sources the level followed by the new sources in id order."""
        slot, seen = self.slot, self.seen
        level = self.input_of_local[seed_rows]  # S_{l+1} as input rows
        blocks: list[Block] = []
        for table in self.tables:
            rows = table.row_of[level]
            assert bool((rows >= 0).all()), "a batch node missing from its round's samples"
            first = table.rowptr[rows]
            edge_dst, offset = segments(table.rowptr[rows + 1] - first)
            neighbours = table.neighbours[first[edge_dst] + offset]
            seen[neighbours] = True
            seen[level] = False
            new = torch.nonzero(seen).view(-1)  # sorted input rows = sorted global ids
            seen[new] = False
            sources = torch.cat([level, new])
            slot[sources] = torch.arange(sources.numel())
            edge_src = slot[neighbours]
            slot[sources] = -1
            block = Block(comm, config, edge_src, edge_dst, level.numel(), sources.numel(), table.degree[rows],
                          table.orig[rows])
            if blocks:
                blocks[0].src_in_degree = block.in_degree  # the sources of the layer above are this one's dsts
            blocks.insert(0, block)
            level = sources
        return MiniBatch(blocks, self.inputs[level], seed_rows, level)


class Scratch:
    """A grow-only buffer: :meth:`take` hands out its first rows, reallocating (with room to grow) when short."""

    def __init__(self):
        self.buffer: torch.Tensor | None = None

    def take(self, rows: int, tail: tuple = (), dtype: torch.dtype = torch.long) -> torch.Tensor:
        buf = self.buffer
        if buf is None or buf.shape[0] < rows or tuple(buf.shape[1:]) != tuple(tail) or buf.dtype != dtype:
            # untouched pages of the headroom are never resident
            self.buffer = buf = torch.empty((rows + rows // 4 + 1, *tail), dtype=dtype)
        return buf[:rows]


def sample_round(sampler: DistSampler, ids: IdSpace, seed_rows: torch.Tensor, fanouts: tuple, seed: int, epoch: int,
                 features: torch.Tensor, buffers: tuple[Scratch, Scratch] | None = None) -> SampledRound:
    """Sample the union of the seeds' (local rows) neighbourhoods and post the fetch of its input rows; every
    worker calls it at once. Hop ``h`` samples layer ``L - h`` with ``fanouts[h - 1]``, keyed by (seed, epoch,
    layer); ``buffers``: where the fetched features and in-degrees land (fresh tensors when not given)."""
    store, layers = sampler.store, len(fanouts)
    frontier = ids.union([seed_rows + store.node_start])
    levels = []
    for hop, fanout in enumerate(fanouts):
        level = sampler.sample_level(frontier, fanout, key_of(seed, epoch, layers - 1 - hop), remote=hop > 0)
        levels.append(level)
        frontier = ids.union([frontier, level.neighbours])
    n = frontier.numel()
    out = (None, None) if buffers is None else \
        (buffers[0].take(n, tuple(features.shape[1:]), features.dtype), buffers[1].take(n))
    fetch = sampler.fetch(frontier, features, *out)
    own = store.bounds(frontier)[store.rank:store.rank + 2]
    return SampledRound(frontier, ids.tables(levels, frontier), fetch, tuple(own), store.node_start, store.num_nodes)


class MiniBatchTrainer(Trainer):
    """A :class:`~sarlab.training.trainer.Trainer` whose epoch is mini-batch steps with neighbour sampling.

    The exact engine's graph (``graph``) serves the all-reduces and the full-graph evaluation; the sampler talks
    over a process group of its own. Every worker builds its trainer at the same time.

    Args:
        graph: the worker's :class:`~sarlab.core.shards.ShardedGraph`.
        part: its partition.
        model_cfg, train_cfg: the model and the optimisation (no strategy: MFG, label augmentation, C&S and the
            others that TrainConfig switches on hook into the full-batch epoch).
        sampling: fan-outs, batch size, prefetch.
        round_batches: batches sampled together (0: the epoch's; see the module docstring).
    """

    def __init__(self, graph: ShardedGraph, part: Partition, model_cfg: ModelConfig, train_cfg: TrainConfig,
                 sampling: SamplingConfig, round_batches: int = DEFAULT_ROUND_BATCHES):
        if registry.configure(train_cfg):  # the strategies a TrainConfig switches on hook into the full-batch epoch
            raise InputError("sampling trains on sampled mini-batches: MFG pruning, label augmentation and "
                             "Correct & Smooth are full-batch options; drop them or use mode sar/sa/oneshot")
        if model_cfg.model not in ("gcn", "sage", "gat"):
            raise InputError(f"sampling supports gcn, sage and gat, not {model_cfg.model!r}")
        if len(sampling.fanouts) != model_cfg.layers:
            raise InputError(f"{len(sampling.fanouts)} fan-out(s) for a {model_cfg.layers}-layer model: give one per "
                             "layer, or 'all'")
        check_int("batches per sampling round (0: all of an epoch's)", round_batches, 0)
        super().__init__(graph, part, model_cfg, train_cfg)
        self.sampling, self.round_batches = sampling, round_batches
        comm = graph.comm
        group = dist.new_group(list(range(comm.world))) if comm.world > 1 else None
        self.sample_comm = Comm(comm.rank, comm.world, group)
        self.sampler = DistSampler(GraphStore.from_partition(part, self.sample_comm), self.sample_comm)
        self.train_rows = torch.nonzero(self.masks["train"]).view(-1)
        counts = torch.zeros(comm.world, dtype=torch.long)
        counts[comm.rank] = self.train_rows.numel()
        graph.all_reduce(counts)
        self.steps = max(1, math.ceil(int(counts.max()) / sampling.batch_size))
        # a round's features land in one of two buffers (the next round's arrive while this one's are read);
        # every batch's input rows are gathered into one more
        self._round_buffers = [(Scratch(), Scratch()), (Scratch(), Scratch())]
        self._rounds_made = 0
        self._batch_rows = Scratch()
        self._ids = IdSpace(int(self.sampler.store.node_starts[-1]))

    def batches(self, epoch: int) -> list[torch.Tensor]:
        """This worker's training rows of ``epoch`` in :attr:`steps` near-equal batches (shuffled by a hash of
        the seed, the epoch and the node's original id)."""
        keys = node_keys(key_of(self.model.cfg.seed, epoch, _SHUFFLE), self.graph.orig_ids[self.train_rows])
        shuffled = self.train_rows[torch.argsort(keys, stable=True)]
        return list(torch.tensor_split(shuffled, self.steps))

    def rounds(self) -> list[range]:
        """The steps of an epoch grouped into sampling rounds."""
        size = self.round_batches or self.steps
        return [range(first, min(first + size, self.steps)) for first in range(0, self.steps, size)]

    def prepare(self, batches: list[torch.Tensor], epoch: int) -> SampledRound:
        """Sample a round of batches (seeds as local rows) and post the fetch of its input features."""
        buffers = self._round_buffers[self._rounds_made % 2]
        self._rounds_made += 1
        return sample_round(self.sampler, self._ids, torch.cat(batches), self.sampling.fanouts, self.model.cfg.seed,
                            epoch, self.x, buffers)

    def batch_inputs(self, sampled: SampledRound, seed_rows: torch.Tensor) -> tuple[MiniBatch, torch.Tensor]:
        """The blocks of one batch of a round whose features have arrived, and its input rows (gathered into a
        buffer that the next batch reuses)."""
        batch = sampled.batch(seed_rows, self.graph.comm, self.graph.config)
        rows, degree = sampled.wait()
        x = torch.index_select(rows, 0, batch.input_rows,
                               out=self._batch_rows.take(batch.input_rows.numel(), tuple(rows.shape[1:]), rows.dtype))
        batch.blocks[0].src_in_degree = degree[batch.input_rows]
        return batch, x

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
        """One epoch of mini-batch steps, round by round (timed, peak memory measured), then optional full-graph
        evaluation."""
        for group in self.opt.param_groups:
            group["lr"] = self.train_cfg.lr_at(epoch)
        self._stats_reset()
        memory.reset_peak()
        t0 = time.perf_counter()
        batches = self.batches(epoch)
        sizes = self.graph.all_reduce(torch.tensor([float(b.numel()) for b in batches], dtype=torch.float64))
        prefetch, rounds = self.sampling.prefetch, self.rounds()
        t_sample = time.perf_counter()
        pending = self.prepare([batches[s] for s in rounds[0]], epoch)
        sample_s, fetch_wait_s = time.perf_counter() - t_sample, 0.0
        totals = torch.zeros(2, dtype=torch.float64)  # summed loss, correct predictions
        # input rows, remote input rows, sampled edges, seeds (per batch, summed); the rounds' input and remote rows
        shape = torch.zeros(6, dtype=torch.float64)
        end = self.graph.node_start + self.graph.num_nodes
        for r, steps in enumerate(rounds):
            sampled = pending
            t_wait = time.perf_counter()
            sampled.wait()
            fetch_wait_s += time.perf_counter() - t_wait
            inputs = sampled.inputs
            remote = float(((inputs < self.graph.node_start) | (inputs >= end)).sum())
            shape[4:] += torch.tensor([inputs.numel(), remote], dtype=torch.float64)
            if prefetch and r + 1 < len(rounds):
                t_sample = time.perf_counter()
                pending = self.prepare([batches[s] for s in rounds[r + 1]], epoch)
                sample_s += time.perf_counter() - t_sample
            for s in steps:
                t_sample = time.perf_counter()
                batch, x = self.batch_inputs(sampled, batches[s])
                sample_s += time.perf_counter() - t_sample
                ids = batch.input_ids
                shape[:4] += torch.tensor([ids.numel(), float(((ids < self.graph.node_start) | (ids >= end)).sum()),
                                           batch.num_edges, batch.seed_rows.numel()], dtype=torch.float64)
                logits, loss_sum, grads = self.batch_gradients(batch, x, float(sizes[s]), epoch * self.steps + s)
                del x, batch
                for p, g in zip(self.params, grads):
                    p.grad = g
                self.opt.step()
                self.opt.zero_grad(set_to_none=True)
                totals += torch.tensor([loss_sum, float((logits.argmax(1) == self.y[batches[s]]).sum())],
                                       dtype=torch.float64)
            del sampled
            if not prefetch and r + 1 < len(rounds):
                t_sample = time.perf_counter()
                pending = self.prepare([batches[s] for s in rounds[r + 1]], epoch)
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
            "rounds": len(rounds), "sample_s": sample_s, "fetch_wait_s": fetch_wait_s,
            "input_rows": float(shape[0]), "remote_input_rows": float(shape[1]), "sampled_edges": float(shape[2]),
            "seeds": float(shape[3]), "round_input_rows": float(shape[4]), "round_remote_rows": float(shape[5]),
        }

    def config_columns(self) -> dict:
        out = super().config_columns()
        out.update(fanouts=self.sampling.label(), batch_size=self.sampling.batch_size,
                   sampling_prefetch=self.sampling.prefetch, round_batches=self.round_batches)
        return out
