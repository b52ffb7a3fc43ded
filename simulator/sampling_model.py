"""Mini-batch training with distributed neighbour sampling (``--mode sampling``), priced without events.

**Sampled sizes.** A graph with ``n_j`` nodes of in-degree ``d_j`` (``n = sum n_j``, ``E = sum n_j d_j``
directed edges, stored in both directions). A step starts from ``B`` seeds per worker, training nodes drawn
uniformly, so a node of class ``j`` is a seed with probability ``pi_L(j) = B / n``. Hop ``h`` (fan-out ``k``,
``all`` = every in-edge) samples ``c_j = min(k, d_j)`` in-edges of every node of the level above, so

.. math::
    m_h = \\sum_j n_j\\, \\pi(j)\\, c_j, \\qquad
    \\pi'(j) = 1 - \\big(1 - \\pi(j)\\big)\\Big(1 - \\frac{d_j}{E}\\Big)^{m_h}, \\qquad |S| = \\sum_j n_j \\pi'(j)

(an edge's source is node ``v`` with probability ``d_v / E`` on a symmetric graph, so hubs join first). Every hop
samples the whole level again, and a node that an earlier hop added along one (tree) edge draws that edge again
with probability ``c_j / d_j`` from its own end, and its parent draws it with the frontier's mean ``c / d``
(weighted by draws): those draws add nothing, so only ``m_h`` minus them enter :math:`\\pi'`; the rest are
treated as independent (within 2 % of a brute-force sampler on configuration-model graphs, see
``tests/test_simulator_strategies.py``; an upper bound where communities repeat sources). The new level holds
the old one plus the sources sampled, as :func:`sarlab.minibatch.sample_batch` builds it.

**Remote rows.** Of part ``p``'s in-edges a fraction ``a_p = e_pp / in_p`` has a local source; of the other
parts' in-edges a fraction ``b_p = sum_{q != p} e_qp / sum_{q != p} in_q`` has its source in ``p``. A hop whose
draws start from own nodes with weight ``w_own`` lands on an own node with probability ``x = (w_own a_p +
w_other b_p) / m_h`` (a two-state chain over the partition's edge matrix); own (a share ``f = n_p / n`` of every
degree class) and other nodes are tracked apart in :math:`\\pi`, so a side the levels have mostly taken adds
fewer new rows. Remote frontier nodes are sampled by their owners (one request and one reply per peer and
hop), remote input rows are fetched from them.

**A step** (``sarlab/minibatch.py``): sample ``L`` hops (blocking all-to-alls), post the fetch of the input
features, compute forward and backward of the ``L`` blocks (the layers' :class:`~simulator.layers.LayerPlan`
ops on ``|S_{l+1}|`` destinations, ``|S_l|`` sources and ``m`` sampled edges), all-reduce the gradients, Adam.
With prefetch the next batch is sampled and its features posted before this one computes, so the transfer
overlaps the compute: ``t_step = t_sample + t_request + t_compute + t_allreduce + max(0, t_transfer -
t_compute)``; without, the transfer is waited for in full. An epoch is ``ceil(max_p T_p / B)`` steps, ``T_p`` the
training nodes of part ``p``, and every worker waits for the slowest at each all-to-all.

**The sampler's own work** (hashing, Floyd's draws, sorts, index maps, building the blocks: Python-level torch
calls on small tensors, which no op family of the profile describes) is :class:`SamplerCosts`: seconds per hop,
peer, sampled edge and added row, plus a step's unpriced dispatch (``step_s``) and, on several workers, the wall
time each blocking call loses waiting for a peer that is not running (``sync_s``), fitted to real sampling epochs
of a calibration graph (:mod:`simulator.sampling_fit`), shipped in ``profiles/sampler/epyc-2core.json``, and
scaled with the profile's ``compute_scale`` (single-threaded: more cores do not speed it up).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from simulator.costs import CostModel, allreduce_seconds
from simulator.layers import layer_plans
from simulator.model import ModelSpec
from simulator.ops import Op, flatten_grads, loss_bwd, loss_fwd, optimizer_step
from simulator.profile import Link, Profile
from simulator.runspec import RunSpec, resolve_placement
from simulator.workload import PartitionStats

#: where the shipped sampler costs live (:func:`load_sampler_costs`)
SAMPLER_PROFILE = Path(__file__).parent / "profiles" / "sampler" / "epyc-2core.json"


@dataclass(frozen=True)
class SamplerCosts:
    """Seconds of the sampler's own work (hashing, Floyd's draws, sorts, index maps, building the blocks),
    outside the layers' ops and the messages:

    .. math::
        t_{sample} = \\sum_{hops} \\big(t_{hop} + (N-1)\\,t_{peer} + m_h t_{edge} + |S_{new}| t_{row}\\big)

    Args:
        hop_s: fixed seconds of one hop and its block (its torch calls).
        peer_s: seconds per peer and hop (grouping, packing, per-peer slices).
        edge_s: seconds per sampled edge.
        row_s: seconds per row a hop adds.
        step_s: seconds of a step beyond its priced ops (Python and autograd dispatch, batch split, metrics).
        sync_s: wall seconds each blocking exchange or all-reduce of a step costs beyond its message time
            (waiting for a peer that the OS has not scheduled yet; 0 on one worker).
        compute_scale: the ``compute_scale`` of the profile of the machine they were measured on (a profile with
            another scale, e.g. a resource of another speed, scales them by the ratio).
        source: how the numbers were obtained.
    """

    hop_s: float = 70 * 12e-6
    peer_s: float = 10 * 12e-6
    edge_s: float = 0.4e-6
    row_s: float = 0.4e-6
    step_s: float = 60 * 12e-6
    sync_s: float = 0.0
    compute_scale: float = 1.0
    source: str = "counted: ~70 torch calls per hop, ~10 per peer at 12 us each; ~0.4 us per edge and row (assumed)"

    def seconds(self, sizes: SampledSizes, workers: int) -> float:
        """The sampler's seconds for one batch."""
        new_rows = np.maximum(sizes.rows[:-1] - sizes.rows[1:], 0.0)
        hops = len(sizes.edges)
        return float(hops * (self.hop_s + (workers - 1) * self.peer_s) + self.edge_s * sizes.edges.sum()
                     + self.row_s * new_rows.sum())


