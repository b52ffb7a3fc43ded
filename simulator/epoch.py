"""SimPy model of one full-batch training epoch on ``N`` workers in ``sar``, ``sa`` or ``oneshot`` mode.

One SimPy process per worker runs what the engine's ``Trainer.forward_backward`` + optimizer step run:
for every layer the dense ``pre`` work, the aggregation with its exchanges, the dense ``post`` work and the
hidden-layer tail (BatchNorm with its two fp64 all-reduces, ReLU, dropout); the loss; the backward pass in
reverse layer order (BatchNorm's all-reduce, the aggregation's gradient exchanges); the gradient and loss
all-reduces; Adam. The schedule of exchanges follows ``sarlab/aggregate.py`` (worker ``p``, prefetch
``d``, round ``r = 1..N-1``, ``q_in = p - r``, ``q_out = p + r`` mod ``N``):

* ``sar``/``sa`` forward: rounds ``1..d+1`` are posted first (rows gathered, send to ``q_out`` + receive
  from ``q_in``), so they overlap the local shard, which is aggregated next; then round ``r`` is waited for
  (both messages), aggregated, its rows dropped (``sar``) and the next unposted round posted: while round
  ``r`` is computed rounds ``r+1..r+d`` are in flight, so ``sar`` holds at most ``d + 1`` fetched shards.
* backward, case 1 (sum/mean of copied rows): the remote gradients ``A_q^T g`` are computed and sent back
  to ``q_in`` first (the gradient of this worker's rows comes from ``q_out``), then the local shard's
  gradient overlaps them; once more than ``d + 1`` are in flight the oldest is waited for and added in.
  Case 2: ``sar`` starts the re-fetch, computes the local shard's VJP while it is in flight, then per
  round the VJP and its gradient return; ``sa`` uses its kept rows (unfused GAT: one autograd backward
  over the kept graph, then all returns).
* ``oneshot``: all ``N - 1`` exchanges are posted at once into an extended ``[own; halo]`` matrix, then
  one aggregation; its backward sends every halo gradient at once.

Memory: a tracker per worker books every tensor the engine allocates (see :mod:`simulator.layers`):
``sar`` frees each fetched shard after use; ``sa`` keeps all of them until the layer's backward;
``oneshot`` holds all halo rows at once, kept for backward only in case 2. Linear aggregations keep no
exchanged rows for backward in any mode.
"""

from __future__ import annotations

import gc
import time
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import simpy

from simulator.costs import CostModel
from simulator.layers import (
    FP64,
    MODES,
    LayerMemory,
    LayerPlan,
    ModelSpec,
    activation_bytes,
    flatten_grads,
    layer_plans,
    loss_bwd,
    loss_fwd,
    optimizer_step,
)
from simulator.memory import MemoryTracker
from simulator.network import NETWORKS, Message, SharedCores
from simulator.profile import Profile
from simulator.workload import PartitionStats

Proc = Generator[simpy.Event, Any, None]


@dataclass(frozen=True)
class RunSpec:
    """How the epoch runs: mode, prefetch, threads and placement.

    Args:
        mode: ``sar``, ``sa`` or ``oneshot``.
        prefetch: the engine's prefetch depth ``d`` (``d + 1`` rounds in flight while one is computed).
        threads: compute threads per worker; ``None`` = the host's cores divided among its workers.
        workers_per_host: placement; ``None`` = the profile's (0 = all workers on one host).
        shared_cores: model a host's workers competing for its cores and memory system (processor
            sharing, :class:`simulator.network.SharedCores`, with ``cores // threads`` slots); ``None`` =
            when the host is oversubscribed or its co-located processes interfere (a profile ``share_eff``
            below 1).
        trace: record Gantt intervals, transfers and memory timelines (slower).
        network: NIC channel discipline, ``reserve`` (fast) or ``simpy`` (``simpy.Resource``), see
            :mod:`simulator.network`.
    """

    mode: str = "sar"
    prefetch: int = 1
    threads: float | None = None
    workers_per_host: int | None = None
    shared_cores: bool | None = None
    trace: bool = False
    network: str = "reserve"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, got {self.prefetch}")
        if self.network not in NETWORKS:
            raise ValueError(f"network must be one of {tuple(NETWORKS)}, got {self.network!r}")


@dataclass(frozen=True)
class Placement:
    """Resolved placement: workers per host, threads per worker, shared core slots per host (or None)."""

    workers_per_host: int
    threads: float
    core_slots: int | None


