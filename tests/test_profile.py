"""``sarlab profile``: memray captures per rank, flamegraphs, summaries and a report whose categories add up;
memory filed by the engine's phase tags (sarlab.core.phases), whatever the tagged functions are called."""
from __future__ import annotations

import fnmatch
import functools
import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import memray
import pytest
import torch

from sarlab.core import phases
from sarlab.real.profile.attribution import (
    CATEGORIES,
    FALLBACK_RULES,
    HEADING_OF_TAG,
    LOCAL_ACTIVATION_RULES,
    ROOT,
    UNTAGGED,
    Frame,
    _scopes,
    analyze_capture,
    classify,
    site_of,
    tag_of,
)
from sarlab.real.profile.command import main, parse_modes

GRAPH = "synthetic:nodes=1500,degree=8,features=16,classes=4"
MODES = ("sar", "oneshot")
WORKERS = 2
MIB = 1 << 20
SLACK = 64 << 10  # bytes memray books beside a tensor's storage at the same line (the Python objects)
# What each engine phase allocates, written down independently of real/profile/attribution.py's table.
EXPECTED_HEADING = {"aggregation": "local activations", "remote_rows": "remote rows", "halo_exchange": "remote rows",
                    "aggregation_backward": "gradients", "rematerialization": "gradients",
                    "gradient_return": "gradients", "graph_structure": "graph structure"}


def _profile(out_dir: str, json_path: str, timeout: float = 180) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "sarlab", "profile", "--graph", GRAPH, "--workers", str(WORKERS),
           "--modes",
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
        assert sum(r["tags"].values()) == r["peak_bytes"] and set(r["tags"]) <= {*phases.TAGS, UNTAGGED}
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


def _tags_allocated(capture: str) -> set[str]:
    """Every phase tag under which a capture recorded an allocation (alive at the peak or not)."""
    frees = (memray.AllocatorType.FREE, memray.AllocatorType.PYMALLOC_FREE, memray.AllocatorType.MUNMAP)
    seen = set()
    with memray.FileReader(capture) as reader:
        for record in reader.get_allocation_records():
            if record.allocator not in frees:  # frees carry no stack
                seen.update(filter(None, (phases.tag_of_frame(name) for name, _, _ in record.stack_trace())))
    return seen


def test_engine_phases_carry_their_tags_in_real_captures(profiled):
    out, _, _ = profiled
    common = {"aggregation", "aggregation_backward", "gradient_return", "graph_structure"}
    expected = {"sar": common | {"remote_rows"}, "oneshot": common | {"halo_exchange"}}
    for mode in MODES:
        seen = _tags_allocated(os.path.join(out, mode, "rank0.bin"))
        assert expected[mode] <= seen, (mode, expected[mode] - seen)
        assert ("halo_exchange" in seen) == (mode == "oneshot") and ("remote_rows" in seen) == (mode == "sar")


# --- tags, in-process captures -----------------------------------------------------------------------

def _fill(nbytes: int) -> torch.Tensor:
    return torch.ones(nbytes, dtype=torch.uint8)


def _capture(path: str, allocate) -> tuple:
    """Track ``allocate()`` (which returns tensors) and a 3 MiB untagged control block, both held at the peak."""
    with memray.Tracker(path):
        held = [allocate(), _fill(3 * MIB)]
        del held
    return analyze_capture(path)


def test_a_tagged_allocation_of_known_size_lands_under_its_heading(tmp_path):
    sizes = {tag: (i + 1) * MIB for i, tag in enumerate(phases.TAGS)}
    prof = _capture(str(tmp_path / "tags.bin"), lambda: [phases.run(tag, _fill, n) for tag, n in sizes.items()])
    for tag, n in sizes.items():
        assert n <= prof.tags[tag] <= n + SLACK, (tag, prof.tags)
    for heading in CATEGORIES:
        expected = sum(n for tag, n in sizes.items() if EXPECTED_HEADING[tag] == heading)
        if heading == "other":
            expected += 3 * MIB  # the untagged control block (allocated from tests/, not the engine)
        assert expected <= prof.categories[heading] <= expected + SLACK * len(sizes), (heading, prof.categories)


def test_attribution_follows_the_tag_not_the_function_name(tmp_path):
    """The same bytes under the same tag land under the same heading whether the allocating function is
    renamed, wrapped in a partial or decorated; without the tag they do not."""
    block = 5 * MIB
    renamed_code = _fill.__code__.replace(co_name="fetch_rows_renamed", co_qualname="fetch_rows_renamed")
    renamed = types.FunctionType(renamed_code, _fill.__globals__, "fetch_rows_renamed")

    @phases.tagged("remote_rows")
    def yet_another_name(nbytes: int) -> torch.Tensor:
        return _fill(nbytes)

    variants = {
        "run": lambda: phases.run("remote_rows", _fill, block),
        "renamed and wrapped": lambda: phases.run("remote_rows", functools.partial(renamed, block)),
        "decorated": lambda: yet_another_name(block),
        "untagged": lambda: renamed(block),
    }
    remote = {name: _capture(str(tmp_path / f"{i}.bin"), make).categories["remote rows"]
              for i, (name, make) in enumerate(variants.items())}
    for name in ("run", "renamed and wrapped", "decorated"):
        assert block <= remote[name] <= block + SLACK, (name, remote)
        assert abs(remote[name] - remote["run"]) <= SLACK, remote
    assert remote["untagged"] < MIB, remote