def load_sampler_costs(path: str | Path | None = None) -> SamplerCosts:
    """Sampler costs from a JSON file (default :data:`SAMPLER_PROFILE`; the counted defaults without one)."""
    target = Path(path) if path is not None else SAMPLER_PROFILE
    if not target.exists():
        if path is not None:
            raise FileNotFoundError(f"sampler cost file {target} does not exist")
        return SamplerCosts()
    data = json.loads(target.read_text())
    keys = ("hop_s", "peer_s", "edge_s", "row_s", "step_s", "sync_s", "compute_scale", "source")
    return SamplerCosts(**{k: data[k] for k in keys if k in data})


@dataclass(frozen=True)
class SamplingSpec:
    """``--mode sampling``'s settings (the engine's ``SamplingConfig``; the simulator does not import it).

    Args:
        fanouts: neighbours per node, one per layer, hop 1 (the last layer) first; -1 = all.
        batch_size: seeds per worker and step.
        prefetch: sample the next batch and post its feature fetch before computing this one.
    """

    fanouts: tuple[int, ...] = (15, 10, 5)
    batch_size: int = 1024
    prefetch: bool = True

    def __post_init__(self) -> None:
        if not self.fanouts or any(f < 1 and f != -1 for f in self.fanouts):
            raise ValueError(f"fan-outs must be >= 1 or -1 (all), got {self.fanouts!r}")
        if self.batch_size < 1:
            raise ValueError(f"batch size must be >= 1, got {self.batch_size}")


def parse_fanouts(text: str, layers: int) -> tuple[int, ...]:
    """``"15,10"`` or ``"all"`` as one fan-out per layer (-1 = all), hop 1 first; one value is repeated."""
    items = [t.strip().lower() for t in str(text).split(",") if t.strip()]
    try:
        values = [-1 if t in ("all", "-1") else int(t) for t in items]
    except ValueError:
        raise ValueError(f"fan-outs {text!r}: write positive integers or 'all', e.g. 15,10") from None
    if len(values) == 1:
        values = values * layers
    if len(values) != layers:
        raise ValueError(f"{len(values)} fan-outs {text!r} for a {layers}-layer model: give one per layer or one")
    return tuple(values)


