"""sarlab's logging: one ``logging`` logger per module under ``sarlab`` and the one place that configures them.

Library code writes ``log = logging.getLogger(__name__)`` and ``log.info(...)`` for progress (never ``print``);
results a command exists to show stay on stdout in the command modules. :func:`configure` is called by the command
line (``-q`` quiet: warnings only, default: progress at INFO, ``-v``: DEBUG too) and puts one stderr handler on the
``sarlab`` logger; it also exports the verbosity in ``$SARLAB_VERBOSITY`` so the worker processes a run starts log
at the same level (:func:`configure_from_env`). Without :func:`configure` (a script, a notebook) sarlab adds no
handler: Python's defaults apply (warnings on stderr, INFO dropped) unless the caller configured logging, or a call
asks for its progress (``sarlab.run(quiet=False)`` or ``log=``, see :func:`progress_sink`).

Two kinds of record read differently from the rest: the per-epoch lines of a run (``extra=``:data:`ON_STDOUT`),
which sarlab's handler writes to stdout as a command's output, and a warning or error that names its own prefix
(``extra=prefixed("sarlab")``: ``sarlab: interrupted by SIGINT ...`` rather than ``warning: ...``).
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator
from typing import TextIO

ROOT = "sarlab"
ENV_VAR = "SARLAB_VERBOSITY"
QUIET, NORMAL, VERBOSE = -1, 0, 1

_STDOUT_ATTR, _PREFIX_ATTR = "sarlab_stdout", "sarlab_prefix"
#: ``extra=`` of a progress record that is a command's output (a run's per-epoch lines): sarlab's handler writes
#: it to stdout; like any INFO record it is dropped at ``-q`` and when logging is at WARNING
ON_STDOUT = {_STDOUT_ATTR: True}


def prefixed(prefix: str) -> dict:
    """``extra=`` of a warning or error shown as ``PREFIX: message`` instead of ``warning: message``."""
    return {_PREFIX_ATTR: prefix}


class _Format(logging.Formatter):
    """Progress as the bare line; warnings and errors prefixed with their level (or their own prefix, see
    :func:`prefixed`); DEBUG with the logger's name."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info:
            message += "\n" + self.formatException(record.exc_info)
        if record.levelno >= logging.WARNING:
            return f"{getattr(record, _PREFIX_ATTR, None) or record.levelname.lower()}: {message}"
        if record.levelno < logging.INFO:
            return f"[{record.name}] {message}"
        return message


class _Handler(logging.StreamHandler):
    """sarlab's stderr handler (a class of its own, so :func:`configure` replaces only its own); records marked
    :data:`ON_STDOUT` go to ``sys.stdout`` unless a stream was given."""

    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__(stream)
        self._stream = stream  # None: the streams as they are at each line (StreamHandler bound sys.stderr)
        self.setFormatter(_Format())

    @property
    def stream(self) -> TextIO:  # sys.stderr as it is when a line is written (pytest and notebooks swap it)
        return self._stream if self._stream is not None else sys.stderr

    @stream.setter
    def stream(self, value: TextIO | None) -> None:
        self._stream = value

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = self.format(record)
            stream = sys.stdout if self._stream is None and getattr(record, _STDOUT_ATTR, False) else self.stream
            stream.write(message + self.terminator)
            stream.flush()  # a worker's line reaches the terminal (or a pipe) as it is written
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)


def level_for(verbosity: int) -> int:
    """The logging level of a verbosity: -1 (``-q``) WARNING, 0 INFO, 1 or more (``-v``) DEBUG."""
    if verbosity <= QUIET:
        return logging.WARNING
    return logging.INFO if verbosity == NORMAL else logging.DEBUG


def verbosity_for(level: int) -> int:
    """The verbosity of a logging level (:func:`level_for`'s inverse): DEBUG or below 1, INFO 0, above -1."""
    if level <= logging.DEBUG:
        return VERBOSE
    return NORMAL if level <= logging.INFO else QUIET


def configure(verbosity: int = NORMAL, stream: TextIO | None = None) -> logging.Logger:
    """Send the ``sarlab`` loggers' records at the verbosity's level to stderr (or ``stream``), once.

    Replaces the handler an earlier call installed; exports ``$SARLAB_VERBOSITY`` for worker processes.

    Args:
        verbosity: -1 quiet (warnings only), 0 progress (INFO), 1 debug.
        stream: where lines go (default: ``sys.stderr`` at the time of each line, and ``sys.stdout`` for the
            records marked :data:`ON_STDOUT`).
    """
    logger = logging.getLogger(ROOT)
    for handler in [h for h in logger.handlers if isinstance(h, _Handler)]:
        logger.removeHandler(handler)
    logger.addHandler(_Handler(stream))
    logger.setLevel(level_for(verbosity))
    logger.propagate = False  # one copy of each line, whatever the root logger does
    os.environ[ENV_VAR] = str(verbosity)
    return logger


def configure_from_env(rank: int = 0) -> None:
    """In a worker process: log as the process that started it configured (``$SARLAB_VERBOSITY``), ranks other
    than 0 one step quieter (their progress repeats rank 0's). Nothing happens when it is unset: the worker then
    has Python's defaults (warnings on stderr, no progress)."""
    value = os.environ.get(ENV_VAR)
    if value is None:
        return
    try:
        verbosity = int(value)
    except ValueError:
        return
    configure(verbosity - (rank != 0 and verbosity <= NORMAL))


def verbosity() -> int:
    """The verbosity :func:`configure` set in this process (or a parent), NORMAL when none did."""
    try:
        return int(os.environ.get(ENV_VAR, NORMAL))
    except ValueError:
        return NORMAL


def is_quiet() -> bool:
    """Whether the command line asked for warnings only (``-q``)."""
    return verbosity() <= QUIET


def progress_sink(log: Callable[[str], None] | logging.Logger | None,
                  default: logging.Logger) -> Callable[[str], None]:
    """A callable for progress lines: ``log`` itself, ``log.info`` for a Logger, else ``default.info``."""
    if log is None:
        return default.info
    if isinstance(log, logging.Logger):
        return log.info
    if not callable(log):
        raise TypeError(f"log must be a callable taking one line or a logging.Logger, got {type(log).__name__}")
    return log


@contextlib.contextmanager
def shown(quiet: bool) -> Iterator[None]:
    """While the block runs, show sarlab's INFO lines on stderr (a run's epoch lines on stdout) when ``quiet`` is
    False and nothing else shows them (no handler on the ``sarlab`` loggers or the root), in the worker processes
    started meanwhile too; with ``quiet`` True leave logging as it is (Python's default shows warnings only).

    Where the caller configured logging, its level holds: the worker processes (which do not share this process's
    handlers) log at the ``sarlab`` logger's level here, with sarlab's handler, so a caller at WARNING sees no
    progress from them and one at INFO sees their epoch lines.
    """
    logger = logging.getLogger(ROOT)
    handler, before, exported = None, logger.level, ENV_VAR in os.environ
    if not quiet and not logger.hasHandlers():
        handler = _Handler()
        logger.addHandler(handler)
        if logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)
        os.environ.setdefault(ENV_VAR, str(NORMAL))  # the run's worker processes show rank 0's progress too
    elif not quiet and not exported:  # a caller's own logging: the workers follow its level
        os.environ[ENV_VAR] = str(verbosity_for(logger.getEffectiveLevel()))
    try:
        yield
    finally:
        if handler is not None:
            logger.removeHandler(handler)
            logger.setLevel(before)
        if not exported:
            os.environ.pop(ENV_VAR, None)
