"""``sarlab profile``: memray captures per rank, flamegraphs, summaries and a report whose categories add up."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from real.profile import Frame, classify, main, parse_modes, site_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GRAPH = "synthetic:nodes=1500,degree=8,features=16,classes=4"
MODES = ("sar", "oneshot")
WORKERS = 2


def _profile(out_dir: str, json_path: str, timeout: float = 180) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "real.profile", "--graph", GRAPH, "--workers", str(WORKERS), "--modes",
           ",".join(MODES), "--model", "sage", "--layers", "2", "--hidden", "32", "--epochs", "1",
           "--out", out_dir, "--json", json_path]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"sarlab profile did not finish in {timeout}s\nstdout:\n{err.stdout}\nstderr:\n{err.stderr}")


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("profile")
    json_path = str(out / "profile.json")
    done = _profile(str(out / "run"), json_path)
    assert done.returncode == 0, f"exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    with open(json_path) as f:
        return str(out / "run"), json.load(f), done


def test_every_rank_has_capture_flamegraph_and_summary(profiled):
    out, _, _ = profiled
    for mode in MODES:
        for rank in range(WORKERS):
            for name in (f"rank{rank}.bin", f"rank{rank}_flamegraph.html", f"rank{rank}_summary.md"):
                path = os.path.join(out, mode, name)
                assert os.path.isfile(path) and os.path.getsize(path) > 0, f"missing or empty: {path}"
            with open(os.path.join(out, mode, f"rank{rank}_flamegraph.html")) as f:
                assert "<html" in f.read(2000).lower()
    for name in ("report.md", "report.html", "report_categories.png", "report_timeline.png"):
        assert os.path.isfile(os.path.join(out, name)), name


def _summary_table(text: str) -> tuple[dict[str, int], int]:
    """Category bytes and the total row from a rank summary's first table."""
    section = text.split("## What holds the memory at the peak", 1)[1].split("##", 1)[0]
    cats, total = {}, None
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[1].isdigit():
            if "total" in cells[0]:
                total = int(cells[1])
            else:
                cats[cells[0]] = int(cells[1])
    assert total is not None, section
    return cats, total


def test_summaries_have_a_peak_and_categories_add_up(profiled):
    out, _, _ = profiled
    for mode in MODES:
        for rank in range(WORKERS):
            with open(os.path.join(out, mode, f"rank{rank}_summary.md")) as f:
                text = f.read()
            peak = int(re.search(r"memray high-water mark\): \*\*.*?\*\* \((\d+) bytes\)", text).group(1))
            assert peak > 0
            cats, total = _summary_table(text)
            assert total == peak
            assert sum(cats.values()) == peak, (mode, rank, cats, peak)
            assert "## Largest allocation sites at the peak" in text and "sarlab/" in text


def test_json_peaks_categories_and_vmhwm(profiled):
    _, data, _ = profiled
    ranks = data["ranks"]
    assert sorted((r["mode"], r["rank"]) for r in ranks) == sorted((m, k) for m in MODES for k in range(WORKERS))
    for r in ranks:
        assert r["peak_bytes"] > 0
        assert sum(r["categories"].values()) == r["peak_bytes"]
        assert set(r["categories"]) == set(data["categories"])
        assert r["peak_bytes"] == r["memray_reported_peak_bytes"]
        assert r["vmhwm_bytes"] is not None and r["vmhwm_bytes"] > 0
        assert r["sites"] and r["sites"][0]["size_bytes"] > 0
        # a forward-backward pass leaves something in the model's categories, not only in "other"
        assert r["categories"]["other"] < r["peak_bytes"]


