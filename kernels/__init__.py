"""sarlab kernels: shard SpMM, fused GAT attention (online softmax over CSR shards) and CSR max, in C++/OpenMP
or torch, and a counting CPU allocator (:mod:`sarlab.kernels.alloc`).

Each op streams one CSR shard into a running state that shards merge into exactly, and has a backward that
reads the final state: the engine (``sarlab.core.shards``, ``sarlab.nn.gat``, ``sarlab.core.aggregators``) calls them
shard by shard.
Their benchmark against PyG and DGL lives in ``sarlab.real.bench.kernel_bench``; this package depends on torch only.

Backend choice: the ``backend=`` argument of each op, else ``$SARLAB_KERNELS`` (cpp | torch | auto;
default auto = cpp when the extension is built and loads, torch otherwise: while it is being built in the
background, silently; when it cannot be built, with a one-line warning).
A process that finds no build starts one in the background and runs on torch (``$SARLAB_KERNEL_BUILD``:
background | foreground | off); ``sarlab build-kernels`` (``python -m sarlab.kernels.build``) builds ahead.
The extension is JIT-built with ninja for this CPU under ``kernels/`` in sarlab's cache directory
(:mod:`sarlab.kernels.cache`; ``$SARLAB_KERNEL_BUILD_DIR`` overrides it; see :mod:`sarlab.kernels._loader`).
The names below load on first use, so :mod:`sarlab.kernels.cache` is importable without torch.

May import (``MAY_IMPORT`` below, held by tests/test_contracts.py): nothing else of sarlab.
"""

from __future__ import annotations

import importlib

#: public name -> (submodule, attribute); attribute None means the submodule itself
_LAZY = {
    "alloc": (".alloc", None),
    "build": ("._loader", "build"),
    "BuildPending": ("._loader", "BuildPending"),
    "build_dir": ("._loader", "build_dir"),
    "extension_error": ("._loader", "extension_error"),
    "preload": ("._loader", "preload"),
    "Transpose": (".csr", "Transpose"),
    "csr_transpose": (".csr", "csr_transpose"),
    "empty_state": (".gat", "empty_state"),
    "gat_backward_shard": (".gat", "gat_backward_shard"),
    "gat_finalize": (".gat", "gat_finalize"),
    "gat_forward_shard": (".gat", "gat_forward_shard"),
    "COUNT_DTYPE": (".maxagg", "COUNT_DTYPE"),
    "csr_max_backward": (".maxagg", "csr_max_backward"),
    "csr_max_shard": (".maxagg", "csr_max_shard"),
    "empty_max_state": (".maxagg", "empty_max_state"),
    "spmm_csr": (".spmm", "spmm_csr"),
}


def backend(requested: str | None = None) -> str:
    """The backend an op called with ``backend=requested`` runs on: 'cpp' or 'torch'.

    ``requested`` None or 'auto' reads ``$SARLAB_KERNELS`` (cpp | torch | auto); auto builds/loads the
    extension on first use and falls back to torch when it cannot.

    Args:
        requested: 'cpp', 'torch', 'auto' or None.
    """
    from ._loader import resolve

    return resolve(None if requested == "auto" else requested)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _LAZY[name]
    value = importlib.import_module(module, __name__)
    if attribute is not None:
        value = getattr(value, attribute)
    globals()[name] = value
    return value


__all__ = ["backend", *_LAZY]

#: the sarlab packages this one may import (held by tests/test_contracts.py)
MAY_IMPORT = (

)
