"""Where sarlab keeps what it builds and caches: one per-user directory, never inside the installed package.

``$SARLAB_CACHE_DIR`` when set; else, when sarlab runs from a source checkout (this folder's parent holds
``pyproject.toml`` and ``sarlab/``), the checkout's git-ignored ``.cache``; else the platform's user cache
directory (``platformdirs`` when installed, otherwise ``$XDG_CACHE_HOME/sarlab`` or ``~/.cache/sarlab``).
This module imports the standard library only, so the kernels' loader and the engine share it.
"""
from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "SARLAB_CACHE_DIR"


def checkout_root() -> Path | None:
    """The source checkout this package runs from, or None for an installed (non-editable) package."""
    root = Path(__file__).resolve().parent.parent
    checkout = (root / "pyproject.toml").is_file() and (root / "sarlab" / "__init__.py").is_file()
    if checkout and (root / "kernels").is_dir():
        return root
    return None


def cache_root() -> Path:
    """The cache directory (not created here)."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser().resolve()
    root = checkout_root()
    if root is not None:
        return root / ".cache"
    try:
        import platformdirs
    except ImportError:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return Path(base) / "sarlab"
    return Path(platformdirs.user_cache_dir("sarlab", appauthor=False))


def cache_path(*parts: str) -> Path:
    """A path inside the cache directory (not created here): ``cache_path("kernels")``."""
    return cache_root().joinpath(*parts)
