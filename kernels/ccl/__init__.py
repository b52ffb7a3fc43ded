"""A torch.distributed backend named ``ccl`` over Intel oneCCL (CPU tensors), built as a C++ extension.

Usage::

    import sarlab.kernels.ccl as ccl
    ccl.register()                        # builds on first use (about a minute), then cached
    dist.init_process_group("ccl", ...)   # env://, tcp:// and torchrun work as with gloo

sarlab itself needs no call: :mod:`sarlab.core.comm` registers the backend lazily (``register(lazy=True)``) in
every process that imports it, and :func:`sarlab.core.comm.check_backend` builds it in the launcher.

:func:`available` tells without building whether the libraries are installed, and if not, how to install them.
Rendezvous goes through the c10d store: rank 0 publishes the address of its oneCCL key-value store there.

Ops (CPU, dense, contiguous tensors; one tensor per call):

* ``all_reduce``: SUM, AVG (floating dtypes), PRODUCT, MIN, MAX on float32/64, float16, bfloat16,
  int8/16/32/64, uint8, bool (SUM = logical or, PRODUCT = logical and).
* ``broadcast``, ``all_gather`` (list form, so ``all_gather_object`` works), ``all_gather_into_tensor``,
  ``all_to_all_single`` (equal or unequal splits), ``send``/``recv``/``isend``/``irecv``,
  ``batch_isend_irecv``, ``barrier``: any dtype (moved as bytes).
* Not supported: ``reduce``, ``reduce_scatter``, ``gather``, ``scatter``, list ``all_to_all``, any-source recv,
  sparse or non-CPU tensors (each raises an error that names the op).

Point-to-point ordering: oneCCL send/recv have no tag. Tags are accepted and ignored; messages between two ranks
are matched in posting order, per direction (the k-th send from A to B is received by the k-th recv posted on
B from A), independently of ops with other peers and of how sends and receives interleave. Code that relies on
tags to match messages posted in different orders on the two sides is not supported.

Timeouts: every op fails (``DistBackendError`` naming the op and the timeout; ``Work.wait()`` raises it) when it
has not completed within the process group's timeout (``init_process_group(timeout=...)``), e.g. because a peer
died. oneCCL cannot cancel an op, so the process group is unusable afterwards: later ops fail at once. Creating
the process group is bounded by the store's timeout while waiting for rank 0's address, not after that.

Environment set when unset (before oneCCL loads): ``CCL_ATL_TRANSPORT=ofi``, ``FI_PROVIDER=tcp``,
``CCL_LOG_LEVEL=error``, ``CCL_YIELD=sched_yield``, ``IPATH_NO_BACKTRACE=1`` (see :data:`ENV_DEFAULTS`), and
``CCL_WORKER_OFFLOAD=0`` (no oneCCL worker thread: the backend's progress thread drives oneCCL) where more ranks
share the machine's cores than the process has (``LOCAL_WORLD_SIZE``, or every rank sarlab's launcher started on this
machine, an emulated network's hosts included: :data:`MACHINE_RANKS_ENV`; see :data:`SHARED_CORES_ENV`).
This module imports only the standard library; torch is imported by :func:`load` and :func:`register`.

May import (``MAY_IMPORT`` below, held by tests/test_contracts.py): ``sarlab.kernels``.
"""

from __future__ import annotations

import threading

from ._build import (
    ENV_DEFAULTS,
    MACHINE_RANKS_ENV,
    SHARED_CORES_ENV,
    apply_env,
    available,
    cache_root,
    ranks_share_cores,
)

__all__ = ["ENV_DEFAULTS", "MACHINE_RANKS_ENV", "SHARED_CORES_ENV", "available", "cache_root", "load", "register",
           "apply_env", "ranks_share_cores"]

BACKEND_NAME = "ccl"
_lock = threading.Lock()
_registered = False


def load():
    """Build (if needed) and import the C++ extension; raises RuntimeError with the install command when a
    library is missing."""
    from ._build import load as _load

    return _load()


def register(lazy: bool = False) -> None:
    """Register the ``ccl`` backend with ``torch.distributed``. Idempotent.

    Args:
        lazy: do not build or load the extension now but when the first ``ccl`` process group is created (then
            a missing library fails ``init_process_group`` with the install command).
    """
    global _registered
    with _lock:
        if _registered:
            return
        import torch.distributed as dist

        ext = None if lazy else load()

        def create(store, rank, size, timeout):
            return (ext or load()).create_backend(store, rank, size, timeout)

        if BACKEND_NAME.upper() not in dist.Backend._plugins:
            dist.Backend.register_backend(BACKEND_NAME, create, devices=["cpu"])
        _registered = True

#: the sarlab packages this one may import (held by tests/test_contracts.py)
MAY_IMPORT = (
    "sarlab.kernels",
)
