"""The graph structure the kernels read: a CSR shard over destination rows, its validation and its transpose.

A shard is ``rowptr [Nd+1]`` (int64, from 0 to E) and ``col [E]`` (int64 source row of every edge, sorted by
destination): the in-edges of destination ``i`` are ``col[rowptr[i]:rowptr[i+1]]``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import _loader
from . import torch_backend as _torch

Transpose = tuple[Tensor, Tensor]


def check_csr(rowptr: Tensor, col: Tensor, num_src: int) -> None:
    """Raise a clear error unless (rowptr, col) is a valid CSR shard over ``num_src`` source rows.

    Args:
        rowptr: [Nd+1] int64 row pointer; col: [E] int64 source indices; num_src: Ns.
    """
    if rowptr.dtype != torch.int64 or col.dtype != torch.int64:
        raise TypeError(f"rowptr and col must be int64 (got {rowptr.dtype}, {col.dtype}); use .long()")
    if rowptr.dim() != 1 or rowptr.numel() < 1 or col.dim() != 1:
        raise ValueError("a shard is a CSR: rowptr [Nd+1] and col [E], both 1-D")
    if int(rowptr[0]) != 0 or int(rowptr[-1]) != col.numel():
        raise ValueError(f"rowptr must start at 0 and end at len(col)={col.numel()}, got {int(rowptr[-1])}")
    if col.numel() and (int(col.min()) < 0 or int(col.max()) >= num_src):
        raise IndexError(f"col indexes rows outside the {num_src} source rows")


def csr_transpose(rowptr: Tensor, col: Tensor, num_src: int, backend: str | None = None) -> Transpose:
    """Transpose a CSR shard into a CSC (per source row, the destinations it feeds, ascending).

    Args:
        rowptr: [Nd+1] int64 row pointer; col: [E] int64 source indices.
        num_src: Ns.
        backend: 'cpp', 'torch' or None.
    """
    check_csr(rowptr, col, num_src)
    extension = _loader.cpp_extension(backend)
    if extension is not None:
        t_rowptr, t_row = extension.csr_transpose(rowptr.contiguous(), col.contiguous(), int(num_src))
        return t_rowptr, t_row
    return _torch.csr_transpose(rowptr, col, num_src)
