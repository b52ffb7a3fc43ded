"""Shared fixtures: small graphs, the shipped Cora file, a CLI runner (a subprocess with a timeout, or in this process
for refusals), and a spawned-ranks runner with a timeout."""
from __future__ import annotations

import datetime
import os
import subprocess
import sys

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="session")
def cora_path() -> str:
    """The Cora npz shipped inside the package (Planetoid release, public split): see :mod:`sarlab.data.datasets`."""
    from sarlab.data import datasets

    return str(datasets.path("cora"))


@pytest.fixture(scope="session")
def small_graph():
    from sarlab.data.graphs import synthetic_graph

    return synthetic_graph(nodes=300, degree=6, features=12, classes=4, seed=3)


def run_cli(args: list[str], timeout: float = 240, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``sarlab ARGS`` in a subprocess; on timeout, fail with whatever it printed."""
    cmd = [sys.executable, "-m", "sarlab", *args]
    full_env = dict(os.environ, **(env or {}))
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=full_env)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"`sarlab {' '.join(args)}` did not finish in {timeout}s\nstdout:\n{err.stdout}\n"
                    f"stderr:\n{err.stderr}")


def cli_here(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``sarlab ARGS`` in this process (``cli.main``, what the ``sarlab`` script calls), with ``env`` set for
    the call; returns what :func:`run_cli` returns. For command lines that are refused before any work (nothing is
    started): the same checks as a subprocess, without the ~3 s of CPU a fresh interpreter spends importing torch.
    The ``sarlab`` logger (which the command line configures) and the environment are restored afterwards."""
    import contextlib
    import io
    import logging

    from sarlab.real.commands.cli import main

    logger = logging.getLogger("sarlab")
    saved_log = (list(logger.handlers), logger.level, logger.propagate)
    saved_env = {k: os.environ.get(k) for k in (env or {})}
    out, err = io.StringIO(), io.StringIO()
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as done:  # argparse
                code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    finally:
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        logger.handlers[:] = saved_log[0]
        logger.setLevel(saved_log[1])
        logger.propagate = saved_log[2]
    return subprocess.CompletedProcess(["sarlab", *args], code, out.getvalue(), err.getvalue())


def spawn_ranks(target, world: int, args: tuple, out: str, timeout: float = 240) -> None:
    """Run ``target(rank, world, store_port, *args)`` on ``world`` spawned processes sharing one TCPStore; each
    rank writes ``{out}.rank{r}.err`` with its traceback on failure. Fails the test with the ranks' tracebacks
    (or the ones still running after ``timeout`` s, which are killed); nothing is left running."""
    store = dist.TCPStore("127.0.0.1", 0, world_size=None, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=120))
    procs = [mp.get_context("spawn").Process(target=target, args=(r, world, store.port, *args)) for r in range(world)]
    for p in procs:
        p.start()
    try:
        for p in procs:
            p.join(timeout)
        errors = [open(f"{out}.rank{r}.err").read() for r in range(world) if os.path.exists(f"{out}.rank{r}.err")]
        if errors or any(p.exitcode != 0 for p in procs):
            pytest.fail(f"ranks exited {[p.exitcode for p in procs]} (None: still running after {timeout}s)\n"
                        + "\n".join(errors))
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(10)
