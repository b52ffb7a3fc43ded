"""GAT attention aggregation over CSR shards: fused kernels streaming an online softmax, forward and backward.

For one head h and an edge j -> i, with :math:`s^{dst}_i = a_{dst}\\cdot z_i` and
:math:`s^{src}_j = a_{src}\\cdot z_j` computed by the caller,

.. math::
    e_{ij} = \\mathrm{LeakyReLU}(s^{dst}_i + s^{src}_j),\\qquad
    \\mathrm{out}_i = \\sum_j \\frac{e^{e_{ij}}}{\\sum_k e^{e_{ik}}} z_j .

The fused kernels stream the edges of a shard and keep, per destination and head, the running max
``m``, the normaliser ``l = sum exp(e - m)`` and ``acc = sum exp(e - m) z_j`` ([Nd,H,C]); shards merge
exactly by rescaling with ``exp(m_old - m_new)``. No E x H tensor is written in the C++ path.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import _loader
from . import torch_backend as _torch
from .csr import Transpose, check_csr

State = tuple[Tensor, Tensor, Tensor]


def _check_inputs(rowptr: Tensor, col: Tensor, s_dst: Tensor, s_src: Tensor, z_src: Tensor) -> None:
    if z_src.dim() != 3:
        raise ValueError(f"z_src must be [Ns,H,C], got shape {tuple(z_src.shape)}")
    if z_src.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"kernels support float32 and float64, got {z_src.dtype}")
    num_src, heads, _ = z_src.shape
    num_dst = rowptr.numel() - 1
    if tuple(s_src.shape) != (num_src, heads):
        raise ValueError(f"s_src must be [Ns,H]=({num_src},{heads}), got {tuple(s_src.shape)}")
    if tuple(s_dst.shape) != (num_dst, heads):
        raise ValueError(f"s_dst must be [Nd,H]=({num_dst},{heads}), got {tuple(s_dst.shape)}")
    if s_dst.dtype != z_src.dtype or s_src.dtype != z_src.dtype:
        raise TypeError("s_dst, s_src and z_src must share one dtype")
    check_csr(rowptr, col, num_src)


def _row_blocks(z_src: Tensor) -> Tensor:
    """z_src itself when each row's [H,C] values are contiguous (rows may be strided, as a column slice of the
    engine's [z | s_src] rows is: the C++ kernels read them in place), else a contiguous copy."""
    _, heads, channels = z_src.shape
    if z_src.stride(2) == 1 and z_src.stride(1) == channels and z_src.stride(0) >= heads * channels:
        return z_src
    return z_src.contiguous()


def empty_state(num_dst: int, heads: int, channels: int, like: Tensor) -> State:
    """Fresh online-softmax state: m = -inf, l = 0, acc = 0.

    Args:
        num_dst, heads, channels: Nd, H, C.
        like: tensor whose dtype and device the state takes.
    """
    m = torch.full((num_dst, heads), float("-inf"), dtype=like.dtype, device=like.device)
    return (
        m,
        torch.zeros_like(m),
        torch.zeros((num_dst, heads, channels), dtype=like.dtype, device=like.device),
    )


def gat_forward_shard(
    rowptr: Tensor,
    col: Tensor,
    s_dst: Tensor,
    s_src: Tensor,
    z_src: Tensor,
    negative_slope: float,
    state: State | None = None,
    backend: str | None = None,
    inplace: bool = False,
) -> State:
    """Stream one shard's in-edges into the running softmax state (m, l, acc).

    .. math::
        m_i' = \\max(m_i, \\max_j e_{ij}),\\quad
        l_i' = l_i e^{m_i - m_i'} + \\sum_j e^{e_{ij} - m_i'},\\quad
        acc_i' = acc_i e^{m_i - m_i'} + \\sum_j e^{e_{ij} - m_i'} z_j

    Processing shards A then B equals processing their union (up to rounding).

    Args:
        rowptr: [Nd+1] int64 CSR row pointer over destination rows.
        col: [E] int64 source row of every edge (rows of s_src / z_src).
        s_dst: [Nd,H] destination attention scores.
        s_src: [Ns,H] source attention scores.
        z_src: [Ns,H,C] source features (the C++ kernels read strided rows in place when each row's [H,C]
            block is contiguous; ``$SARLAB_GAT_TILE_BYTES`` sets their tile budget, see ``csrc/gat.cpp``).
        negative_slope: LeakyReLU slope.
        state: (m, l, acc) from earlier shards, or None to start fresh.
        backend: 'cpp', 'torch' or None for :func:`kernels.backend`.
        inplace: update the given state tensors in place instead of copies.
    """
    _check_inputs(rowptr, col, s_dst, s_src, z_src)
    num_dst = rowptr.numel() - 1
    _, heads, channels = z_src.shape
    if state is None:
        m, l, acc = empty_state(num_dst, heads, channels, z_src)
    else:
        m, l, acc = state
        if tuple(m.shape) != (num_dst, heads) or tuple(l.shape) != (num_dst, heads):
            raise ValueError(f"state m, l must be [Nd,H]=({num_dst},{heads})")
        if tuple(acc.shape) != (num_dst, heads, channels):
            raise ValueError(f"state acc must be [Nd,H,C]=({num_dst},{heads},{channels})")
        if not (m.dtype == l.dtype == acc.dtype == z_src.dtype):
            raise TypeError("state must have the dtype of z_src")
        if inplace and not (m.is_contiguous() and l.is_contiguous() and acc.is_contiguous()):
            raise ValueError("inplace=True needs contiguous state tensors")
        if not inplace:
            m, l, acc = m.clone(memory_format=torch.contiguous_format), l.clone(), acc.clone()
    extension = _loader.cpp_extension(backend)
    z_rows = _row_blocks(z_src) if extension is not None else z_src.contiguous()
    args = (rowptr, col, s_dst.contiguous(), s_src.contiguous(), z_rows, float(negative_slope))
    if extension is not None:
        extension.gat_forward_shard(*args, m, l, acc)
    else:
        _torch.gat_forward_shard(*args, m, l, acc)
    return m, l, acc


