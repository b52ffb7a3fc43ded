"""Pure-torch implementations of the shard kernels (same results as the C++ ones).

They build E-sized tensors transiently (per-edge logits, weights and gathered rows), so they are
the fallback when no compiler is available, not the fast path.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor


def csr_rows(rowptr: Tensor) -> Tensor:
    """Destination row of every edge of a CSR: ``row[k] = i`` for ``rowptr[i] <= k < rowptr[i+1]``.

    Args:
        rowptr: [Nd+1] int64 row pointer.
    """
    num_dst = rowptr.numel() - 1
    return torch.repeat_interleave(torch.arange(num_dst, device=rowptr.device), rowptr.diff())


def csr_transpose(rowptr: Tensor, col: Tensor, num_src: int) -> tuple[Tensor, Tensor]:
    """Transpose a CSR shard: for each source j, the destinations i with an edge j->i, ascending.

    Args:
        rowptr: [Nd+1] int64 row pointer over destinations.
        col: [E] int64 source index of every edge.
        num_src: Ns, the number of source rows.
    """
    row = csr_rows(rowptr)
    order = torch.argsort(col, stable=True)
    counts = torch.bincount(col, minlength=num_src)
    t_rowptr = torch.zeros(num_src + 1, dtype=torch.int64, device=col.device)
    torch.cumsum(counts, 0, out=t_rowptr[1:])
    return t_rowptr, row[order]


def spmm_csr(rowptr: Tensor, col: Tensor, x: Tensor, out: Tensor, accumulate: bool) -> None:
    """``out (+)= A x`` for the 0/1 CSR ``(rowptr, col)`` through ``torch.sparse`` ``addmm`` (out, x 2-D).

    Args:
        rowptr, col: the shard as a CSR over output rows; x: [Ns,F]; out: [R,F], updated in place.
        accumulate: add into out (else overwrite it).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
        ones = torch.ones(col.numel(), dtype=x.dtype)
        mat = torch.sparse_csr_tensor(rowptr, col, ones, size=(out.shape[0], x.shape[0]))
        out.addmm_(mat, x, beta=1 if accumulate else 0)


def _logits(row: Tensor, col: Tensor, s_dst: Tensor, s_src: Tensor, slope: float) -> tuple[Tensor, Tensor]:
    pre = s_dst[row] + s_src[col]
    return pre, torch.nn.functional.leaky_relu(pre, slope)


def gat_forward_shard(
    rowptr: Tensor,
    col: Tensor,
    s_dst: Tensor,
    s_src: Tensor,
    z_src: Tensor,
    negative_slope: float,
    m: Tensor,
    l: Tensor,
    acc: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """Torch version of :func:`kernels.gat.gat_forward_shard` (the math is there): updates the online-softmax
    state (m, l, acc) in place with the edges of one shard and returns it.

    Args:
        rowptr, col, s_dst, s_src, z_src, negative_slope: as in :func:`kernels.gat.gat_forward_shard`.
        m, l, acc: running state, [Nd,H], [Nd,H], [Nd,H,C].
    """
    row = csr_rows(rowptr)
    _, e = _logits(row, col, s_dst, s_src, negative_slope)
    shard_max = torch.full_like(m, float("-inf")).scatter_reduce_(
        0, row[:, None].expand_as(e), e, "amax", include_self=True
    )
    m_new = torch.maximum(m, shard_max)
    keep = torch.isfinite(m)  # rows with earlier edges keep them, rescaled
    scale = torch.where(keep, torch.exp(torch.where(keep, m - m_new, torch.zeros_like(m))), torch.zeros_like(m))
    w = torch.exp(e - m_new[row])
    l.mul_(scale).index_add_(0, row, w)
    acc.mul_(scale[..., None]).index_add_(0, row, w[..., None] * z_src[col])
    m.copy_(m_new)
    return m, l, acc


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
    out: tuple[Tensor, Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Torch version of :func:`kernels.gat.gat_backward_shard` (the math is there): one shard's gradients wrt
    s_dst, s_src and z_src given the final softmax state.

    Args:
        rowptr, col, s_dst, s_src, z_src, negative_slope, m, l, grad_out, delta: as in
            :func:`kernels.gat.gat_backward_shard`.
        out: optional accumulators ([Nd,H], [Ns,H], [Ns,H,C]) the gradients are added into in place and
            returned, so that a caller streaming chunks of one shard allocates no full-size zeros per chunk.
    """
    row = csr_rows(rowptr)
    pre, e = _logits(row, col, s_dst, s_src, negative_slope)
    alpha = torch.exp(e - m[row]) / l[row]
    g_row = grad_out[row]
    z_col = z_src[col]
    de = alpha * ((g_row * z_col).sum(-1) - delta[row])
    dpre = torch.where(pre > 0, de, de * negative_slope)
    if out is None:
        out = torch.zeros_like(s_dst), torch.zeros_like(s_src), torch.zeros_like(z_src)
    grad_s_dst, grad_s_src, grad_z = out
    grad_s_dst.index_add_(0, row, dpre)
    grad_s_src.index_add_(0, col, dpre)
    grad_z.index_add_(0, col, alpha[..., None] * g_row)
    return grad_s_dst, grad_s_src, grad_z


def csr_max_shard(rowptr: Tensor, col: Tensor, x_src: Tensor, mx: Tensor, count: Tensor) -> tuple[Tensor, Tensor]:
    """Update a running per-destination max over in-edges (and the count attaining it) in place.

    .. math:: M_i' = \\max(M_i, \\max_{j\\to i} x_j),\\quad n_i' = \\#\\{\\text{edges attaining } M_i'\\}

    Builds E x F transients (the gathered rows, the tie mask): the fallback, not the fast path.

    Args:
        rowptr, col: the shard as a CSR over destination rows.
        x_src: [Ns,F] source rows.
        mx, count: [Nd,F] running max (-inf for no edge yet) and integer count.
    """
    row = csr_rows(rowptr)
    vals = x_src[col]
    index = row[:, None].expand_as(vals)
    shard_max = torch.full_like(mx, float("-inf")).scatter_reduce_(0, index, vals, "amax", include_self=True)
    hits = (vals == shard_max[row]).to(count.dtype)
    shard_count = torch.zeros_like(count).index_add_(0, row, hits)
    grows = shard_max > mx
    ties = shard_max == mx  # (-inf == -inf where the shard has no edge into a row: its count stays)
    count.copy_(torch.where(grows, shard_count, torch.where(ties, count + shard_count, count)))
    mx.copy_(torch.maximum(mx, shard_max))
    return mx, count


def csr_max_backward(rowptr: Tensor, col: Tensor, x_src: Tensor, mx: Tensor, count: Tensor, grad_out: Tensor) -> Tensor:
    """Gradient of the per-destination max, split evenly between tied in-edges.

    .. math:: \\partial x_j = \\sum_{i: j\\to i} [x_j = M_i]\\, g_i / n_i

    Args:
        rowptr, col: the shard as a CSR over destination rows.
        x_src: [Ns,F]; mx, count: final max and count, [Nd,F]; grad_out: [Nd,F].
    """
    row = csr_rows(rowptr)
    vals = x_src[col]
    hit = vals == mx[row]
    contrib = torch.where(hit, grad_out[row] / count[row].clamp_min(1).to(grad_out.dtype), torch.zeros_like(vals))
    return torch.zeros_like(x_src).index_add_(0, col, contrib)
