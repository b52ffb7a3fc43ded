"""Shared fixtures: small graphs, the shipped Cora file, a CLI runner (a subprocess with a timeout, or in this process
for refusals), and a spawned-ranks runner with a timeout."""
from __future__ import annotations

import contextlib
import datetime
import logging
import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: files whose tests touch machine-wide state: network namespaces, signals to whole launchers, the leftovers of a
#: killed launcher that the next run must be the one to sweep. Under pytest-xdist they all run on one worker.
SHARED_STATE_FILES = frozenset({"test_network.py", "test_launcher_signals.py", "test_safety_faults.py",
                                "test_faults_cli.py", "test_bad_input_table.py"})


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under ``pytest -n N`` (pytest-xdist): a file's tests go to one worker and run there in their order (README's
    blocks use what earlier blocks wrote; module fixtures are built once), and the files of
    :data:`SHARED_STATE_FILES` all go to one worker, one test at a time. (xdist's own ``loadgroup`` renames the
    test ids to group them, which pytest 9 no longer reads; a scheduler that splits the ids by file does not.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "shared-state" if os.path.basename(path) in SHARED_STATE_FILES else path

    return ByFile(config, log)


@pytest.hookimpl(trylast=True)  # after pytest's tmp_path plugin has set up the base folder
def pytest_configure(config):
    """A pytest-xdist worker gets a ``$TMPDIR`` of its own (its runs' subprocesses too): a run sweeps the run
    directories of dead launchers from ``$TMPDIR`` and must not sweep those another worker's test is about to
    check. The folder is inside the worker's pytest base folder, which pytest itself rotates (it keeps the last
    three sessions'), so nothing removes it while multiprocessing's exit handlers may still use it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        import tempfile

        path = config._tmp_path_factory.getbasetemp() / "t"  # short: unix socket paths live in it
        path.mkdir(exist_ok=True)
        os.environ["TMPDIR"] = str(path)
        tempfile.tempdir = None
        # two pytest workers on two cores: the tests' own tensor work on one thread each (torch would start a
        # thread per core in each, and spinning OpenMP threads then take turns with the other worker's runs)
        torch.set_num_threads(1)



@contextlib.contextmanager
def sarlab_logging_kept():
    """Restore the ``sarlab`` logger (its handlers, level, propagation) and ``$SARLAB_VERBOSITY`` on exit: a command
    line run in this process (``cli.main``) configures both."""
    logger = logging.getLogger("sarlab")
    saved = list(logger.handlers), logger.level, logger.propagate, os.environ.get("SARLAB_VERBOSITY")
    try:
        yield
    finally:
        logger.handlers[:] = saved[0]
        logger.setLevel(saved[1])
        logger.propagate = saved[2]
        if saved[3] is None:
            os.environ.pop("SARLAB_VERBOSITY", None)
        else:
            os.environ["SARLAB_VERBOSITY"] = saved[3]


@pytest.fixture(autouse=True)
def _sarlab_logging_restored():
    """Every test leaves the ``sarlab`` logger and ``$SARLAB_VERBOSITY`` as it found them
    (:func:`sarlab_logging_kept`): a later test of the same worker that counts log lines with ``caplog`` would read
    the level a test's in-process command line left (a fresh-clone ``make test`` failed so)."""
    with sarlab_logging_kept():
        yield


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


def cli_here(args: list[str], env: dict | None = None, cwd: str = ROOT) -> subprocess.CompletedProcess:
    """Run ``sarlab ARGS`` in this process (``cli.main``, what the ``sarlab`` script calls) in ``cwd`` (the
    repository root unless given), with ``env`` set for the call; returns what :func:`run_cli` returns. Without the
    ~3.5 s of CPU a fresh interpreter spends importing torch, and its workers come from this process's zygote (one
    for the whole session; a changed environment starts another).
    The output is captured at the file descriptors, so the workers' lines (rank 0's epochs) are in it as in a
    subprocess's. For what needs no process of its own: a test of signals, exit by a signal, a killed launcher or
    an environment read at import uses :func:`run_cli`. The ``sarlab`` logger (which the command line configures,
    :func:`sarlab_logging_kept`), the working directory and the environment are restored afterwards."""
    import tempfile

    from sarlab.real.commands.cli import main

    saved_env = {k: os.environ.get(k) for k in (env or {})}
    saved_cwd = os.getcwd()
    os.environ.update(env or {})
    sys.stdout.flush()
    sys.stderr.flush()
    saved_fds = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        stdout, stderr = open(1, "w", closefd=False), open(2, "w", closefd=False)  # noqa: SIM115
        try:
            os.chdir(cwd)
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr), sarlab_logging_kept():
                try:
                    code = main(list(args))
                except SystemExit as done:  # argparse
                    code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        finally:
            stdout.flush()
            stderr.flush()
            os.dup2(saved_fds[0], 1)
            os.dup2(saved_fds[1], 2)
            os.close(saved_fds[0])
            os.close(saved_fds[1])
            os.chdir(saved_cwd)
            for key, value in saved_env.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        out.seek(0)
        err.seek(0)
        text_out, text_err = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    return subprocess.CompletedProcess(["sarlab", *args], code, text_out, text_err)


#: ranks of :func:`spawn_ranks` start from a forkserver that imported these once (not a fresh interpreter each:
#: ~3 s of CPU apiece here); the forkserver never runs an op, so the ranks start with no OpenMP state to inherit
RANK_CONTEXT = mp.get_context("forkserver")
RANK_CONTEXT.set_forkserver_preload(["torch", "torch.distributed", "torch._dynamo", "sarlab.training.trainer",
                                     "sarlab.core.shards", "sarlab.data.partition"])


def _with_env(env: dict, target, *args) -> None:
    """A rank of :func:`spawn_ranks`: the caller's environment, then ``target(*args)``."""
    os.environ.clear()
    os.environ.update(env)
    target(*args)


def spawn_ranks(target, world: int, args: tuple, out: str, timeout: float = 240) -> None:
    """Run ``target(rank, world, store_port, *args)`` on ``world`` processes (forked from a preloaded forkserver)
    sharing one TCPStore; each rank writes ``{out}.rank{r}.err`` with its traceback on failure. Fails the test with
    the ranks' tracebacks (or the ones still running after ``timeout`` s, which are killed); nothing is left
    running."""
    store = dist.TCPStore("127.0.0.1", 0, world_size=None, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=120))
    env = dict(os.environ)  # as now, not as when the forkserver started (a test may have set a variable since)
    procs = [RANK_CONTEXT.Process(target=_with_env, args=(env, target, r, world, store.port, *args))
             for r in range(world)]
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
