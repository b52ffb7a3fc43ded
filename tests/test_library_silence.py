"""The library prints nothing (issue 42): only commands print (the command line's modules, a module's ``main()``);
a run's per-epoch lines are log records that follow the caller's logging level in the worker processes too; the
launcher's lines for an interrupted or OOM-killed command are log records shown at ``-q``.

``sarlab train -q`` printing only the summary, default verbosity showing the epoch lines on stdout, and
``sarlab.run(quiet=True)`` silent at WARNING are in tests/test_logging.py.
"""
from __future__ import annotations

import ast
import contextlib
import io
import logging
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from conftest import ROOT

import sarlab
from sarlab.common import log as sarlab_log
from sarlab.real.launch import lifecycle

#: the folders of the installed packages (pyproject's package-dir); real/commands is the command line itself
LIBRARY = ("sarlab", "kernels", "simulator", "real")
COMMAND_LINE = os.path.join("real", "commands")
SPEC = "synthetic:nodes=200,degree=4,features=6,classes=3,seed=4"


def _writes(func: ast.expr) -> bool:
    """``print(...)``, ``sys.stdout.write(...)`` or ``sys.stderr.write(...)``."""
    if isinstance(func, ast.Name):
        return func.id == "print"
    return (isinstance(func, ast.Attribute) and func.attr == "write" and isinstance(func.value, ast.Attribute)
            and func.value.attr in ("stdout", "stderr") and isinstance(func.value.value, ast.Name)
            and func.value.value.id == "sys")


def _is_main_guard(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) and "__name__" in ast.unparse(node.test)


def _library_writes(path: str) -> list[str]:
    """``path:line`` of each print outside a ``main()`` (and what it nests) and outside ``if __name__ == ...``."""
    found: list[str] = []

    def visit(node: ast.AST, command: bool) -> None:
        command = command or _is_main_guard(node) or (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "main")
        if not command and isinstance(node, ast.Call) and _writes(node.func):
            found.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}")
        for child in ast.iter_child_nodes(node):
            visit(child, command)

    with open(path, encoding="utf-8") as f:
        visit(ast.parse(f.read(), path), False)
    return found


def test_library_code_never_prints():
    """Every module of the four package folders except the command line's: a print is a command's (its
    ``main()``); progress and messages are log records (sarlab.common.log)."""
    modules = [os.path.join(d, name) for top in LIBRARY for d, _, names in os.walk(os.path.join(ROOT, top))
               for name in names if name.endswith(".py")
               and not os.path.relpath(d, ROOT).startswith(COMMAND_LINE) and "__pycache__" not in d]
    assert len(modules) > 100, modules  # the walk found the packages
    prints = [hit for path in sorted(modules) for hit in _library_writes(path)]
    assert prints == [], "library code prints (use logging.getLogger(__name__)):\n" + "\n".join(prints)


def test_the_scan_finds_a_print_in_library_code(tmp_path):
    """The check above can fail: a print in a helper is found, the same in ``main()`` or the guard is not."""
    path = tmp_path / "mod.py"
    path.write_text(textwrap.dedent("""\
        import sys
        def helper():
            print("progress")
            sys.stderr.write("x")
        def main():
            def say(line):
                print(line)
        if __name__ == "__main__":
            print("ok")
    """))
    assert [hit.rsplit(":", 1)[1] for hit in _library_writes(str(path))] == ["3", "4"]


@contextlib.contextmanager
def _callers_logging(handler: logging.Handler | None, level: int) -> Iterator[None]:
    """Logging as a user's script sets it up: the root at ``level`` with ``handler`` only (pytest's own handlers,
    which it adds for each test phase, set aside), sarlab's loggers untouched; no verbosity exported."""
    root, ours = logging.getLogger(), logging.getLogger(sarlab_log.ROOT)
    saved = (list(root.handlers), root.level, list(ours.handlers), ours.level, ours.propagate,
             os.environ.pop(sarlab_log.ENV_VAR, None))
    root.handlers[:] = [handler] if handler else []
    ours.handlers[:] = []
    root.setLevel(level)
    ours.setLevel(logging.NOTSET)
    ours.propagate = True
    try:
        yield
    finally:
        root.handlers[:], ours.handlers[:] = saved[0], saved[2]
        root.setLevel(saved[1])
        ours.setLevel(saved[3])
        ours.propagate = saved[4]
        if saved[5] is not None:
            os.environ[sarlab_log.ENV_VAR] = saved[5]


