"""R-GCN's aggregation in the existing op families: per (shard, relation) work, summed over the relations.

The engine (``sarlab/nn/rgcn.py``, ``sarlab/core/shards.py``'s ``relation_shards``) splits every shard ``q`` by
relation ``r`` into blocks of at most :data:`RELATION_BLOCK_ROWS` destination rows, one call each. With ``e_qr``
edges reaching ``m_qr`` destination rows, ``s_q`` source rows (own ``n`` or the halo from ``q``), input and
output widths ``f_i``/``f_o`` and ``b`` bytes per element:

* aggregate first (``fused``, PyG ``RGCNConv``'s order), per (q, r):
  :math:`Y = A_{qr} X_q` (``spmm``, out of place, ``m f_i``), :math:`Y / deg_r`, :math:`Y W_r` (``gemm``
  ``2 m f_i f_o``), ``index_add_`` into the state (``3 m f_o b``). Backward (SAR case 2): the output gradient's
  rows gathered and scaled (``3 m f_o b``), :math:`A_{qr} X_q` rematerialised, :math:`dW_r = Y^T g` and
  :math:`g W_r^T` (two ``gemm``), :math:`A_{qr}^T (g W_r^T)` added into the rows' gradient in place (remote
  shards: into a zero-filled ``s_q x f_i`` buffer that goes home).
* one message per edge (``fused=False``, PyG ``FastRGCNConv``'s order), in blocks of at most
  :data:`EDGE_BLOCK` edges: gather ``x_j`` (``2 e f_i b``), ``x_j W_r`` (``2 e f_i f_o``), scale (``2 e f_o b``),
  ``index_add_`` (``3 e f_o b``); backward: gather and scale ``g`` (``4 e f_o b``), the gathered rows again
  (``sar`` only: autograd keeps them), ``dW_r`` and ``g W_r^T`` (``2 x 2 e f_i f_o``), ``index_add_`` into the
  rows' gradient (``3 e f_i b``). Under autograd (``sa``, ``oneshot``, one worker) the state is added out of
  place (``out.index_add``): a fresh ``n x f_o`` copy per block; autograd keeps each edge's gathered row and
  scaled message (:func:`kept_bytes`).

All the relations of one shard gather from the same ``s_q x f_i`` matrix, so their summed work prices exactly as
the per-relation ops would (the cost model is linear in work, rows, calls and fresh bytes at one gather size).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sarlab.simulator.workload.ops import ZERO_FILL_PASSES, Number, Op, active_rows, spmm_passes
from sarlab.simulator.workload.workload import RelationStats

#: destination rows per relation block (``RELATION_BLOCK_ROWS`` in ``sarlab/core/shards.py``)
RELATION_BLOCK_ROWS = 1 << 13
#: edges per block of the per-edge order without autograd (``EDGE_CHUNK`` in ``sarlab/nn/rgcn.py``)
EDGE_BLOCK = 1 << 15
INDEX = 8  # int64 edge indices


class RelationSplit(NamedTuple):
    """One shard (or a table of shards) split by relation: arrays with a trailing relation axis.

    Args:
        edges: ``e_qr``.
        rows: ``m_qr`` destination rows reached.
        num_src: ``s_q`` source rows (trailing axis of 1).
        n: the worker's destination rows (trailing axis of 1).
        remote: 1 where the shard's rows come from a peer (their gradient goes to a fresh buffer that the shard's
            backward zero-fills and holds until it is sent home), else 0.
        merged: ``oneshot``'s merged shard (its rows' gradient is a fresh buffer too, booked by the schedule).
    """

    edges: np.ndarray
    rows: np.ndarray
    num_src: np.ndarray
    n: np.ndarray
    remote: np.ndarray
    merged: bool = False


def relation_split(relations: RelationStats | None, edges: Number, n: Number, num_src: Number) -> RelationSplit:
    """The relation split of the shards pricing asks about, recognised by the shape of ``edges``.

    ``P x P`` (every shard ``[p][q]``): the partition's per-relation counts, the diagonal local; ``P`` (``oneshot``'s
    merged shard of each worker): the relations' edges summed over the source parts and ``rows_all``; a scalar
    (an average shard): the partition's relation mix and rows reached per edge. Without relation counts: one
    relation reaching rows at random.
    """
    e = np.asarray(edges, dtype=np.float64)
    nn = np.asarray(n, dtype=np.float64)[..., None]
    src = np.asarray(num_src, dtype=np.float64)[..., None]
    if relations is None:
        return RelationSplit(e[..., None], active_rows(e, n)[..., None], src, nn, np.ones_like(src))
    P = relations.edges.shape[0]
    if e.shape == (P, P):
        remote = (~np.eye(P, dtype=bool)).astype(np.float64)[..., None]
        return RelationSplit(relations.edges.astype(np.float64), relations.rows.astype(np.float64), src, nn, remote)
    if e.shape == (P,):
        return RelationSplit(relations.edges.sum(axis=1), relations.rows_all.astype(np.float64), src, nn,
                             np.zeros_like(src), merged=True)
    if e.ndim == 0:
        per_relation = relations.edges.sum(axis=(0, 1))
        rows_per_edge = relations.rows.sum(axis=(0, 1)) / np.maximum(per_relation, 1.0)
        e_r = e * per_relation / max(per_relation.sum(), 1.0)
        return RelationSplit(e_r, e_r * rows_per_edge, src, nn, np.ones_like(src))
    raise ValueError(f"R-GCN: no relation counts for shards of shape {e.shape} ({P} parts)")


def _blocks(split: RelationSplit, per_edge: bool, autograd: bool) -> np.ndarray:
    """Calls per relation: row blocks, and (per-edge order without autograd) edge blocks within them."""
    blocks = np.where(split.edges > 0, np.ceil(split.rows / RELATION_BLOCK_ROWS), 0.0)
    if per_edge and not autograd:
        blocks = np.maximum(blocks, np.ceil(split.edges / EDGE_BLOCK))
    return blocks


def shard_fwd(split: RelationSplit, fi: int, fo: int, b: int, fused: bool, autograd: bool) -> list[Op]:
    """Forward ops of the shards in ``split`` (see the module docstring), summed over the relations."""
    calls = _blocks(split, not fused, autograd)
    k = calls.sum(axis=-1)
    if fused:
        m = split.rows.sum(axis=-1)
        e = split.edges.sum(axis=-1)
        gathered = split.num_src[..., 0] * fi * b
        return [
            Op("spmm", e * fi, calls=k, rows=m * fi, gather_bytes=gathered, fresh=m * fi * b,
               edges=e * spmm_passes(fi, b)),
            Op("elementwise", 2.0 * m * fi * b, calls=k),
            Op("gemm", 2.0 * m * fi * fo, calls=k),
            Op("elementwise", 3.0 * m * fo * b, calls=k),
        ]
    e = split.edges.sum(axis=-1)
    copies = 2.0 * split.n[..., 0] * fo * b * k if autograd else 0.0 * e  # out.index_add: a new state per block
    return [
        Op("elementwise", (2.0 * fi * b + 3.0 * INDEX) * e, calls=3 * k),  # x_j gathered; dst, scale indices
        Op("gemm", 2.0 * e * fi * fo, calls=k),
        Op("elementwise", 2.0 * e * fo * b, calls=k),  # x 1/deg_r
        Op("elementwise", 3.0 * e * fo * b + copies, calls=k),  # index_add(_)
    ]


def shard_bwd(split: RelationSplit, fi: int, fo: int, b: int, fused: bool, autograd: bool) -> list[Op]:
    """Backward ops (SAR case 2) of the shards in ``split``: rows' and relation weights' gradients."""
    calls = _blocks(split, not fused, autograd)
    k = calls.sum(axis=-1)
    src = split.num_src[..., 0]
    fresh = 1.0 if split.merged else split.remote[..., 0]
    zero = [Op("elementwise", ZERO_FILL_PASSES * fresh * src * fi * b)]  # a fresh gradient buffer for the rows
    if fused:
        m = split.rows.sum(axis=-1)
        e = split.edges.sum(axis=-1)
        hit = active_rows(split.edges, split.num_src).sum(axis=-1)  # source rows A^T writes
        per_block = m / np.maximum(k, 1.0)
        return zero + [
            Op("elementwise", 3.0 * m * fo * b, calls=k, backward=True),
            Op("spmm", e * fi, calls=k, backward=True, rows=m * fi, gather_bytes=src * fi * b, fresh=m * fi * b,
               edges=e * spmm_passes(fi, b)),
            Op("gemm", 2.0 * 2.0 * m * fi * fo, calls=2 * k),
            Op("spmm", e * fi, calls=k, backward=True, rows=hit * fi, gather_bytes=per_block * fi * b,
               edges=e * spmm_passes(fi, b)),
        ]
    e = split.edges.sum(axis=-1)
    regather = 0.0 if autograd else 2.0 * fi * b  # autograd kept the gathered rows
    return zero + [
        Op("elementwise", (4.0 * fo * b + regather + 2.0 * INDEX) * e, calls=3 * k, backward=True),
        Op("gemm", 2.0 * 2.0 * e * fi * fo, calls=2 * k),
        Op("elementwise", 3.0 * e * fi * b, calls=k, backward=True),  # index_add_ into the rows' gradient
    ]


def _block_edges(split: RelationSplit, autograd: bool) -> np.ndarray:
    """Edges of one per-edge block of each relation: a row block's share of the relation's edges, at most
    :data:`EDGE_BLOCK` without autograd."""
    per_row_block = split.edges / np.maximum(np.ceil(split.rows / RELATION_BLOCK_ROWS), 1.0)
    return per_row_block if autograd else np.minimum(per_row_block, EDGE_BLOCK)


def transient_fwd(split: RelationSplit, fi: int, fo: int, b: int, fused: bool, autograd: bool) -> np.ndarray:
    """Bytes of one shard's forward temporaries: one relation block at a time (its largest)."""
    if fused:  # A X, its scaled copy, (A X) W_r
        return (np.minimum(split.rows, RELATION_BLOCK_ROWS) * (2 * fi + fo) * b).max(axis=-1)
    block = _block_edges(split, autograd)
    if autograd:  # x_j W_r of a row block (its scaled copy is kept), the out-of-place state
        return (block * fo * b).max(axis=-1) + split.n[..., 0] * fo * b
    # x_j with x_j W_r, then x_j W_r with its scaled copy (Python frees each temporary once the next op returns)
    return (block * (max(fi + fo, 2 * fo) * b + 2 * INDEX)).max(axis=-1)


