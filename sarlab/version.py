"""sarlab's version, and the git commit when it runs from a source checkout (both go into every metric record)."""
from __future__ import annotations

import functools
import subprocess
from pathlib import Path

__version__ = "0.2.0"


@functools.lru_cache(maxsize=1)
def git_commit() -> str:
    """The checkout's commit (``abc1234``, ``abc1234+dirty`` with uncommitted changes), ``""`` when installed."""
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists() or not (root / "pyproject.toml").is_file():
        return ""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return ""
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return head.stdout.strip() + ("+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def version_string() -> str:
    """``0.2.0`` or ``0.2.0 (git abc1234)``: what ``sarlab --version`` prints and records carry."""
    commit = git_commit()
    return f"{__version__} (git {commit})" if commit else __version__
