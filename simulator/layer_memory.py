"""What one layer holds in memory on a worker: tensor sizes by lifetime, per-shard temporaries and caches.

The byte counts follow what the engine's autograd keeps and frees (``sarlab/nn``, ``sarlab/aggregate.py``)
and what its kernels allocate on their default path, the C++ extension (``kernels/``): the shard SpMM of sum
and mean adds into its output in place and allocates nothing else; the running max of SAGE max/pool updates
its state in place and writes no per-edge tensor, forward or backward; both read a per-shard transpose that the
shard caches on first use (:func:`shard_cache_bytes`). Each term below names the tensor it stands for.
Notation as in :mod:`simulator.layers`: ``n`` destination rows, ``E`` edges of one shard, ``b`` bytes per
element, ``f_i``/``f_o`` input/output widths, ``w`` the exchanged row width, ``H`` heads, ``C`` channels per head.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator import rgcn_layer
from simulator.layers import LayerPlan
from simulator.ops import FP64, Number, edge_chunks

#: bytes of one element of the running max's tie count (``kernels.maxagg.COUNT_DTYPE``, int32, whatever the dtype)
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
        exchange_kept: ``pre``'s own autograd keeps the exchanged matrix (SAGE-pool's ReLU output).
        pre_saved: other tensors ``pre`` keeps for backward (GAT's attention scores).
        agg_state: the aggregation's running state, booked from ``init``: sum and mean the ``n x w`` zeros the
            shards are added into; max the running max (``n x w``) and its int32 tie count; GAT ``m``, ``l``,
            ``acc``. A max aggregation with an autograd record keeps its final state (``ctx.saved``) and its
            output until its backward, so there the state and the output are booked together here, and freed
            as ``agg_out`` (``new_out`` False).
        agg_out: the aggregation output (a new tensor when ``new_out``, else the state itself), freed after
            the aggregation backward (or, without an autograd record, once nothing reads it).
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
        # rows = [z, s_src] (exchanged); z (saved by the score product) and dst_x = [rows, s_dst]
        exchange, pre_saved = n * w * b, n * (2 * hc + 2 * plan.heads) * b
        exchange_kept = True  # the attention's input is needed by the backward in every mode
        # hidden layers: a view of the output plus bias; the output layer first averages its head
        agg_state, new_out = n * (hc + 2 * plan.heads) * b, True
        post_peak = 0 if plan.hidden else n * fo * b
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
        agg_out=0 if plan.kind == "rgcn" else agg_state if not new_out else n * aw * b,
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

def shard_transient_bytes(plan: LayerPlan, edges: Number, n: Number, num_src: Number) -> Number:
    """Temporaries of one shard's forward aggregation (freed when the shard is done).

    Sum and mean: none (the C++ shard SpMM adds into the state in place). Max: none (``kernels.csr_max_shard``
    updates the running max and count in place, reading the rows through the shard's columns). GAT
    through the kernels: the contiguous copies of the strided inputs (``z``, ``s_src`` of the ``num_src``
    rows, ``s_dst``); unfused also, for one chunk of at most :data:`simulator.ops.UNFUSED_CHUNK_EDGES` edges at a time,
    the per-edge logits, weights (``3 E H``), gathered rows and their product (``2 E H C``) and the int64
    destination of every edge. GAT under autograd: ``2 E H`` (the gathered running max and the shifted
    logits); what it keeps is :func:`shard_kept_bytes`.
    """
    b, w = plan.bytes_per_element, plan.agg_width_in
    if plan.kind == "rgcn":
        return rgcn_layer.transient_fwd(plan.relation_split(edges, n, num_src), *plan.rgcn_args())
    if plan.kind == "gat":
        hc, heads = plan.heads * plan.channels, plan.heads
        if plan.autograd:
            return 2 * edges * heads * b + 0 * num_src
        copies = (num_src * (hc + heads) + n * heads) * b
        if plan.fused:
            return copies + 0 * edges
        return copies + edge_chunks(edges)[0] * ((3 * heads + 2 * hc) * b + 8)
    # sum, mean and max: the kernels write into the state in place
    return 0 * n * w * b + 0 * edges

def shard_bwd_transient_bytes(plan: LayerPlan, edges: Number, n: Number, num_src: Number) -> Number:
    """Temporaries of one shard's backward beyond its row gradient (``num_src x w``, which the schedule books as
    the send buffer of a remote shard and :class:`simulator.pricing.EpochPricing` as the local shard's).

    Sum and mean: none (``A_q^T g`` is the fresh output of the C++ SpMM). Max: none
    (``kernels.csr_max_backward`` writes only its output, reading the cached CSC). GAT through the kernels:
    the contiguous input copies and the kernel's outputs
    (``2 num_src (HC + H)`` and ``2 n H``), the VJP's zeroed destination gradient ``n (HC + 2H)`` and
    ``delta`` (``n H``). Unfused (the torch kernels, chunked) the kernel's outputs are the accumulators every
    chunk adds into (``g_z``, ``g_s_src``, ``g_s_dst``), and beside them either one chunk's edge tensors, while
    the chunks run (the recomputed logits and weights ``5 E H``, the gathered output gradients, source rows and
    their product ``3 E H C``, the int64 edge destinations), or, at the end, the row gradient ``torch.cat``
    makes of them (``num_src (HC + H)``), whichever is larger.
    GAT under autograd: beyond the kept graph, which autograd releases node by node, the gradients of
    the per-edge tensors (``2 E H C + 4 E H`` net of what is released, measured with memray) and of
    the running state (``2 n H C``).
    """
    b = plan.bytes_per_element
    if plan.kind == "rgcn":
        return rgcn_layer.transient_bwd(plan.relation_split(edges, n, num_src), *plan.rgcn_args())
    if plan.kind != "gat":  # sum, mean, max: the kernel's output is the row gradient itself, booked separately
        return 0 * edges
    hc, heads = plan.heads * plan.channels, plan.heads
    if plan.autograd:
        return edges * (2 * hc + 4 * heads) * b + 2 * n * hc * b + 0 * num_src
    kernel = (2 * num_src * (hc + heads) + n * (hc + 5 * heads)) * b
    if plan.fused:
        return kernel + 0 * edges
    chunk = edge_chunks(edges)[0] * ((5 * heads + 3 * hc) * b + 8)
    return kernel + np.maximum(chunk, num_src * (hc + heads) * b)

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
    need none; R-GCN's relation blocks are :func:`simulator.rgcn_layer.cache_bytes`)."""
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
