"""Pricing tables: every second and byte of one epoch, per worker and per pair, computed before it runs.

The schedule (:mod:`sarlab.simulator.system.schedule`) only looks numbers up: for layer ``l`` the seconds of each stage
on worker ``p`` (``pre``, each shard ``[p][q]``, ``post``, the tail, their backward), the bytes of each exchange
``[p][q]`` (the ``H[p][q]`` rows of ``q`` that ``p`` needs), the temporaries of every shard and what
autograd keeps. Seconds are :class:`sarlab.simulator.system.costs.CostModel` prices of the layer's
:class:`sarlab.simulator.workload.ops.Op` lists at the worker's threads and compute scale; bytes come from
:mod:`sarlab.simulator.workload.layer_memory`. For the per-worker executor the tables are Python lists, since its hot
loop indexes them ``[p][q]`` with ints; for the lockstep executor (``vector=True``) they are numpy arrays, pair
tables wrapped in :class:`PairTable` so that ``T[p][q]`` with index arrays picks ``T[p_i, q_i]``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from sarlab.simulator.hardware.host import colocation_eff
from sarlab.simulator.hardware.profile import Profile
from sarlab.simulator.system.costs import CostModel
from sarlab.simulator.system.runspec import Placement, RunSpec
from sarlab.simulator.workload import rgcn_layer
from sarlab.simulator.workload.layer_memory import (
    INDEX_BYTES,
    LayerMemory,
    cache_kind,
    layer_memory,
    shard_bwd_transient_bytes,
    shard_cache_bytes,
    shard_kept_bytes,
    shard_transient_bytes,
)
from sarlab.simulator.workload.layers import LayerPlan, activation_bytes, layer_plans
from sarlab.simulator.workload.model import ModelSpec
from sarlab.simulator.workload.ops import flatten_grads, loss_bwd, loss_fwd, optimizer_step
from sarlab.simulator.workload.rgcn_workload import relations_for
from sarlab.simulator.workload.workload import PartitionStats


class PairTable:
    """A ``P x P`` array indexed as ``T[p][q]`` with index arrays ``p``, ``q`` (element-wise pairs)."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __getitem__(self, p: Any) -> _Rows:
        return _Rows(self.array, p)


class _Rows:
    __slots__ = ("array", "p")

    def __init__(self, array: np.ndarray, p: Any) -> None:
        self.array, self.p = array, p

    def __getitem__(self, q: Any) -> Any:
        return self.array[self.p, q]


class PartMemory:
    """Per-part :class:`LayerMemory` for the lockstep executor: ``M[p]`` (any ``p``) is one
    :class:`LayerMemory` whose byte fields are arrays over the parts."""

    __slots__ = ("stacked",)

    def __init__(self, mems: list[LayerMemory]) -> None:
        fields = {}
        for name in LayerMemory.__dataclass_fields__:
            values = [getattr(m, name) for m in mems]
            fields[name] = values[0] if isinstance(values[0], bool) else np.asarray(values, dtype=np.float64)
        self.stacked = LayerMemory(**fields)

    def __getitem__(self, p: Any) -> LayerMemory:
        return self.stacked


@dataclass(frozen=True)
class LayerTables:
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
    self_b: list[float]
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
    one_ops: list[float]
    mem: list[LayerMemory]
    finalize_transient: list[float]


def per_part(value: Any, parts: int) -> list[float]:
    """``value`` (a scalar or one entry per part) as a list with one float per part."""
    return np.broadcast_to(np.asarray(value, dtype=np.float64), (parts,)).tolist()


def matrix(value: Any, parts: int, mask: np.ndarray | None = None) -> list[list[float]]:
    """``value`` broadcast to a ``parts x parts`` list of lists, 0 where ``mask`` is False."""
    m = np.broadcast_to(np.asarray(value, dtype=np.float64), (parts, parts)).copy()
    if mask is not None:
        m[~mask] = 0.0
    return m.tolist()


def with_diagonal(square: np.ndarray, diagonal: np.ndarray) -> np.ndarray:
    """A copy of the ``square`` matrix whose diagonal (the local shard of each worker) is ``diagonal``."""
    out = np.array(square, dtype=np.float64)
    np.fill_diagonal(out, diagonal)
    return out


def finalize_transient_bytes(plan: LayerPlan, n: Any) -> Any:
    """Temporaries of ``finalize`` on ``n`` rows (freed when it returns, the output kept).

    Max (SAGE max and pool, :meth:`sarlab.core.aggregators.Aggregation.finalize`): ``torch.where(count > 0, best,
    zeros_like(best))`` holds the bool mask and the zeros beside the state and the output,
    :math:`n w (1 + b)` for ``w`` aggregated features of ``b`` bytes. Other aggregations: none beyond their output
    (mean's ``state / degree``; GAT's and R-GCN's are priced with their shards).
    """
    if plan.kind == "sage" and plan.case == 2:
        return n * plan.agg_width * (1.0 + plan.bytes_per_element)
    return 0.0 * n