@dataclass(frozen=True)
class DegreeDistribution:
    """In-degrees as a histogram: ``counts[j]`` nodes have in-degree ``degrees[j]``."""

    degrees: np.ndarray
    counts: np.ndarray

    @classmethod
    def from_degrees(cls, degrees: np.ndarray) -> DegreeDistribution:
        """The histogram of one in-degree per node."""
        values, counts = np.unique(np.asarray(degrees, dtype=np.int64), return_counts=True)
        return cls(values.astype(np.float64), counts.astype(np.float64))

    @classmethod
    def power_law(cls, nodes: int, mean_degree: float, power: float = 2.5, seed: int = 0) -> DegreeDistribution:
        """An assumed law where no graph is at hand: Poisson degrees with power-law means ``theta ~ 1 +
        Pareto(power - 1)`` scaled to ``mean_degree`` (the law of ``sarlab.graphs.synthetic_graph``'s weights),
        drawn for ``min(nodes, 200000)`` nodes and scaled to ``nodes``."""
        rng = np.random.default_rng(seed)
        m = int(min(nodes, 200_000))
        theta = np.minimum(1.0 + rng.pareto(max(power - 1.0, 0.1), size=m), nodes / 10.0 + 1.0)
        degrees = rng.poisson(mean_degree * theta / theta.mean())
        hist = cls.from_degrees(degrees)
        return cls(hist.degrees, hist.counts * (nodes / m))

    @property
    def nodes(self) -> float:
        return float(self.counts.sum())

    @property
    def edges(self) -> float:
        return float((self.counts * self.degrees).sum())


def degrees_from_partition(path: str | Path) -> DegreeDistribution:
    """In-degrees of every node of a ``sarlab partition`` directory (each part's ``edge_dst.npy``, read with
    numpy: the destination rows of its in-edges)."""
    path = Path(path)
    parts = sorted(p for p in path.glob("part*") if p.is_dir())
    if not parts:
        raise FileNotFoundError(f"{path} has no part*/ directories; is it a `sarlab partition` directory?")
    degrees = []
    for part in parts:
        dst = np.load(part / "edge_dst.npy", allow_pickle=False)
        rows = len(np.load(part / "orig_ids.npy", allow_pickle=False, mmap_mode="r"))
        degrees.append(np.bincount(dst.astype(np.int64), minlength=rows))
    return DegreeDistribution.from_degrees(np.concatenate(degrees))


def train_nodes_per_part(stats: PartitionStats, path: str | Path | None = None) -> np.ndarray:
    """Training nodes of every part: counted in the partition's ``train_mask.npy`` files, else ``train_nodes``
    spread in proportion to the parts' sizes (all nodes when the statistics know no training nodes)."""
    if path is not None and Path(path).is_dir():
        parts = sorted(p for p in Path(path).glob("part*") if p.is_dir())
        if len(parts) == stats.num_parts:
            return np.array([float(np.load(p / "train_mask.npy", allow_pickle=False).sum()) for p in parts])
    total = stats.train_nodes or stats.num_nodes
    return total * stats.nodes_per_part / max(float(stats.nodes_per_part.sum()), 1.0)


@dataclass(frozen=True)
class SampledSizes:
    """Expected sizes of one worker's mini-batch: ``rows[l]`` = ``|S_l|`` (``rows[L]`` the seeds), ``edges[l]``
    sampled edges of layer ``l``, ``local[l]`` the fraction of ``S_l`` owned by the worker."""

    rows: np.ndarray
    edges: np.ndarray
    local: np.ndarray

    @property
    def remote_inputs(self) -> float:
        """Input rows fetched from other workers."""
        return float(self.rows[0] * (1.0 - self.local[0]))


