"""sarlab kernels: fused GAT attention (online softmax over CSR shards) and CSR max, in C++/OpenMP or torch.

Backend choice: the ``backend=`` argument of each op, else ``$SARLAB_KERNELS`` (cpp | torch | auto;
default auto = cpp when the extension builds and loads, torch otherwise with a one-line warning).
The extension is JIT-built with ninja into ``<repo>/.build/kernels`` (``$SARLAB_KERNEL_BUILD_DIR``).
"""

from __future__ import annotations

from ._loader import build, build_dir, extension_error
from ._loader import resolve as _resolve
from .gat import (
    GATFusedFunction,
    GATLayer,
    csr_transpose,
    empty_state,
    gat_backward_shard,
    gat_finalize,
    gat_forward_shard,
    gat_fused,
    gat_unfused,
)
from .maxagg import csr_max, csr_max_backward, csr_max_shard


def backend() -> str:
    """The backend ops use when called without ``backend=``: 'cpp' or 'torch'.

    Reads ``$SARLAB_KERNELS`` (cpp | torch | auto); auto builds/loads the extension on first use.
    """
    return _resolve(None)


__all__ = [
    "GATFusedFunction",
    "GATLayer",
    "backend",
    "build",
    "build_dir",
    "csr_max",
    "csr_max_backward",
    "csr_max_shard",
    "csr_transpose",
    "empty_state",
    "extension_error",
    "gat_backward_shard",
    "gat_finalize",
    "gat_forward_shard",
    "gat_fused",
    "gat_unfused",
]