class EpochPricing:
    """The pricing tables of one configuration.

    Args:
        stats: partition statistics (``num_parts`` = number of workers).
        model: the model configuration.
        run: mode, prefetch, threads, placement.
        profile: the machine profile.
        placement: the run's resolved placement (:func:`sarlab.simulator.system.runspec.resolve_placement`).
        scale_bytes: look the compute scale up at these bytes (:meth:`Profile.scale_at`) instead of the
            workers' mean activation (:func:`sarlab.simulator.system.epoch.simulate_epoch` passes the predicted peak for
            ``"peak"``-keyed profiles).
        vector: tables as numpy arrays for the lockstep executor (see the module docstring).
    """

    def __init__(
        self,
        stats: PartitionStats,
        model: ModelSpec,
        run: RunSpec,
        profile: Profile,
        placement: Placement,
        scale_bytes: float | None = None,
        vector: bool = False,
    ) -> None:
        self.stats, self.profile, self.placement, self.vector = stats, profile, placement, vector
        self.N = stats.num_parts
        self.ring = run.mode != "oneshot" and self.N > 1  # one worker: every mode runs one shard, no exchange
        relations = relations_for(stats, model)  # R-GCN: the partition's per-relation counts (other models: None)
        self.plans = [pl.in_run(run.mode, self.N).with_relations(relations)
                      for pl in layer_plans(model, stats.feature_dim, stats.num_classes)]
        # the compute scale for this size of shard (Profile.scale_at): workers' activations of mean size
        self.activation_bytes = float(activation_bytes(self.plans, stats.nodes_per_part.mean()))
        self.scale_bytes = self.activation_bytes if scale_bytes is None else float(scale_bytes)
        self.costs = CostModel(profile, placement.threads, model.dtype, profile.scale_at(self.scale_bytes))
        self.b = model.bytes_per_element
        self.params = sum(p.params for p in self.plans)
        self.layers = [self._layer_tables(plan) for plan in self.plans]
        b, c = self.b, stats.num_classes
        n = stats.nodes_per_part.astype(np.float64)
        n_train = n * (stats.train_nodes / max(stats.num_nodes, 1)) if stats.train_nodes else n
        cost = self.costs.seconds
        self.loss_f = self._part(cost(loss_fwd(n_train, c, b)))
        self.loss_b = self._part(cost(loss_bwd(n, n_train, c, b)))
        self.loss_saved = self._part(2.0 * n_train * c * b)  # logits[train] and log_softmax's output
        self.logits_grad = self._part(n * c * b)
        self.flat_s = float(cost(flatten_grads(self.params, b)))
        self.opt_s = float(cost(optimizer_step(self.params, b)))
        self.persistent = self._persistent_bytes()
        self.share_eta = self._share_etas() if placement.core_slots is not None else {}
        # loopback copies of point-to-point bytes compete for the cores only where workers share them; their
        # costs are those of the ranks sharing a host's cores (an emulated network's hosts all share this machine's)
        per_message, per_byte = profile.comm_cpu(placement.workers_per_host)
        self.copy_s_per_byte = per_byte if placement.core_slots is not None else 0.0
        running = min(placement.workers_per_host, placement.core_slots or 1)
        self.copy_eta = colocation_eff(profile.op("elementwise"), running, placement.threads)
        self.copy_s_per_message = per_message if placement.core_slots is not None else 0.0

    def _part(self, value: Any) -> Any:
        """A per-part table: a list (per-worker executor) or an array (lockstep)."""
        if self.vector:
            return np.broadcast_to(np.asarray(value, dtype=np.float64), (self.N,)).copy()
        return per_part(value, self.N)

    def _pairs(self, value: Any, mask: np.ndarray | None = None) -> Any:
        """A pair table ``[p][q]``: lists of lists, or a :class:`PairTable` (lockstep)."""
        if self.vector:
            m = np.broadcast_to(np.asarray(value, dtype=np.float64), (self.N, self.N)).copy()
            if mask is not None:
                m[~mask] = 0.0
            return PairTable(m)
        return matrix(value, self.N, mask)

    def _layer_tables(self, plan: LayerPlan) -> LayerTables:
        """The tables of one layer (see the module docstring)."""
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
            shard_b = with_diagonal(shard_b, cost(plan.shard_bwd(np.diag(E), n, n, in_place=True)))
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
        shard_transient, shard_bwd_transient, one_transient, one_bwd_transient = self._temporaries(
            plan, n, E, num_src, e_all, halo_in)
        mems = [layer_memory(plan, int(k)) for k in st.nodes_per_part]
        one_kept = shard_kept_bytes(plan, e_all, n) if plan.keeps_edge_tensors else 0.0
        if not self.ring and plan.records and not plan.autograd:
            mems, one_transient, one_kept = self._oneshot_output(mems, one_transient, one_kept)
        return LayerTables(
            plan=plan,
            pre_f=self._part(cost(plan.pre_fwd(n))),
            init_f=self._part(cost(plan.agg_init(n) + plan.self_init(n))),  # zeroed state, GAT's self loops
            finalize=self._part(cost(plan.finalize(n))),
            post_f=self._part(cost(plan.post_fwd(n))),
            tail_f=tuple(self._part(cost(ops)) for ops in plan.tail_fwd(n)),  # type: ignore[arg-type]
            tail_b=tuple(self._part(cost(ops)) for ops in plan.tail_bwd(n)),  # type: ignore[arg-type]
            post_b=self._part(cost(plan.post_bwd(n))),
            bwd_setup=self._part(cost(plan.agg_bwd_setup(n))),
            self_b=self._part(cost(plan.self_bwd(n))),  # GAT's self-loop terms, after the local shard's VJP
            pre_b=self._part(cost(plan.pre_bwd(n))),
            shard_f=self._pairs(shard_f, has_edges),
            shard_b=self._pairs(shard_b, has_edges),
            one_f=self._part(np.where(e_all > 0, one_f, 0.0)),
            one_b=self._part(np.where(e_all > 0, one_b, 0.0)),
            accumulate=self._pairs(acc),
            one_accumulate=self._part(one_acc),
            gather=self._pairs(gather),
            one_prep=self._part(one_prep if P > 1 else 0.0),
            one_clone=self._part(cost(plan.copy_rows(n))),
            row_bytes=self._pairs(H * wb),
            shard_transient=self._pairs(shard_transient, has_edges),
            shard_bwd_transient=self._pairs(shard_bwd_transient, has_edges),
            shard_kept=self._pairs(shard_kept_bytes(plan, E, nd) if plan.keeps_edge_tensors else 0.0, has_edges),
            one_transient=self._part(one_transient),
            one_bwd_transient=self._part(one_bwd_transient),
            one_kept=self._part(one_kept),
            one_ext=self._part((n + halo_in) * wb if P > 1 else 0.0),  # one worker: no extended copy
            one_grad=self._part((n + halo_in) * wb),
            own_rows=self._part(n * wb),
            one_ops=self._part(np.count_nonzero(H, axis=1) + np.count_nonzero(H, axis=0)),
            mem=self._memory(mems),
            finalize_transient=self._part(finalize_transient_bytes(plan, n)),
        )

    def _temporaries(self, plan: LayerPlan, n: np.ndarray, E: np.ndarray, num_src: np.ndarray, e_all: np.ndarray,
                     halo_in: np.ndarray) -> tuple[Any, Any, Any, Any]:
        """Temporaries of the layer's shard kernels while they run: ``shard_transient``, ``shard_bwd_transient``
        (``[p][q]``) and oneshot's ``one_transient``, ``one_bwd_transient`` (per worker), with what the backward
        holds beside the kernel (SAGE mean's scaled gradient, GAT's self-loop terms, max's local row gradient)."""
        nd, wb = n[:, None], plan.width * self.b
        shard_transient = shard_transient_bytes(plan, E, nd, num_src)
        shard_bwd_transient = shard_bwd_transient_bytes(plan, E, nd, num_src)
        one_transient = shard_transient_bytes(plan, e_all, n, n + halo_in)
        one_bwd_transient = shard_bwd_transient_bytes(plan, e_all, n, n + halo_in)
        if plan.kind == "sage" and plan.case == 1:
            # mean: oneshot's shard_vjp divides the output gradient by the degree (the ring modes scale it
            # once for all shards, the local one included, and that copy is booked with the ring rounds)
            one_bwd_transient = one_bwd_transient + n * plan.width * self.b
        if plan.kind == "gat" and not plan.autograd:
            # the local shard's VJP (and oneshot's one) is followed, with self loops, by the self-loop terms' VJP
            # while its destination gradient is still held: that, the self-loop gradient and its concatenation,
            # and n x H temporaries (``held``); the peak of that phase may exceed the kernel's. The row gradient
            # (the kernel's outputs concatenated, or the zeros the unfused chunks add into) is alive through both:
            # the ring modes' local one, n (HC + H), until it is added into the source gradient (booked here);
            # oneshot's is the [own; halo] gradient, which the schedule books beside these (``one_grad``)
            hc, heads, b = plan.heads * plan.channels, plan.heads, self.b
            held = n * (3 * hc + 9 * heads) * b if plan.self_loops else 0.0
            shard_bwd_transient = with_diagonal(
                shard_bwd_transient, np.maximum(np.diag(shard_bwd_transient), held) + n * (hc + heads) * b
            )
            one_bwd_transient = np.maximum(one_bwd_transient, held)
        if plan.kind == "sage" and plan.case == 2:
            # max: the local shard's row gradient (csr_max_backward's fresh n x w output) lives until the ring
            # modes have added it into the source gradient; a remote one is the send buffer, oneshot's the
            # gradient of [own; halo] (both booked by the schedule)
            shard_bwd_transient = with_diagonal(shard_bwd_transient, np.diag(shard_bwd_transient) + n * wb)
        return shard_transient, shard_bwd_transient, one_transient, one_bwd_transient

    @staticmethod
    def _oneshot_output(mems: list[LayerMemory], transient: Any, kept: Any) -> tuple[list[LayerMemory], Any, Any]:
        """``ShardAggregate`` (oneshot, one worker) keeps its output (GCN: the state itself; max: the state too)
        only until its own backward returns, before ``HaloExchange``'s backward sends the halo gradients home,
        while the schedule frees ``agg_out`` after that: the kept output moves into the aggregation's kept bytes
        (``one_kept``, freed when the aggregation backward is done); an output that is the state is booked as a
        temporary of the aggregation until then. Returns the layer memories, ``one_transient`` and ``one_kept``."""
        out = np.array([m.agg_out for m in mems], dtype=np.float64)
        if mems[0].new_out:
            return [replace(m, agg_out=0) for m in mems], transient, kept + out
        return [replace(m, agg_state=0, agg_out=0) for m in mems], transient + out, kept + out

    def _memory(self, mems: list[LayerMemory]) -> Any:
        return PartMemory(mems) if self.vector else mems

    def _share_etas(self) -> dict[tuple, float]:
        """Co-located process efficiency (:meth:`CostModel.share_eff`) of every kind of compute segment,
        keyed like the first two fields of :class:`Interval` ``what`` (op mixes of an average part)."""
        st, b, c = self.stats, self.b, self.stats.num_classes
        S = float(min(self.placement.workers_per_host, self.placement.core_slots or 1))  # ranks computing at once
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
                "agg": L.self_init(n) + L.shard_fwd(e, n, h or n),
                "finalize": L.finalize(n),
                "post": L.post_fwd(n),
                "bn": tail_f[0] + tail_f[1],
                "tail": tail_f[2],
                "tail-bwd": tail_b[0],
                "bn-bwd": tail_b[1],
                "post-bwd": L.post_bwd(n),
                "bwd-setup": L.agg_bwd_setup(n),
                "agg-bwd": L.shard_bwd(e, n, h or n) + L.self_bwd(n),
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

        Adam's two moments; the transposes every shard caches on first use for the backward kernels
        (:func:`sarlab.simulator.workload.layer_memory.shard_cache_bytes`: linear aggregations' ``transpose_index``, the
        CSC of max and fused GAT); ``oneshot``'s merged shard (its int64 edge lists and row pointer,
        ``16 E + 8 (n + 1)``), built on first use; R-GCN's relation blocks of every shard (or of the merged
        shard), built in epoch 0 and kept (:func:`sarlab.simulator.workload.rgcn_layer.cache_bytes`); the first-use
        resident bytes of the aggregation families the model runs and of the first backward pass
        (:attr:`Profile.first_use_bytes`).
        """
        st, P = self.stats, self.N
        n = st.nodes_per_part.astype(np.float64)
        E = st.edges_per_shard.astype(np.float64)
        H = st.halo_rows.astype(np.float64)
        total = np.full(P, 2.0 * self.params * self.b)
        first_use = self.profile.first_use_bytes
        total += sum(first_use.get(family, 0.0) for family in {pl.family for pl in self.plans} | {"autograd"})
        # one cache of a kind per shard, built by the first aggregation backward that runs over it
        kinds = sorted({cache_kind(pl) for pl in self.plans if pl.records} - {""})
        rgcn = [pl for pl in self.plans if pl.kind == "rgcn"]
        if not self.ring and self.N > 1:  # oneshot's merged shard (one worker: its own shard)
            e_all, rows = E.sum(axis=1), n + H.sum(axis=1)
            total += 2 * INDEX_BYTES * e_all + INDEX_BYTES * (n + 1)  # its src, dst and row pointer
            for kind in kinds:
                total += shard_cache_bytes(kind, e_all, rows)
            if rgcn:
                total += rgcn_layer.cache_bytes(rgcn[0].relation_split(e_all, n, rows), rgcn[0].fused)
        else:
            num_src = np.where(np.eye(P, dtype=bool), n[:, None], H)
            for kind in kinds:
                total += np.asarray(shard_cache_bytes(kind, E, num_src)).sum(axis=1)
            if rgcn:
                blocks = rgcn_layer.cache_bytes(rgcn[0].relation_split(E, n[:, None], num_src), rgcn[0].fused)
                total += blocks.sum(axis=1)
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