def sampled_sizes(deg: DegreeDistribution, seeds: float, fanouts: tuple[int, ...], local_keep: float = 1.0,
                  remote_in: float = 0.0, local_share: float = 1.0) -> SampledSizes:
    """Expected ``|S_l|``, sampled edges and local fractions (module docstring).

    The worker's own nodes (a share ``f`` of every degree class) and the others' are tracked apart: a draw lands
    on the own side with the chain's probability and then on a given own node of degree ``d`` with probability
    ``d / (f E)``, so a side that the levels have mostly taken already adds fewer new rows.

    Args:
        deg: the graph's in-degree histogram.
        seeds: seeds per step ``B`` (the worker's own nodes).
        fanouts: hop 1 (the last layer) first, -1 = all.
        local_keep: ``a_p``, local fraction of a local node's in-edges.
        remote_in: ``b_p``, fraction of a remote node's in-edges whose source is local.
        local_share: ``f = n_p / n``, the worker's share of the nodes (1 = one worker).
    """
    d, n_j, E = deg.degrees, deg.counts, max(deg.edges, 1.0)
    layers = len(fanouts)
    f = min(max(local_share, 1e-12), 1.0)
    sides = (f, 1.0 - f)  # own nodes, the others'
    pis = [np.full_like(d, min(1.0, seeds / max(deg.nodes * f, 1.0))), np.zeros_like(d)]
    seeded = [pi.copy() for pi in pis]
    rows, edges, local = np.zeros(layers + 1), np.zeros(layers), np.ones(layers + 1)
    rows[layers] = float((n_j * f * pis[0]).sum())
    for hop, k in enumerate(fanouts):
        layer = layers - 1 - hop
        c = d if k == -1 else np.minimum(d, k)
        draw = c / np.maximum(d, 1.0)  # chance that a given in-edge is drawn
        weights = [n_j * share * pi * c for share, pi in zip(sides, pis)]
        m_side = [float(w.sum()) for w in weights]
        m = sum(m_side)
        added = sum(float((n_j * share * (pi - s0) * draw).sum()) for share, pi, s0 in zip(sides, pis, seeded))
        tree = sum(float((n_j * share * (pi - s0)).sum()) for share, pi, s0 in zip(sides, pis, seeded))
        back = added + tree * sum(float((w * draw).sum()) for w in weights) / max(m, 1e-30)
        fresh = max(m - back, 0.0)
        x = (m_side[0] * local_keep + m_side[1] * remote_in) / max(m, 1e-30)  # a draw's source is own
        for i, (share, target) in enumerate(zip(sides, (x, 1.0 - x))):
            if share > 0 and target > 0:
                log_miss = np.log1p(-np.minimum(d / (E * share), 1.0 - 1e-15))
                pis[i] = 1.0 - (1.0 - pis[i]) * np.exp(fresh * target * log_miss)
        own, other = (float((n_j * share * pi).sum()) for share, pi in zip(sides, pis))
        rows[layer], edges[layer], local[layer] = own + other, m, own / max(own + other, 1e-12)
    return SampledSizes(rows, edges, local)


def chain_of_part(stats: PartitionStats, p: int) -> tuple[float, float]:
    """``(a_p, b_p)`` of part ``p`` from the partition's edge matrix (module docstring)."""
    e = np.asarray(stats.edges_per_shard, dtype=np.float64)
    inn = e.sum(axis=1)
    a = float(e[p, p] / inn[p]) if inn[p] > 0 else 1.0
    others = [q for q in range(stats.num_parts) if q != p]
    denom = float(inn[others].sum()) if others else 0.0
    b = float(e[others, p].sum() / denom) if denom > 0 else 0.0
    return a, b


def exchange_seconds(profile: Profile, link: Link, workers: int, recv_bytes: float) -> tuple[float, float]:
    """(CPU seconds, wire seconds) of one all-to-all exchange call in which a worker receives ``recv_bytes``
    from its ``N - 1`` peers: the call, ``2 (N-1)`` ops posted and waited; latency, one gap per message and the
    bytes through the receive channel."""
    if workers <= 1:
        return 0.0, 0.0
    ops = 2 * (workers - 1)
    cpu = profile.p2p_call_s + ops * (profile.p2p_op_s + profile.p2p_wait_s)
    wire = link.latency_s + (workers - 1) * link.gap_s + recv_bytes / link.bandwidth_Bps
    return cpu, wire


class StepMessages(NamedTuple):
    """A step's messages for one worker: CPU seconds of the calls, wire seconds of the blocking exchanges, wire
    seconds of the feature transfer (overlapped with compute under prefetch), bytes received, blocking calls."""

    cpu: float
    wire: float
    transfer: float
    nbytes: float
    blocking: int


