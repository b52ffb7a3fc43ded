"""Shard SpMM for 0/1 adjacencies: ``out (+)= A x`` over a CSR, in place, deterministic (C++ or torch).

.. math::
    \\text{out}_i \\mathrel{+}= \\sum_{k = \\text{rowptr}_i}^{\\text{rowptr}_{i+1} - 1} x_{\\text{col}_k}

The transposed product ``A^T g`` is the same op over the shard's CSC (``colptr`` over source rows, the
destination of every edge in source order). In C++ each output row is summed by one thread in index order, so
results do not depend on the thread count or the run; the torch backend is ``torch.sparse`` CSR ``addmm``.
"""
from __future__ import annotations

import torch
from torch import Tensor

from . import _loader
from . import torch_backend as _torch


def spmm_csr(rowptr: Tensor, col: Tensor, x: Tensor, out: Tensor | None = None, accumulate: bool = True,
             backend: str | None = None) -> Tensor:
    """``out (+)= A x`` for the 0/1 CSR ``(rowptr, col)`` (no autograd); a fresh ``out`` when none is given.

    Args:
        rowptr: ``[R+1]`` int64 row pointer.
        col: ``[E]`` int64 row of ``x`` of every edge.
        x: ``[Ns, ...]`` source rows (trailing dims are flattened).
        out: optional ``[R, ...]`` contiguous accumulator, updated in place.
        accumulate: add into ``out`` (True) or overwrite it (False; rows without edges become 0).
        backend: 'cpp', 'torch' or None (see :func:`kernels.backend`).
    """
    rows = rowptr.numel() - 1
    if out is None:
        out = torch.empty((rows, *x.shape[1:]), dtype=x.dtype)
        accumulate = False
    if not out.is_contiguous():
        raise ValueError("spmm_csr: out must be contiguous (it is updated in place)")
    if out.shape[0] != rows or out.shape[1:] != x.shape[1:]:
        raise ValueError(f"spmm_csr: out is {tuple(out.shape)}, expected one row per CSR row and the trailing "
                         f"shape of x: {(rows, *x.shape[1:])}")
    if out.dtype != x.dtype:
        raise ValueError(f"spmm_csr: out is {out.dtype} but x is {x.dtype}; pass tensors of the same dtype")
    flat, acc = x.reshape(x.shape[0], -1).contiguous(), out.view(rows, -1)
    extension = _loader.cpp_extension(backend)
    if extension is not None:
        extension.spmm_csr(rowptr, col, flat, acc, accumulate)
    else:
        _torch.spmm_csr(rowptr, col, flat, acc, accumulate)
    return out
