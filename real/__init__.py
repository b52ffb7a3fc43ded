"""The real executor: launching workers (or joining torchrun), experiments, measurements, the ``sarlab`` CLI.

``real.run``, ``real.gradients`` and their results are the Python API (:mod:`real.api`). They are loaded on
first use, so that ``import real`` and the command-line dispatcher stay free of torch, and so that
``python -m real.worker`` (or :mod:`real.worker_entry`) does not import the worker module twice.
"""
from __future__ import annotations

import importlib

_API = ("run", "gradients", "RunResult", "GradientResult")

__all__ = list(_API)


def __getattr__(name: str):
    if name in _API:
        return getattr(importlib.import_module(".api", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