def resolve_placement(profile: Profile, workers: int, run: RunSpec) -> Placement:
    """Workers per host, threads per worker and whether cores are shared (see :class:`RunSpec`)."""
    wph = profile.workers_per_host if run.workers_per_host is None else run.workers_per_host
    wph = workers if wph <= 0 else min(wph, workers)
    threads = run.threads if run.threads is not None else max(1, profile.cores_per_host // wph)
    oversubscribed = wph * threads > profile.cores_per_host
    interfere = wph > 1 and any(profile.op(name).process_eff < 1.0 for name in profile.ops)
    shared = (oversubscribed or interfere) if run.shared_cores is None else run.shared_cores
    slots = max(1, int(profile.cores_per_host // max(threads, 1))) if shared else None
    return Placement(wph, float(threads), slots)


@dataclass
class Interval:
    """One bar of the Gantt chart: ``kind`` is ``compute``, ``wait`` (p2p) or ``allreduce``."""

    start: float
    end: float
    kind: str
    what: tuple


@dataclass
class EpochResult:
    """Per-rank predictions of one steady-state epoch, plus traces when requested.

    Attributes:
        epoch_time_s, compute_s, comm_wait_s, bytes_sent, bytes_recv, peak_above_baseline_bytes,
        baseline_bytes: arrays with one entry per rank.
        intervals: per rank, the Gantt bars (trace only).
        transfers: every point-to-point message (trace only).
        memory: per rank, ``(times, bytes)`` above the baseline (trace only).
        events: SimPy events processed; messages: point-to-point messages simulated.
        wall_s, cpu_s: wall-clock and process CPU seconds of the run.
        start_bytes, end_bytes: bytes above the baseline held at the start and end of the epoch (equal
            when every allocation of the epoch was freed: a self-check of the memory model).
        activation_bytes: a worker's mean ``nodes x widest layer`` activation; scale_key_bytes: the bytes
            the compute scale was looked up at (the activation, or the predicted peak for a profile whose
            ``compute_scale_key`` is ``"peak"``); compute_scale: the multiplier of the compute costs
            (:meth:`simulator.profile.Profile.scale_at` of ``scale_key_bytes``).
    """

    mode: str
    workers: int
    epoch_time_s: np.ndarray
    compute_s: np.ndarray
    comm_wait_s: np.ndarray
    bytes_sent: np.ndarray
    bytes_recv: np.ndarray
    peak_above_baseline_bytes: np.ndarray
    baseline_bytes: np.ndarray
    placement: Placement
    events: int = 0
    messages: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    intervals: list[list[Interval]] = field(default_factory=list)
    transfers: list[Any] = field(default_factory=list)
    memory: list[tuple[list[float], list[float]]] = field(default_factory=list)
    start_bytes: np.ndarray | None = None
    end_bytes: np.ndarray | None = None
    activation_bytes: float = 0.0
    scale_key_bytes: float = 0.0
    compute_scale: float = 1.0

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall_s if self.wall_s > 0 else float("inf")


@dataclass
class _LayerArrays:
    """Per-layer precomputed seconds and bytes (Python lists: the hot loop indexes them ``[p][q]``)."""

    plan: LayerPlan
    pre_f: list[float]
    init_f: list[float]
    finalize: list[float]
    post_f: list[float]
    tail_f: tuple[list[float], list[float], list[float]]
    tail_b: tuple[list[float], list[float]]
    post_b: list[float]
    bwd_setup: list[float]
    pre_b: list[float]
    shard_f: list[list[float]]
    shard_b: list[list[float]]
    one_f: list[float]
    one_b: list[float]
    accumulate: list[list[float]]
    one_accumulate: list[float]
    gather: list[list[float]]
    one_prep: list[float]
    one_clone: list[float]
    row_bytes: list[list[float]]
    shard_transient: list[list[float]]
    shard_bwd_transient: list[list[float]]
    shard_kept: list[list[float]]
    one_transient: list[float]
    one_bwd_transient: list[float]
    one_kept: list[float]
    one_ext: list[float]
    one_grad: list[float]
    own_rows: list[float]
    mem: list[LayerMemory]


def _per_part(value: Any, parts: int) -> list[float]:
    return np.broadcast_to(np.asarray(value, dtype=np.float64), (parts,)).tolist()


def _matrix(value: Any, parts: int, mask: np.ndarray | None = None) -> list[list[float]]:
    m = np.broadcast_to(np.asarray(value, dtype=np.float64), (parts, parts)).copy()
    if mask is not None:
        m[~mask] = 0.0
    return m.tolist()


class EpochModel:
    """Builds and runs the SimPy model of one epoch.

    Args:
        stats: partition statistics (``num_parts`` = number of workers).
        model: the model configuration.
        run: mode, prefetch, threads, placement.
        profile: the machine profile.
        scale_bytes: look the compute scale up at these bytes (:meth:`Profile.scale_at`) instead of the
            workers' mean activation (:func:`simulate_epoch` passes the predicted peak for ``"peak"``-keyed
            profiles).
    """

    def __init__(
        self, stats: PartitionStats, model: ModelSpec, run: RunSpec, profile: Profile, scale_bytes: float | None = None
    ) -> None:
        self.stats, self.model, self.run_spec, self.profile = stats, model, run, profile
        self.N = stats.num_parts
        self.ring = run.mode != "oneshot" and self.N > 1  # one worker: every mode runs one shard, no exchange
        self.placement = resolve_placement(profile, self.N, run)
        self.plans = [pl.in_run(run.mode, self.N) for pl in layer_plans(model, stats.feature_dim, stats.num_classes)]
        # the compute scale for this size of shard (Profile.scale_at): workers' activations of mean size
        self.activation_bytes = float(activation_bytes(self.plans, stats.nodes_per_part.mean()))
        self.scale_bytes = self.activation_bytes if scale_bytes is None else float(scale_bytes)
        self.costs = CostModel(profile, self.placement.threads, model.dtype, profile.scale_at(self.scale_bytes))
        self.b = model.bytes_per_element
        self.params = sum(p.params for p in self.plans)
        self.arrays = [self._precompute(plan) for plan in self.plans]
        P, b, c = self.N, self.b, stats.num_classes
        n = stats.nodes_per_part.astype(np.float64)
        n_train = n * (stats.train_nodes / max(stats.num_nodes, 1)) if stats.train_nodes else n
        cost = self.costs.seconds
        self.loss_f = _per_part(cost(loss_fwd(n_train, c, b)), P)
        self.loss_b = _per_part(cost(loss_bwd(n, n_train, c, b)), P)
        self.loss_saved = (2.0 * n_train * c * b).tolist()  # logits[train] and log_softmax's output
        self.logits_grad = (n * c * b).tolist()
        self.flat_s = float(cost(flatten_grads(self.params, b)))
        self.opt_s = float(cost(optimizer_step(self.params, b)))
        self.persistent = self._persistent_bytes()
        self._eta = self._share_etas() if self.placement.core_slots is not None else {}
        # loopback copies of point-to-point bytes compete for the cores only where workers share them
        self._copy_s_per_byte = profile.p2p_cpu_s_per_byte if self.placement.core_slots is not None else 0.0
        self._copy_eta = profile.op("elementwise").process_eff

    # ---------------------------------------------------------------------------- precompute
    def _precompute(self, plan: LayerPlan) -> _LayerArrays:
        st, cost, P = self.stats, self.costs.seconds, self.N
        n = st.nodes_per_part.astype(np.float64)
        E = st.edges_per_shard.astype(np.float64)
        H = st.halo_rows.astype(np.float64)
        has_edges = E > 0
        nd = n[:, None]
        # source rows of shard q on worker p: its own n_p rows (q == p) or the H[p][q] halo rows
        num_src = np.where(np.eye(P, dtype=bool), nd, H)
        full = np.ones((P, P))
        shard_f = cost(plan.shard_fwd(E, nd, num_src)) * full
        shard_b = cost(plan.shard_bwd(E, nd, num_src)) * full
        if plan.case == 1:  # the ring modes add the local shard's A^T g into the source gradient in place
            shard_b = _with_diagonal(shard_b, cost(plan.shard_bwd(np.diag(E), n, n, in_place=True)))
        e_all, halo_in = E.sum(axis=1), H.sum(axis=1)
        one_f = cost(plan.shard_fwd(e_all, n, n + halo_in))
        one_b = cost(plan.shard_bwd(e_all, n, n + halo_in))
        # accumulate[p][q]: adding the gradient q sends back for the H[q][p] rows of p it used
        acc = np.where(H.T > 0, cost(plan.accumulate_grad(H.T)), 0.0)
        one_acc = np.where(H.sum(axis=0) > 0, cost(plan.accumulate_grad(H.sum(axis=0))), 0.0)
        # gather[p][q]: packing the H[q][p] rows of p that q needs, and posting the exchange
        call = self.profile.p2p_call_s
        gather_only = np.where(H.T > 0, cost(plan.gather_rows(H.T)), 0.0)
        gather = gather_only + call
        one_prep = cost(plan.copy_rows(n)) + np.asarray(gather_only).sum(axis=1) + call
        wb = plan.width * self.b
        shard_transient = plan.shard_transient_bytes(E, nd, num_src)
        shard_bwd_transient = plan.shard_bwd_transient_bytes(E, nd, num_src)
        one_transient = plan.shard_transient_bytes(e_all, n, n + halo_in)
        one_bwd_transient = plan.shard_bwd_transient_bytes(e_all, n, n + halo_in)
        if plan.kind == "sage" and plan.case == 1:
            # mean: oneshot's shard_vjp divides the output gradient by the degree (the ring modes scale it
            # once for all shards, the local one included, and that copy is booked with the ring rounds)
            one_bwd_transient = one_bwd_transient + n * plan.width * self.b
        if plan.kind == "gat" and not plan.autograd:
            # the local shard's VJP (and oneshot's one) is followed by the self-loop terms' VJP while its
            # row and destination gradients are still held: those two, the self-loop gradient and its
            # concatenation, and n x H temporaries; the peak of that phase may exceed the kernel's
            hc, heads, b = plan.heads * plan.channels, plan.heads, self.b
            held = n * (3 * hc + 9 * heads) * b
            shard_bwd_transient = _with_diagonal(
                shard_bwd_transient, np.maximum(np.diag(shard_bwd_transient), n * (hc + heads) * b + held)
            )
            one_bwd_transient = np.maximum(one_bwd_transient, (n + halo_in) * (hc + heads) * b + held)
        if plan.case == 1:  # measured temporaries of the sparse products beyond their outputs
            extra = self.profile.transient_bytes
            fo, fe = extra.get("spmm_fwd_out", 0.0), extra.get("spmm_fwd_edge", 0.0)
            bo, be = extra.get("spmm_bwd_out", 0.0), extra.get("spmm_bwd_edge", 0.0)
            shard_transient = shard_transient + fo * nd * wb + fe * E
            shard_bwd_transient = shard_bwd_transient + bo * num_src * wb + be * E
            # the ring modes add the local shard's A^T g into the source gradient in place (addmm_, whose
            # temporaries are the forward's), the remote ones are fresh send buffers (A^T @ g)
            shard_bwd_transient = _with_diagonal(shard_bwd_transient, fo * n * wb + fe * np.diag(E))
            one_transient = one_transient + fo * n * wb + fe * e_all
            one_bwd_transient = one_bwd_transient + bo * (n + halo_in) * wb + be * e_all
        return _LayerArrays(
            plan=plan,
            pre_f=_per_part(cost(plan.pre_fwd(n)), P),
            init_f=_per_part(cost(plan.agg_init(n)), P),
            finalize=_per_part(cost(plan.finalize(n)), P),
            post_f=_per_part(cost(plan.post_fwd(n)), P),
            tail_f=tuple(_per_part(cost(ops), P) for ops in plan.tail_fwd(n)),  # type: ignore[arg-type]
            tail_b=tuple(_per_part(cost(ops), P) for ops in plan.tail_bwd(n)),  # type: ignore[arg-type]
            post_b=_per_part(cost(plan.post_bwd(n)), P),
            bwd_setup=_per_part(cost(plan.agg_bwd_setup(n)), P),
            pre_b=_per_part(cost(plan.pre_bwd(n)), P),
            shard_f=_matrix(shard_f, P, has_edges),
            shard_b=_matrix(shard_b, P, has_edges),
            one_f=_per_part(np.where(e_all > 0, one_f, 0.0), P),
            one_b=_per_part(np.where(e_all > 0, one_b, 0.0), P),
            accumulate=_matrix(acc, P),
            one_accumulate=_per_part(one_acc, P),
            gather=_matrix(gather, P),
            one_prep=_per_part(one_prep if P > 1 else 0.0, P),
            one_clone=_per_part(cost(plan.copy_rows(n)), P),
            row_bytes=_matrix(H * wb, P),
            shard_transient=_matrix(shard_transient, P, has_edges),
            shard_bwd_transient=_matrix(shard_bwd_transient, P, has_edges),
            shard_kept=_matrix(plan.shard_kept_bytes(E, nd) if plan.keeps_edge_tensors else 0.0, P, has_edges),
            one_transient=_per_part(one_transient, P),
            one_bwd_transient=_per_part(one_bwd_transient, P),
            one_kept=_per_part(plan.shard_kept_bytes(e_all, n) if plan.keeps_edge_tensors else 0.0, P),
            one_ext=_per_part((n + halo_in) * wb if P > 1 else 0.0, P),  # one worker: no extended copy
            one_grad=_per_part((n + halo_in) * wb, P),
            own_rows=_per_part(n * wb, P),
            mem=[plan.memory(int(k)) for k in st.nodes_per_part],
        )

    def _share_etas(self) -> dict[tuple, float]:
        """Co-located process efficiency (:meth:`CostModel.share_eff`) of every kind of compute segment,
        keyed like the first two fields of :class:`Interval` ``what`` (op mixes of an average part)."""
        st, S, b, c = self.stats, float(self.placement.core_slots or 1), self.b, self.stats.num_classes
        n = float(st.nodes_per_part.mean())
        E = st.edges_per_shard.astype(np.float64)
        e_local = float(np.diag(E).mean())
        off = ~np.eye(self.N, dtype=bool)
        e_remote = float(E[off].mean()) if off.any() else e_local
        h = float(st.halo_rows[off].mean()) if off.any() else 0.0
        eta = self.costs.share_eff
        out: dict[tuple, float] = {
            ("loss", "fwd"): eta(loss_fwd(n, c, b), S),
            ("loss", "bwd"): eta(loss_bwd(n, n, c, b), S),
            ("flatten",): eta(flatten_grads(self.params, b), S),
            ("adam",): eta(optimizer_step(self.params, b), S),
        }
        for L in self.plans:
            li = L.index
            tail_f, tail_b = L.tail_fwd(n), L.tail_bwd(n)
            e = e_local + e_remote * (self.N - 1) if not self.ring else e_remote
            kinds = {
                "pre": L.pre_fwd(n),
                "agg": L.shard_fwd(e, n, h or n),
                "finalize": L.finalize(n),
                "post": L.post_fwd(n),
                "bn": tail_f[0] + tail_f[1],
                "tail": tail_f[2],
                "tail-bwd": tail_b[0],
                "bn-bwd": tail_b[1],
                "post-bwd": L.post_bwd(n),
                "bwd-setup": L.agg_bwd_setup(n),
                "agg-bwd": L.shard_bwd(e, n, h or n),
                "pre-bwd": L.pre_bwd(n),
                "gather": L.gather_rows(h or n),
                "accumulate": L.accumulate_grad(h or n),
                "clone": L.copy_rows(n),
            }
            for kind, ops in kinds.items():
                out[(li, kind)] = eta(ops, S)
        return out

    def _persistent_bytes(self) -> np.ndarray:
        """Bytes held above the baseline at the start of a steady-state epoch, per rank.

        Adam's two moments; the CSR matrices (and transposes) of linear aggregations and the CSC
        transposes of fused GAT, cached on first use; ``oneshot``'s merged shard (its edge lists and row
        pointer), built on first use; the first-use resident bytes of the aggregation families the model
        runs and of the first backward pass (:attr:`Profile.first_use_bytes`).
        """
        st, P = self.stats, self.N
        n = st.nodes_per_part.astype(np.float64)
        E = st.edges_per_shard.astype(np.float64)
        H = st.halo_rows.astype(np.float64)
        total = np.full(P, 2.0 * self.params * self.b)
        first_use = self.profile.first_use_bytes
        total += sum(first_use.get(family, 0.0) for family in {pl.family for pl in self.plans} | {"autograd"})
        linear = [pl for pl in self.plans if pl.case == 1]
        fused = [pl for pl in self.plans if pl.kind == "gat" and pl.fused]
        if not self.ring and self.N > 1:  # oneshot's merged shard (one worker: its own shard)
            e_all, rows = E.sum(axis=1), n + H.sum(axis=1)
            total += 16.0 * e_all + 8.0 * (n + 1)
            for group in (linear, fused):
                if group:
                    total += group[0].csr_cache_bytes(e_all, rows) + group[0].kernel_cache_bytes(e_all, rows)
        else:
            num_src = np.where(np.eye(P, dtype=bool), n[:, None], H)
            for group in (linear, fused):
                if group:
                    cache = group[0].csr_cache_bytes(E, num_src) + group[0].kernel_cache_bytes(E, num_src)
                    total += np.asarray(cache).sum(axis=1)
        return total

    def baseline_bytes(self) -> np.ndarray:
        """Estimated baseline per rank (RSS after setup): features, labels, masks, shards, send lists, params.

        .. math::
            B_p = n_p F b + 11 n_p + \\sum_q \\left(16 e_{pq} + 8 (n_p + 1)\\right)
                + 8 \\sum_q h_{qp} + b\\,|\\theta|

        (int64 ``src``/``dst`` per shard edge and a row pointer per shard; int64 send index lists.)
        """
        st = self.stats
        n = st.nodes_per_part.astype(np.float64)
        E = st.edges_per_shard.astype(np.float64)
        H = st.halo_rows.astype(np.float64)
        structure = 16.0 * E.sum(axis=1) + 8.0 * (n + 1.0) * self.N + 8.0 * H.sum(axis=0)
        return n * st.feature_dim * self.b + 11.0 * n + structure + self.b * self.params

    # ------------------------------------------------------------------------------------ run
    def run(self) -> EpochResult:
        """Simulate one steady-state epoch and return per-rank predictions."""
        wall, cpu = time.perf_counter(), time.process_time()
        N, trace = self.N, self.run_spec.trace
        env = simpy.Environment()
        self.env = env
        network = NETWORKS[self.run_spec.network]
        self.net = network(
            env,
            N,
            self.profile.inter_host,
            self.profile.intra_host,
            self.placement.workers_per_host,
            trace=trace,
        )
        slots = self.placement.core_slots
        self.pools = [SharedCores(env, slots) for _ in range(self.net.hosts)] if slots is not None else None
        self.workers = [_Worker(p, MemoryTracker(start=float(self.persistent[p]), trace=trace)) for p in range(N)]
        self._allreduce_seq = [0] * N
        self._kept: dict[tuple[int, int], dict[int, float]] = {}
        for w in self.workers:
            env.process(self._worker(w))
        events = 0
        step, peek, inf = env.step, env.peek, float("inf")
        collecting = gc.isenabled()
        gc.disable()  # the run allocates ~1e5 short-lived objects; cyclic collection would only slow it down
        try:
            while peek() != inf:
                step()
                events += 1
        finally:
            if collecting:
                gc.enable()
        left = self.net.unmatched()
        if left:
            raise RuntimeError(f"schedule bug: {len(left)} messages/collectives never matched, e.g. {left[:3]}")
        ws = self.workers
        return EpochResult(
            mode=self.run_spec.mode,
            workers=N,
            epoch_time_s=np.asarray([w.clock for w in ws]),
            compute_s=np.asarray([w.compute_s for w in ws]),
            comm_wait_s=np.asarray([w.wait_s for w in ws]),
            bytes_sent=np.asarray([w.sent for w in ws]),
            bytes_recv=np.asarray([w.recv for w in ws]),
            peak_above_baseline_bytes=np.asarray([w.mem.peak for w in ws]) * self.profile.mem_overhead_factor,
            baseline_bytes=self.baseline_bytes(),
            placement=self.placement,
            events=events,
            messages=self.net.matched,
            wall_s=time.perf_counter() - wall,
            cpu_s=time.process_time() - cpu,
            intervals=[w.intervals for w in ws] if trace else [],
            transfers=self.net.transfers,
            memory=[(w.mem.times, w.mem.values) for w in ws] if trace else [],
            end_bytes=np.asarray([w.mem.current for w in ws]),
            start_bytes=self.persistent.copy(),
            activation_bytes=self.activation_bytes,
            scale_key_bytes=self.scale_bytes,
            compute_scale=self.costs.scale,
        )

    # ---------------------------------------------------------------------------- primitives
    def _compute(self, w: _Worker, seconds: float, what: tuple) -> Proc:
        """Worker ``w`` computes ``seconds``: its clock moves on (no SimPy event), unless cores are shared.

        With shared cores the worker first lets the simulation catch up with its clock, then runs the op
        on its host's :class:`SharedCores`, so compute of co-located workers contends.
        """
        if seconds <= 0.0:
            return
        if self.pools is None:
            start = w.clock
            w.clock = w.mem.now = start + seconds
            w.compute_s += seconds
            if self.run_spec.trace:
                w.intervals.append(Interval(start, w.clock, "compute", what))
            return
        env = self.env
        if w.clock > env.now:
            yield env.timeout(w.clock - env.now)
        pool = self.pools[w.rank // self.placement.workers_per_host]
        start = env.now
        yield pool.run(seconds, self._eta.get(what[:2], 1.0))
        w.clock = w.mem.now = env.now
        w.compute_s += env.now - start
        if self.run_spec.trace:
            w.intervals.append(Interval(start, env.now, "compute", what))

    def _tick(self, w: _Worker, seconds: float, what: tuple) -> None:
        """:meth:`_compute` without shared cores: move the worker's clock (no generator, no event)."""
        if seconds > 0.0:
            start = w.clock
            w.clock = w.mem.now = start + seconds
            w.compute_s += seconds
            if self.run_spec.trace:
                w.intervals.append(Interval(start, w.clock, "compute", what))

    def _await(self, w: _Worker, messages: tuple[Message, ...], what: tuple) -> Proc:
        """Worker ``w`` waits until all ``messages`` are delivered; blocks (yields) only on unmatched ones.

        A matched message's delivery time is known, so waiting for it just moves the worker's clock.
        The time from the worker's clock to delivery is booked as communication wait.
        """
        start = ready = w.clock
        for msg in messages:
            t = msg.deliver_at
            if t < 0.0:  # not matched yet: block until it is delivered
                yield msg
                t = self.env.now
            if t > ready:
                ready = t
        if ready > start:
            w.clock = w.mem.now = ready
            w.wait_s += ready - start
            if self.run_spec.trace:
                w.intervals.append(Interval(start, ready, "wait", what))

    def _arrive(self, w: _Worker, ready: float, what: tuple) -> None:
        """:meth:`_await` for messages delivered at a known time ``ready``: move the clock, book the wait."""
        start = w.clock
        if ready > start:
            w.clock = w.mem.now = ready
            w.wait_s += ready - start
            if self.run_spec.trace:
                w.intervals.append(Interval(start, ready, "wait", what))

    def _allreduce(self, w: _Worker, nbytes: float, what: tuple) -> Proc:
        """Join the next all-reduce (every worker calls them in the same order); booked as wait, as the
        engine books it."""
        if self.N <= 1:
            return
        seq = self._allreduce_seq[w.rank]
        self._allreduce_seq[w.rank] += 1
        moved = 2.0 * (self.N - 1) / self.N * nbytes
        w.sent += moved
        w.recv += moved
        start = w.clock
        yield self.net.allreduce(seq, nbytes, start)
        w.clock = w.mem.now = self.env.now
        w.wait_s += w.clock - start
        if self.run_spec.trace and w.clock > start:
            w.intervals.append(Interval(start, w.clock, "allreduce", what))

    def _sync(self, w: _Worker) -> Proc:
        """Let the simulation clock catch up with the worker's before it posts messages.

        Workers run ahead of the simulation while they compute and while they wait for messages whose
        delivery time is known; posting must happen in time order, because the NIC channels serve
        messages in the order they are matched (see :mod:`simulator.network`).
        """
        if w.clock > self.env.now:
            yield self.env.timeout(w.clock - self.env.now)

    def _exchange(
        self, w: _Worker, phase: str, li: int, r: int, send_bytes: float, recv_bytes: float, at: float
    ) -> tuple[Message, Message]:
        """Post one exchange at time ``at`` (the caller has synced): send ``send_bytes`` to ``p + r``,
        receive ``recv_bytes`` from ``p - r``. Empty messages are not sent (the engine skips them)."""
        N, p = self.N, w.rank
        q_out, q_in = (p + r) % N, (p - r) % N
        post = self.net.post
        base = (li * 3 + _PHASES[phase]) * N  # an int key per (layer, phase, src, dst)
        s = post((base + p) * N + q_out, p, q_out, send_bytes, p, at) if send_bytes > 0 else _DELIVERED
        v = post((base + q_in) * N + p, q_in, p, recv_bytes, p, at) if recv_bytes > 0 else _DELIVERED
        w.sent += send_bytes
        w.recv += recv_bytes
        if self._copy_s_per_byte:  # the bytes' copies run in the background on the worker's host cores
            self.pools[p // self.placement.workers_per_host].run(
                self._copy_s_per_byte * (send_bytes + recv_bytes), self._copy_eta
            )
        return s, v

    # ------------------------------------------------------------------------------- worker
    def _worker(self, w: _Worker) -> Proc:
        p, mem, b = w.rank, w.mem, self.b
        for A in self.arrays:
            yield from self._forward_layer(w, A)
        mem.alloc(self.loss_saved[p])
        yield from self._compute(w, self.loss_f[p], ("loss", "fwd"))
        mem.alloc(self.logits_grad[p])
        yield from self._compute(w, self.loss_b[p], ("loss", "bwd"))
        mem.free(self.loss_saved[p])
        for li in range(len(self.arrays) - 1, -1, -1):
            yield from self._backward_layer(w, li)
            if li == len(self.arrays) - 1:
                mem.free(self.logits_grad[p])
        mem.alloc(self.params * b)  # torch.cat of the gradients
        yield from self._compute(w, self.flat_s, ("flatten",))
        yield from self._allreduce(w, self.params * b, ("grad",))
        yield from self._allreduce(w, FP64, ("loss",))
        mem.free(self.params * b)  # the per-parameter gradient list dies with forward_backward
        mem.alloc(self.params * b)  # Adam's temporary denominator
        yield from self._compute(w, self.opt_s, ("adam",))
        mem.free(2 * self.params * b + self.arrays[-1].mem[p].conv_out)  # flat grads, denominator, logits

    def _forward_layer(self, w: _Worker, A: _LayerArrays) -> Proc:
        p, mem = w.rank, w.mem
        L, M, li = A.plan, A.mem[p], A.plan.index
        ring = self.ring
        mem.alloc(M.pre_peak + M.exchange + M.pre_saved)
        yield from self._compute(w, A.pre_f[p], (li, "pre"))
        mem.free(M.pre_peak)
        if ring:
            yield from self._ring_forward(w, A)
        else:
            yield from self._oneshot_forward(w, A)
        mem.alloc(M.post_peak + M.conv_out)
        yield from self._compute(w, A.post_f[p], (li, "post"))
        mem.free(M.post_peak)
        if not (L.records or M.agg_out_kept):
            mem.free(M.agg_out)
        if not (M.exchange_kept or (ring and L.records and L.case == 2)):  # sar/sa keep non-linear rows only
            mem.free(M.exchange)
        if not L.hidden:
            return
        stats, var, rest = A.tail_f[0][p], A.tail_f[1][p], A.tail_f[2][p]
        f = L.out_dim
        if L.batchnorm:
            mem.alloc(M.bn_peak)
            yield from self._compute(w, stats, (li, "bn"))
            yield from self._allreduce(w, (f + 1) * FP64, (li, "bn-mean"))
            yield from self._compute(w, var, (li, "bn"))
            yield from self._allreduce(w, f * FP64, (li, "bn-var"))
            mem.alloc(M.bn_saved + M.conv_out)  # xhat, and y = xhat * weight + bias
            mem.free(M.bn_peak + M.conv_out)  # BatchNorm does not keep its input
        mem.alloc(M.relu_saved)
        mem.free(M.conv_out)  # ReLU's input (the conv output, or BatchNorm's output)
        if L.dropout > 0:
            mem.alloc(M.dropout_peak)
            mem.alloc(M.dropout_saved + M.next_input)
            mem.free(M.dropout_peak)
        yield from self._compute(w, rest, (li, "tail"))

    def _backward_layer(self, w: _Worker, li: int) -> Proc:
        p, mem = w.rank, w.mem
        A = self.arrays[li]
        L, M = A.plan, A.mem[p]
        mem.alloc(M.grad_tail)
        if L.hidden:
            yield from self._compute(w, A.tail_b[0][p], (li, "tail-bwd"))
            if L.batchnorm:
                yield from self._allreduce(w, 2 * L.out_dim * FP64, (li, "bn-bwd"))
                yield from self._compute(w, A.tail_b[1][p], (li, "bn-bwd"))
            mem.free(M.dropout_saved + M.relu_saved + M.bn_saved)
        mem.free(M.grad_tail)
        mem.alloc(M.grad_post)
        yield from self._compute(w, A.post_b[p], (li, "post-bwd"))
        mem.free(M.grad_post)
        mem.alloc(M.grad_agg)
        if L.records:
            if not self.ring:
                yield from self._oneshot_backward(w, A)
            else:
                yield from self._ring_backward(w, A)
        if L.records or M.agg_out_kept:
            mem.free(M.agg_out)
        if M.exchange_kept or (L.records and L.case == 2 and self.ring):
            mem.free(M.exchange)
        mem.free(M.grad_agg)
        mem.alloc(M.grad_pre)
        yield from self._compute(w, A.pre_b[p], (li, "pre-bwd"))
        mem.free(M.pre_saved + M.grad_pre)
        mem.alloc(L.params * self.b)  # this layer's parameter gradients, kept until the step
        if li > 0:
            mem.free(self.arrays[li - 1].mem[p].next_input)  # this layer's input is no longer needed

    # --------------------------------------------------------------------------- ring modes
    def _ring_fetch(
        self,
        w: _Worker,
        A: _LayerArrays,
        phase: str,
        local: Callable[[], Proc],
        kept: dict[int, float] | None,
        returns: deque | None,
    ) -> Proc:
        """The engine's ``RingFetch`` + per-round work, forward (aggregate) or backward (re-fetch + VJP).

        ``start()`` posts rounds ``1..d+1`` (rows gathered, exchange posted), then ``local()`` runs (the
        local shard, overlapping those fetches); then per round: wait for both messages (the send buffer
        dies), aggregate (or VJP) the round, drop its rows, post the next unposted round. While round
        ``r`` is computed rounds ``r+1..r+d`` are in flight: at most ``d + 1`` remote shards are resident.

        ``kept``: ``sa``'s resident rows (round -> bytes), filled in forward. ``returns``: backward; each
        round's gradient goes to :meth:`_grad_return` before its rows are dropped (the caller drains
        what is left in flight).
        """
        backward = returns is not None
        N, d, p, mem, li = self.N, self.run_spec.prefetch, w.rank, w.mem, A.plan.index
        rows, gather = A.row_bytes, A.gather
        compute_table = A.shard_b if backward else A.shard_f
        transient_table = A.shard_bwd_transient if backward else A.shard_transient
        in_flight: deque[tuple[int, Message, Message, float]] = deque()
        next_round = 1
        env, fast, tick = self.env, self.pools is None, self._tick

        def post(r: int) -> Proc:
            """Gather round ``r``'s rows and post its exchange (the gather is compute)."""
            q_out = (p + r) % N
            send_b, recv_b = rows[q_out][p], rows[p][(p - r) % N]
            mem.alloc(send_b + recv_b)
            if fast:
                tick(w, gather[p][q_out], (li, "gather", r))
                if w.clock > env.now:
                    yield env.timeout(w.clock - env.now)
            else:
                yield from self._compute(w, gather[p][q_out], (li, "gather", r))
                yield from self._sync(w)
            s, v = self._exchange(w, phase, li, r, send_b, recv_b, w.clock)
            in_flight.append((r, s, v, send_b))

        while next_round < N and len(in_flight) <= d:
            yield from post(next_round)
            next_round += 1
        yield from local()
        while in_flight:
            r, s, v, send_b = in_flight.popleft()
            if s.deliver_at >= 0.0 and v.deliver_at >= 0.0:  # both matched: no need to block
                self._arrive(w, s.deliver_at if s.deliver_at > v.deliver_at else v.deliver_at, (li, phase, r))
            else:
                yield from self._await(w, (s, v), (li, phase, r))
            mem.free(send_b)
            q = (p - r) % N
            transient = transient_table[p][q]
            mem.alloc(transient)
            if fast:
                tick(w, compute_table[p][q], (li, "agg-bwd" if backward else "agg", r))
            else:
                yield from self._compute(w, compute_table[p][q], (li, "agg-bwd" if backward else "agg", r))
            mem.free(transient)
            if kept is not None:
                kept[r] = rows[p][q]
                mem.alloc(A.shard_kept[p][q])
            if returns is not None:
                yield from self._grad_return(w, A, r, returns)
            if kept is None:
                mem.free(rows[p][q])
            if next_round < N:
                yield from post(next_round)
                next_round += 1

    def _grad_return(
        self, w: _Worker, A: _LayerArrays, r: int, returns: deque, send: str = "new"
    ) -> Proc:
        """The engine's ``GradReturn.post``: send round ``r``'s source gradient home; once more than
        ``d + 1`` are in flight the oldest is waited for and added in.

        ``send``: the gradient rows (the send buffer) are ``new`` (booked here, freed with the round),
        ``given`` (booked by the caller, freed with the round) or ``kept`` (booked and freed by the caller).
        """
        N, p, li = self.N, w.rank, A.plan.index
        q_in, q_out = (p - r) % N, (p + r) % N
        send_b, recv_b = A.row_bytes[p][q_in], A.row_bytes[q_out][p]
        w.mem.alloc(recv_b + (send_b if send == "new" else 0.0))
        booked = recv_b + (0.0 if send == "kept" else send_b)  # freed when the round completes
        if self.pools is None:
            self._tick(w, self.profile.p2p_call_s, (li, "post", r))
            if w.clock > self.env.now:
                yield self.env.timeout(w.clock - self.env.now)
        else:
            yield from self._compute(w, self.profile.p2p_call_s, (li, "post", r))
            yield from self._sync(w)
        s, v = self._exchange(w, "g", li, N - r, send_b, recv_b, w.clock)
        returns.append((r, s, v, booked, q_out))
        while len(returns) > self.run_spec.prefetch + 1:
            yield from self._grad_complete(w, A, returns)

    def _grad_complete(self, w: _Worker, A: _LayerArrays, returns: deque) -> Proc:
        r, s, v, nbytes, q_out = returns.popleft()
        li = A.plan.index
        if s.deliver_at >= 0.0 and v.deliver_at >= 0.0:
            self._arrive(w, s.deliver_at if s.deliver_at > v.deliver_at else v.deliver_at, (li, "grad", r))
        else:
            yield from self._await(w, (s, v), (li, "grad", r))
        if self.pools is None:
            self._tick(w, A.accumulate[w.rank][q_out], (li, "accumulate", r))
        else:
            yield from self._compute(w, A.accumulate[w.rank][q_out], (li, "accumulate", r))
        w.mem.free(nbytes)

    def _ring_forward(self, w: _Worker, A: _LayerArrays) -> Proc:
        p, mem = w.rank, w.mem
        M, li = A.mem[p], A.plan.index
        keep = self.run_spec.mode == "sa"

        def local() -> Proc:  # init + the local shard, while the first rounds are in flight
            mem.alloc(M.agg_state)
            transient = A.shard_transient[p][p]
            mem.alloc(transient)
            yield from self._compute(w, A.init_f[p] + A.shard_f[p][p], (li, "agg", 0))
            mem.free(transient)
            if keep and A.plan.records:
                mem.alloc(A.shard_kept[p][p])

        kept: dict[int, float] | None = {} if keep else None
        yield from self._ring_fetch(w, A, "f", local, kept, None)
        yield from self._compute(w, A.finalize[p], (li, "finalize"))
        if M.new_out:
            mem.alloc(M.agg_out)
            mem.free(M.agg_state)
        if kept is not None:
            if A.plan.records:
                self._kept[(p, li)] = kept
            else:  # no autograd record: sa's kept rows die with the forward
                mem.free(sum(kept.values()))

    def _ring_backward(self, w: _Worker, A: _LayerArrays) -> Proc:
        N, p, mem = self.N, w.rank, w.mem
        L, M, li, mode = A.plan, A.mem[p], A.plan.index, self.run_spec.mode
        kept = self._kept.pop((p, li), None) if mode == "sa" else None
        own = A.own_rows[p]
        extra = M.agg_bwd_hold  # SAGE-mean's scaled gradient, GAT's destination-input gradient
        mem.alloc(own + extra)  # zeroed source gradient (+ the above)
        yield from self._compute(w, A.bwd_setup[p], (li, "bwd-setup"))

        def local() -> Proc:  # the local shard's VJP, added into the source gradient (case 1: in place)
            transient = A.shard_bwd_transient[p][p]
            mem.alloc(transient)
            yield from self._compute(w, A.shard_b[p][p], (li, "agg-bwd", 0))
            mem.free(transient)
            if kept is not None:
                mem.free(A.shard_kept[p][p])

        returns: deque = deque()
        if L.case == 1:  # remote gradients A_q^T g go out first, then the local shard overlaps them
            if kept is not None:  # sa keeps rows it never needs in case 1: dropped at once
                mem.free(sum(kept.values()))
            for r in range(1, N):
                q = (p - r) % N
                transient = A.shard_bwd_transient[p][q]
                mem.alloc(A.row_bytes[p][q] + transient)  # A_q^T g (the send buffer) and its temporaries
                if self.pools is None:
                    self._tick(w, A.shard_b[p][q], (li, "agg-bwd", r))
                else:
                    yield from self._compute(w, A.shard_b[p][q], (li, "agg-bwd", r))
                mem.free(transient)
                yield from self._grad_return(w, A, r, returns, send="given")
            yield from local()
        elif kept is None:  # sar, case 2: re-fetch (overlapping the local shard), rematerialize, return
            yield from self._ring_fetch(w, A, "r", local, None, returns)
        elif L.whole_graph_backward(mode):  # sa keeping the autograd graph: one backward, then the returns
            shards = [(p - r) % N for r in range(N)]  # the local shard and every remote one
            # one autograd backward over the kept graph: all of it is alive while the largest shard's
            # gradients are (measured: the graph is released when the backward ends)
            transient = max(A.shard_bwd_transient[p][q] for q in shards)
            mem.alloc(transient)
            yield from self._compute(w, sum(A.shard_b[p][q] for q in shards), (li, "agg-bwd"))
            mem.free(transient)
            grads = sum(A.row_bytes[p][q] for q in shards[1:])
            mem.alloc(grads)
            mem.free(sum(kept.values()) + sum(A.shard_kept[p][q] for q in shards))
            for r in range(1, N):
                yield from self._grad_return(w, A, r, returns, send="kept")
            while returns:
                yield from self._grad_complete(w, A, returns)
            mem.free(grads)
        else:  # sa, case 2: the kept rows
            yield from local()
            for r in range(1, N):
                q = (p - r) % N
                transient = A.shard_bwd_transient[p][q]
                mem.alloc(transient)
                yield from self._compute(w, A.shard_b[p][q], (li, "agg-bwd", r))
                mem.free(transient + kept.pop(r) + A.shard_kept[p][q])
                yield from self._grad_return(w, A, r, returns)
        while returns:
            yield from self._grad_complete(w, A, returns)
        mem.free(own + extra)

    # ------------------------------------------------------------------------------ oneshot
    def _oneshot_forward(self, w: _Worker, A: _LayerArrays) -> Proc:
        N, p, mem = self.N, w.rank, w.mem
        L, M, li, rows = A.plan, A.mem[p], A.plan.index, A.row_bytes
        mem.alloc(A.one_ext[p])
        sends = sum(rows[(p + r) % N][p] for r in range(1, N))
        mem.alloc(sends)
        yield from self._compute(w, A.one_prep[p], (li, "gather"))  # every row gathered, then one batch
        yield from self._sync(w)
        posted: list[Message] = []
        for r in range(1, N):
            posted.extend(self._exchange(w, "f", li, r, rows[(p + r) % N][p], rows[p][(p - r) % N], w.clock))
        yield from self._await(w, tuple(posted), (li, "halo", 0))
        mem.free(sends)
        mem.alloc(M.agg_state + A.one_transient[p])
        yield from self._compute(w, A.init_f[p] + A.one_f[p] + A.finalize[p], (li, "agg", 0))
        mem.free(A.one_transient[p])
        if M.new_out:
            mem.alloc(M.agg_out)
            mem.free(M.agg_state)
        if L.records:
            mem.alloc(A.one_kept[p])  # unfused GAT's autograd graph
        if not (L.records and L.case == 2 and not L.autograd):  # ShardAggregate keeps non-linear rows
            mem.free(A.one_ext[p])

    def _oneshot_backward(self, w: _Worker, A: _LayerArrays) -> Proc:
        """Gradient w.r.t. ``[own; halo]`` rows, then (``N > 1``) the halo gradients go home at once."""
        N, p, mem = self.N, w.rank, w.mem
        L, li, rows = A.plan, A.plan.index, A.row_bytes
        transient = A.one_bwd_transient[p]
        grad = A.one_grad[p]
        mem.alloc(grad + transient)
        yield from self._compute(w, A.one_b[p], (li, "agg-bwd", 0))
        mem.free(transient + A.one_kept[p])
        if L.case == 2 and not L.autograd:
            mem.free(A.one_ext[p])
        if N == 1:
            mem.free(grad)
            return
        own = A.own_rows[p]
        recvs = sum(rows[(p + r) % N][p] for r in range(1, N))
        mem.alloc(own + recvs)  # grad_ext[:n].clone() and the receive buffers
        yield from self._compute(w, A.one_clone[p] + self.profile.p2p_call_s, (li, "clone"))
        yield from self._sync(w)
        posted: list[Message] = []
        for r in range(1, N):
            posted.extend(self._exchange(w, "g", li, N - r, rows[p][(p - r) % N], rows[(p + r) % N][p], w.clock))
        yield from self._await(w, tuple(posted), (li, "halo-grad", 0))
        yield from self._compute(w, A.one_accumulate[p], (li, "accumulate", 0))
        mem.free(grad + recvs + own)


@dataclass
class _Worker:
    """One worker's clock and counters (its clock may run ahead of the simulation between syncs)."""

    rank: int
    mem: MemoryTracker
    clock: float = 0.0
    compute_s: float = 0.0
    wait_s: float = 0.0
    sent: float = 0.0
    recv: float = 0.0
    intervals: list[Interval] = field(default_factory=list)


def _delivered() -> Message:
    """A message slot for an exchange direction with nothing to send (always already delivered)."""
    msg = Message(simpy.Environment(), -1, -1, 0.0, -1, None)
    msg.deliver_at = 0.0
    return msg


_DELIVERED = _delivered()
_PHASES = {"f": 0, "r": 1, "g": 2}  # forward fetch, backward re-fetch, gradient return


def _with_diagonal(matrix: np.ndarray, diagonal: np.ndarray) -> np.ndarray:
    """A copy of the square ``matrix`` whose diagonal (the local shard of each worker) is ``diagonal``."""
    out = np.array(matrix, dtype=np.float64)
    np.fill_diagonal(out, diagonal)
    return out


def predicted_peak(stats: PartitionStats, model: ModelSpec, run: RunSpec, profile: Profile) -> EpochResult:
    """The untraced epoch with ``compute_scale`` 1 whose largest per-worker peak keys a ``"peak"`` profile's
    compute scale."""
    return EpochModel(stats, model, replace(run, trace=False), profile.with_scale(1.0)).run()


def simulate_epoch(stats: PartitionStats, model: ModelSpec, run: RunSpec, profile: Profile) -> EpochResult:
    """Simulate one epoch (see :class:`EpochModel`).

    A profile whose compute scale curve is keyed by peak memory (``compute_scale_key == "peak"``) takes two
    runs: :func:`predicted_peak` first, then the epoch priced at the scale of that peak; the result's
    ``events``, ``wall_s`` and ``cpu_s`` count both.
    """
    if profile.compute_scale_curve and profile.compute_scale_key == "peak":
        first = predicted_peak(stats, model, run, profile)
        result = EpochModel(stats, model, run, profile, float(first.peak_above_baseline_bytes.max())).run()
        result.events += first.events
        result.wall_s += first.wall_s
        result.cpu_s += first.cpu_s
        return result
    return EpochModel(stats, model, run, profile).run()
