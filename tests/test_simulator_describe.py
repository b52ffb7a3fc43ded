"""A machine described rather than calibrated (sarlab.simulator.hardware.describe) and the calibration's budget
pieces (thread counts, co-location groups, the busy-machine warning)."""

from __future__ import annotations

import json

import pytest

from sarlab.real.calibration.budget import busy_warning, expected_seconds
from sarlab.real.calibration.hostbench import colocation_threads
from sarlab.real.calibration.opbench import THREAD_POINTS, speedup_rounds, thread_counts
from sarlab.simulator.calibration.calibration import Calibration
from sarlab.simulator.hardware.describe import base_bandwidth, describe_profile, parse_spec
from sarlab.simulator.hardware.host import CROWDED, FIT, regime
from sarlab.simulator.hardware.profile import Link, OpCost, Profile
from sarlab.simulator.hardware.provenance import profile_line, resolve_profile


def base(cores: int = 2) -> Profile:
    """A calibrated-looking base: speed-ups measured up to its cores."""
    ops = {name: OpCost(rate=1e9 if name != "gemm" else 5e10, parallel_eff=0.9,
                        speedups=((2.0, 1.9),) if cores >= 2 else ())
           for name in ("gemm", "spmm", "max_aggr", "gat_unfused", "elementwise")}
    link = Link(latency_s=5e-5, bandwidth_Bps=1e9, gap_s=1e-5)
    return Profile(name="base", ops=ops, inter_host=link, intra_host=link, cores_per_host=cores,
                   progress_spread={2: 0.05, 4: 0.3}, meta={"machine": "test cpu"})


def resolver(prof: Profile):
    return lambda name: (prof, "test base")


def test_parse_spec_pairs_and_json(tmp_path):
    assert parse_spec("describe:cores=16,gemm=2x") == {"cores": "16", "gemm": "2x"}
    path = tmp_path / "host.json"
    path.write_text(json.dumps({"cores": 64, "membw": 200}))
    assert parse_spec(f"describe:{path}") == {"cores": "64", "membw": "200"}
    with pytest.raises(ValueError, match="unknown key"):
        parse_spec("describe:cores=16,disk=1")
    with pytest.raises(ValueError, match="key=value"):
        parse_spec("describe:cores=16,gemm")


def test_described_host_takes_the_named_differences_and_keeps_the_rest():
    b = base(2)
    d = describe_profile("describe:cores=16,gemm=2x,net=100", resolver(b))
    assert d.cores_per_host == 16 and d.op("gemm").rate == pytest.approx(1e11)
    assert d.inter_host.bandwidth_Bps == pytest.approx(100e9 / 8) and d.intra_host == b.intra_host
    assert d.op("spmm").rate == b.op("spmm").rate and d.op("spmm").speedup(2) == pytest.approx(1.9)
    # beyond the base's 2 cores the table goes on at its last segment's efficiency (0.9)
    assert d.op("spmm").speedup(16) == pytest.approx(1.9 + 14 * 0.9)
    assert d.progress_spread == {16: 0.05, 32: 0.3}  # the same crowding on 16 cores
    assert regime(8, 2, d.cores_per_host) == FIT and regime(8, 4, d.cores_per_host) == CROWDED


def test_membw_caps_memory_bound_families_not_gemm():
    b = base(2)
    bw = base_bandwidth(b)  # 1e9 B/s x 1.9
    d = describe_profile("describe:cores=64,membw=4x", resolver(b))
    cap = 4 * bw / b.op("elementwise").rate
    assert d.op("spmm").speedup(64) == pytest.approx(cap)
    assert d.op("gemm").speedup(64) > cap


def test_one_core_base_gets_assumed_thread_efficiencies_said_in_the_notes():
    d = describe_profile("describe:cores=2", resolver(base(1)))
    assert d.op("gemm").speedup(2) == pytest.approx(1.85) and d.op("spmm").speedup(2) == pytest.approx(1.8)
    assert any("assumed" in n for n in d.notes)
    # its line says the 2 cores are described, from a calibration of one
    assert "2 cores described from a calibration on test cpu (1 core)" in profile_line(d, "describe:cores=2")


