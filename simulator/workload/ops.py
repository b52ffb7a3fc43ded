"""Units of work the cost model prices: :class:`Op`, and the ops of the whole model (loss, gradient buffer, Adam).

An :class:`Op` is an amount of work of one op family of the profile
(:data:`sarlab.simulator.hardware.profile.OP_UNITS`);
:class:`sarlab.simulator.system.costs.CostModel` turns it into seconds. The helpers here count what the engine's sparse
kernels touch: the destination rows a shard's edges hit, and the chunks unfused GAT streams a shard in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import numpy as np

Number = Union[float, np.ndarray]

FP64 = 8  # BatchNorm statistics and the dropout hash run in 64-bit arithmetic whatever the dtype
#: the engine's streamed unfused GAT (``sar``) materialises per-edge tensors for at most this many edges at a
#: time, a shard's destination rows in chunks (``UNFUSED_CHUNK_EDGES`` in ``sarlab/nn/gat.py``)
UNFUSED_CHUNK_EDGES = 1 << 15
#: op families whose per-row forward work (``Op.rows``) is done only for destination rows with an edge in the
#: shard: the fused C++ GAT kernel skips a row without one (``kernels/csrc/gat.cpp``), and the engine adds a
#: linear shard into the running state in place (``addmm_``), which leaves rows without an edge untouched;
#: the torch formulations touch every row of their fresh outputs
ACTIVE_ROW_FAMILIES = ("gat_fused", "spmm")
#: element-bytes of work per byte of a fresh zero-filled tensor (``torch.zeros``: a write and the pages'
#: first-touch faults, measured at 0.75-0.81 of the time of an add of the same shape, whose 12 bytes per
#: element the elementwise rate is fitted in)
ZERO_FILL_PASSES = 2.3


def spmm_passes(width: int, bytes_per_element: int = 4) -> int:
    """Passes the C++ shard SpMM makes over a row's edges for rows of ``width`` elements
    (``kernels/csrc/spmm.cpp``): register blocks of 512 bytes while they fit, then one each of 256, 128 and 64
    bytes where they fit, then one for the rest. Each pass walks the row's index and gathers part of every
    source row again: the family's per-edge cost (``OpCost.edge_rate``) is paid once per pass."""
    line = max(64 // max(int(bytes_per_element), 1), 1)
    w = max(int(width), 1)
    passes, rest = divmod(w, 8 * line)
    for block in (4 * line, 2 * line, line):
        if rest >= block:
            passes, rest = passes + 1, rest - block
    return passes + (1 if rest else 0)


def edge_chunks(edges: Number, chunk: int = UNFUSED_CHUNK_EDGES) -> tuple[Number, Number]:
    """(edges per chunk at most, number of chunks) of a shard of ``edges`` edges processed in chunks."""
    e = np.asarray(edges, dtype=np.float64)
    return np.minimum(e, chunk), np.maximum(np.ceil(e / chunk), 1.0)


def active_rows(edges: Number, n: Number) -> Number:
    """Expected destination rows with at least one of ``edges`` edges spread at random over ``n`` rows:
    :math:`n (1 - e^{-e/n})`."""
    e, rows = np.asarray(edges, dtype=np.float64), np.asarray(n, dtype=np.float64)
    return rows * -np.expm1(-e / np.maximum(rows, 1.0))


@dataclass(frozen=True)
class Op:
    """An amount of work of one op family (priced by :class:`sarlab.simulator.system.costs.CostModel`).

    Args:
        family: a key of :data:`sarlab.simulator.hardware.profile.OP_UNITS`.
        work: units of work (FLOP, edge*feature, bytes...), scalar or per-shard array.
        calls: number of calls (each pays the family's fixed overhead).
        backward: priced with the family's backward ratio.
        rows: row*feature units of the op's dense output (sparse families: the destination rows it
            writes), priced at the family's ``row_rate``.
        gather_bytes: bytes of the matrix whose rows the edge work gathers at random (sparse families);
            once it outgrows the last-level cache the gathers run at the family's ``mem_rate``.
        fresh: bytes of an out-of-place result on new pages, priced at the family's ``fresh_rate``
            (the sparse product's ``A^T g`` send buffers; its in-place calls have none).
        edges: edge visits whose cost does not grow with the features, priced at the family's ``edge_rate``:
            the index walk and, per head, GAT's score, softmax and weight (sparse families: edges x heads,
            SpMM edges x :func:`spmm_passes`).
    """

    family: str
    work: Number
    calls: int = 1
    backward: bool = False
    rows: Number = 0.0
    gather_bytes: Number = 0.0
    fresh: Number = 0.0
    edges: Number = 0.0


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
