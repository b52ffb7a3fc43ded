"""Smoke test of ``python -m benchmarks.kernel_speed`` (this tree against itself on a tiny graph) and its
graph."""
from __future__ import annotations

import csv
import subprocess
import sys

import numpy as np
import pytest

from benchmarks.ab import TREE_ROOT
from benchmarks.kernel_speed import DEFAULT_OUT, make_graph


@pytest.mark.parametrize("graph", ["skewed", "uniform"])
def test_graph_has_the_edges_asked_for_sorted_within_rows(graph):
    rowptr, col = make_graph(500, 4000, seed=3, graph=graph)
    assert rowptr[0] == 0 and rowptr[-1] == 4000 == col.numel()
    assert bool((rowptr[1:] >= rowptr[:-1]).all()) and 0 <= int(col.min()) and int(col.max()) < 500
    rows = np.repeat(np.arange(500), np.diff(rowptr.numpy()))
    assert np.all(np.lexsort((col.numpy(), rows)) == np.arange(4000))  # already in (row, source) order
    again_rowptr, again_col = make_graph(500, 4000, seed=3, graph=graph)
    assert (again_rowptr == rowptr).all() and (again_col == col).all()
    shuffled_rowptr, shuffled_col = make_graph(500, 4000, seed=3, graph=graph, shuffle_rows=True)
    assert (shuffled_rowptr == rowptr).all() and not (shuffled_col == col).all()
    assert sorted(zip(rows, shuffled_col.tolist())) == sorted(zip(rows, col.tolist()))


@pytest.mark.timeout(900)
def test_command_writes_both_engines_and_ratios(tmp_path):
    out = tmp_path / "speed"
    cmd = [sys.executable, "-m", "benchmarks.kernel_speed", "--base-root", TREE_ROOT, "--out", str(out),
           "--nodes", "300",
           "--edges", "3000", "--channels", "4", "--heads", "1,2", "--reps", "1", "--inner", "1"]
    try:
        done = subprocess.run(cmd, cwd=TREE_ROOT, capture_output=True, text=True, timeout=840)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"kernel_speed did not finish:\nstdout:\n{err.stdout}\nstderr:\n{err.stderr}")
    assert done.returncode == 0, done.stderr[-3000:]
    with open(out / "kernel_speed.csv") as f:
        rows = list(csv.DictReader(f))
    # one rep of heads 1 and 2: four processes, and each engine goes first once (the order alternates by rep + heads)
    assert [(r["engine"], r["heads"], r["rep"]) for r in rows] == [("new", "1", "0"), ("base", "1", "0"),
                                                                   ("base", "2", "0"), ("new", "2", "0")]
    assert all(float(r["fwd_cpu_s"]) > 0 and float(r["bwd_cpu_s"]) > 0 for r in rows)
    text = (out / "kernel_speed.md").read_text()
    assert "ratio_total" in text and "| 2 | 1 |" in text
    assert "max_rel_checksum_diff" in text and "0.0e+00" in text  # the same kernels on both sides: same sums


def test_default_output_is_not_under_results():
    from pathlib import Path

    from sarlab.common.paths import cache_dir

    out = Path(DEFAULT_OUT)
    assert out.is_relative_to(cache_dir()) and "results" not in out.relative_to(cache_dir()).parts
