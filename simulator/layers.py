"""What every layer of a GCN / SAGE / GAT model computes, exchanges and keeps, in units the cost model prices.

The stages follow the engine (``sarlab/nn``, ``sarlab/aggregators.py``, ``sarlab/aggregate.py``):

* ``pre``: dense work that makes the rows to exchange (GCN ``h = x W`` scaled by ``deg^-1/2``; SAGE-pool
  ``relu(x W_p + b_p)``; GAT ``z = x W`` and the two attention scores);
* the aggregation, one call per source shard, then ``finalize`` (mean division, max clean-up, softmax
  normalisation);
* ``post``: dense work after it (GCN self term, scaling, bias; SAGE ``lin_l(agg) + lin_r(x)``; GAT bias);
* the ``tail`` of hidden layers: distributed BatchNorm (fp64 sums, two all-reduces forward, one backward),
  ReLU, and dropout whose mask is a hash of (seed, epoch, layer, node id, column) in int64 arithmetic.

Work is a list of :class:`Op`; memory is a :class:`LayerMemory` of byte counts. Notation: ``n``
destination rows of this worker, ``e`` edges of one shard, ``b`` bytes per element, ``f_i``/``f_o``
layer input/output widths, ``w`` exchanged row width, ``H`` heads, ``C`` channels per head.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Union

import numpy as np

Number = Union[float, np.ndarray]

DTYPE_BYTES = {"float32": 4, "float64": 8, "bfloat16": 2, "float16": 2}
MODELS = ("gcn", "sage", "gat")
SAGE_AGGRS = ("mean", "max", "pool")
MODES = ("sar", "sa", "oneshot")
FP64 = 8  # BatchNorm statistics and the dropout hash run in 64-bit arithmetic whatever the dtype
#: the engine's streamed unfused GAT (``sar``) materialises per-edge tensors for at most this many edges at a
#: time, a shard's destination rows in chunks (``UNFUSED_CHUNK_EDGES`` in ``sarlab/nn/gat.py``)
UNFUSED_CHUNK_EDGES = 1 << 15


def edge_chunks(edges: Number, chunk: int = UNFUSED_CHUNK_EDGES) -> tuple[Number, Number]:
    """(edges per chunk at most, number of chunks) of a shard of ``edges`` edges processed in chunks."""
    e = np.asarray(edges, dtype=np.float64)
    return np.minimum(e, chunk), np.maximum(np.ceil(e / chunk), 1.0)


#: op families whose per-row forward work (``Op.rows``) is done only for destination rows with an edge in the
#: shard: the fused C++ GAT kernel skips a row without one (``kernels/csrc/gat.cpp``), and the engine adds a
#: linear shard into the running state in place (``addmm_``), which leaves rows without an edge untouched
#: (EPYC VM, 20k x 256 state: 10.1 ms with every row hit, 4.6 ms with half of them); the torch formulations
#: touch every row of their fresh outputs
ACTIVE_ROW_FAMILIES = ("gat_fused", "spmm")
#: element-bytes of work per byte of a fresh zero-filled tensor (``torch.zeros``: a write and the pages'
#: first-touch faults; it ran at 0.75-0.81 of the time of an add of the same shape on the EPYC VM, whose 12
#: bytes per element the elementwise rate is fitted in)
ZERO_FILL_PASSES = 2.3


def active_rows(edges: Number, n: Number) -> Number:
    """Expected destination rows with at least one of ``edges`` edges spread at random over ``n`` rows:
    :math:`n (1 - e^{-e/n})`."""
    e, rows = np.asarray(edges, dtype=np.float64), np.asarray(n, dtype=np.float64)
    return rows * -np.expm1(-e / np.maximum(rows, 1.0))


@dataclass(frozen=True)
class Op:
    """An amount of work of one op family (priced by :class:`simulator.costs.CostModel`).

    Args:
        family: a key of :data:`simulator.profile.OP_UNITS`.
        work: units of work (FLOP, edge*feature, bytes...), scalar or per-shard array.
        calls: number of calls (each pays the family's fixed overhead).
        backward: priced with the family's backward ratio.
        rows: row*feature units of the op's dense output (sparse families: the destination rows it
            writes), priced at the family's ``row_rate``.
        gather_bytes: bytes of the matrix whose rows the edge work gathers at random (sparse families);
            once it outgrows the last-level cache the gathers run at the family's ``mem_rate``.
        fresh: bytes of an out-of-place result on new pages, priced at the family's ``fresh_rate``
            (the sparse product's ``A^T g`` send buffers; its in-place calls have none).
    """

    family: str
    work: Number
    calls: int = 1
    backward: bool = False
    rows: Number = 0.0
    gather_bytes: Number = 0.0
    fresh: Number = 0.0


@dataclass(frozen=True)
class ModelSpec:
    """A model configuration (the configuration columns of a metric record).

    Args:
        model: ``gcn``, ``sage`` or ``gat``.
        layers: number of conv layers ``L`` (>= 1).
        hidden: hidden width (GAT: the concatenated width, ``heads * hidden // heads``).
        heads: attention heads of GAT's hidden layers (the output layer has one head).
        aggr: SAGE aggregator: ``mean`` (case 1), ``max`` or ``pool`` (case 2).
        fused: GAT uses the fused attention kernels (no per-edge tensors).
        batchnorm: hidden layers apply distributed BatchNorm.
        dropout: dropout probability of hidden layers (0 disables the op).
        dtype: ``float32``/``float64``/``bfloat16``.
    """

    model: str = "gcn"
    layers: int = 2
    hidden: int = 64
    heads: int = 1
    aggr: str = "mean"
    fused: bool = False
    batchnorm: bool = True
    dropout: float = 0.5
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {MODELS}, got {self.model!r}")
        if self.layers < 1 or self.hidden < 1 or self.heads < 1:
            raise ValueError("layers, hidden and heads must be >= 1")
        if self.model == "sage" and self.aggr not in SAGE_AGGRS:
            raise ValueError(f"sage aggr must be one of {SAGE_AGGRS}, got {self.aggr!r}")
        if self.model == "gat" and self.hidden % self.heads:
            raise ValueError(f"GAT hidden size {self.hidden} must be divisible by heads {self.heads}")
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype must be one of {tuple(DTYPE_BYTES)}, got {self.dtype!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    @property
    def bytes_per_element(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def label(self) -> str:
        """Short name: ``gcn``, ``sage-max``, ``gat-fused``..."""
        if self.model == "sage":
            return f"sage-{self.aggr}"
        if self.model == "gat":
            return "gat-fused" if self.fused else "gat"
        return self.model


@dataclass(frozen=True)
class LayerMemory:
    """Bytes one layer allocates on a worker, by lifetime.

    Args:
        pre_peak: temporaries of ``pre`` (freed when it ends).
        exchange: the matrix whose rows are exchanged, when ``pre`` makes a new one (0 when it is the
            layer input itself).
        exchange_kept: ``pre``'s own autograd keeps the exchanged matrix (SAGE-pool's ReLU output).
        pre_saved: other tensors ``pre`` keeps for backward (GAT's attention scores).
        agg_state: the aggregation's running state.
        agg_out: the aggregation output (a new tensor when ``new_out``, else the state itself).
        new_out: ``finalize`` allocates the output (mean, max, GAT) instead of returning the state (sum).
        agg_out_kept: the output is kept for backward even without the aggregation's own autograd record
            (SAGE's ``lin_l`` saves its input).
        post_peak: temporaries of ``post``.
        conv_out: the conv output (BatchNorm / ReLU input, or the logits of the last layer).
        bn_peak: fp64 temporaries of BatchNorm's forward; bn_saved: its saved normalised input.
        relu_saved: ReLU's saved output.
        dropout_peak: int64 temporaries of the dropout hash; dropout_saved: the saved mask.
        next_input: the tail's output (the next layer's input, kept until that layer's backward).
        grad_tail, grad_post, grad_agg, grad_pre: activation gradients alive (at their most) during the
            backward of the tail, of ``post``, of the aggregation and of ``pre`` (:meth:`LayerPlan.memory`),
            besides what those phases book themselves (the aggregation's source gradient and buffers).
        agg_bwd_hold: held through the aggregation backward besides the source gradient (SAGE-mean's
            scaled output gradient; GAT's destination-input gradient).
    """

    pre_peak: int
    exchange: int
    exchange_kept: bool
    pre_saved: int
    agg_state: int
    agg_out: int
    new_out: bool
    agg_out_kept: bool
    post_peak: int
    conv_out: int
    bn_peak: int
    bn_saved: int
    relu_saved: int
    dropout_peak: int
    dropout_saved: int
    next_input: int
    grad_tail: int
    grad_post: int
    grad_agg: int
    grad_pre: int
    agg_bwd_hold: int = 0


@dataclass(frozen=True)
class LayerPlan:
    """One conv layer of a model, with the widths, exchange width and gradient case it implies.

    Args:
        index: layer number (0 = input layer).
        kind: ``gcn``/``sage``/``gat``.
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
        aggr: SAGE aggregator; fused: GAT fused kernels.
        batchnorm, dropout: the tail's settings.
        bytes_per_element: ``b``.
        params: trainable parameters (conv + BatchNorm affine).
        autograd: unfused GAT whose aggregation runs under torch autograd (see :meth:`in_run`).
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
        return "spmm" if self.case == 1 else "max_aggr"

    @property
    def agg_width(self) -> int:
        """Columns of the aggregation output (``H*C`` for GAT, else the exchanged width)."""
        return self.heads * self.channels if self.kind == "gat" else self.width

    def in_run(self, mode: str, workers: int) -> LayerPlan:
        """This layer as the engine runs it in ``mode`` on ``workers`` workers (sets :attr:`autograd`)."""
        autograd = self.kind == "gat" and not self.fused and (mode != "sar" or workers == 1)
        return replace(self, autograd=autograd)

    @property
    def keeps_edge_tensors(self) -> bool:
        """Per-edge tensors survive from forward to backward (the autograd graph of unfused GAT)."""
        return self.autograd

    def whole_graph_backward(self, mode: str) -> bool:
        """``sa`` with kept per-edge tensors runs one autograd backward over all shards, then returns the
        gradients (``SequentialAggregate._backward_through_graph``)."""
        return mode == "sa" and self.autograd

    # ---------------------------------------------------------------------------------- forward
    def pre_fwd(self, n: Number) -> list[Op]:
        """Dense work before the aggregation on ``n`` rows."""
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
        if self.kind == "gat":  # z = lin(x); s_src, s_dst = sum_c z * a
            hc = self.heads * self.channels
            return [
                Op("gemm", 2.0 * n * self.in_dim * hc),
                Op("elementwise", 2.0 * 3.0 * n * hc * b, calls=4),
            ]
        return []

    def shard_fwd(self, edges: Number, n: Number, num_src: Number) -> list[Op]:
        """Aggregation of one shard of ``edges`` in-edges from ``num_src`` source rows into the running
        state of ``n`` rows. GAT through the kernels also copies its strided source inputs (``z``,
        ``s_src``) into contiguous ones on every kernel call: once per shard fused, once per chunk unfused.
        """
        b = self.bytes_per_element
        gathered = num_src * self.agg_width_in * b
        rows = active_rows(edges, n) if self.family in ACTIVE_ROW_FAMILIES else n
        ops = [Op(self.family, edges * self.agg_width_in, rows=rows * self.agg_width, gather_bytes=gathered)]
        if self.kind == "gat" and not self.autograd:
            calls = 1.0 if self.fused else edge_chunks(edges)[1]
            copied = calls * num_src * (self.agg_width + self.heads) + n * self.heads
            ops.append(Op("elementwise", 2.0 * copied * b))
        return ops

    def agg_init(self, n: Number) -> list[Op]:
        """The running state of a linear aggregation (``torch.zeros``, n x w), which the shards are then
        added into in place; the other families' calibrated shard ops allocate their own outputs."""
        if self.family != "spmm":
            return []
        return [Op("elementwise", ZERO_FILL_PASSES * n * self.agg_width * self.bytes_per_element)]

    @property
    def agg_width_in(self) -> int:
        """Features gathered per edge (the exchanged rows without GAT's score column)."""
        return self.heads * self.channels if self.kind == "gat" else self.width

    def finalize(self, n: Number) -> list[Op]:
        """Turning the state into the output: mean division, max clean-up, softmax normalisation."""
        b, w = self.bytes_per_element, self.agg_width
        if self.kind == "gat":
            return [Op("elementwise", 3.0 * n * w * b, calls=2)]
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
    def tail_bwd(self, n: Number) -> tuple[list[Op], list[Op]]:
        """Tail backward split at BatchNorm's all-reduce: (dropout, ReLU, BN sums), (BN input gradient)."""
        b, f = self.bytes_per_element, self.out_dim
        if not self.hidden:
            return [], []
        first = [Op("elementwise", 3.0 * b * n * f, backward=True)]
        if self.dropout > 0:
            first.append(Op("elementwise", 5.0 * b * n * f, calls=2, backward=True))
        second: list[Op] = []
        if self.batchnorm:
            first.append(Op("elementwise", (5 * b + 2 * FP64) * n * f, calls=3, backward=True))
            second = [Op("elementwise", 11.0 * b * n * f, calls=4, backward=True)]
        return first, second

    def post_bwd(self, n: Number) -> list[Op]:
        """Backward of ``post``: gradient w.r.t. the aggregation output and the dense parameters."""
        b = self.bytes_per_element
        if self.kind == "gcn":
            return [Op("elementwise", 3.0 * n * self.out_dim * b, calls=2, backward=True)]
        if self.kind == "sage":
            # dW_l, dW_r always; d(agg) = g W_l^T when the aggregation records; dx = g W_r^T when needed
            gemms = 2 + int(self.records) + int(self.needs_input_grad)
            return [
                Op("gemm", gemms * 2.0 * n * self.in_dim * self.out_dim, calls=gemms),
                Op("elementwise", 1.0 * n * self.out_dim * b),
            ]
        return [Op("elementwise", 1.0 * n * self.out_dim * b, backward=True)]

    def agg_bwd_setup(self, n: Number) -> list[Op]:
        """Start of the aggregation backward: zeroed source gradient, mean scaling, GAT's ``delta``."""
        b, w = self.bytes_per_element, self.width
        ops = [Op("elementwise", 1.0 * n * w * b)]
        if self.kind == "sage" and self.case == 1:
            ops.append(Op("elementwise", 2.0 * n * w * b))
        if self.kind == "gat":
            ops.append(Op("elementwise", 3.0 * n * self.agg_width * b))
        return ops

    def shard_bwd(self, edges: Number, n: Number, num_src: Number, in_place: bool = False) -> list[Op]:
        """Backward of one shard: ``A_q^T g`` (case 1, output ``num_src`` rows), else the VJP.

        ``A^T g`` is added in place into the source gradient for the ring modes' local shard
        (``in_place``: like the forward, only the rows with an edge are touched) and is a fresh
        ``num_src x w`` result otherwise (a send buffer, or oneshot's gradient of its extended rows).
        A VJP that rematerializes (SAGE max/pool's regathered messages, the GAT kernels' recomputed
        attention) does so inside the backward op the calibration times, so its backward ratio covers it.
        """
        if self.case == 1:  # A^T g gathers rows of the n x w output gradient
            b = self.bytes_per_element
            gathered = n * self.width * b
            fresh = 0.0 if in_place else num_src * self.width * b
            rows = active_rows(edges, num_src) * self.width
            return [Op("spmm", edges * self.width, rows=rows, backward=True, gather_bytes=gathered, fresh=fresh)]
        fwd = self.shard_fwd(edges, n, num_src)[:1]
        ops = [replace(o, backward=True, rows=o.rows + num_src * self.width) for o in fwd]
        if self.kind == "gat" and not self.autograd:  # input copies; unfused adds each chunk's gradients in
            b, w = self.bytes_per_element, self.agg_width + self.heads
            adds = 0.0 if self.fused else 3.0 * edge_chunks(edges)[1] * num_src * w
            ops.append(Op("elementwise", (2.0 * (num_src * w + n * self.heads) + adds) * b))
        return ops

    def pre_bwd(self, n: Number) -> list[Op]:
        """Backward of ``pre``: weight gradient, and the input gradient when needed."""
        b = self.bytes_per_element
        grads = 2 if self.needs_input_grad else 1
        if self.kind == "gcn":
            return [
                Op("elementwise", 5.0 * n * self.out_dim * b, calls=2, backward=True),
                Op("gemm", grads * 2.0 * n * self.in_dim * self.out_dim, calls=grads),
            ]
        if self.kind == "sage":
            ops = []
            if self.aggr == "pool":
                ops = [
                    Op("elementwise", 3.0 * n * self.in_dim * b, backward=True),
                    Op("gemm", grads * 2.0 * n * self.in_dim * self.in_dim, calls=grads),
                ]
            if self.needs_input_grad:  # the two contributions to dx
                ops.append(Op("elementwise", 3.0 * n * self.in_dim * b))
            return ops
        hc = self.heads * self.channels
        return [
            Op("elementwise", 6.0 * n * hc * b, calls=4, backward=True),
            Op("gemm", grads * 2.0 * n * self.in_dim * hc, calls=grads),
        ]

    def accumulate_grad(self, rows: Number) -> list[Op]:
        """Adding received halo-row gradients into the local gradient (index_add over ``rows`` rows)."""
        return [Op("elementwise", 3.0 * rows * self.width * self.bytes_per_element)]

    def gather_rows(self, rows: Number) -> list[Op]:
        """Gathering the ``rows`` rows a peer needs into a contiguous send buffer (index_select)."""
        return [Op("elementwise", 2.0 * rows * self.width * self.bytes_per_element)]

    def copy_rows(self, rows: Number) -> list[Op]:
        """Copying ``rows`` rows (``oneshot``: own rows into the extended matrix, gradient clone)."""
        return [Op("elementwise", 2.0 * rows * self.width * self.bytes_per_element)]

    # ----------------------------------------------------------------------------------- memory
    def memory(self, n: int) -> LayerMemory:
        """Bytes this layer allocates on a worker with ``n`` rows (see :class:`LayerMemory`)."""
        b, fi, fo, w = self.bytes_per_element, self.in_dim, self.out_dim, self.width
        aw = self.agg_width
        pre_peak = exchange = pre_saved = 0
        exchange_kept = False
        if self.kind == "gcn":
            pre_peak, exchange = n * fo * b, n * fo * b  # h, then h * deg^-1/2
            # (agg + h) and its product with deg^-1/2 coexist; the product plus bias is the output
            agg_state, new_out, post_peak = n * fo * b, False, n * fo * b
        elif self.kind == "sage":
            if self.aggr == "pool":
                pre_peak, exchange, exchange_kept = n * fi * b, n * fi * b, True
            agg_state = (2 if self.case == 2 else 1) * n * fi * b  # max keeps (best, count)
            new_out, post_peak = True, 2 * n * fo * b
        else:
            hc = self.heads * self.channels
            # rows = [z, s_src] (exchanged); z (saved by the score product) and dst_x = [rows, s_dst]
            exchange, pre_saved = n * w * b, n * (2 * hc + 2 * self.heads) * b
            exchange_kept = True  # the attention's input is needed by the backward in every mode
            # hidden layers: a view of the output plus bias; the output layer first averages its head
            agg_state, new_out = n * (hc + 2 * self.heads) * b, True
            post_peak = 0 if self.hidden else n * fo * b
        f = fo
        hidden = self.hidden
        bn = hidden and self.batchnorm
        drop = hidden and self.dropout > 0
        return LayerMemory(
            pre_peak=pre_peak,
            exchange=exchange,
            exchange_kept=exchange_kept,
            pre_saved=pre_saved,
            agg_state=agg_state,
            agg_out=n * aw * b,
            new_out=new_out,
            agg_out_kept=self.kind == "sage",
            post_peak=post_peak,
            conv_out=n * fo * b,
            bn_peak=2 * n * f * FP64 if bn else 0,
            bn_saved=n * f * b if bn else 0,
            relu_saved=n * f * b if hidden else 0,
            dropout_peak=3 * n * f * FP64 if drop else 0,
            dropout_saved=n * f * b if drop else 0,
            next_input=n * f * b if drop else 0,
            **self._gradient_levels(n),
            agg_bwd_hold=(
                n * (aw + 2 * self.heads) * b
                if self.kind == "gat"
                else n * w * b
                if self.kind == "sage" and self.case == 1
                else 0
            ),
        )

    def _gradient_levels(self, n: int) -> dict[str, int]:
        """Activation gradients alive in each backward phase, following autograd's buffers.

        ``G`` is the gradient of the layer's output (after the tail), ``n x f_o``; the last layer's comes
        from the loss (booked by the epoch). Autograd frees a node's incoming gradients once the node has
        run and adds a second gradient for the same tensor into the first in place.

        * tail: the incoming and the outgoing gradient of each op (ReLU, dropout): ``2 n f_o``; BatchNorm's
          input gradient ``(g - mean_g - xhat mean_gx) * s`` holds three more ``n f_o`` temporaries.
        * post: GCN ``g * deg^-1/2`` next to ``g``; SAGE ``g`` with ``g W_r^T`` (input gradient, kept
          until the aggregation's is added) and ``g W_l^T`` (the aggregation's output gradient), ``n f_i``
          each; GAT ``g`` (bias and reshape pass it through).
        * aggregation: its output gradient (GCN ``n f_o``; SAGE ``n f_i`` + the waiting ``g W_r^T``; GAT
          ``n H C``).
        * pre: GCN ``g``, ``g deg^-1/2`` then ``g deg^-1/2`` and ``dx`` (``n f_i``); SAGE the input gradient
          (pool: its ReLU and projection gradients too); GAT the aggregation's row and destination
          gradients (``n w``, ``n (w + H)``), the score products' ``n H C`` gradients and ``dx``.
        """
        b, fi, fo, w = self.bytes_per_element, self.in_dim, self.out_dim, self.width
        dx = fi if self.needs_input_grad else 0
        hidden = self.hidden
        tail = (2 + (3 if self.batchnorm else 0)) * n * fo if hidden else 0
        if self.kind == "gcn":
            post, agg, pre = (2 if hidden else 1) * fo, fo, max(2 * fo, fo + dx)
        elif self.kind == "sage":
            agg_grad = fi if self.records else 0
            post = (fo if hidden else 0) + dx + agg_grad
            agg = dx + agg_grad
            pre = dx if self.aggr != "pool" else 2 * fi + dx
        else:
            hc = self.heads * self.channels
            post = fo if hidden else hc
            agg = hc
            pre = w + (w + self.heads) + 2 * hc + dx
        return {"grad_tail": tail * b, "grad_post": n * post * b, "grad_agg": n * agg * b, "grad_pre": n * pre * b}

    def shard_transient_bytes(self, edges: Number, n: Number, num_src: Number) -> Number:
        """Temporaries of one shard's forward aggregation (freed when the shard is done).

        Sum: none beyond the measured sparse-product temporaries (``addmm_`` into the state). Max: at most two
        ``E x w`` float tensors and the tie mask (1 byte) live at once (messages, the shard max gathered back
        per edge or the mask's cast), plus four ``n x w`` tensors (shard max, ties, new best, new count). GAT
        through the kernels: the contiguous copies of the strided inputs (``z``, ``s_src`` of the ``num_src``
        rows, ``s_dst``); unfused also, for one chunk of at most :data:`UNFUSED_CHUNK_EDGES` edges at a time,
        the per-edge logits, weights (``3 E H``), gathered rows and their product (``2 E H C``) and the int64
        destination of every edge. GAT under autograd: ``2 E H`` (the gathered running max and the shifted
        logits); what it keeps is :meth:`shard_kept_bytes`.
        """
        b, w = self.bytes_per_element, self.agg_width_in
        if self.kind == "gat":
            hc, heads = self.heads * self.channels, self.heads
            if self.autograd:
                return 2 * edges * heads * b + 0 * num_src
            copies = (num_src * (hc + heads) + n * heads) * b
            if self.fused:
                return copies + 0 * edges
            return copies + edge_chunks(edges)[0] * ((3 * heads + 2 * hc) * b + 8)
        if self.case == 1:  # the product is added into the running state in place
            return 0 * n * w * b + 0 * edges
        return edges * w * (2 * b + 1) + 4 * n * w * b

    def shard_bwd_transient_bytes(self, edges: Number, n: Number, num_src: Number) -> Number:
        """Temporaries of one shard's backward (case 2: the VJP's per-edge tensors and their gradients).

        Max: the rebuilt messages, the weights autograd saves, and at a time two more ``E x w`` floats and
        two masks (the gathered best/count, the hit mask, then the gradient gather and product), plus two
        ``n x w`` tensors. GAT through the kernels: the contiguous input copies and the kernel's outputs
        (``2 num_src (HC + H)`` and ``2 n H``), the VJP's zeroed destination gradient ``n (HC + 2H)`` and
        ``delta`` (``n H``); unfused also the accumulated source gradients and, per chunk, the recomputed
        logits and weights (``5 E H``), the gathered output gradients, source rows and their product
        (``3 E H C``) and the int64 edge destinations.
        GAT under autograd: beyond the kept graph, which autograd releases node by node, the gradients of
        the per-edge tensors (``2 E H C + 4 E H`` net of what is released, measured with memray) and of
        the running state (``2 n H C``).
        """
        b, w = self.bytes_per_element, self.agg_width_in
        if self.case == 1:
            return 0 * edges  # the A_q^T g output is the gradient buffer itself, booked separately
        if self.kind == "gat":
            hc, heads = self.heads * self.channels, self.heads
            if self.autograd:
                return edges * (2 * hc + 4 * heads) * b + 2 * n * hc * b + 0 * num_src
            kernel = (2 * num_src * (hc + heads) + n * (hc + 5 * heads)) * b
            if self.fused:
                return kernel + 0 * edges
            # chunked: the accumulated source gradients beside each chunk's, and one chunk's edge tensors
            return kernel + num_src * (hc + heads) * b + edge_chunks(edges)[0] * ((5 * heads + 3 * hc) * b + 8)
        return edges * w * (4 * b + 2) + 2 * n * w * b

    def shard_kept_bytes(self, edges: Number, n: Number) -> Number:
        """What autograd keeps for one shard until backward (:attr:`keeps_edge_tensors`), as memray shows
        it: the gathered source rows (saved by the product) and the weighted messages (saved by
        ``index_add``), ``2 E H C``; the LeakyReLU input and the exponentiated logits, ``2 E H``; the
        shard's rescaling factors, ``n H``."""
        b = self.bytes_per_element
        hc = self.heads * self.channels
        return edges * (2 * hc + 2 * self.heads) * b + n * self.heads * b

    def kernel_cache_bytes(self, edges: Number, num_src: Number) -> Number:
        """Fused GAT: the CSC transpose of a shard its backward kernel builds once and caches (int64)."""
        if self.kind != "gat" or not self.fused:
            return 0 * edges
        return edges * 8 + (num_src + 1) * 8

    def csr_cache_bytes(self, edges: Number, num_src: Number) -> Number:
        """Cached CSR matrix and transpose of a linear aggregation over one shard (built in epoch 0, kept).

        Forward matrix values (``b`` per edge, index arrays shared); transpose: column pointers,
        destinations in source order and the permutation (int64), values.
        """
        if self.case != 1:
            return 0 * edges
        return edges * (2 * self.bytes_per_element + 16) + (num_src + 1) * 8


def activation_bytes(plans: list[LayerPlan], nodes: Number) -> Number:
    """Bytes of one ``nodes x widest-layer`` activation (input, output or aggregation width): the size
    :meth:`simulator.profile.Profile.scale_at` keys the compute scale by."""
    widest = max(max(p.in_dim, p.out_dim, p.agg_width) for p in plans)
    return np.asarray(nodes, dtype=np.float64) * widest * plans[0].bytes_per_element


def layer_plans(spec: ModelSpec, feature_dim: int, num_classes: int) -> list[LayerPlan]:
    """The conv layers of ``spec`` on a graph with ``feature_dim`` inputs and ``num_classes`` classes.

    Widths ``[F, hidden, ..., hidden, classes]``. GAT hidden layers have ``heads`` heads of
    ``hidden // heads`` channels (concatenated), the output layer one head of ``classes`` channels.
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
            )
        )
        in_dim = out_dim
    return plans


def loss_fwd(n_train: Number, num_classes: int, b: int) -> list[Op]:
    """Gather of the training rows' logits, log_softmax and NLL over ``n_train`` rows."""
    return [Op("elementwise", 6.0 * n_train * num_classes * b, calls=4)]


def loss_bwd(n: Number, n_train: Number, num_classes: int, b: int) -> list[Op]:
    """Gradient of the loss w.r.t. all ``n`` rows of logits (zeros, then the training rows)."""
    return [Op("elementwise", (1.0 * n + 6.0 * n_train) * num_classes * b, calls=3, backward=True)]


def flatten_grads(params: int, b: int) -> list[Op]:
    """Concatenating the parameter gradients into one buffer for the all-reduce."""
    return [Op("elementwise", 2.0 * params * b)]


def optimizer_step(params: int, b: int) -> list[Op]:
    """torch's Adam (foreach): ~20 passes over the parameters (moments, bias correction, update)."""
    return [Op("elementwise", 20.0 * params * b, calls=12)]
