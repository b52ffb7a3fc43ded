"""The scaffold every A/B driver shares: this tree against another checkout of it (``--base-root``).

A driver measures ``base`` (the other checkout, e.g. ``git worktree add /tmp/base <commit>``) and ``new`` (this
tree) in turns, so that a change of machine load falls on both alike, and reports ``ratio = base / new`` per
interleaved pair (above 1: this tree is faster) as ``median (min-max)`` over the pairs. Each measurement runs in a
fresh process whose last stdout line is a JSON object (:func:`run_json_child`); the report is one Markdown file
that names the date, the machine, the conditions and the command that made it (:func:`write_report`).

Used by :mod:`benchmarks.engine_speed`, :mod:`benchmarks.kernel_speed` and :mod:`benchmarks.kernel_roofline`.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from sarlab.common.machine import cpu_model, today
from sarlab.common.tables import md_table

TREE_ROOT = str(Path(__file__).resolve().parents[1])  # this checkout: the folder holding kernels/ and benchmarks/
DEFAULT_BASE = "/tmp/base"


def parser(module: str, doc: str, base_root: str = DEFAULT_BASE) -> argparse.ArgumentParser:
    """The parser of ``python -m benchmarks.MODULE`` (described by the first line of ``doc``), with the
    ``--base-root`` option: the checkout measured as ``base``."""
    p = argparse.ArgumentParser(prog=f"python -m benchmarks.{module}", description=doc.splitlines()[0])
    p.add_argument("--base-root", default=base_root, help="the other checkout (default %(default)s; make one "
                   "with `git worktree add /tmp/base <commit>`)")
    return p


def check_base_root(root: str, needs: str) -> None:
    """Stop with a one-line message when ``root`` is not a checkout holding ``needs`` (a folder, e.g. kernels)."""
    if not os.path.isdir(os.path.join(root, needs)):
        raise SystemExit(f"--base-root {root}: no {needs}/ there; make a checkout to compare with, e.g. "
                         f"`git worktree add {root} <commit>`")


def command_line(module: str, argv: Sequence[str] | None) -> str:
    """``python -m benchmarks.MODULE ARGS`` as a shell line (``argv`` None: this process's arguments)."""
    return f"python -m benchmarks.{module} " + shlex.join(list(argv) if argv is not None else sys.argv[1:])


def alternating(engines: tuple[str, ...], turn: int) -> tuple[str, ...]:
    """``engines`` in order on even turns and reversed on odd ones (which engine runs first alternates too)."""
    return engines if turn % 2 == 0 else engines[::-1]


def run_json_child(args: list[str], root: str, threads: int, timeout_s: float) -> dict:
    """``python args...`` in a fresh process, ``cwd`` at ``root``, ``threads`` OpenMP threads and the C++ kernels,
    bounded by ``timeout_s``; returns the JSON object of its last stdout line."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "SARLAB_KERNELS": "cpp"}
    env.pop("PYTHONPATH", None)
    done = subprocess.run([sys.executable, *args], cwd=root, env=env, capture_output=True, text=True,
                          timeout=timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"measurement in {root} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def pair_ratio(runs: pd.DataFrame, column: str) -> pd.Series:
    """``base / new`` of ``column`` per interleaved pair: the rows of ``engine`` base and new with the same
    ``rep`` (above 1 means new is faster)."""
    base = runs[runs.engine == "base"].set_index("rep")[column]
    new = runs[runs.engine == "new"].set_index("rep")[column]
    both = base.index.intersection(new.index)
    return base.loc[both] / new.loc[both]


def spread(values: pd.Series) -> str:
    """``median (min-max)`` of ratios, two decimals."""
    return f"{values.median():.2f} ({values.min():.2f}-{values.max():.2f})"


def write_report(path: str, title: str, machine: str, table: pd.DataFrame, command: str | None = None,
                 reading: str | None = None) -> None:
    """``# TITLE (date)``, ``Machine: CPU`` + ``machine`` (the conditions), the command, how to read the table,
    and the table, as Markdown at ``path``."""
    lines = [f"# {title} ({today()})", "", f"Machine: {cpu_model()}{machine}", ""]
    if command is not None:
        lines += [f"Command: `{command}`", ""]
    if reading is not None:
        lines += [reading, ""]
    lines += [md_table(table), ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))
