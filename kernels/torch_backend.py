"""Pure-torch implementations of the shard kernels (same results as the C++ ones).

They build E-sized tensors transiently (GAT: per-edge logits and weights, [H,E], its weighted sums as
sparse products; max: gathered rows), so they are the fallback when no compiler is available, not the fast
path. The engine's unfused GAT (``sarlab.nn.gat``, ``fused=False``) runs the GAT ones in chunks of edges.
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


def row_chunks(rowptr: Tensor, max_edges: int | None) -> list[tuple[int, int]]:
    """Row ranges ``[first, end)`` of a CSR holding at most ``max_edges`` edges each (a row with more is a range
    alone); one range over all rows when ``max_edges`` is None or the CSR has no more edges.

    Args:
        rowptr: [R+1] int64 row pointer.
        max_edges: edge budget per range, or None.
    """
    num_rows, total = rowptr.numel() - 1, int(rowptr[-1])
    if max_edges is None or total <= max_edges:
        return [(0, num_rows)]
    chunks, first = [], 0
    while first < num_rows:
        end = int(torch.searchsorted(rowptr, rowptr[first] + max_edges, right=True)) - 1
        end = min(max(end, first + 1), num_rows)
        chunks.append((first, end))
        first = end
    return chunks


def _with_channel(x: Tensor, extra: Tensor | float) -> Tensor:
    """``[N,H,C]`` rows with one more channel (``[N,H]`` or a constant) appended: contiguous ``[N,H,C+1]``."""
    num, heads, channels = x.shape
    out = torch.empty((num, heads, channels + 1), dtype=x.dtype, device=x.device)
    out[..., :channels] = x
    out[..., channels] = extra
    return out


class _HeadCsr:
    r"""The CSR of one chunk with every edge expanded into its ``H`` heads, rows ``(i, h)`` and columns
    ``(j, h)``: multiplying it by rows ``[N,H,K]`` (viewed ``[N*H,K]``) gives every head's weighted sum at
    once, each destination's ``deg * H`` nonzeros next to each other and each source row's heads adjacent in
    memory (read once per destination, not once per head). Per-edge values ``[E,H]`` (edge-major) are put in
    the expanded order by one gather.

    .. math:: \mathrm{out}_{i,h,:} = \sum_{k=\mathrm{rowptr}_i}^{\mathrm{rowptr}_{i+1}-1}
        \mathrm{values}_{k,h}\, \mathrm{dense}_{\mathrm{col}_k,h,:}

    Args:
        rowptr: [R+1] chunk-local row pointer (from 0); row: [E] chunk-local row of every edge;
        col: [E] column of every edge, < num_cols; heads: H; num_cols: N.
    """

    def __init__(self, rowptr: Tensor, row: Tensor, col: Tensor, heads: int, num_cols: int):
        rows, nnz = rowptr.numel() - 1, col.numel()
        index = torch.int32 if heads * max(num_cols, nnz + 1) < 2**31 else torch.int64  # MKL's LP64 index
        head = torch.arange(heads, device=col.device)
        deg = rowptr.diff()
        self.crow = torch.empty(rows * heads + 1, dtype=index, device=col.device)
        self.crow[:-1].view(rows, heads).copy_(rowptr[:-1, None] * heads + head * deg[:, None])
        self.crow[-1] = nnz * heads
        # edge k of row i, head h goes to rowptr_i*H + h*deg_i + (k - rowptr_i); `order` inverts that
        place = rowptr.index_select(0, row).mul_(heads - 1).add_(torch.arange(nnz, device=col.device))
        place = (place[:, None] + head * deg.index_select(0, row)[:, None]).view(-1)
        self.order = torch.empty_like(place).scatter_(0, place, torch.arange(nnz * heads, device=col.device))
        self.col = (col[:, None] * heads + head).view(-1).index_select(0, self.order).to(index)
        self.rows, self.heads, self.num_cols = rows, heads, num_cols

    def matmul(self, values: Tensor, dense: Tensor) -> Tensor:
        """``[R,H,K]`` weighted sums of ``dense`` ``[N,H,K]`` (contiguous) with per-edge ``values`` ``[E,H]``."""
        heads, width = self.heads, dense.shape[-1]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
            mat = torch.sparse_csr_tensor(self.crow, self.col, values.reshape(-1).index_select(0, self.order),
                                          size=(self.rows * heads, self.num_cols * heads))
            return (mat @ dense.view(self.num_cols * heads, width)).view(self.rows, heads, width)


def _attention(s_dst: Tensor, s_src: Tensor, dst: Tensor, src: Tensor, negative_slope: float,
               m: Tensor | None = None, l: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Per edge and head (``[E,H]``): the pre-activation ``p = s_dst[dst] + s_src[src]`` and either the logit
    ``lrelu(p)`` or, given the final state, the attention weight ``exp(lrelu(p) - m[dst]) / l[dst]``.

    Args:
        s_dst, s_src: [Nd,H], [Ns,H] scores; dst, src: [E] row indices into them.
        negative_slope: LeakyReLU slope.
        m, l: optional final max and normaliser, [Nd,H].
    """
    pre = s_dst.index_select(0, dst).add_(s_src.index_select(0, src))
    logit = torch.nn.functional.leaky_relu(pre, negative_slope)
    if m is None or l is None:
        return pre, logit
    return pre, logit.sub_(m.index_select(0, dst)).exp_().div_(l.index_select(0, dst))


