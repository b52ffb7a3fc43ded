"""sarlab kernels: shard SpMM, fused GAT attention (online softmax over CSR shards) and CSR max, in C++/OpenMP
or torch, and a counting CPU allocator (:mod:`sarlab.kernels.alloc`).

Each op streams one CSR shard into a running state that shards merge into exactly, and has a backward that
reads the final state: the engine (``sarlab.core.shards``, ``sarlab.nn.gat``, ``sarlab.core.aggregators``) calls them
shard by shard.
Their benchmark against PyG and DGL lives in ``sarlab.executor.bench.kernel_bench``; this package depends on torch only.

Backend choice: the ``backend=`` argument of each op, else ``$SARLAB_KERNELS`` (cpp | torch | auto;
default auto = cpp when the extension builds and loads, torch otherwise with a one-line warning).
The extension is JIT-built with ninja for this CPU under ``<repo>/.build/kernels`` (``$SARLAB_KERNEL_BUILD_DIR``;
see :mod:`sarlab.kernels._loader`).
"""

from __future__ import annotations

from . import alloc
from ._loader import build, build_dir, extension_error
from ._loader import resolve as _resolve
from .csr import Transpose, csr_transpose
from .gat import empty_state, gat_backward_shard, gat_finalize, gat_forward_shard
from .maxagg import COUNT_DTYPE, csr_max_backward, csr_max_shard, empty_max_state
from .spmm import spmm_csr


def backend(requested: str | None = None) -> str:
    """The backend an op called with ``backend=requested`` runs on: 'cpp' or 'torch'.

    ``requested`` None or 'auto' reads ``$SARLAB_KERNELS`` (cpp | torch | auto); auto builds/loads the
    extension on first use and falls back to torch when it cannot.

    Args:
        requested: 'cpp', 'torch', 'auto' or None.
    """
    return _resolve(None if requested == "auto" else requested)


__all__ = [
    "COUNT_DTYPE",
    "Transpose",
    "alloc",
    "backend",
    "build",
    "build_dir",
    "csr_max_backward",
    "csr_max_shard",
    "csr_transpose",
    "empty_max_state",
    "empty_state",
    "extension_error",
    "gat_backward_shard",
    "gat_finalize",
    "gat_forward_shard",
    "spmm_csr",
]