def messages(profile: Profile, link: Link, workers: int, sizes: SampledSizes, fanouts: tuple[int, ...],
             row_bytes: float) -> StepMessages:
    """Per hop: sizes, requests and replies (fan-out ``all``: metadata and neighbours apart) of the remote frontier
    nodes; the feature fetch: sizes and ids (blocking), then rows and degrees (posted)."""
    cpu = wire = nbytes = 0.0
    blocking = 0
    layers = len(fanouts)
    calls = []
    for hop, k in enumerate(fanouts):
        layer = layers - 1 - hop
        remote = sizes.rows[layer + 1] * (1.0 - sizes.local[layer + 1])
        per_node = 8.0 * (3 + (sizes.edges[layer] / max(sizes.rows[layer + 1], 1.0) if k == -1 else k))
        calls += [8.0 * (workers - 1), 8.0 * remote, per_node * remote] + ([0.0] if k == -1 else [])
    calls += [8.0 * (workers - 1), 8.0 * sizes.remote_inputs]
    for recv in calls:
        c, w = exchange_seconds(profile, link, workers, recv)
        cpu, wire, nbytes, blocking = cpu + c, wire + w, nbytes + recv, blocking + 1
    c1, transfer = exchange_seconds(profile, link, workers, sizes.remote_inputs * row_bytes)
    c2, w2 = exchange_seconds(profile, link, workers, sizes.remote_inputs * 8.0)
    nbytes += sizes.remote_inputs * (row_bytes + 8.0)
    return StepMessages(cpu + c1 + c2, wire, transfer + w2, nbytes, blocking + 1)


@dataclass(frozen=True)
class SamplingEpoch:
    """A predicted sampling epoch (the slowest worker's step times ``steps``) and its parts, per worker."""

    workers: int
    steps: int
    epoch_time_s: float
    compute_s: np.ndarray
    comm_wait_s: np.ndarray
    bytes_sent: np.ndarray
    bytes_recv: np.ndarray
    peak_above_baseline_bytes: np.ndarray
    baseline_bytes: np.ndarray
    sizes: list[SampledSizes]
    threads: float


def step_ops(model: ModelSpec, stats: PartitionStats, sizes: SampledSizes) -> list[Op]:
    """The layers' forward and backward ops on the sampled blocks, loss, gradient flattening and Adam."""
    plans = [p.in_run("oneshot", 1) for p in layer_plans(model, stats.feature_dim, stats.num_classes)]
    b = model.bytes_per_element
    ops: list[Op] = [Op("elementwise", 2.0 * sizes.rows[0] * stats.feature_dim * b)]  # input assembly
    for layer, plan in enumerate(plans):
        src, dst, m = sizes.rows[layer], sizes.rows[layer + 1], sizes.edges[layer]
        tail = plan.tail_fwd(dst)
        ops += plan.pre_fwd(src) + plan.agg_init(dst) + plan.shard_fwd(m, dst, src) + plan.finalize(dst)
        ops += plan.post_fwd(dst) + tail[0] + tail[1] + tail[2]
        if plan.kind == "gcn":  # deg / sampled scaling of the sum
            ops.append(Op("elementwise", 2.0 * dst * plan.width * b))
        back = plan.tail_bwd(dst)
        ops += back[0] + back[1] + plan.post_bwd(dst)
        if plan.records:
            ops += plan.agg_bwd_setup(dst) + plan.shard_bwd(m, dst, src, in_place=True)
        ops += plan.pre_bwd(src)
    seeds, classes = sizes.rows[-1], stats.num_classes
    params = sum(p.params for p in plans)
    ops += loss_fwd(seeds, classes, b) + loss_bwd(seeds, seeds, classes, b)
    ops += flatten_grads(params, b) + optimizer_step(params, b)
    return ops


