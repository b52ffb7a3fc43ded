"""What one layer holds in memory on a worker: tensor sizes by lifetime, per-shard temporaries and caches.

The byte counts follow what the engine's autograd keeps and frees (``sarlab/nn``, ``sarlab/core/aggregate.py``)
and what its kernels allocate on their default path, the C++ extension (``kernels/``): the shard SpMM of sum
and mean adds into its output in place and allocates nothing else; the running max of SAGE max/pool updates
its state in place and writes no per-edge tensor, forward or backward; both read a per-shard transpose that the
shard caches on first use (:func:`shard_cache_bytes`). Each term below names the tensor it stands for.
Notation as in :mod:`sarlab.simulator.workload.layers`: ``n`` destination rows, ``E`` edges of one shard, ``b`` bytes
per element, ``f_i``/``f_o`` input/output widths, ``w`` the exchanged row width, ``H`` heads, ``C`` channels per head.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sarlab.simulator.workload import rgcn_layer
from sarlab.simulator.workload.layers import LayerPlan
from sarlab.simulator.workload.ops import FP64, Number, edge_chunks

#: bytes of one element of the running max's tie count (``sarlab.kernels.maxagg.COUNT_DTYPE``, int32, whatever the
#: dtype)
COUNT_BYTES = 4
#: bytes of one int64 index (row pointers, edge lists, permutations)
INDEX_BYTES = 8


@dataclass(frozen=True)
class LayerMemory:
    """Bytes one layer allocates on a worker, by lifetime.

    Args:
        pre_peak: temporaries of ``pre`` (freed when it ends).
        exchange: the matrix whose rows are exchanged, when ``pre`` makes a new one (0 when it is the
            layer input itself).
        exchange_kept: ``pre``'s own autograd keeps the exchanged matrix (SAGE-pool's ReLU output); whether the
            aggregation saves it for its backward depends on the mode (the schedule's ``_rows_saved``).
        pre_saved: other tensors ``pre`` keeps for backward (GAT's attention scores).
        agg_state: the aggregation's running state, booked from ``init``: sum and mean the ``n x w`` zeros the
            shards are added into; max the running max (``n x w``) and its int32 tie count; GAT ``m``, ``l``,
            ``acc``. A max aggregation with an autograd record keeps its final state (``ctx.saved``) and its
            output until its backward, so there the state and the output are booked together here, and freed
            as ``agg_out`` (``new_out`` False).
        agg_out: the aggregation output (a new tensor when ``new_out``, else the state itself), freed after
            the aggregation backward (or, without an autograd record, once nothing reads it); GAT's also holds the
            softmax's running max and denominator ``m``, ``l`` (``n H`` each), which ``finalize`` keeps for the
            backward (``ctx.saved``) when it frees the rest of the state.
        new_out: ``finalize`` allocates the output and frees the state (mean; max without an autograd record;
            GAT), instead of returning the state (sum) or keeping it (max with a record).
        agg_out_kept: the output is kept for backward even without the aggregation's own autograd record
            (SAGE's ``lin_l`` saves its input).
        post_peak: temporaries of ``post``.
        conv_out: the conv output (BatchNorm / ReLU input, or the logits of the last layer).
        bn_peak: fp64 temporaries of BatchNorm's forward; bn_saved: its saved normalised input.
        relu_saved: ReLU's saved output.
        dropout_peak: int64 temporaries of the dropout hash; dropout_saved: the saved mask.
        next_input: the tail's output (the next layer's input, kept until that layer's backward).
        grad_tail, grad_post, grad_agg, grad_pre: activation gradients alive (at their most) during the
            backward of the tail, of ``post``, of the aggregation and of ``pre`` (:func:`layer_memory`),
            besides what those phases book themselves (the aggregation's source gradient and buffers).
        agg_bwd_hold: held through the aggregation backward besides the source gradient (SAGE-mean's
            scaled output gradient; GAT's destination-input gradient).
        shard_grad_dst: one remote shard's VJP output that the ring modes' case-2 round loop
            (``SequentialAggregate.backward``) keeps until the next round's VJP has returned its own, and the
            last one until the backward ends: GAT's zeroed destination-input gradient ``n (HC + 2H)`` (0 for the
            others, whose shard VJPs return no destination gradient).
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
    shard_grad_dst: int = 0



def layer_memory(plan: LayerPlan, n: int) -> LayerMemory:
    """Bytes this layer allocates on a worker with ``n`` rows (see :class:`LayerMemory`)."""
    b, fi, fo, w = plan.bytes_per_element, plan.in_dim, plan.out_dim, plan.width
    aw = plan.agg_width
    pre_peak = exchange = pre_saved = 0
    exchange_kept = False
    if plan.kind == "gcn":
        pre_peak, exchange = n * fo * b, n * fo * b  # h, then h * deg^-1/2
        # (agg + h) and its product with deg^-1/2 coexist; the product plus bias is the output
        agg_state, new_out, post_peak = n * fo * b, False, n * fo * b
    elif plan.kind == "rgcn":
        # the state is the aggregation output; nothing saves it (the backward reads x and the weights): it
        # dies in ``post``, beside x W_root and their sum (the bias is added into conv_out)
        agg_state, new_out, post_peak = n * fo * b, True, 2 * n * fo * b
    elif plan.kind == "sage":
        if plan.aggr == "pool":  # relu(lin(x)): the exchanged rows, which the max's backward reads
            pre_peak, exchange, exchange_kept = n * fi * b, n * fi * b, True
        if plan.case == 1:  # mean: zeros the shards are added into; the output is state / degree
            agg_state, new_out = n * fi * b, True
        else:  # max: the running max and its int32 tie count (kernels.empty_max_state)
            agg_state, new_out = n * fi * (b + COUNT_BYTES), True
            if plan.records:  # ctx.saved keeps (max, count) and save_for_backward the output, until the backward
                agg_state, new_out = agg_state + n * fi * b, False
        post_peak = 2 * n * fo * b  # lin_l(agg) and lin_r(x), then their sum (conv_out)
    else:
        hc = plan.heads * plan.channels
        # rows = [z, s_src] (exchanged; torch.cat's backward keeps nothing of it: the aggregation saves it where its
        # backward reads it); z (saved by the score product) and dst_x = [rows, s_dst]
        exchange, pre_saved = n * w * b, n * (2 * hc + 2 * plan.heads) * b
        # hidden layers: a view of the output plus bias; the output layer first averages its head
        agg_state, new_out = n * (hc + 2 * plan.heads) * b, True
        post_peak = 0 if plan.hidden else n * fo * b
    # GAT's finalize keeps m and l for the backward (``ctx.saved``); the autograd form keeps its own graph instead
    kept_state = 2 * n * plan.heads * b if plan.kind == "gat" and not plan.autograd else 0
    f = fo
    hidden = plan.hidden
    bn = hidden and plan.batchnorm
    drop = hidden and plan.dropout > 0
    return LayerMemory(
        pre_peak=pre_peak,
        exchange=exchange,
        exchange_kept=exchange_kept,
        pre_saved=pre_saved,
        agg_state=agg_state,
        agg_out=0 if plan.kind == "rgcn" else agg_state if not new_out else n * aw * b + kept_state,
        new_out=new_out,
        agg_out_kept=plan.kind == "sage",
        post_peak=post_peak,
        conv_out=n * fo * b,
        bn_peak=2 * n * f * FP64 if bn else 0,
        bn_saved=n * f * b if bn else 0,
        relu_saved=n * f * b if hidden else 0,
        dropout_peak=3 * n * f * FP64 if drop else 0,
        dropout_saved=n * f * b if drop else 0,
        next_input=n * f * b if drop else 0,
        **gradient_levels(plan, n),
        agg_bwd_hold=(
            n * (aw + 2 * plan.heads) * b
            if plan.kind == "gat"
            else n * w * b
            if plan.kind == "sage" and plan.case == 1
            else 0
        ),
        shard_grad_dst=n * (aw + 2 * plan.heads) * b if plan.kind == "gat" else 0,
    )

def gradient_levels(plan: LayerPlan, n: int) -> dict[str, int]:
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
    b, fi, fo, w = plan.bytes_per_element, plan.in_dim, plan.out_dim, plan.width
    dx = fi if plan.needs_input_grad else 0
    hidden = plan.hidden
    tail = (2 + (3 if plan.batchnorm else 0)) * n * fo if hidden else 0
    if plan.kind == "gcn":
        post, agg, pre = (2 if hidden else 1) * fo, fo, max(2 * fo, fo + dx)
    elif plan.kind == "rgcn":  # g (the last layer's is the loss's), the root's g W_root^T, then their sum
        g = fo if hidden else 0
        post, agg, pre = g + dx, g + dx, dx
    elif plan.kind == "sage":
        agg_grad = fi if plan.records else 0
        post = (fo if hidden else 0) + dx + agg_grad
        agg = dx + agg_grad
        pre = dx if plan.aggr != "pool" else 2 * fi + dx
    else:
        hc = plan.heads * plan.channels
        post = fo if hidden else hc
        agg = hc
        pre = w + (w + plan.heads) + 2 * hc + dx
    return {"grad_tail": tail * b, "grad_post": n * post * b, "grad_agg": n * agg * b, "grad_pre": n * pre * b}


def _unfused_chunk_bytes(plan: LayerPlan, edges: Number, rows: Number, chunks: Number, backward: bool) -> Number:
    """Peak bytes of one chunk of the engine's streamed unfused GAT (``kernels/torch_backend.py``), ``E_c`` edges
    over ``r`` rows (the chunks of a shard of ``E`` edges over ``R`` rows hold ``r = R E_c / E`` rows each).

    Alive at every step: the int64 chunk-local rows of the edges (``8 E_c``). The steps that can peak:

    * building the head-expanded CSR (``_HeadCsr``), beside the ``[E_c,H]`` pre-activations and weights
      (``2 E_c H b``): ``place``, ``order``, the expanded columns and their gathered copy, four int64 ``[E_c H]``
      tensors (``32 E_c H``), the row pointers and degrees (``16 r``); forward also its new max and rescaling
      factors (``2 r H b``);
    * the sparse product: the weights gathered into the expanded order (``E_c H b``) beside the pre-activations
      and weights (backward also ``alpha lrelu'``, ``E_c H b`` more), the CSR's ``order`` (int64) and int32
      columns (``12 E_c H``), and the ``[r,H,C+1]`` sums twice (torch's CSR product writes them into a buffer
      and copies it out: ``2 r (HC + H) b``, measured with memray); forward also the max and factors;
    * backward only: the per-row dot products of the sums, ``r (2HC + 3H) b`` beside the sums, the source side's
      CSR (``12 E_c H``) and the pre-activations and weights.

    A shard of several chunks keeps the previous chunk's sums until the loop reassigns them (``r (HC + H) b``
    more; backward always: its source side starts with the destination side's last sums) and, on the backward's
    source side, the previous chunk's CSR while the next one is built (``12 E_c H``).

    .. math::
        \\text{fwd} = 8E_c + p + \\max(E_cH(2b + 32) + 16r + 2rHb,\\; E_cH(3b + 12) + r(2HC + 4H)b)

        \\text{bwd} = 8E_c + p + \\max(E_cH(2b + 32 + 12[k>1]) + 16r,\\; E_cH(4b + 12) + 2r(HC + H)b,\\;
            E_cH(2b + 12) + r(2HC + 3H)b)

    with ``k`` chunks and ``p = r (HC + H) b`` (forward: only when ``k > 1``).

    Args:
        plan: an unfused GAT layer; edges: ``E_c``; rows: ``r``; chunks: ``k``; backward: the backward's chunk
            (else forward's).
    """
    b, hc, heads = plan.bytes_per_element, plan.heads * plan.channels, plan.heads
    eh = edges * heads
    several = np.asarray(chunks) > 1
    previous = np.where(several, rows * (hc + heads) * b, 0.0)
    if not backward:
        build = eh * (2 * b + 32) + 16 * rows + 2 * rows * heads * b
        product = eh * (3 * b + 12) + rows * (2 * hc + 4 * heads) * b
        return INDEX_BYTES * edges + previous + np.maximum(build, product)
    build = eh * (2 * b + 32 + np.where(several, 12, 0)) + 16 * rows
    product = eh * (4 * b + 12) + 2 * rows * (hc + heads) * b
    dots = eh * (2 * b + 12) + rows * (2 * hc + 3 * heads) * b
    previous = rows * (hc + heads) * b  # the destination side's last sums live on into the source side
    return INDEX_BYTES * edges + previous + np.maximum(build, np.maximum(product, dots))


def _chunk_rows(edges: Number, rows: Number) -> Number:
    """Rows of one chunk of a shard of ``edges`` edges over ``rows`` rows
    (:func:`sarlab.simulator.workload.ops.edge_chunks`)."""
    return rows * edge_chunks(edges)[0] / np.maximum(edges, 1.0)


def shard_transient_bytes(plan: LayerPlan, edges: Number, n: Number, num_src: Number) -> Number:
    """Temporaries of one shard's forward aggregation (freed when the shard is done).

    Sum and mean: none (the C++ shard SpMM adds into the state in place). Max: none (``kernels.csr_max_shard``
    updates the running max and count in place, reading the rows through the shard's columns). GAT fused: the
    contiguous copies of the strided scores ``s_src``, ``s_dst`` (``(num_src + n) H``; the C++ kernel reads ``z``'s
    rows in place). Unfused (``kernels/torch_backend.py``): the ``[z, 1]`` rows and the score copies
    (``num_src (HC + 2H) + n H``) for the whole shard, and one chunk of at most
    :data:`sarlab.simulator.workload.ops.UNFUSED_CHUNK_EDGES` edges at a time (:func:`_unfused_chunk_bytes`). GAT under
    autograd: ``2 E H`` (the gathered running max and the shifted logits); what it keeps is :func:`shard_kept_bytes`.
    """
    b, w = plan.bytes_per_element, plan.agg_width_in
    if plan.kind == "rgcn":
        return rgcn_layer.transient_fwd(plan.relation_split(edges, n, num_src), *plan.rgcn_args())
    if plan.kind == "gat":
        hc, heads = plan.heads * plan.channels, plan.heads
        if plan.autograd:
            return 2 * edges * heads * b + 0 * num_src
        if plan.fused:
            return (num_src + n) * heads * b + 0 * edges
        shard = (num_src * (hc + 2 * heads) + n * heads) * b
        chunk, chunks = edge_chunks(edges)
        return shard + _unfused_chunk_bytes(plan, chunk, _chunk_rows(edges, n), chunks, backward=False)
    # sum, mean and max: the kernels write into the state in place
    return 0 * n * w * b + 0 * edges


def shard_bwd_transient_bytes(plan: LayerPlan, edges: Number, n: Number, num_src: Number) -> Number:
    """Temporaries of one shard's backward beyond its row gradient (``num_src x w``, which the schedule books as
    the send buffer of a remote shard, beside these while the VJP runs, and
    :class:`sarlab.simulator.system.pricing.EpochPricing` as the local shard's).

    Sum and mean: none (``A_q^T g`` is the fresh output of the C++ SpMM). Max: none
    (``kernels.csr_max_backward`` writes only its output, reading the cached CSC). R-GCN: a relation block's
    (:func:`sarlab.simulator.workload.rgcn_layer.transient_bwd`), without the zero-filled gradient of a remote
    shard's rows, which is that row gradient. GAT, either form: the VJP's
    zeroed destination gradient ``n (HC + 2H)``, ``delta`` (``n H``) and the copies of the strided scores
    (``(num_src + n) H``). Fused, besides: the C++ kernel's outputs ``g_z``, ``g_s_src``, ``g_s_dst``
    (``num_src (HC + H) + n H``, reading ``z`` in place), alive when ``torch.cat`` makes the row gradient of them.
    Unfused (``kernels/torch_backend.py``), besides: the ``[z, 1]`` and ``[g, delta]`` rows
    (``num_src (HC + H) + n (HC + H)``; the chunks add into the row and destination gradients in place) and one
    chunk of at most :data:`sarlab.simulator.workload.ops.UNFUSED_CHUNK_EDGES` edges (:func:`_unfused_chunk_bytes`, its
    rows those of the larger side: destination rows, then source rows over the transpose).
    GAT under autograd: beyond the kept graph, which autograd releases node by node, the gradients of
    the per-edge tensors (``2 E H C + 4 E H`` net of what is released, measured with memray) and of
    the running state (``2 n H C``).
    """
    b = plan.bytes_per_element
    if plan.kind == "rgcn":  # without a remote shard's zero-filled row gradient: the send buffer, booked beside these
        split = plan.relation_split(edges, n, num_src)
        return rgcn_layer.transient_bwd(split._replace(remote=np.zeros_like(split.remote)), *plan.rgcn_args())
    if plan.kind != "gat":  # sum, mean, max: the kernel's output is the row gradient itself, booked separately
        return 0 * edges
    hc, heads = plan.heads * plan.channels, plan.heads
    if plan.autograd:
        return edges * (2 * hc + 4 * heads) * b + 2 * n * hc * b + 0 * num_src
    vjp = n * (hc + 2 * heads) + n * heads + (num_src + n) * heads
    if plan.fused:
        return (vjp + num_src * (hc + heads) + n * heads) * b + 0 * edges
    rows = _chunk_rows(edges, np.maximum(n, num_src))
    shard = (vjp + (num_src + n) * (hc + heads)) * b
    chunk, chunks = edge_chunks(edges)
    return shard + _unfused_chunk_bytes(plan, chunk, rows, chunks, backward=True)


def shard_kept_bytes(plan: LayerPlan, edges: Number, n: Number) -> Number:
    """What autograd keeps for one shard until backward (:attr:`LayerPlan.keeps_edge_tensors`), as memray shows
    it: the gathered source rows (saved by the product) and the weighted messages (saved by
    ``index_add``), ``2 E H C``; the LeakyReLU input and the exponentiated logits, ``2 E H``; the
    shard's rescaling factors, ``n H``."""
    b = plan.bytes_per_element
    if plan.kind == "rgcn":  # per-edge R-GCN: rgcn_layer.kept_bytes
        return rgcn_layer.kept_bytes(plan.relation_split(edges, n, n), plan.in_dim, plan.out_dim, b)
    hc = plan.heads * plan.channels
    return edges * (2 * hc + 2 * plan.heads) * b + n * plan.heads * b

def cache_kind(plan: LayerPlan) -> str:
    """The structure the engine caches on every shard for this layer's backward, built in the first epoch and
    kept (shards are shared by the layers, so one per kind): ``transpose`` for sum and mean
    (``Shard.transpose_index``, which the C++ ``A^T g`` runs over), ``csc`` for max and fused GAT
    (``kernels.csr_transpose`` in ``shard.cache``), ``""`` for none (unfused GAT runs the torch kernels, which
    need none; R-GCN's relation blocks are :func:`sarlab.simulator.workload.rgcn_layer.cache_bytes`)."""
    if plan.kind == "rgcn":
        return ""
    if plan.case == 1:
        return "transpose"
    if plan.kind == "sage" or (plan.kind == "gat" and plan.fused):
        return "csc"
    return ""


def shard_cache_bytes(kind: str, edges: Number, num_src: Number) -> Number:
    """Bytes of one shard's cached structure of kind ``kind`` (:func:`cache_kind`), ``E`` edges over ``num_src``
    source rows (int64 throughout).

    .. math::
        \\text{transpose} = 8 (N_s + 1) + 8 E + 8 E, \\qquad \\text{csc} = 8 (N_s + 1) + 8 E

    (column pointers over the source rows, the destination of every edge in source order, and for
    ``transpose`` the edge permutation.)
    """
    if kind == "transpose":
        return INDEX_BYTES * (num_src + 1) + 2 * INDEX_BYTES * edges
    if kind == "csc":
        return INDEX_BYTES * (num_src + 1) + INDEX_BYTES * edges
    return 0 * edges
