"""Logging: ``-q/-v`` on every command, ``sarlab train -q`` prints only the summary, ``sarlab.run(quiet=True)`` prints
nothing (workers included) with logging at WARNING, and ``log=`` receives the progress lines."""
from __future__ import annotations

import logging
import subprocess
import sys

import pytest
from conftest import ROOT, cli_here

import sarlab
from sarlab.common import log as sarlab_log
from sarlab.real.commands.cli import split_verbosity

SPEC = "synthetic:nodes=200,degree=4,features=6,classes=3,seed=2"
#: no compile in these tests: the kernels run on torch while none is built (here: never)
QUIET_ENV = {"SARLAB_KERNEL_BUILD": "off"}


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SARLAB_CACHE_DIR", str(tmp_path / "cache"))
    for name, value in QUIET_ENV.items():
        monkeypatch.setenv(name, value)
    return {"SARLAB_CACHE_DIR": str(tmp_path / "cache"), **QUIET_ENV}


def test_verbosity_flags_are_taken_anywhere_before_a_double_dash():
    assert split_verbosity(["-q", "train", "--epochs", "1"]) == (-1, ["train", "--epochs", "1"])
    assert split_verbosity(["train", "--verbose", "--epochs", "1"]) == (1, ["train", "--epochs", "1"])
    assert split_verbosity(["train", "--", "-q"]) == (0, ["train", "--", "-q"])
    assert split_verbosity(["calibrate", "--quiet-tries", "3"]) == (0, ["calibrate", "--quiet-tries", "3"])


def test_configure_levels_and_one_handler(monkeypatch):
    monkeypatch.setenv(sarlab_log.ENV_VAR, "0")  # restored afterwards (configure exports it)
    logger = logging.getLogger("sarlab")
    handlers, level, propagate = list(logger.handlers), logger.level, logger.propagate
    try:
        for verbosity, expected in ((-1, logging.WARNING), (0, logging.INFO), (1, logging.DEBUG)):
            sarlab_log.configure(verbosity)
            assert logger.level == expected and sarlab_log.verbosity() == verbosity
        assert sum(isinstance(h, sarlab_log._Handler) for h in logger.handlers) == 1
    finally:
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate


def test_train_quiet_prints_only_the_summary(fresh_cache):
    res = cli_here(["train", "--graph", SPEC, "--workers", "2", "--epochs", "2", "--method", "random", "-q"],
                   env=fresh_cache)
    assert res.returncode == 0, res.stderr
    assert res.stderr == "", res.stderr
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("final:"), res.stdout
    loud = cli_here(["train", "--graph", SPEC, "--workers", "2", "--epochs", "2", "--method", "random"],
                    env=fresh_cache)  # without -q: progress on stderr (the partition is reused from the cache)
    assert loud.returncode == 0 and "reused the cached partition" in loud.stderr, loud.stderr
    assert "epoch 2/2" in loud.stdout and "sarlab kernels: torch" in loud.stderr, loud.stdout + loud.stderr


def test_run_quiet_prints_nothing_at_warning(fresh_cache, capfd):
    """capfd captures the file descriptors, so the worker processes' output is caught too."""
    logging.getLogger("sarlab").setLevel(logging.WARNING)
    try:
        result = sarlab.run(SPEC, workers=2, epochs=1, method="random", quiet=True, run_timeout_s=180)
    finally:
        logging.getLogger("sarlab").setLevel(logging.NOTSET)
    out, err = capfd.readouterr()
    assert len(result.records) == 2
    assert out == "" and err == "", f"stdout:\n{out}\nstderr:\n{err}"


def test_log_receives_the_progress_lines(fresh_cache, capfd):
    lines: list[str] = []
    sarlab.run(SPEC, workers=2, epochs=1, method="random", quiet=True, log=lines.append, run_timeout_s=180)
    assert any(line.startswith("loading graph") for line in lines) and any("edge cut" in line for line in lines)
    assert capfd.readouterr().err == ""
    with pytest.raises(TypeError, match="callable"):
        sarlab.run(SPEC, workers=2, epochs=1, log="stderr")  # refused before anything runs


def test_a_logger_as_log_receives_lines_at_info():
    logger = logging.getLogger("test_logging.receiver")
    handler = _Collect()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        sarlab_log.progress_sink(logger, logging.getLogger("sarlab"))("a progress line")
    finally:
        logger.removeHandler(handler)
    assert handler.messages == ["a progress line"]


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_every_command_help_names_the_common_options():
    res = subprocess.run([sys.executable, "-m", "sarlab", "partition", "--help"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert res.returncode == 0 and "-v, --verbose" in res.stdout, res.stdout
