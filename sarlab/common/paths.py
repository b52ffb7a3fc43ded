"""Where sarlab reads its shipped files and writes its caches: never into the installed package.

Caches (kernel builds, partition caches, default outputs of benchmarks and ``reproduce``, a local calibration)
live under :func:`cache_dir`: ``$SARLAB_CACHE_DIR``, a checkout's git-ignored ``.cache``, or the per-user cache
directory (see :mod:`sarlab.kernels.cache`, the one definition).
"""
from __future__ import annotations

from pathlib import Path

from sarlab.kernels.cache import cache_path, cache_root, checkout_root

__all__ = ["cache_dir", "cache_root", "checkout_root", "package_parent"]


def cache_dir(*parts: str) -> Path:
    """A directory (or file path) inside the cache: ``cache_dir("reproduce", "quick")``; not created here."""
    return cache_path(*parts)


def package_parent() -> Path:
    """The directory that holds the ``sarlab`` package (a checkout's root, or site-packages): what a child
    process needs on ``PYTHONPATH`` to import the same sarlab."""
    return Path(__file__).resolve().parents[2]  # sarlab/common/paths.py -> the folder holding sarlab/