@pytest.fixture
def no_build(tmp_path, monkeypatch):
    """A fresh partition cache; the kernels on torch (no compile in these tests)."""
    monkeypatch.setenv("SARLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SARLAB_KERNEL_BUILD", "off")


@pytest.mark.timeout(240)
def test_run_shows_no_epoch_lines_when_the_callers_logging_is_at_warning(no_build, capfd):
    """``quiet=False`` asks for progress, but the caller's logging at WARNING holds, in the worker processes too
    (capfd reads the file descriptors they write to)."""
    seen = io.StringIO()
    with _callers_logging(logging.StreamHandler(seen), logging.WARNING):
        result = sarlab.run(SPEC, workers=2, epochs=2, method="random", quiet=False, run_timeout_s=180)
    out, err = capfd.readouterr()
    assert len(result.records) == 4
    assert out == "" and err == "" and seen.getvalue() == "", f"stdout:\n{out}\nstderr:\n{err}\n{seen.getvalue()}"


@pytest.mark.timeout(240)
def test_run_not_quiet_shows_the_epoch_lines_on_stdout(no_build, capfd):
    """A script with no logging set up and ``quiet=False``: rank 0's epoch lines on stdout (each once, nothing else
    there), the progress on stderr."""
    with _callers_logging(None, logging.WARNING):
        sarlab.run(SPEC, workers=2, epochs=2, method="random", quiet=False, run_timeout_s=180)
    out, err = capfd.readouterr()
    lines = out.splitlines()
    assert [line.split("] ", 1)[1].split(" loss")[0] for line in lines] == ["epoch 1/2", "epoch 2/2"], out
    assert all(line.startswith("[") and "above baseline" in line for line in lines), out
    assert "] epoch" not in err and "edge cut" in err, err


def test_an_interrupted_command_ends_with_its_one_line_at_quiet(monkeypatch):
    """The line the launcher's users read (tests/test_launcher_signals.py), now a log record: shown at ``-q``."""
    monkeypatch.setenv(sarlab_log.ENV_VAR, "0")  # restored afterwards (configure exports it)
    logger = logging.getLogger(sarlab_log.ROOT)
    saved = (list(logger.handlers), logger.level, logger.propagate)
    stream = io.StringIO()
    try:
        sarlab_log.configure(sarlab_log.QUIET, stream)

        def main(argv):
            raise lifecycle.Interrupted(signal.SIGTERM)

        code = lifecycle.interruptible(main)([])
    finally:
        logger.handlers[:] = saved[0]
        logger.setLevel(saved[1])
        logger.propagate = saved[2]
    assert code == 128 + signal.SIGTERM
    assert stream.getvalue() == ("sarlab: interrupted by SIGTERM; workers stopped, temporary files and networks "
                                 "removed\n"), stream.getvalue()


def test_a_run_killed_by_the_oom_killer_is_named_on_stderr_at_quiet():
    """:func:`~sarlab.real.launch.lifecycle.survive_oom`: the child SIGKILLed (as the OOM killer does), the
    waiting parent says so in one error line, and exits 137."""
    code = textwrap.dedent("""\
        import os, signal
        from sarlab.common import log
        from sarlab.real.launch import lifecycle
        log.configure(log.QUIET)
        with lifecycle.forced_runs_guarded():
            lifecycle.survive_oom("needs about 9 GiB")
            os.kill(os.getpid(), signal.SIGKILL)  # the child, as the OOM killer would
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert res.returncode == 128 + signal.SIGKILL, res.stdout + res.stderr
    assert res.stdout == ""
    assert res.stderr == ("error: the run was killed by the kernel (SIGKILL), most likely out of memory: "
                          "needs about 9 GiB\n"), res.stderr