def transient_bwd(split: RelationSplit, fi: int, fo: int, b: int, fused: bool, autograd: bool) -> np.ndarray:
    """Bytes of one shard's backward temporaries: a relation block's, plus a peer's zero-filled gradient."""
    buffer = split.remote[..., 0] * split.num_src[..., 0] * fi * b
    if fused:  # g rows, scaled; A X rematerialised; g W_r^T
        block = np.minimum(split.rows, RELATION_BLOCK_ROWS) * (2 * fo + 2 * fi) * b
    elif autograd:  # the per-edge gradients of a row block
        block = _block_edges(split, True) * ((2 * fo + fi) * b + INDEX)
    else:
        block = _block_edges(split, False) * ((fo + fi) * b + 2 * INDEX)  # g of a block beside x_j, then g W_r^T
    return block.max(axis=-1) + buffer


def kept_bytes(split: RelationSplit, fi: int, fo: int, b: int) -> np.ndarray:
    """What autograd keeps per shard in the per-edge order: the gathered rows (``e f_i``, saved by ``@ W_r``), the
    scaled messages (``e f_o``, saved by ``index_add``: torch's ``IndexAddBackward0`` keeps its source), the int64
    destination index and the per-edge scale (the source index is a view of the shard's)."""
    return (split.edges * ((fi + fo) * b + INDEX + b)).sum(axis=-1)


def cache_bytes(split: RelationSplit, fused: bool) -> np.ndarray:
    """The relation blocks a shard builds in its first epoch and keeps (``relation_shards``): per block the
    destination rows reached (int64), the block's edges sorted (source and destination, int64), its row pointer,
    and (aggregate-first: its ``A^T`` products) the transpose index: a pointer over the source rows, the edges'
    destinations in source order and the permutation."""
    blocks = _blocks(split, False, True)
    per_block = INDEX * split.rows + 2 * INDEX * split.edges + INDEX * (split.rows + blocks)
    if fused:
        per_block = per_block + 2 * INDEX * split.edges + INDEX * (split.num_src + 1) * blocks
    return per_block.sum(axis=-1)