def test_phase_tags_are_checked_and_cheap_wrappers():
    with pytest.raises(ValueError, match="unknown phase tag"):
        phases.run("remote_row", _fill, 1)
    with pytest.raises(ValueError, match="unknown phase tag"):
        phases.tagged("nope")

    def gen():
        yield 1

    with pytest.raises(TypeError, match="cannot tag"):
        phases.tagged("aggregation")(gen)

    @phases.tagged("aggregation")
    def documented(x: int) -> int:
        """Doubles."""
        return 2 * x

    assert documented(3) == 6 and documented.__name__ == "documented" and documented.__doc__ == "Doubles."
    assert documented.__code__.co_name == "phase:aggregation"
    assert phases.run("gradient_return", lambda a, b=0: a + b, 2, b=5) == 7
    assert phases.tag_of_frame("phase:remote_rows") == "remote_rows"
    assert phases.tag_of_frame("phase:unknown") is None and phases.tag_of_frame("ring_fetch") is None


def test_every_tag_has_one_heading():
    assert set(HEADING_OF_TAG) == set(phases.TAGS) == set(EXPECTED_HEADING)
    assert set(HEADING_OF_TAG.values()) <= set(CATEGORIES)


# --- stacks -> headings ----------------------------------------------------------------------------

def _tag(tag: str) -> Frame:
    return Frame("sarlab/core/phases.py", phases.FRAME_PREFIX + tag, 60)


def test_classify_files_stacks_by_the_innermost_tag_or_fallback_rule():
    forward = [Frame("sarlab/nn/model.py", "GNN.forward", 89),
               Frame("sarlab/training/trainer.py", "Trainer.forward_backward", 64)]
    backward = [_tag("aggregation_backward"), Frame("torch/autograd/function.py", "apply", 307),
                Frame("torch/autograd/graph.py", "_engine_run_backward", 979),
                Frame("torch/autograd/__init__.py", "grad", 503),
                Frame("sarlab/training/trainer.py", "Trainer.forward_backward", 68)]
    any_name = Frame("sarlab/core/aggregate.py", "whatever_it_is_called", 40)
    assert classify([any_name, _tag("remote_rows"), _tag("aggregation")] + forward) == "remote rows"
    assert tag_of([any_name, _tag("remote_rows"), _tag("aggregation")] + forward) == "remote_rows"
    assert classify([any_name, _tag("halo_exchange")] + forward) == "remote rows"
    assert classify([any_name, _tag("aggregation")] + forward) == "local activations"
    assert classify([any_name, _tag("remote_rows")] + backward) == "remote rows"  # re-fetch in the backward
    assert classify([any_name, _tag("rematerialization")] + backward) == "gradients"
    assert classify([Frame("sarlab/core/shards.py", "Shard.matrix", 55), _tag("graph_structure"),
                     Frame("sarlab/core/shards.py", "Shard.spmm", 72)] + backward) == "graph structure"
    # code without tags: fallback rules, innermost first, before any outer tag
    attention = Frame("sarlab/nn/gat.py", "AttentionAggregation._accumulate_autograd", 75)
    assert classify([attention, _tag("aggregation")] + forward) == "attention tensors"
    assert classify([attention, _tag("rematerialization")] + backward) == "attention tensors"
    assert classify([Frame("torch/optim/adam.py", "_init_group", 178)]) == "optimizer state"
    assert classify(backward[1:]) == "gradients"  # autograd's backward of the layers and the loss
    imported = [Frame("<frozen importlib._bootstrap>", "_find_and_load", 1176), _tag("aggregation")] + forward
    assert classify(imported) == "other"
    # untagged frames of the layers and the loss, then everything else
    assert classify(forward) == "local activations"
    assert classify([Frame("sarlab/training/trainer.py", "Trainer.accuracy", 84)]) == "other"
    assert classify([]) == "other" and tag_of([]) == UNTAGGED
    location, callers = site_of([any_name, _tag("remote_rows")] + forward)
    assert location.startswith("sarlab/core/aggregate.py:40") and callers[0] == "GNN.forward:89"
    assert site_of([imported[0], any_name])[0].startswith("import in sarlab/core/aggregate.py:40")


def test_bad_modes_fail_with_a_message(capsys, tmp_path):
    assert parse_modes("all") == ["sar", "sa", "oneshot"]
    assert main(["--modes", "sar,fast", "--out", str(tmp_path / "x")]) == 1
    assert "unknown mode(s) fast" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0


def test_fallback_rules_name_functions_that_exist():
    """A fallback rule naming engine code must match it (the tagged engine needs no rule)."""
    for rule in FALLBACK_RULES + LOCAL_ACTIVATION_RULES:
        if not rule.path.startswith(("sarlab/", "kernels/")):
            continue
        files = sorted(str(p) for p in Path(ROOT).glob(rule.path) if p.suffix == ".py")
        assert files, f"{rule}: no file matches {rule.path}"
        names = [scope[2] for f in files for scope in _scopes(f)]
        assert any(fnmatch.fnmatchcase(n, rule.name) for n in names), f"{rule}: no function matches {rule.name}"
