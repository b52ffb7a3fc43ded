"""Running per-destination max over in-edges, shard by shard, with exact tie-splitting gradients.

The state is the running max ``M`` ([Nd,F], -inf before any in-edge) and the number ``n`` of in-edges
attaining it (int32 [Nd,F]: exact up to 2^31 - 1 in-edges of one node, the size of a float32 max). Shards
merge exactly, in any order; no E x F tensor is written in the C++ path.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import _loader
from . import torch_backend as _torch
from .csr import Transpose, check_csr, csr_transpose

COUNT_DTYPE = torch.int32


def _check_x(x_src: Tensor) -> None:
    if x_src.dim() != 2:
        raise ValueError(f"x_src must be [Ns,F], got shape {tuple(x_src.shape)}")
    if x_src.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"kernels support float32 and float64, got {x_src.dtype}")


def empty_max_state(num_dst: int, features: int, like: Tensor) -> tuple[Tensor, Tensor]:
    """Fresh running-max state: max = -inf, count = 0 (int32).

    Args:
        num_dst, features: Nd, F.
        like: tensor whose dtype and device the max takes.
    """
    best = torch.full((num_dst, features), float("-inf"), dtype=like.dtype, device=like.device)
    return best, torch.zeros((num_dst, features), dtype=COUNT_DTYPE, device=like.device)


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

    Nodes with no in-edge keep max = -inf and count = 0 (the caller maps them to 0). An edge listed
    twice counts twice.

    Args:
        rowptr: [Nd+1] int64 CSR row pointer; col: [E] int64 source indices.
        x_src: [Ns,F] source rows.
        state: (max [Nd,F], count [Nd,F] int32) from earlier shards, or None.
        backend: 'cpp', 'torch' or None.
        inplace: update the given state in place (it must then be contiguous).
    """
    _check_x(x_src)
    check_csr(rowptr, col, x_src.shape[0])
    num_dst, features = rowptr.numel() - 1, x_src.shape[1]
    if state is None:
        best, count = empty_max_state(num_dst, features, x_src)
    else:
        best, count = state
        if tuple(best.shape) != (num_dst, features) or best.shape != count.shape:
            raise ValueError(f"state must be max, count shaped [Nd,F]=({num_dst},{features})")
        if best.dtype != x_src.dtype or count.dtype != COUNT_DTYPE:
            raise TypeError("state max must have the dtype of x_src and count must be int32")
        if inplace and not (best.is_contiguous() and count.is_contiguous()):
            raise ValueError("inplace=True needs contiguous state tensors")
        if not inplace:
            best, count = best.clone(memory_format=torch.contiguous_format), count.clone()
    extension = _loader.cpp_extension(backend)
    if extension is not None:
        extension.csr_max_shard(rowptr, col, x_src.contiguous(), best, count)
    else:
        _torch.csr_max_shard(rowptr, col, x_src, best, count)
    return best, count


def csr_max_backward(
    rowptr: Tensor,
    col: Tensor,
    x_src: Tensor,
    best: Tensor,
    count: Tensor,
    grad_out: Tensor,
    backend: str | None = None,
    transpose: Transpose | None = None,
) -> Tensor:
    """Gradient of the max wrt one shard's source rows, split evenly among tied in-edges.

    .. math:: \\partial x_{jf} = \\sum_{i : j \\to i} [x_{jf} = M_{if}]\\; g_{if} / n_{if}

    Args:
        rowptr, col, x_src: the shard, as in :func:`csr_max_shard`.
        best, count: FINAL max and count over all shards, [Nd,F].
        grad_out: [Nd,F] gradient of the output.
        backend: 'cpp', 'torch' or None.
        transpose: optional precomputed :func:`kernels.csr_transpose` of this shard (the C++ path reads it).
    """
    _check_x(x_src)
    check_csr(rowptr, col, x_src.shape[0])
    if best.shape != count.shape or grad_out.shape != best.shape or best.shape[0] != rowptr.numel() - 1:
        raise ValueError("best, count and grad_out must all be [Nd,F]")
    if count.dtype != COUNT_DTYPE:
        raise TypeError(f"count must be int32 (as csr_max_shard returns it), got {count.dtype}")
    extension = _loader.cpp_extension(backend)
    if extension is not None:
        if transpose is None:
            transpose = csr_transpose(rowptr, col, x_src.shape[0], backend="cpp")
        elif transpose[0].numel() != x_src.shape[0] + 1 or transpose[1].numel() != col.numel():
            raise ValueError("transpose does not match this shard; build it with csr_transpose(rowptr, col, Ns)")
        return extension.csr_max_backward(
            transpose[0],
            transpose[1],
            x_src.contiguous(),
            best.to(x_src.dtype).contiguous(),
            count.contiguous(),
            grad_out.to(x_src.dtype).contiguous(),
        )
    return _torch.csr_max_backward(rowptr, col, x_src, best, count, grad_out)
