"""What every layer of a GCN / SAGE / GAT / R-GCN model computes and exchanges, in units the cost model prices.

The stages follow the engine (``sarlab/nn``, ``sarlab/core/aggregators.py``, ``sarlab/core/aggregate.py``):

* ``pre``: dense work that makes the rows to exchange (GCN ``h = x W`` scaled by ``deg^-1/2``; SAGE-pool
  ``relu(x W_p + b_p)``; GAT ``z = x W`` and the two attention scores);
* the aggregation, one call per source shard, then ``finalize`` (mean division, max clean-up, softmax
  normalisation);
* ``post``: dense work after it (GCN self term, scaling, bias; SAGE ``lin_l(agg) + lin_r(x)``; GAT bias);
* the ``tail`` of hidden layers: distributed BatchNorm (fp64 sums, two all-reduces forward, one backward),
  ReLU, and dropout whose mask is a hash of (seed, epoch, layer, node id, column) in int64 arithmetic.

R-GCN's aggregation is priced per (shard, relation) by :mod:`~sarlab.simulator.workload.rgcn_layer` (no ``pre``
stage: the input is exchanged as it is; ``post`` is the root weight and bias). Work is a list of
:class:`~sarlab.simulator.workload.ops.Op`; what a layer holds is :mod:`~sarlab.simulator.workload.layer_memory`.
Notation: ``n`` destination rows of this worker, ``e`` edges of one shard, ``b`` bytes per element, ``f_i``/``f_o``
layer input/output widths, ``w`` exchanged row width, ``H`` heads, ``C`` channels per head.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from sarlab.simulator.workload import rgcn_layer
from sarlab.simulator.workload.layer_backward import LayerBackward
from sarlab.simulator.workload.model import ModelSpec
from sarlab.simulator.workload.ops import (
    ACTIVE_ROW_FAMILIES,
    FP64,
    ZERO_FILL_PASSES,
    Number,
    Op,
    active_rows,
    spmm_passes,
)
from sarlab.simulator.workload.workload import RelationStats

#: GAT ``pre`` forward, bytes per element of a row's ``H C`` columns: the products ``z * a`` read ``z`` and write
#: (``a`` is cache resident) ``2 + 2``; the channel sums read ``H C`` at a quarter of a written pass's cost (a
#: read-only reduction; measured 0.24) ``0.25 + 0.25``; the two concatenations ``2 + 2``
GAT_PRE_FWD_HC = 8.5
#: ... and of its ``H`` columns: the sums write ``1 + 1``, the concatenations copy ``2`` and ``2 * 2``
GAT_PRE_FWD_H = 8.0


@dataclass(frozen=True)
class LayerPlan(LayerBackward):
    """One conv layer of a model, with the widths, exchange width and gradient case it implies.

    Args:
        index: layer number (0 = input layer).
        kind: ``gcn``/``sage``/``gat``/``rgcn``.
        in_dim: ``f_i``.
        out_dim: ``f_o``.
        width: columns of every exchanged row.
        case: 1 = sum/mean of copied rows (remote-row gradient ``A_q^T g`` computed locally, no re-fetch),
            2 = everything else (``sar`` re-fetches in backward).
        records: the aggregation records autograd (False when its input is the raw feature matrix and it
            has no parameters: SAGE mean/max's first layer, which then has no aggregation backward).
        needs_input_grad: the layer must return a gradient for its input (False for layer 0).
        hidden: followed by the BatchNorm -> ReLU -> dropout tail.
        heads: ``H``; channels: ``C`` per head (GAT).
        aggr: SAGE aggregator; fused: GAT fused kernels, R-GCN aggregate-first order (else one message per edge).
        batchnorm, dropout: the tail's settings.
        bytes_per_element: ``b``.
        params: trainable parameters (conv + BatchNorm affine).
        autograd: unfused GAT or per-edge R-GCN whose aggregation runs under torch autograd (see :meth:`in_run`).
        relations: R-GCN: the partition's per-relation counts (:meth:`with_relations`; None: one relation
            reaching rows at random).
        self_loops: GAT: every node also attends to itself (:meth:`self_init`, :meth:`self_bwd`).
    """

    index: int
    kind: str
    in_dim: int
    out_dim: int
    width: int
    case: int
    records: bool
    needs_input_grad: bool
    hidden: bool
    heads: int = 1
    channels: int = 0
    aggr: str = "mean"
    fused: bool = False
    batchnorm: bool = True
    dropout: float = 0.0
    bytes_per_element: int = 4
    params: int = 0
    autograd: bool = False
    relations: RelationStats | None = None
    self_loops: bool = True

    @property
    def family(self) -> str:
        """The profile op family of one shard's aggregation.

        GAT: ``gat_fused`` (C++ kernels), ``gat_unfused`` (the engine's streamed torch kernels, ``sar``: a
        no-grad forward per shard and a backward that recomputes the attention itself) or ``gat_autograd``
        (unfused under torch autograd, which keeps the graph: ``sa``, ``oneshot``, one worker).
        """
        if self.kind == "gat":
            if self.fused:
                return "gat_fused"
            return "gat_autograd" if self.autograd else "gat_unfused"
        if self.kind == "rgcn":
            return "spmm"
        return "spmm" if self.case == 1 else "max_aggr"

    @property
    def agg_width(self) -> int:
        """Columns of the aggregation output (``H*C`` for GAT, ``f_o`` for R-GCN, else the exchanged width)."""
        if self.kind == "rgcn":
            return self.out_dim
        return self.heads * self.channels if self.kind == "gat" else self.width

    def in_run(self, mode: str, workers: int) -> LayerPlan:
        """This layer as the engine runs it in ``mode`` on ``workers`` workers (sets :attr:`autograd`)."""
        autograd = self.kind in ("gat", "rgcn") and not self.fused and (mode != "sar" or workers == 1)
        return replace(self, autograd=autograd)

    def with_relations(self, relations: RelationStats | None) -> LayerPlan:
        """This R-GCN layer priced with a partition's per-relation counts (other kinds: unchanged)."""
        return replace(self, relations=relations) if self.kind == "rgcn" else self

    def relation_split(self, edges: Number, n: Number, num_src: Number) -> rgcn_layer.RelationSplit:
        """R-GCN: the shards ``(edges, n, num_src)`` split by relation
        (:func:`sarlab.simulator.workload.rgcn_layer.relation_split`)."""
        return rgcn_layer.relation_split(self.relations, edges, n, num_src)

    def rgcn_args(self) -> tuple[int, int, int, bool, bool]:
        """``(f_i, f_o, b, fused, autograd)``: the arguments of :mod:`sarlab.simulator.workload.rgcn_layer`'s op and
        byte counts."""
        return self.in_dim, self.out_dim, self.bytes_per_element, self.fused, self.autograd

    @property
    def rows_need_grad(self) -> bool:
        """The exchanged rows need a gradient: False where they are the layer's input and it needs none (R-GCN's
        layer 0 exchanges the features as they are; SAGE mean/max's layer 0 records no aggregation at all), so that
        ``oneshot`` returns no halo gradients (autograd never runs ``HaloExchange``'s backward). The ring modes'
        aggregation Function returns them all the same."""
        exchanges_input = self.kind == "rgcn" or (self.kind == "sage" and self.aggr != "pool")
        return self.needs_input_grad or not exchanges_input

    @property
    def keeps_edge_tensors(self) -> bool:
        """Per-edge tensors survive from forward to backward (the autograd graph of unfused GAT, per-edge R-GCN)."""
        return self.autograd

    def whole_graph_backward(self, mode: str) -> bool:
        """``sa`` with kept per-edge tensors runs one autograd backward over all shards, then returns the
        gradients (``SequentialAggregate._backward_through_graph``)."""
        return mode == "sa" and self.autograd

    # ---------------------------------------------------------------------------------- forward
    def pre_fwd(self, n: Number) -> list[Op]:
        """Dense work before the aggregation on ``n`` rows.

        GAT (``GATConv.forward`` up to the aggregation): ``z = x W``; ``s_src, s_dst = sum_c z * a``; the exchanged
        rows ``[z, s_src]`` and the destination rows ``[z, s_src, s_dst]`` (two ``torch.cat``), in 6 elementwise calls
        of :data:`GAT_PRE_FWD_HC` ``H C`` + :data:`GAT_PRE_FWD_H` ``H`` bytes-per-element of each row.
        """
        b = self.bytes_per_element
        if self.kind == "gcn":  # h = lin(x); h * deg^-1/2
            return [
                Op("gemm", 2.0 * n * self.in_dim * self.out_dim),
                Op("elementwise", 2.0 * n * self.out_dim * b),
            ]
        if self.kind == "sage" and self.aggr == "pool":  # relu(lin(x))
            return [
                Op("gemm", 2.0 * n * self.in_dim * self.in_dim),
                Op("elementwise", 2.0 * n * self.in_dim * b),
            ]
        if self.kind == "gat":
            hc, heads = self.heads * self.channels, self.heads
            return [
                Op("gemm", 2.0 * n * self.in_dim * hc),
                Op("elementwise", n * (GAT_PRE_FWD_HC * hc + GAT_PRE_FWD_H * heads) * b, calls=6),
            ]
        return []

    def shard_fwd(self, edges: Number, n: Number, num_src: Number) -> list[Op]:
        """Aggregation of one shard of ``edges`` in-edges from ``num_src`` source rows into the running
        state of ``n`` rows.

        GAT: one op of its family and nothing else. :mod:`sarlab.real.calibration.gatbench` times the engine's
        whole ``AttentionAggregation.accumulate`` per shard, so the family's rate already holds what runs around the
        kernel: the contiguous copies of ``s_dst`` and ``s_src`` (``kernels/gat.py`` ``gat_forward_shard``), the
        unfused form's ``[z, 1]`` rows and copies (``kernels/torch_backend.py`` ``gat_forward_shard``) and its
        per-chunk work.
        """
        if self.kind == "rgcn":
            return rgcn_layer.shard_fwd(self.relation_split(edges, n, num_src), *self.rgcn_args())
        b = self.bytes_per_element
        gathered = num_src * self.width * b  # whole exchanged rows (GAT: z and the score column, as gatbench's sweep)
        rows = active_rows(edges, n) if self.family in ACTIVE_ROW_FAMILIES else n
        return [Op(self.family, edges * self.agg_width_in, rows=rows * self.agg_width, gather_bytes=gathered,
                   edges=edges * self.visits_per_edge)]

    def agg_init(self, n: Number) -> list[Op]:
        """The running state of a linear aggregation (``torch.zeros``, n x w), which the shards are then
        added into in place (R-GCN: its ``n x f_o`` state); the other families' calibrated shard ops allocate their
        own outputs."""
        if self.family != "spmm":
            return []
        return [Op("elementwise", ZERO_FILL_PASSES * n * self.agg_width * self.bytes_per_element)]

    def self_init(self, n: Number) -> list[Op]:
        """GAT's self-loop terms put into the initial state (``AttentionAggregation.init``, before any shard).

        .. math:: e = \\mathrm{leaky}(s_{dst} + s_{src}),\\quad m = e,\\quad w = \\exp(e - m),\\quad acc = w\\,z

        Bytes per element of the ``n`` destination rows (reads + writes): ``s_dst + s_src`` ``3 H b``, leaky ReLU
        ``2 H b``, ``m``'s clone ``2 H b``, ``e - m`` ``3 H b``, ``exp`` ``2 H b``, ``w z`` ``(2 H C + H) b``:
        ``(2 H C + 13 H) b`` in 6 calls (the score and ``z`` columns are strided views of the destination rows,
        counted by the elements they hold). The same ops run under autograd. Without self loops, or for other
        models: nothing (the empty state is not priced, as before).
        """
        if self.kind != "gat" or not self.self_loops:
            return []
        hc, heads = self.heads * self.channels, self.heads
        return [Op("elementwise", n * (2.0 * hc + 13.0 * heads) * self.bytes_per_element, calls=6)]

    @property
    def visits_per_edge(self) -> int:
        """Edge visits (``Op.edges``) per edge of a shard: GAT's heads (each scores, normalises and weighs the edge),
        the C++ SpMM's passes over the row's edges (:func:`~sarlab.simulator.workload.ops.spmm_passes`), else one."""
        if self.kind == "gat":
            return self.heads
        if self.family == "spmm":
            return spmm_passes(self.agg_width_in, self.bytes_per_element)
        return 1

    @property
    def agg_width_in(self) -> int:
        """Features gathered per edge (the exchanged rows without GAT's score column; R-GCN: ``f_i``)."""
        return self.heads * self.channels if self.kind == "gat" else self.width

    def finalize(self, n: Number) -> list[Op]:
        """Turning the state into the output: mean division, max clean-up, softmax normalisation."""
        b, w = self.bytes_per_element, self.agg_width
        if self.kind == "rgcn":  # the state is the output
            return []
        if self.kind == "gat":  # acc / where(l > 0, l, 1); under autograd gatbench's timed forward runs it
            return [] if self.autograd else [Op("elementwise", 3.0 * n * w * b, calls=2)]
        if self.case == 2:
            return [Op("elementwise", 4.0 * n * w * b, calls=2)]
        if self.kind == "sage":  # mean
            return [Op("elementwise", 2.0 * n * w * b)]
        return []

    def post_fwd(self, n: Number) -> list[Op]:
        """Dense work after the aggregation."""
        b = self.bytes_per_element
        if self.kind == "gcn":  # (agg + h) * deg^-1/2 + bias
            return [Op("elementwise", 7.0 * n * self.out_dim * b, calls=3)]
        if self.kind == "sage":  # lin_l(agg) + lin_r(x)
            return [
                Op("gemm", 2.0 * 2.0 * n * self.in_dim * self.out_dim, calls=2),
                Op("elementwise", 3.0 * n * self.out_dim * b),
            ]
        if self.kind == "rgcn":  # x W_root, + aggregation, + bias
            return [
                Op("gemm", 2.0 * n * self.in_dim * self.out_dim),
                Op("elementwise", 2.0 * 3.0 * n * self.out_dim * b, calls=2),
            ]
        return [Op("elementwise", 2.0 * n * self.out_dim * b)]  # gat: + bias

    def tail_fwd(self, n: Number) -> tuple[list[Op], list[Op], list[Op]]:
        """Hidden-layer tail, split at BatchNorm's two all-reduces: (sum, centred squares, rest).

        Bytes per element: BN sums in fp64 (``b + 8``), centred squares (``b + 56``), normalise and affine
        (``6b + 48``); ReLU ``2b``; the dropout hash ~ 12 int64 passes (``200``) and the masking ``6b + 50``.
        """
        b, f = self.bytes_per_element, self.out_dim
        if not self.hidden:
            return [], [], []
        stats: list[Op] = []
        var: list[Op] = []
        rest: list[Op] = []
        if self.batchnorm:
            stats = [Op("elementwise", (b + FP64) * n * f)]
            var = [Op("elementwise", (b + 7 * FP64) * n * f, calls=4)]
            rest = [Op("elementwise", (6 * b + 6 * FP64) * n * f, calls=6)]
        rest.append(Op("elementwise", 2.0 * b * n * f))
        if self.dropout > 0:
            rest.append(Op("elementwise", (25 * FP64 + 6 * b + 50) * n * f, calls=20))
        return stats, var, rest

    # --------------------------------------------------------------------------------- backward
    def accumulate_grad(self, rows: Number) -> list[Op]:
        """Adding received halo-row gradients into the local gradient (index_add over ``rows`` rows)."""
        return [Op("elementwise", 3.0 * rows * self.width * self.bytes_per_element)]

    def gather_rows(self, rows: Number) -> list[Op]:
        """Gathering the ``rows`` rows a peer needs into a contiguous send buffer (index_select)."""
        return [Op("elementwise", 2.0 * rows * self.width * self.bytes_per_element)]

    def copy_rows(self, rows: Number) -> list[Op]:
        """Copying ``rows`` rows (``oneshot``: own rows into the extended matrix, gradient clone)."""
        return [Op("elementwise", 2.0 * rows * self.width * self.bytes_per_element)]


