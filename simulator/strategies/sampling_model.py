"""Mini-batch training with distributed neighbour sampling (``--mode sampling``), priced round by round (no events).

**The engine's epoch** (``sarlab/training/minibatch.py``, ``sarlab/strategies/sampling.py``). Worker ``p`` splits its
``T_p`` training nodes into ``S = ceil(max_q T_q / B)`` near-equal batches (every worker runs ``S`` steps) and groups
consecutive batches into rounds of ``b`` (``round_batches``; 0: the whole epoch is one round), ``R = ceil(S / b)``
rounds. A round

1. samples the union of its batches' neighbourhoods, layer by layer (expected sizes:
   :func:`sarlab.simulator.workload.sampled_sizes.sampled_sizes` with the round's seeds): hop 1 samples the seeds, own
   nodes, with no message; every later hop makes one blocking mask exchange (``ceil(n_q / 8)`` bytes to each peer ``q``)
   and one blocking reply (``8 (3 + k)`` bytes per remote node; fan-out ``all``: two replies), each node sampled
   by its owner;
2. asks for its input rows ``S_0`` (one more blocking mask exchange) and posts their fetch (``F`` features and an
   in-degree per remote row), which arrives in the background;

then each of its batches cuts its blocks out of the round's tables, gathers its input rows, computes forward and
backward on the blocks (sizes with one batch's seeds), all-reduces the gradients and steps Adam. With
``prefetch`` the next round is sampled and posted right after this round's rows arrived, before this round's
steps, so its transfer overlaps them; the first round's transfer is always waited for in full.

Every blocking exchange and every all-reduce is joined by all workers, so each phase lasts as long as its
slowest worker:

.. math::
    t_{epoch} = \\sum_{r=1}^{R} \\Big(\\max_p t^{sample}_{p,r} + \\max_p w_{p,r}\\Big)
              + S \\max_p t^{step}_p + 2\\,(t_{ar} + t_{sync})

* :math:`t^{sample}_{p,r}`: the sampler's own work on the round (:meth:`SamplerCosts.round_seconds`: ``t_round +
  t_edge m_r + t_row |S_0^r|``, round sizes), the message software of its ``2 (L-1) + 1`` blocking exchanges and
  of posting the fetch, their wire time (:func:`exchange_seconds`) and ``t_sync`` each;
* :math:`w_{p,r}`: the fetch's wire time, less the previous round's ``b`` steps under prefetch (round 1: all);
* :math:`t^{step}_p`: cutting the blocks (:meth:`SamplerCosts.batch_seconds`: ``t_batch + t_edge m_b + t_row
  |S_0^b|``, batch sizes), the layers' ops priced by the profile (:func:`step_ops`), the gradient all-reduce
  ``t_ar`` (and BatchNorm's), ``t_step`` of unpriced dispatch and ``t_sync`` per all-reduce;
* two all-reduces per epoch outside the steps (batch sizes at the start, loss and accuracy at the end).

Co-located workers share the host's cores by processor sharing: every CPU term of a worker is stretched by ``k /
(1 + (min(k, C) - 1) eta)`` (``k`` workers on ``C`` core slots, ``eta`` the step ops' sharing efficiency), and the
CPU of moving its bytes (``p2p_cpu_s_per_byte``, an emulated network's shaping included) runs on the shared cores.
On an emulated network (``workers_per_nic`` below ``N``) messages take the inter-host link, a NIC's workers
sharing its bandwidth.

**The sampler's own work** (hashing, Floyd's draws, unions, index maps, building the blocks: Python-level torch
calls on small tensors, which no op family of the profile describes) is :class:`SamplerCosts`: seconds per round,
per batch, per sampled edge and per input row, plus a step's unpriced dispatch (``step_s``) and, on several workers,
the wall time each blocking call loses waiting for a peer that is not running (``sync_s``), fitted to real sampling
epochs of calibration graphs (:mod:`sarlab.simulator.strategies.sampling_fit`) and scaled with the profile's
``compute_scale`` (single-threaded: more cores do not speed it up).
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from sarlab.simulator.hardware.profile import Link, Profile
from sarlab.simulator.network.collectives import allreduce_seconds
from sarlab.simulator.system.costs import CostModel
from sarlab.simulator.system.runspec import Placement, RunSpec, resolve_placement
from sarlab.simulator.workload.layers import LayerPlan, layer_plans
from sarlab.simulator.workload.model import ModelSpec
from sarlab.simulator.workload.ops import Op, flatten_grads, loss_bwd, loss_fwd, optimizer_step
from sarlab.simulator.workload.sampled_sizes import (
    DegreeDistribution,
    SampledSizes,
    chain_of_part,
    sampled_sizes,
    train_nodes_per_part,
)
from sarlab.simulator.workload.workload import PartitionStats

__all__ = ["SamplerCosts", "SamplingEpoch", "SamplingSpec", "exchange_seconds", "load_sampler_costs", "message_link",
           "parse_fanouts", "round_batches_of", "round_messages", "simulate_sampling_epoch", "step_ops"]

#: where the shipped sampler costs live (:func:`load_sampler_costs`)
SAMPLER_PROFILE = Path(__file__).resolve().parent.parent / "profiles" / "sampler" / "epyc-2core.json"
#: the format of a sampler cost file that prices the round sampler
COSTS_FORMAT = "sarlab-sampler-costs/2"
_COST_KEYS = ("round_s", "batch_s", "edge_s", "row_s", "step_s", "sync_s", "compute_scale", "source")


@dataclass(frozen=True)
class SamplerCosts:
    """Seconds of the sampler's own work, outside the layers' ops and the messages:

    .. math::
        t_{round} + t_{edge} \\sum_l m^r_l + t_{row} |S^r_0| \\quad\\text{per round}, \\qquad
        t_{batch} + t_{edge} \\sum_l m^b_l + t_{row} |S^b_0| \\quad\\text{per batch}

    Args:
        round_s: fixed seconds of sampling a round (its torch calls: unions, one sample per layer, masks, tables,
            posting the fetch).
        batch_s: fixed seconds of cutting one batch's blocks out of its round (per-layer calls, the blocks).
        edge_s: seconds per sampled edge (drawn in a round, or cut into a batch's block).
        row_s: seconds per input row (of a round's union, or gathered for a batch).
        step_s: seconds of a step beyond its priced ops (Python and autograd dispatch, metrics).
        sync_s: wall seconds each blocking exchange or all-reduce costs beyond its message time (waiting for a peer
            that the OS has not scheduled yet; 0 on one worker).
        compute_scale: the ``compute_scale`` of the profile of the machine they were measured on (a profile with
            another scale, e.g. a resource of another speed, scales them by the ratio).
        source: how the numbers were obtained.
    """

    round_s: float = 150 * 12e-6
    batch_s: float = 40 * 12e-6
    edge_s: float = 0.4e-6
    row_s: float = 0.4e-6
    step_s: float = 60 * 12e-6
    sync_s: float = 0.0
    compute_scale: float = 1.0
    source: str = ("counted: ~150 torch calls per round, ~40 per batch, ~60 per step at 12 us each; ~0.4 us per "
                   "edge and row (assumed)")

    def round_seconds(self, sizes: SampledSizes) -> float:
        """The sampler's seconds for one round of union ``sizes``."""
        return float(self.round_s + self.edge_s * sizes.edges.sum() + self.row_s * sizes.rows[0])

    def batch_seconds(self, sizes: SampledSizes) -> float:
        """The seconds of cutting one batch of ``sizes`` out of its round."""
        return float(self.batch_s + self.edge_s * sizes.edges.sum() + self.row_s * sizes.rows[0])


def load_sampler_costs(path: str | Path | None = None) -> SamplerCosts:
    """Sampler costs from a JSON file (default :data:`SAMPLER_PROFILE`; the counted defaults without one, or, with a
    warning, when the shipped file priced the per-batch sampler of before, format ``sarlab-sampler-costs/1``)."""
    target = Path(path) if path is not None else SAMPLER_PROFILE
    if not target.exists():
        if path is not None:
            raise FileNotFoundError(f"sampler cost file {target} does not exist")
        return SamplerCosts()
    data = json.loads(target.read_text())
    if data.get("format", COSTS_FORMAT) != COSTS_FORMAT:
        message = (f"{target} has sampler costs of format {data.get('format')!r}, fitted to the per-batch sampler; "
                   f"this model prices rounds ({COSTS_FORMAT}): refit with `python -m "
                   f"sarlab.simulator.strategies.sampling_fit`")
        if path is not None:
            raise ValueError(message)
        warnings.warn(message + "; using the counted defaults", stacklevel=2)
        return SamplerCosts()
    return SamplerCosts(**{k: data[k] for k in _COST_KEYS if k in data})


@dataclass(frozen=True)
class SamplingSpec:
    """``--mode sampling``'s settings (the engine's ``SamplingConfig``; the simulator does not import it).

    Args:
        fanouts: neighbours per node, one per layer, hop 1 (the last layer) first; -1 = all.
        batch_size: seeds per worker and step.
        prefetch: sample the next round and post its feature fetch before computing this one.
        round_batches: batches sampled and fetched together (0: all of an epoch's).
    """

    fanouts: tuple[int, ...] = (15, 10, 5)
    batch_size: int = 1024
    prefetch: bool = True
    round_batches: int = 0

    def __post_init__(self) -> None:
        if not self.fanouts or any(f < 1 and f != -1 for f in self.fanouts):
            raise ValueError(f"fan-outs must be >= 1 or -1 (all), got {self.fanouts!r}")
        if self.batch_size < 1:
            raise ValueError(f"batch size must be >= 1, got {self.batch_size}")
        if self.round_batches < 0:
            raise ValueError(f"round_batches must be >= 0 (0: the whole epoch), got {self.round_batches}")


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


def round_batches_of(steps: int, round_batches: int) -> list[int]:
    """Batches in each round of an epoch of ``steps`` batches (``round_batches`` 0: one round)."""
    size = round_batches or steps
    return [min(size, steps - first) for first in range(0, steps, size)]


def exchange_seconds(profile: Profile, link: Link, workers: int, recv_bytes: float,
                     nic_share: int = 1) -> tuple[float, float]:
    """(CPU seconds, wire seconds) of one all-to-all exchange call in which a worker receives ``recv_bytes``
    from its ``N - 1`` peers: the call, ``2 (N-1)`` ops posted and waited; latency, one gap per message and the
    bytes through the receive channel, which ``nic_share`` workers share."""
    if workers <= 1:
        return 0.0, 0.0
    ops = 2 * (workers - 1)
    cpu = profile.p2p_call_s + ops * (profile.p2p_op_s + profile.p2p_wait_s)
    wire = link.latency_s + (workers - 1) * link.gap_s + recv_bytes * nic_share / link.bandwidth_Bps
    return cpu, wire


class RoundMessages(NamedTuple):
    """A round's messages for one worker: bytes received by each blocking exchange, and by the posted fetch."""

    blocking: list[float]
    fetch: float


def round_messages(sizes: SampledSizes, fanouts: tuple[int, ...], workers: int, own_nodes: float,
                   row_bytes: float) -> RoundMessages:
    """Bytes a worker receives in a round of union ``sizes`` (module docstring): per hop after the first, a mask
    from every peer (``ceil(n_p / 8)`` bytes) and the samples of its remote frontier nodes; the fetch's masks;
    then the posted rows (``row_bytes`` each) and their in-degrees (8 bytes each)."""
    if workers <= 1:
        return RoundMessages([], 0.0)
    mask = (workers - 1) * math.ceil(own_nodes / 8)
    layers, calls = len(fanouts), []
    for hop, k in enumerate(fanouts[1:], start=1):
        layer = layers - 1 - hop
        remote = sizes.remote_rows(layer + 1)
        calls.append(float(mask))
        if k == -1:  # metadata first, then the neighbours, whose count the requester cannot know
            per_node = sizes.edges[layer] / max(sizes.rows[layer + 1], 1.0)
            calls += [24.0 * remote, 8.0 * per_node * remote]
        else:
            calls.append(8.0 * (3 + k) * remote)
    calls.append(float(mask))
    return RoundMessages(calls, sizes.remote_inputs * (row_bytes + 8.0))


@dataclass(frozen=True)
class SamplingEpoch:
    """A predicted sampling epoch and its parts, per worker (``sample_s`` and ``fetch_wait_s`` as the engine's
    records count them: sampling rounds plus cutting and gathering batches, and waiting for fetched rows); the
    expected sizes of one batch (``sizes``) and of the first round (``round_sizes``) per worker, and the input rows
    and sampled edges of all rounds together (``round_rows``, ``round_edges``)."""

    workers: int
    steps: int
    rounds: int
    epoch_time_s: float
    compute_s: np.ndarray
    comm_wait_s: np.ndarray
    sample_s: np.ndarray
    fetch_wait_s: np.ndarray
    bytes_sent: np.ndarray
    bytes_recv: np.ndarray
    peak_above_baseline_bytes: np.ndarray
    baseline_bytes: np.ndarray
    sizes: list[SampledSizes]
    round_sizes: list[SampledSizes]
    round_rows: np.ndarray
    round_edges: np.ndarray
    threads: float


def step_ops(model: ModelSpec, stats: PartitionStats, sizes: SampledSizes) -> list[Op]:
    """One step's priced ops on a batch of ``sizes``: gathering its input rows, the layers' forward and backward on
    the sampled blocks (GAT with its self-loop terms on the block's destination rows), loss, gradient flattening
    and Adam."""
    plans = [p.in_run("oneshot", 1) for p in layer_plans(model, stats.feature_dim, stats.num_classes)]
    b = model.bytes_per_element
    ops: list[Op] = [Op("elementwise", 2.0 * sizes.rows[0] * stats.feature_dim * b)]  # gather of the input rows
    for layer, plan in enumerate(plans):
        src, dst, m = sizes.rows[layer], sizes.rows[layer + 1], sizes.edges[layer]
        tail = plan.tail_fwd(dst)
        ops += plan.pre_fwd(src) + plan.agg_init(dst) + plan.self_init(dst) + plan.shard_fwd(m, dst, src)
        ops += plan.finalize(dst)
        ops += plan.post_fwd(dst) + tail[0] + tail[1] + tail[2]
        if plan.kind == "gcn":  # deg / sampled scaling of the sum
            ops.append(Op("elementwise", 2.0 * dst * plan.width * b))
        back = plan.tail_bwd(dst)
        ops += back[0] + back[1] + plan.post_bwd(dst)
        if plan.records:
            ops += plan.agg_bwd_setup(dst) + plan.shard_bwd(m, dst, src, in_place=True) + plan.self_bwd(dst)
        ops += plan.pre_bwd(src)
    seeds, classes = sizes.rows[-1], stats.num_classes
    params = sum(p.params for p in plans)
    ops += loss_fwd(seeds, classes, b) + loss_bwd(seeds, seeds, classes, b)
    ops += flatten_grads(params, b) + optimizer_step(params, b)
    return ops


def message_link(profile: Profile, place: Placement, workers: int) -> tuple[Link, int]:
    """The link a worker's messages take and how many workers share its channel: the inter-host link where
    workers sit on other hosts or emulated hosts (own NICs, ``workers_per_nic`` each), else the intra-host one."""
    if place.workers_per_host < workers or place.workers_per_nic < workers:
        return profile.inter_host, max(1, min(place.workers_per_nic, place.workers_per_host))
    return profile.intra_host, 1


def _core_sharing(profile: Profile, place: Placement, costs: CostModel, work: list[Op]) -> tuple[float, float]:
    """How co-located workers share the host's cores (module docstring): the stretch of a worker's CPU terms,
    ``k / (1 + (min(k, C) - 1) eta)`` with ``eta`` the sharing efficiency of its step ops ``work``, and the CPU
    seconds per byte it moves on the shared cores; ``(1, 0)`` where the placement gives no core slots."""
    if place.core_slots is None:
        return 1.0, 0.0
    k_run = place.workers_per_host
    stretch = k_run / (1.0 + (min(k_run, place.core_slots) - 1.0) * costs.share_eff(work, place.core_slots))
    byte_cpu = 2.0 * profile.comm_cpu(place.workers_per_host)[1] * k_run / place.core_slots
    return stretch, byte_cpu


def _round_phase(profile: Profile, link: Link, workers: int, nic_share: int, msg: RoundMessages, sampler_s: float,
                 stretch: float, byte_cpu: float) -> tuple[float, float, float, float]:
    """One worker's sampling phase of one round: ``(cpu, wire, fetch_wire, bytes)``. ``cpu`` is the sampler's own
    ``sampler_s``, the message software of the blocking exchanges and twice that of the fetch, stretched by the
    core sharing, plus ``byte_cpu`` per byte of the round; ``wire`` the blocking exchanges' wire time,
    ``fetch_wire`` the fetch's (:func:`exchange_seconds`), ``bytes`` all the round's messages."""
    cpu, wire = sampler_s, 0.0
    for nbytes in msg.blocking:
        c, w = exchange_seconds(profile, link, workers, nbytes, nic_share)
        cpu, wire = cpu + c, wire + w
    c_rows, w_rows = exchange_seconds(profile, link, workers, msg.fetch, nic_share)
    round_bytes = sum(msg.blocking) + msg.fetch
    cpu = (cpu + 2.0 * c_rows) * stretch + byte_cpu * round_bytes
    return cpu, wire, w_rows, round_bytes


def _peak_bytes(plans: list[LayerPlan], batch: SampledSizes, rounds: list[SampledSizes], held_rounds: float,
                features: int, b: float, num_nodes: int, params: int) -> float:
    """A worker's peak above its baseline in a sampling epoch, in bytes of ``b`` per value: what every layer keeps
    of a batch (``in_dim + 2 out_dim + agg_width`` values per row of its block, counted twice), 48 bytes per
    batch edge, the batch's input rows, ``held_rounds`` copies of the largest round's tables (its input rows with
    an 8-byte degree each, 16 bytes per sampled edge), 9 bytes per graph node and four copies of the parameters."""
    kept = sum(batch.rows[i] * (pl.in_dim + 2 * pl.out_dim + pl.agg_width) for i, pl in enumerate(plans))
    biggest = max(rounds, key=lambda s: float(s.rows[0]))
    round_bytes_held = held_rounds * (biggest.rows[0] * (features * b + 8.0) + 16.0 * float(biggest.edges.sum()))
    return (2.0 * kept * b + 48.0 * float(batch.edges.sum()) + batch.rows[0] * features * b + round_bytes_held
            + 9.0 * num_nodes + 4.0 * params * b)


def simulate_sampling_epoch(stats: PartitionStats, model: ModelSpec, sampling: SamplingSpec, profile: Profile,
                            degrees: DegreeDistribution | None = None, train_per_part: np.ndarray | None = None,
                            run: RunSpec | None = None, sampler: SamplerCosts | None = None) -> SamplingEpoch:
    """Predict one ``--mode sampling`` epoch on ``stats.num_parts`` workers (module docstring).

    Args:
        stats: partition statistics.
        model: the model (``sampling.fanouts`` must have one entry per layer).
        sampling: fan-outs, batch size, prefetch, batches per round.
        profile: the machine profile (an emulated network's link profile applied:
            :func:`sarlab.simulator.network.linkprofile.for_network`).
        degrees: the in-degree histogram (default: :meth:`DegreeDistribution.power_law` at the mean degree).
        train_per_part: training nodes per part (default :func:`train_nodes_per_part`).
        run: placement (threads, workers per host and per NIC); its mode is ignored.
        sampler: the sampler's own costs (default :func:`load_sampler_costs`).
    """
    sampler = sampler or load_sampler_costs()
    if len(sampling.fanouts) != model.layers:
        raise ValueError(f"{len(sampling.fanouts)} fan-outs for a {model.layers}-layer model")
    N = stats.num_parts
    deg = degrees or DegreeDistribution.power_law(stats.num_nodes, stats.num_edges / max(stats.num_nodes, 1))
    train = train_nodes_per_part(stats) if train_per_part is None else np.asarray(train_per_part, dtype=float)
    steps = max(1, math.ceil(float(train.max()) / sampling.batch_size))
    per_round = round_batches_of(steps, sampling.round_batches)
    R = len(per_round)
    place = resolve_placement(profile, N, run or RunSpec())
    link, nic_share = message_link(profile, place, N)
    b, F = model.bytes_per_element, stats.feature_dim
    plans = layer_plans(model, F, stats.num_classes)
    params = sum(p.params for p in plans)
    grad_bytes = params * b
    bn = 3 * sum(1 for pl in plans if pl.hidden and pl.batchnorm)  # two all-reduces forward, one backward
    t_allreduce = allreduce_seconds(link, grad_bytes, N) + bn * allreduce_seconds(link, 16.0 * model.hidden, N)
    sync = sampler.sync_s if N > 1 else 0.0
    sampler_scale = profile.compute_scale / sampler.compute_scale
    sample_r, wire_fetch = np.zeros((N, R)), np.zeros((N, R))
    step_time, compute, sample_s, sent, peak, round_rows, round_edges = (np.zeros(N) for _ in range(7))
    batch_sizes, first_round = [], []
    for p in range(N):
        a, bb = chain_of_part(stats, p)
        share = float(stats.nodes_per_part[p]) / max(float(stats.nodes_per_part.sum()), 1.0)
        seeds = float(train[p]) / steps
        batch = sampled_sizes(deg, seeds, sampling.fanouts, a, bb, share)
        rounds = {nb: sampled_sizes(deg, seeds * nb, sampling.fanouts, a, bb, share) for nb in set(per_round)}
        batch_sizes.append(batch)
        first_round.append(rounds[per_round[0]])
        act = float(batch.rows.max()) * max(max(pl.in_dim, pl.out_dim) for pl in plans) * b
        costs = CostModel(profile, place.threads, model.dtype, profile.scale_at(act))
        work = step_ops(model, stats, batch)
        stretch, byte_cpu = _core_sharing(profile, place, costs, work)
        t_cut = sampler.batch_seconds(batch) * sampler_scale
        t_ops = float(np.sum(costs.seconds(work)))
        step_cpu = (t_cut + t_ops + sampler.step_s * sampler_scale) * stretch + byte_cpu * grad_bytes
        step_time[p] = step_cpu + t_allreduce + (1 + bn) * sync
        compute[p] = step_cpu * steps
        sample_s[p] = steps * (t_cut + float(costs.op_seconds(work[0]))) * stretch
        recv = 2.0 * grad_bytes * steps
        for r, nb in enumerate(per_round):
            size = rounds[nb]
            msg = round_messages(size, sampling.fanouts, N, float(stats.nodes_per_part[p]), F * b)
            cpu, wire, wire_fetch[p, r], round_bytes = _round_phase(
                profile, link, N, nic_share, msg, sampler.round_seconds(size) * sampler_scale, stretch, byte_cpu)
            sample_r[p, r] = cpu + wire + len(msg.blocking) * sync
            compute[p] += cpu
            recv += round_bytes
            round_rows[p] += float(size.rows[0])
            round_edges[p] += float(size.edges.sum())
        sample_s[p] += float(sample_r[p].sum())
        sent[p] = recv
        held_rounds = 2.0 if sampling.prefetch and R > 1 else 1.0  # the next round's rows arrive meanwhile
        peak[p] = _peak_bytes(plans, batch, list(rounds.values()), held_rounds, F, b, stats.num_nodes, params)
    waits = np.zeros((N, R))
    for r in range(R):
        hidden = per_round[r - 1] * float(step_time.max()) if sampling.prefetch and r > 0 else 0.0
        waits[:, r] = np.maximum(wire_fetch[:, r] - hidden, 0.0)
    fixed = 2.0 * (allreduce_seconds(link, 16.0, N) + sync)
    epoch = float(sample_r.max(axis=0).sum() + waits.max(axis=0).sum() + steps * step_time.max() + fixed)
    baseline = (stats.nodes_per_part * (F * b + 24.0) + stats.edges_per_shard.sum(axis=1) * 8.0 * 4).astype(float)
    return SamplingEpoch(N, steps, R, epoch, compute, epoch - compute, sample_s, waits.sum(axis=1), sent,
                         sent.copy(), peak, baseline, batch_sizes, first_round, round_rows, round_edges, place.threads)
