"""First-use memory per memory method (allocator): a profile holds the first-use bytes measured under each method; a
record is priced with its own method's; profiles without the field price and write as before; the live probe measures
tensor bytes. No timing."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
import pytest
from test_allocator_scale import row as scale_row
from test_simulator_fixtures import hand_profile

from sarlab import kernels
from sarlab.real.calibration.hostbench import bench_first_use
from sarlab.simulator.calibration.calibration import Findings
from sarlab.simulator.hardware.profile import Profile, load_profile, save_profile
from sarlab.simulator.system.replay import simulate_row
from sarlab.simulator.workload.workload import estimate_partition

RSS_FIRST_USE = {"autograd": 7e6, "spmm": 1.5e6, "max_aggr": 1e6}
LIVE_FIRST_USE = {"autograd": 0.0, "spmm": 0.25e6, "max_aggr": 0.0}


def measured_profile() -> Profile:
    """A live-fitted curve with rss's ratio, first-use bytes under both methods."""
    return replace(hand_profile(), compute_scale=0.9, compute_scale_memory="live", memory_scale={"rss": 1.5},
                   first_use_bytes=dict(RSS_FIRST_USE),
                   first_use_memory={"rss": dict(RSS_FIRST_USE), "live": dict(LIVE_FIRST_USE)})


def row(mem_method: str | None, workers: int = 2) -> pd.Series:
    """test_allocator_scale's GCN 2 x 64 summary row on 20,000 nodes, at two workers by default."""
    return scale_row(mem_method, workers)


STATS = estimate_partition(20_000, 400_000, 2, 64, 16)


def test_the_fields_round_trip_and_old_profiles_write_as_before(tmp_path):
    prof = measured_profile()
    back = load_profile(save_profile(prof, tmp_path / "p.json"))
    assert back == prof and back.first_use_memory["live"] == LIVE_FIRST_USE
    assert json.loads((tmp_path / "p.json").read_text())["first_use_memory"]["live"] == LIVE_FIRST_USE
    old = hand_profile().to_json()
    assert "first_use_memory" not in old
    assert Profile.from_json(json.loads(json.dumps(old))) == hand_profile()


def test_negative_first_use_bytes_are_refused():
    with pytest.raises(ValueError, match="first_use_memory"):
        replace(hand_profile(), first_use_memory={"live": {"spmm": -1.0}})


def test_each_record_holds_its_own_methods_first_use_bytes():
    """A GCN record holds autograd's and spmm's first-use bytes above the baseline all epoch (by hand: rss 8.5 MB,
    live 0.25 MB); a record without the column holds the profile's first_use_bytes (rss's, as before)."""
    prof = measured_profile()
    bare = simulate_row(row(None), replace(prof, first_use_bytes={}, first_use_memory={}), STATS)
    for method, extra in (("rss", 8.5e6), ("live", 0.25e6), (None, 8.5e6)):
        got = simulate_row(row(method), prof, STATS)
        assert list(got.start_bytes - bare.start_bytes) == pytest.approx([extra, extra])
    assert prof.for_memory("live").first_use_bytes == LIVE_FIRST_USE
    assert prof.for_memory("rss").first_use_bytes == RSS_FIRST_USE
    assert prof.for_memory("rss").for_memory("live").first_use_bytes == LIVE_FIRST_USE


def test_without_first_use_per_method_every_record_holds_the_same():
    prof = replace(measured_profile(), first_use_memory={})
    live, rss = (simulate_row(row(m), prof, STATS) for m in ("live", "rss"))
    assert list(live.start_bytes) == list(rss.start_bytes)


@pytest.mark.skipif(not kernels.alloc.available(), reason="the counting allocator needs the C++ kernels")
def test_the_live_probe_counts_tensor_bytes_only():
    """Under the counting allocator a family's first use leaves no tensor live (the probes return nothing), so the
    probe finds 0 bytes for each, where resident bytes (code pages, arenas) grow; it keeps rss's raw apart."""
    found = Findings()
    live, transients = bench_first_use(found, "live")
    assert {"autograd", "spmm", "max_aggr", "gat_unfused"} <= set(live)
    assert all(v == 0.0 for v in live.values()) and transients == {}
    assert found.raw["first_use_live"] == live and "first_use" not in found.raw