def activation_bytes(plans: list[LayerPlan], nodes: Number) -> Number:
    """Bytes of one ``nodes x widest-layer`` activation (input, output or aggregation width): the size
    :meth:`sarlab.simulator.hardware.profile.Profile.scale_at` keys the compute scale by."""
    widest = max(max(p.in_dim, p.out_dim, p.agg_width) for p in plans)
    return np.asarray(nodes, dtype=np.float64) * widest * plans[0].bytes_per_element


def layer_plans(spec: ModelSpec, feature_dim: int, num_classes: int) -> list[LayerPlan]:
    """The conv layers of ``spec`` on a graph with ``feature_dim`` inputs and ``num_classes`` classes.

    Widths ``[F, hidden, ..., hidden, classes]``. GAT hidden layers have ``heads`` heads of
    ``hidden // heads`` channels (concatenated), the output layer one head of ``classes`` channels. R-GCN
    (``spec.model == "rgcn"``, ``spec.relations`` relations, one weight each): case 2, the input exchanged.
    """
    plans = []
    in_dim = feature_dim
    b = spec.bytes_per_element
    for i in range(spec.layers):
        last = i == spec.layers - 1
        out_dim = num_classes if last else spec.hidden
        heads, channels = 1, 0
        if spec.model == "gat":
            heads = 1 if last else spec.heads
            channels = out_dim // heads
            width = heads * channels + heads  # [z, s_src]
            case = 2
            params = in_dim * heads * channels + 3 * heads * channels
        elif spec.model == "rgcn":
            width, case = in_dim, 2
            params = (spec.relations + 1) * in_dim * out_dim + out_dim
        elif spec.model == "sage":
            width = in_dim
            case = 1 if spec.aggr == "mean" else 2
            params = 2 * in_dim * out_dim + out_dim + (in_dim * in_dim + in_dim if spec.aggr == "pool" else 0)
        else:
            width = out_dim
            case = 1
            params = in_dim * out_dim + out_dim
        if not last and spec.batchnorm:
            params += 2 * out_dim
        raw_input_aggregation = spec.model == "sage" and spec.aggr != "pool"
        plans.append(
            LayerPlan(
                index=i,
                kind=spec.model,
                in_dim=in_dim,
                out_dim=out_dim,
                width=width,
                case=case,
                records=not (i == 0 and raw_input_aggregation),
                needs_input_grad=i > 0,
                hidden=not last,
                heads=heads,
                channels=channels,
                aggr=spec.aggr,
                fused=spec.fused,
                batchnorm=spec.batchnorm,
                dropout=0.0 if last else spec.dropout,
                bytes_per_element=b,
                params=params,
                self_loops=spec.self_loops,
            )
        )
        in_dim = out_dim
    return plans
