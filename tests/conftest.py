"""Shared fixtures: small graphs, the Cora file, a CLI runner with a timeout."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORA = os.path.join(os.path.dirname(ROOT), "shared", "data", "cora.npz")


@pytest.fixture(scope="session")
def cora_path() -> str:
    if not os.path.isfile(CORA):
        raise FileNotFoundError(f"Cora test data expected at {CORA} (../shared/data/cora.npz beside the repo)")
    return CORA


@pytest.fixture(scope="session")
def small_graph():
    from sarlab.graphs import synthetic_graph

    return synthetic_graph(nodes=300, degree=6, features=12, classes=4, seed=3)


def run_cli(args: list[str], timeout: float = 240, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``sarlab ARGS`` in a subprocess; on timeout, fail with whatever it printed."""
    cmd = [sys.executable, "-m", "real.cli", *args]
    full_env = dict(os.environ, **(env or {}))
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=full_env)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"`sarlab {' '.join(args)}` did not finish in {timeout}s\nstdout:\n{err.stdout}\n"
                    f"stderr:\n{err.stderr}")