def test_eff_sets_the_threads_beyond_the_base_for_every_family():
    one = describe_profile("describe:cores=4,eff=0.5", resolver(base(1)))
    for name in ("gemm", "spmm", "elementwise"):  # 1 + (T - 1) x 0.5 instead of the assumed 0.85 / 0.8 / 0.7
        assert one.op(name).speedup(2) == pytest.approx(1.5) and one.op(name).speedup(4) == pytest.approx(2.5)
    assert any("0.5" in n and "described" in n for n in one.notes) and not any("assumed" in n for n in one.notes)
    two = describe_profile("describe:cores=8,eff=0.25", resolver(base(2)))
    assert two.op("spmm").speedup(2) == pytest.approx(1.9)  # measured on the base: kept
    assert two.op("spmm").speedup(8) == pytest.approx(1.9 + 6 * 0.25)  # not the last segment's 0.9
    capped = describe_profile("describe:cores=8,eff=1,membw=1x", resolver(base(2)))
    assert capped.op("spmm").speedup(8) == pytest.approx(1.9)  # the bandwidth cap still binds
    for bad in ("0", "1.5", "-0.2"):
        with pytest.raises(ValueError, match="eff"):
            describe_profile(f"describe:cores=4,eff={bad}", resolver(base(1)))


def test_resolve_profile_reads_describe_specs():
    prof, source = resolve_profile("describe:base=epyc-2core,cores=16")
    assert prof.cores_per_host == 16 and source.startswith("describe:")


def test_calibration_times_log2_thread_counts_and_few_colocation_groups():
    assert thread_counts(1) == [1] and thread_counts(2) == [1, 2] and thread_counts(12) == [1, 2, 4, 8, 12]
    assert thread_counts(64) == [1, 2, 4, 8, 16, 32, 64]
    assert colocation_threads(2) == [1] and colocation_threads(16) == [1, 8] and colocation_threads(128) == [1, 64]
    quick, full = Calibration(quick=True), Calibration()
    # the budget grows with log2(cores), not cores x seconds
    assert expected_seconds(full, 128) < 2.0 * expected_seconds(full, 16)
    assert expected_seconds(quick, 16) < expected_seconds(full, 16)


def test_thread_speedup_rounds_hold_the_timed_calls_whatever_the_cores():
    full = Calibration()
    assert speedup_rounds(full, 2) == full.thread_rounds == 3  # the 2-core VM's calibrations: unchanged
    for cores in (2, 3, 4, 8, 16, 64, 128):
        rounds = speedup_rounds(full, cores)
        assert rounds >= 1 and rounds * len(thread_counts(cores)) <= max(THREAD_POINTS, len(thread_counts(cores)))
    assert speedup_rounds(full, 16) == 1 and speedup_rounds(Calibration(quick=True), 2) == 1


def test_busy_machine_is_said_early_with_its_load():
    cal = Calibration(quick=True)
    quiet = busy_warning(cal, 2, load=0.2)
    assert len(quiet) == 1 and "expected" in quiet[0]
    busy = busy_warning(cal, 2, load=15.0)
    assert len(busy) == 2 and "BUSY MACHINE: load average 15.0 on 2 core(s)" in busy[1] and "up to" in busy[1]
    busy_now = busy_warning(cal, 2, load=15.0, now=0.9)
    assert "BUSY MACHINE" in busy_now[1] and "using 90% of them now" in busy_now[1]


def test_a_load_that_has_just_ended_is_said_without_the_busy_warning():
    """The load average trails by a minute: high load but idle cores now is a job that has just ended."""
    lines = busy_warning(Calibration(), 2, load=2.6, now=0.02)
    assert len(lines) == 2 and "BUSY MACHINE" not in lines[1] and "just ended" in lines[1] and "2.6" in lines[1]