def simulate_sampling_epoch(stats: PartitionStats, model: ModelSpec, sampling: SamplingSpec, profile: Profile,
                            degrees: DegreeDistribution | None = None, train_per_part: np.ndarray | None = None,
                            run: RunSpec | None = None, sampler: SamplerCosts | None = None) -> SamplingEpoch:
    """Predict one ``--mode sampling`` epoch on ``stats.num_parts`` workers.

    Args:
        stats: partition statistics.
        model: the model (``sampling.fanouts`` must have one entry per layer).
        sampling: fan-outs, batch size, prefetch.
        profile: the machine profile.
        degrees: the in-degree histogram (default: :meth:`DegreeDistribution.power_law` at the mean degree).
        train_per_part: training nodes per part (default :func:`train_nodes_per_part`).
        run: placement (threads, workers per host); its mode is ignored.
        sampler: the sampler's own costs (default :func:`load_sampler_costs`).
    """
    sampler = sampler or load_sampler_costs()
    if len(sampling.fanouts) != model.layers:
        raise ValueError(f"{len(sampling.fanouts)} fan-outs for a {model.layers}-layer model")
    N = stats.num_parts
    deg = degrees or DegreeDistribution.power_law(stats.num_nodes, stats.num_edges / max(stats.num_nodes, 1))
    train = train_nodes_per_part(stats) if train_per_part is None else np.asarray(train_per_part, dtype=float)
    steps = max(1, math.ceil(float(train.max()) / sampling.batch_size))
    place = resolve_placement(profile, N, run or RunSpec())
    link = profile.intra_host if place.workers_per_host >= N else profile.inter_host
    b, F = model.bytes_per_element, stats.feature_dim
    plans = layer_plans(model, F, stats.num_classes)
    params = sum(p.params for p in plans)
    step_time = np.zeros(N)
    compute, sent, peak = (np.zeros(N) for _ in range(3))
    all_sizes = []
    for p in range(N):
        a, bb = chain_of_part(stats, p)
        share = float(stats.nodes_per_part[p]) / max(float(stats.nodes_per_part.sum()), 1.0)
        sizes = sampled_sizes(deg, float(train[p]) / steps, sampling.fanouts, a, bb, share)
        all_sizes.append(sizes)
        act = float(sizes.rows.max()) * max(max(pl.in_dim, pl.out_dim) for pl in plans) * b
        costs = CostModel(profile, place.threads, model.dtype, profile.scale_at(act))
        work = step_ops(model, stats, sizes)
        t_compute = float(np.sum(costs.seconds(work)))
        t_sampler = sampler.seconds(sizes, N) * profile.compute_scale / sampler.compute_scale
        msg = messages(profile, link, N, sizes, sampling.fanouts, F * b)
        grad_bytes = params * b
        bn = 3 * sum(1 for pl in plans if pl.hidden and pl.batchnorm)  # two all-reduces forward, one backward
        t_allreduce = allreduce_seconds(link, grad_bytes, N) + bn * allreduce_seconds(link, 16.0 * model.hidden, N)
        t_sampler += sampler.step_s * profile.compute_scale / sampler.compute_scale
        cpu = t_compute + t_sampler + msg.cpu
        if place.core_slots is not None:  # co-located workers share the host's cores
            k_run = place.workers_per_host
            eta = costs.share_eff(work, place.core_slots)
            cpu = cpu * k_run / (1.0 + (min(k_run, place.core_slots) - 1.0) * eta)
            cpu += 2.0 * msg.nbytes * profile.p2p_cpu_s_per_byte * k_run / place.core_slots
        hidden = cpu * t_compute / max(t_compute + t_sampler + msg.cpu, 1e-30) if sampling.prefetch else 0.0
        syncs = (msg.blocking + 1 + bn) * sampler.sync_s if N > 1 else 0.0
        t_wait = msg.wire + t_allreduce + max(0.0, msg.transfer - hidden) + syncs
        step_time[p] = cpu + t_wait
        compute[p], sent[p] = cpu * steps, (msg.nbytes + grad_bytes * 2) * steps
        kept = sum(sizes.rows[i] * (pl.in_dim + 2 * pl.out_dim + pl.agg_width) for i, pl in enumerate(plans))
        edge_bytes = 8.0 * 6 * float(sizes.edges.sum())
        features = (2.0 if sampling.prefetch else 1.0) * sizes.rows[0] * F * b
        peak[p] = 2.0 * kept * b + edge_bytes + features + 4.0 * params * b
    epoch = float(step_time.max()) * steps
    baseline = (stats.nodes_per_part * (F * b + 24.0) + stats.edges_per_shard.sum(axis=1) * 8.0 * 4).astype(float)
    return SamplingEpoch(N, steps, epoch, compute, epoch - compute, sent, sent.copy(), peak, baseline,
                         all_sizes, place.threads)
