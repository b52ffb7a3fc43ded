"""Running per-destination max over in-edges, shard by shard, with exact tie-splitting gradients."""

from __future__ import annotations

import torch
from torch import Tensor

from . import _loader
from . import torch_backend as _torch
from .gat import Transpose, _check_csr, csr_transpose


def _check_x(x_src: Tensor) -> None:
    if x_src.dim() != 2:
        raise ValueError(f"x_src must be [Ns,F], got shape {tuple(x_src.shape)}")
    if x_src.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"kernels support float32 and float64, got {x_src.dtype}")


def csr_max_shard(
    rowptr: Tensor,
    col: Tensor,
    x_src: Tensor,
    state: tuple[Tensor, Tensor] | None = None,
    backend: str | None = None,
    inplace: bool = False,
) -> tuple[Tensor, Tensor]:
    """Update a running per-destination max (and how many in-edges attain it) with one shard.

    .. math::
        M_i' = \\max(M_i, \\max_{j \\to i} x_j),\\qquad
        n_i' = n_i [M_i = M_i'] + \\#\\{j \\to i : x_j = M_i'\\}

    Nodes with no in-edge keep max = -inf and count = 0 (the caller maps them to 0).

    Args:
        rowptr: [Nd+1] int64 CSR row pointer; col: [E] int64 source indices.
        x_src: [Ns,F] source rows.
        state: (max [Nd,F], count [Nd,F] int64) from earlier shards, or None.
        backend: 'cpp', 'torch' or None.
        inplace: update the given state in place.
    """
    _check_x(x_src)
    _check_csr(rowptr, col, x_src.shape[0])
    num_dst, feats = rowptr.numel() - 1, x_src.shape[1]
    if state is None:
        mx = torch.full((num_dst, feats), float("-inf"), dtype=x_src.dtype, device=x_src.device)
        count = torch.zeros((num_dst, feats), dtype=torch.int64, device=x_src.device)
    else:
        mx, count = state
        if tuple(mx.shape) != (num_dst, feats) or mx.shape != count.shape:
            raise ValueError(f"state must be max, count shaped [Nd,F]=({num_dst},{feats})")
        if mx.dtype != x_src.dtype or count.dtype != torch.int64:
            raise TypeError("state max must have the dtype of x_src and count must be int64")
        if not inplace:
            mx, count = mx.clone(memory_format=torch.contiguous_format), count.clone()
    if _loader.resolve(backend) == "cpp":
        ext = _loader.extension()
        assert ext is not None
        ext.csr_max_shard(rowptr, col, x_src.contiguous(), mx, count)
    else:
        _torch.csr_max_shard(rowptr, col, x_src, mx, count)
    return mx, count


def csr_max_backward(
    rowptr: Tensor,
    col: Tensor,
    x_src: Tensor,
    max: Tensor,  # the name the API promises (shadows the builtin inside this function only)
    count: Tensor,
    grad_out: Tensor,
    backend: str | None = None,
    transpose: Transpose | None = None,
) -> Tensor:
    """Gradient of the max wrt one shard's source rows, split evenly among tied in-edges.

    .. math:: \\partial x_{jf} = \\sum_{i : j \\to i} [x_{jf} = M_{if}]\\; g_{if} / n_{if}

    Args:
        rowptr, col, x_src: the shard, as in :func:`csr_max_shard`.
        max, count: FINAL max and count over all shards, [Nd,F].
        grad_out: [Nd,F] gradient of the output.
        backend: 'cpp', 'torch' or None.
        transpose: optional precomputed :func:`csr_transpose` of this shard.
    """
    _check_x(x_src)
    _check_csr(rowptr, col, x_src.shape[0])
    if max.shape != count.shape or grad_out.shape != max.shape or max.shape[0] != rowptr.numel() - 1:
        raise ValueError("max, count and grad_out must all be [Nd,F]")
    if _loader.resolve(backend) == "cpp":
        ext = _loader.extension()
        assert ext is not None
        if transpose is None:
            transpose = csr_transpose(rowptr, col, x_src.shape[0], backend="cpp")
        return ext.csr_max_backward(
            transpose[0],
            transpose[1],
            x_src.contiguous(),
            max.contiguous(),
            count.contiguous(),
            grad_out.to(x_src.dtype).contiguous(),
        )
    return _torch.csr_max_backward(rowptr, col, x_src, max, count, grad_out)


class CSRMaxFunction(torch.autograd.Function):
    """Autograd Function: per-destination max over in-edges of one graph (0 for isolated nodes)."""

    @staticmethod
    def forward(ctx, rowptr, col, x_src, backend):  # type: ignore[override]
        mx, count = csr_max_shard(rowptr, col, x_src, backend=backend)
        ctx.save_for_backward(rowptr, col, x_src, mx, count)
        ctx.backend = backend
        return torch.where(count > 0, mx, torch.zeros_like(mx))

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):  # type: ignore[override]
        rowptr, col, x_src, mx, count = ctx.saved_tensors
        return (
            None,
            None,
            csr_max_backward(rowptr, col, x_src, mx, count, grad_out, backend=ctx.backend),
            None,
        )


def csr_max(rowptr: Tensor, col: Tensor, x_src: Tensor, backend: str | None = None) -> Tensor:
    """Differentiable max aggregation over in-edges (like scatter_reduce 'amax'; 0 for isolated nodes).

    .. math:: \\mathrm{out}_i = \\max_{j \\to i} x_j

    Args:
        rowptr: [Nd+1] int64; col: [E] int64; x_src: [Ns,F]; backend: 'cpp', 'torch' or None.
    """
    return CSRMaxFunction.apply(rowptr, col, x_src, backend)
