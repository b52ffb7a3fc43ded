"""A spec string's partition is cached (keyed by spec, parts, method, seed, format version), checked by its sha256
on reuse, written atomically, and bypassed with ``cache=False``."""
from __future__ import annotations

import logging
import os
import shutil

import numpy as np
import pytest

from sarlab.data.graphs import load_graph
from sarlab.data.partition import check_partition, load_manifest, load_part
from sarlab.real.launch import prepare

SPEC = "synthetic:nodes=240,degree=5,features=6,classes=3,seed=1"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SARLAB_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / prepare.CACHE_FOLDER


def _no_loading(spec, say=None):
    raise AssertionError(f"the graph {spec} was loaded again instead of reusing the cache")


def test_second_call_reuses_the_cached_partition(cache, monkeypatch, caplog):
    first, tmp = prepare.prepare_partition(SPEC, 2, "random", 0, None)
    assert tmp is None and os.path.dirname(first) == str(cache)
    check_partition(first)
    graph = load_graph(SPEC)  # independent check: the parts hold every node's own features
    for part in range(2):
        arrays = load_part(first, part).arrays
        np.testing.assert_array_equal(arrays["features"], graph.features[arrays["orig_ids"]])
    monkeypatch.setattr(prepare, "load_source", _no_loading)
    with caplog.at_level(logging.INFO, logger="sarlab"):
        again, _ = prepare.prepare_partition(SPEC, 2, "random", 0, None)
    assert again == first
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and said[0].startswith("reused the cached partition") and "--no-cache" in said[0], said


def test_key_covers_spec_parts_method_and_seed():
    keys = {prepare.cache_key(SPEC, 2, "metis", 0), prepare.cache_key(SPEC, 3, "metis", 0),
            prepare.cache_key(SPEC, 2, "random", 0), prepare.cache_key(SPEC, 2, "metis", 1),
            prepare.cache_key(SPEC.replace("seed=1", "seed=2"), 2, "metis", 0)}
    assert len(keys) == 5
    assert prepare.cache_key(SPEC, 2, "metis", 0) == prepare.cache_key(SPEC, 2, "metis", 0)


def test_a_corrupt_entry_is_partitioned_again(cache, caplog):
    first, _ = prepare.prepare_partition(SPEC, 2, "random", 0, None)
    victim = os.path.join(first, sorted(load_manifest(first)["files"])[0])
    with open(victim, "r+b") as f:
        f.seek(0, os.SEEK_END)
        f.write(b"\0")
    with caplog.at_level(logging.INFO, logger="sarlab"):
        again, _ = prepare.prepare_partition(SPEC, 2, "random", 0, None)
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert "failed its check" in said and "loading graph" in said, said
    assert again == first
    check_partition(again)  # whole again: every sha256 matches


def test_a_crash_while_partitioning_leaves_nothing_trusted(cache, monkeypatch):
    def crash(graph, parts, out_dir, **kwargs):
        os.makedirs(out_dir)
        open(os.path.join(out_dir, "manifest.json"), "w").close()  # half a partition
        raise KeyboardInterrupt

    real = prepare.partition
    monkeypatch.setattr(prepare, "partition", crash)
    with pytest.raises(KeyboardInterrupt):
        prepare.prepare_partition(SPEC, 2, "random", 0, None)
    assert os.listdir(cache) == []  # no entry, no staging directory
    killed = cache / f"{prepare._STAGING}{2**22 + 12345}-x" / "parts"  # a process killed mid-write (no such pid)
    killed.mkdir(parents=True)
    (killed / "manifest.json").write_text("{}")
    monkeypatch.setattr(prepare, "partition", real)
    again, _ = prepare.prepare_partition(SPEC, 2, "random", 0, None)
    check_partition(again)
    assert os.listdir(cache) == [os.path.basename(again)]  # the dead process's staging directory was swept


def test_cache_false_partitions_into_a_temporary_directory(cache):
    pdir, tmp = prepare.prepare_partition(SPEC, 2, "random", 0, None, cache=False)
    try:
        assert tmp is not None and pdir.startswith(tmp) and not cache.exists()
        check_partition(pdir)
    finally:
        shutil.rmtree(tmp)