def gat_finalize(m: Tensor, l: Tensor, acc: Tensor, inplace: bool = False) -> Tensor:
    """Normalise the accumulated state into the attention output.

    .. math:: \\mathrm{out}_i = acc_i / l_i \\quad (0 \\text{ where node } i \\text{ has no in-edge})

    Args:
        m: [Nd,H] running max (unused, kept for a uniform signature).
        l: [Nd,H] normaliser.
        acc: [Nd,H,C] weighted sum.
        inplace: divide acc in place and return it (saves one [Nd,H,C] tensor).
    """
    del m
    safe = torch.where(l > 0, l, torch.ones_like(l))[..., None]
    return acc.div_(safe) if inplace else acc / safe


def gat_backward_shard(
    rowptr: Tensor,
    col: Tensor,
    s_dst: Tensor,
    s_src: Tensor,
    z_src: Tensor,
    negative_slope: float,
    m: Tensor,
    l: Tensor,
    grad_out: Tensor,
    delta: Tensor,
    backend: str | None = None,
    transpose: Transpose | None = None,
    out: tuple[Tensor, Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients of one shard wrt s_dst, s_src and z_src, recomputing attention on the fly.

    .. math::
        \\alpha_{ij} = e^{e_{ij} - m_i}/l_i,\\quad
        \\partial z_j = \\sum_i \\alpha_{ij} g_i,\\quad
        \\partial e_{ij} = \\alpha_{ij}(g_i \\cdot z_j - \\delta_i),\\quad
        \\partial s^{dst}_i = \\sum_j \\partial e_{ij}\\,\\mathrm{lrelu}'(p_{ij}),\\quad
        \\partial s^{src}_j = \\sum_i \\partial e_{ij}\\,\\mathrm{lrelu}'(p_{ij})

    with :math:`p_{ij} = s^{dst}_i + s^{src}_j` and :math:`\\delta_i = \\sum_c g_{ic}\\,\\mathrm{out}_{ic}`.
    The C++ path runs a CSR pass for s_dst and a transposed (CSC) pass for the source side:
    deterministic, no atomics, nothing E x H stored.

    Args:
        rowptr, col, s_dst, s_src, z_src, negative_slope: as in :func:`gat_forward_shard`.
        m, l: [Nd,H] FINAL state over all shards.
        grad_out: [Nd,H,C] gradient of the final output.
        delta: [Nd,H] sum over channels of grad_out * out.
        backend: 'cpp', 'torch' or None.
        transpose: optional precomputed :func:`csr_transpose` of this shard (reused across calls).
        out: optional accumulators of shapes [Nd,H], [Ns,H], [Ns,H,C] (dtype of z_src): the gradients are
            added into them in place and they are returned (for callers streaming a shard in pieces).
    """
    _check_inputs(rowptr, col, s_dst, s_src, z_src)
    num_dst = rowptr.numel() - 1
    num_src, heads, channels = z_src.shape
    for name, t, shape in (
        ("m", m, (num_dst, heads)),
        ("l", l, (num_dst, heads)),
        ("delta", delta, (num_dst, heads)),
        ("grad_out", grad_out, (num_dst, heads, channels)),
    ):
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}")
        if t.dtype != z_src.dtype:
            raise TypeError(f"{name} must have the dtype of z_src ({z_src.dtype})")
    if out is not None:
        for name, t, shape in zip(("out[0]", "out[1]", "out[2]"), out,
                                  ((num_dst, heads), (num_src, heads), (num_src, heads, channels))):
            if tuple(t.shape) != shape or t.dtype != z_src.dtype:
                raise ValueError(f"{name} must be a {z_src.dtype} accumulator of shape {shape}")
    state = [t.contiguous() for t in (m, l, grad_out, delta)]
    extension = _loader.cpp_extension(backend)
    z_rows = _row_blocks(z_src) if extension is not None else z_src.contiguous()
    dense = [s_dst.contiguous(), s_src.contiguous(), z_rows]
    if extension is not None:
        if transpose is None:
            transpose = extension.csr_transpose(rowptr, col, num_src)
        else:
            check_csr(transpose[0], transpose[1], num_dst)
        t_rowptr, t_row = transpose
        if t_rowptr.numel() != num_src + 1 or t_row.numel() != col.numel():
            raise ValueError("transpose does not match this shard; build it with csr_transpose(rowptr, col, Ns)")
        grads = extension.gat_backward_shard(rowptr, col, t_rowptr, t_row, *dense, float(negative_slope), *state)
        if out is None:
            return grads[0], grads[1], grads[2]
        return tuple(acc.add_(grad) for acc, grad in zip(out, grads))
    return _torch.gat_backward_shard(rowptr, col, *dense, float(negative_slope), *state, out=out)