def test_report_compares_both_modes_for_every_rank(profiled):
    out, data, done = profiled
    with open(os.path.join(out, "report.md")) as f:
        report = f.read()
    for mode in MODES:
        assert f"{mode}: memray peak" in report and f"{mode}: VmHWM - baseline" in report
        for rank in range(WORKERS):
            assert f"{mode} r{rank}" in report
            assert f"({mode}/rank{rank}_flamegraph.html)" in report
    assert "resident pages" in report and "heap allocations" in report
    with open(os.path.join(out, "report.html")) as f:
        page = f.read()
    assert all(f"{mode} r{rank}" in page for mode in MODES for rank in range(WORKERS))
    assert "data:image/png;base64," in page
    assert all(mode in done.stdout for mode in MODES) and "report:" in done.stdout
    assert "[sar] training" in done.stderr  # progress lines


def test_classify_maps_stacks_to_categories():
    grad_line = "grads = torch.autograd.grad(loss, self.params, allow_unused=True)"
    fwd = [Frame("sarlab/nn/model.py", "GNN.forward", 89), Frame("sarlab/train.py", "Trainer.forward_backward", 64,
                                                                 "logits = self.model(self.graph, self.x, epoch)")]
    assert classify([Frame("sarlab/aggregate.py", "ring_fetch.post", 40)] + fwd) == "remote rows"
    assert classify([Frame("sarlab/aggregate.py", "HaloExchange.forward", 230)] + fwd) == "remote rows"
    assert classify([Frame("sarlab/nn/gat.py", "AttentionAggregation._accumulate_autograd", 75)] + fwd) \
        == "attention tensors"
    assert classify([Frame("sarlab/aggregators.py", "Aggregation.finalize", 89)] + fwd) == "local activations"
    assert classify([Frame("sarlab/shards.py", "Shard.matrix", 55),
                     Frame("sarlab/shards.py", "Shard.spmm", 72)] + fwd) == "graph structure"
    backward = [Frame("sarlab/shards.py", "Shard.spmm", 76),
                Frame("sarlab/aggregators.py", "Aggregation.shard_vjp", 115),
                Frame("sarlab/aggregate.py", "SequentialAggregate.backward", 194),
                Frame("torch/autograd/graph.py", "_engine_run_backward", 979),
                Frame("sarlab/train.py", "Trainer.forward_backward", 68, grad_line)]
    assert classify(backward) == "gradients"
    assert classify([Frame("sarlab/aggregate.py", "GradReturn.post", 70)] + backward[2:]) == "gradients"
    assert classify([Frame("sarlab/aggregate.py", "ring_fetch.post", 40)] + backward[2:]) == "remote rows"
    assert classify([Frame("torch/optim/adam.py", "_init_group", 178)]) == "optimizer state"
    imported = [Frame("<frozen importlib._bootstrap>", "_find_and_load", 1176),
                Frame("sarlab/shards.py", "ShardedGraph.aggregate", 156)] + fwd
    assert classify(imported) == "other"
    assert site_of(imported)[0].startswith("import in sarlab/shards.py:156")
    assert classify([]) == "other"


def test_bad_modes_fail_with_a_message(capsys, tmp_path):
    assert parse_modes("all") == ["sar", "sa", "oneshot"]
    assert main(["--modes", "sar,fast", "--out", str(tmp_path / "x")]) == 1
    assert "unknown mode(s) fast" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0


def test_rules_name_functions_that_exist():
    """A renamed engine function must not silently drop its allocations into another category."""
    import fnmatch
    from pathlib import Path

    from real.profile import FORWARD_RULES, ROOT, SPECIFIC_RULES, _scopes

    for rule in SPECIFIC_RULES + FORWARD_RULES:
        if not rule.path.startswith(("sarlab/", "kernels/")):
            continue
        files = sorted(str(p) for p in Path(ROOT).glob(rule.path) if p.suffix == ".py")
        assert files, f"{rule}: no file matches {rule.path}"
        names = [scope[2] for f in files for scope in _scopes(f)]
        assert any(fnmatch.fnmatchcase(n, rule.name) for n in names), f"{rule}: no function matches {rule.name}"