def _slope_weighted(pre: Tensor, alpha: Tensor, negative_slope: float) -> Tensor:
    """``alpha * lrelu'(pre)``: alpha where the pre-activation is positive, ``slope * alpha`` elsewhere."""
    return torch.ops.aten.leaky_relu_backward(alpha, pre, negative_slope, False)


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
    max_edges: int | None = None,
    row: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    r"""Torch version of :func:`sarlab.kernels.gat.gat_forward_shard` (the math is there): updates the online-softmax
    state (m, l, acc) in place with the edges of one shard and returns it.

    Destination rows stream in chunks of at most ``max_edges`` edges; per chunk the per-edge weights are
    ``[E,H]`` and the weighted sums one sparse product over all heads, so nothing ``E x H x C`` is built:

    .. math:: [\Delta acc_i, \Delta l_i] = \sum_j e^{e_{ij} - m'_i} [z_j, 1]

    Args:
        rowptr, col, s_dst, s_src, z_src, negative_slope: as in :func:`sarlab.kernels.gat.gat_forward_shard`
            (z_src may be strided).
        m, l, acc: running state, [Nd,H], [Nd,H], [Nd,H,C].
        max_edges: edges per chunk (None: one chunk).
        row: optional [E] destination row of every edge (``csr_rows(rowptr)``, reused if the caller has it).
    """
    if col.numel() == 0:
        return m, l, acc
    heads = z_src.shape[1]
    row = csr_rows(rowptr) if row is None else row
    z_ones = _with_channel(z_src, 1.0)  # [Ns,H,C+1]: the last channel sums the weights into l
    s_dst, s_src = s_dst.contiguous(), s_src.contiguous()
    for first, end in row_chunks(rowptr, max_edges):
        lo, hi = int(rowptr[first]), int(rowptr[end])
        if lo == hi:
            continue
        dst, src = row[lo:hi] - first, col[lo:hi]
        _, logit = _attention(s_dst[first:end], s_src, dst, src, negative_slope)
        m_old = m[first:end]
        m_new = torch.full_like(m_old, float("-inf")).scatter_reduce_(0, dst[:, None].expand(-1, heads), logit, "amax")
        torch.maximum(m_new, m_old, out=m_new)
        keep = torch.isfinite(m_old)  # rows with earlier edges keep them, rescaled
        scale = torch.where(keep, torch.exp(torch.where(keep, m_old - m_new, torch.zeros_like(m_old))),
                            torch.zeros_like(m_old))
        weight = logit.sub_(m_new.index_select(0, dst)).exp_()
        sums = _HeadCsr(rowptr[first:end + 1] - lo, dst, src, heads, z_ones.shape[0]).matmul(weight, z_ones)
        l[first:end].mul_(scale).add_(sums[..., -1])
        acc[first:end].mul_(scale.unsqueeze(-1)).add_(sums[..., :-1])
        m_old.copy_(m_new)
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
    max_edges: int | None = None,
    row: Tensor | None = None,
    transpose: tuple[Tensor, Tensor] | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    r"""Torch version of :func:`sarlab.kernels.gat.gat_backward_shard` (the math is there): one shard's gradients wrt
    s_dst, s_src and z_src given the final softmax state.

    With :math:`\alpha_{ij}` recomputed per chunk and :math:`\lambda_{ij} = \mathrm{lrelu}'(p_{ij})`, the
    per-edge dot products :math:`g_i \cdot z_j` are never formed; every sum is a sparse product over all heads:

    .. math::
        [S_i, T_i] = \sum_j \alpha_{ij}\lambda_{ij} [z_j, 1],\quad
        \partial s^{dst}_i = g_i \cdot S_i - \delta_i T_i \quad \text{(destination chunks, CSR)}

        \partial z_j = \sum_i \alpha_{ij} g_i,\quad
        [U_j, V_j] = \sum_i \alpha_{ij}\lambda_{ij} [g_i, \delta_i],\quad
        \partial s^{src}_j = z_j \cdot U_j - V_j \quad \text{(source chunks, CSC)}

    Args:
        rowptr, col, s_dst, s_src, z_src, negative_slope, m, l, grad_out, delta: as in
            :func:`sarlab.kernels.gat.gat_backward_shard` (z_src may be strided).
        out: optional accumulators ([Nd,H], [Ns,H], [Ns,H,C], may be strided views) the gradients are added
            into in place and returned.
        max_edges: edges per chunk, on either side (None: one chunk each).
        row: optional [E] destination row of every edge (``csr_rows(rowptr)``).
        transpose: optional :func:`csr_transpose` of the shard (built here when None).
    """
    if out is None:
        out = torch.zeros_like(s_dst), torch.zeros_like(s_src), torch.zeros_like(z_src)
    if col.numel() == 0:
        return out
    grad_s_dst, grad_s_src, grad_z = out
    num_src, heads, _ = z_src.shape
    num_dst = rowptr.numel() - 1
    row = csr_rows(rowptr) if row is None else row
    t_rowptr, t_row = csr_transpose(rowptr, col, num_src) if transpose is None else transpose
    z_ones = _with_channel(z_src, 1.0)  # [Ns,H,C+1]: [z_j, 1]
    g_delta = _with_channel(grad_out, delta)  # [Nd,H,C+1]: [g_i, delta_i]
    s_dst, s_src, m, l = (t.contiguous() for t in (s_dst, s_src, m, l))

    for first, end in row_chunks(rowptr, max_edges):  # destination side
        lo, hi = int(rowptr[first]), int(rowptr[end])
        if lo == hi:
            continue
        dst, src = row[lo:hi], col[lo:hi]
        pre, alpha = _attention(s_dst, s_src, dst, src, negative_slope, m, l)
        sums = _HeadCsr(rowptr[first:end + 1] - lo, dst - first, src, heads, num_src).matmul(
            _slope_weighted(pre, alpha, negative_slope), z_ones)
        g_i = g_delta[first:end]
        grad_s_dst[first:end] += (g_i[..., :-1] * sums[..., :-1]).sum(-1).sub_(g_i[..., -1] * sums[..., -1])

    for first, end in row_chunks(t_rowptr, max_edges):  # source side, over the transpose
        lo, hi = int(t_rowptr[first]), int(t_rowptr[end])
        if lo == hi:
            continue
        local_rowptr, dst = t_rowptr[first:end + 1] - lo, t_row[lo:hi]
        local_src = csr_rows(local_rowptr)
        pre, alpha = _attention(s_dst, s_src, dst, local_src + first, negative_slope, m, l)
        expanded = _HeadCsr(local_rowptr, local_src, dst, heads, num_dst)
        grad_z[first:end] += expanded.matmul(alpha, g_delta)[..., :-1]
        sums = expanded.matmul(_slope_weighted(pre, alpha, negative_slope), g_delta)
        grad_s_src[first:end] += (z_ones[first:end, :, :-1] * sums[..., :-1]).sum(-1).sub_(sums[..., -1])
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
