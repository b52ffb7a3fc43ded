"""The compute scale per memory method (allocator): a profile says which method its curve was fitted under and the
other method's ratio to it; a record is priced with the scale of the method it ran under (its ``mem_method``); a
profile without the fields prices as it always did; the calibration's ratio from paired runs; the engine child's plan
order. No timing: every number here is given."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
import pytest
from test_simulator_fixtures import hand_profile

from sarlab.real.calibration.engine_runs import check_plan, child_plan, memory_scale_of
from sarlab.simulator.calibration.fitting import fit_memory_ratio
from sarlab.simulator.calibration.probe import probe_scale
from sarlab.simulator.hardware.allocators import ratio_note
from sarlab.simulator.hardware.profile import Profile, load_profile, save_profile
from sarlab.simulator.studies.validate import markdown_table, validate
from sarlab.simulator.system.replay import simulate_row
from sarlab.simulator.workload.workload import estimate_partition

CURVE = ((50e6, 0.5), (500e6, 0.4))
RATIO = 2.3


def live_profile(ratio: float = RATIO) -> Profile:
    """The hand profile with a peak-keyed curve fitted under ``live`` and ``rss``'s ratio to it."""
    return replace(hand_profile(), compute_scale=0.45, compute_scale_curve=CURVE, compute_scale_key="peak",
                   compute_scale_memory="live", memory_scale={"rss": ratio})


def old_profile() -> Profile:
    """The same curve as a profile from before the fields (fitted on rss runs, no ratio)."""
    return replace(hand_profile(), compute_scale=0.45, compute_scale_curve=CURVE, compute_scale_key="peak")


def row(mem_method: str | None = None, workers: int = 1) -> pd.Series:
    """A summary row of a GCN 2 x 64 run on a 20,000-node graph, one thread a worker."""
    values = {"label": "", "graph": "g", "partition_dir": "", "num_nodes": 20_000, "num_edges": 400_000,
              "feature_dim": 64, "num_classes": 16, "model": "gcn", "layers": 2, "hidden": 64, "heads": 1,
              "aggr": "mean", "fused": False, "mode": "sar", "workers": workers, "prefetch": 1, "dtype": "float32",
              "batchnorm": False, "dropout": 0.0, "threads": 1, "net": "loopback", "backend": "gloo"}  # fmt: skip
    if mem_method is not None:
        values["mem_method"] = mem_method
    return pd.Series(values)


STATS = estimate_partition(20_000, 400_000, 1, 64, 16)


def priced(r: pd.Series, profile: Profile):
    return simulate_row(r, profile, STATS)


def test_profile_round_trips_the_allocator_fields(tmp_path):
    prof = live_profile()
    back = load_profile(save_profile(prof, tmp_path / "p.json"))
    assert back.compute_scale_memory == "live" and back.memory_scale == {"rss": RATIO}
    assert back == prof
    text = json.loads((tmp_path / "p.json").read_text())
    assert text["compute_scale_memory"] == "live" and text["memory_scale"] == {"rss": RATIO}


def test_an_old_profile_loads_and_is_written_as_before(tmp_path):
    """JSON without the fields reads as a curve fitted on rss runs with no ratio, and is written without them."""
    data = old_profile().to_json()
    assert "compute_scale_memory" not in data and "memory_scale" not in data
    back = Profile.from_json(json.loads(json.dumps(data)))
    assert back.compute_scale_memory == "rss" and back.memory_scale == {}
    assert back == old_profile()


def test_bad_ratios_are_refused():
    with pytest.raises(ValueError, match="memory_scale"):
        replace(hand_profile(), compute_scale_memory="live", memory_scale={"rss": 0.0})
    with pytest.raises(ValueError, match="memory_scale"):
        replace(hand_profile(), compute_scale_memory="live", memory_scale={"live": 2.0})


def test_an_old_profile_prices_every_allocator_as_before():
    """Without a ratio the record's allocator changes nothing: live, rss and no column price identically."""
    prof = old_profile()
    base = priced(row(), prof)
    for method in ("live", "rss"):
        other = priced(row(method), prof)
        assert list(other.epoch_time_s) == list(base.epoch_time_s)
        assert list(other.compute_s) == list(base.compute_s)
        assert other.compute_scale == base.compute_scale


@pytest.mark.parametrize("workers", [1, 2])
def test_an_rss_record_costs_the_ratio_times_a_live_one(workers):
    """With ratio r, an rss record's compute is r times the same live record's; the live record prices with the
    curve as it is, and a record without the column too (the curve's own method)."""
    prof = live_profile()
    live, rss, bare = (priced(row(m, workers), prof) for m in ("live", "rss", None))
    assert rss.compute_scale == pytest.approx(RATIO * live.compute_scale, rel=1e-12)
    for a, b in zip(rss.compute_s, live.compute_s, strict=True):
        assert a == pytest.approx(RATIO * b, rel=1e-9)
    assert list(bare.compute_s) == list(live.compute_s)
    # by hand: the curve's values times r, as a profile of one method alone
    by_hand = replace(hand_profile(), compute_scale=0.45 * RATIO, compute_scale_key="peak",
                      compute_scale_curve=tuple((b, v * RATIO) for b, v in CURVE))
    assert list(priced(row(), by_hand).compute_s) == pytest.approx(list(rss.compute_s), rel=1e-12)


def test_for_memory_restates_the_ratios():
    prof = live_profile()
    rss = prof.for_memory("rss")
    assert rss.compute_scale_memory == "rss" and rss.memory_scale == {"live": pytest.approx(1 / RATIO)}
    assert rss.compute_scale == pytest.approx(0.45 * RATIO)
    assert rss.for_memory("live").compute_scale == pytest.approx(0.45)
    assert prof.for_memory("live") is prof and prof.for_memory("") is prof
    assert prof.memory_label("rss") == "rss = live x 2.30" and prof.memory_label("live") == "live"
    assert old_profile().memory_label("live") == "live as rss"


def test_the_probe_scale_is_stated_for_the_curves_allocator():
    """The speed probe runs under rss: against a live curve with ratio r, the scale it gives is 1/r of the rss one."""
    record = pd.Series({**row("live").to_dict(), "probe_epoch_s": 3.0, "probe_graph": "p", "probe_num_nodes": 20_000,
                        "probe_num_edges": 400_000, "probe_feature_dim": 64, "probe_num_classes": 16,
                        "probe_threads": 1})
    assert probe_scale(record, live_profile()) == pytest.approx(probe_scale(record, old_profile()) / RATIO)


def test_validation_prices_and_names_each_allocator():
    """Records of one configuration under both allocators are two rows, priced apart, and the table says which
    allocator priced each."""
    recs = []
    for method, seconds in (("live", 0.2), ("rss", 0.46)):
        for epoch in range(3):
            recs.append({**row(method).to_dict(), "rank": 0, "epoch": epoch, "epoch_time_s": seconds,
                         "peak_mem_bytes": 3e8, "baseline_mem_bytes": 1e8})
    table = validate(pd.DataFrame(recs), live_profile())
    assert sorted(table["mem_method"]) == ["live", "rss"]
    by = table.set_index("mem_method")
    assert by.loc["live", "allocator"] == "live" and by.loc["rss", "allocator"] == "rss = live x 2.30"
    assert by.loc["rss", "compute_scale_used"] == pytest.approx(RATIO * by.loc["live", "compute_scale_used"])
    assert "| allocator |" in markdown_table(table) and "rss = live x 2.30" in markdown_table(table)


def test_records_priced_through_the_ratio_get_a_warning_and_others_none():
    prof = replace(live_profile(), meta={"date": "2026-11-28"})
    note = ratio_note(prof, ["live", "rss"])
    assert note is not None and "rss = live x 2.30" in note and "2026-11-28" in note and "own day" in note
    assert ratio_note(prof, ["live"]) is None and ratio_note(old_profile(), ["rss", "live"]) is None


def test_the_ratio_is_the_median_of_paired_runs():
    ratio, spread = fit_memory_ratio([0.9, 1.0, 1.2, 0.8], [0.4, 0.5, 0.5, 0.4])  # 2.25, 2.0, 2.4, 2.0
    assert ratio == pytest.approx(2.125) and spread == pytest.approx(1.2)
    with pytest.raises(ValueError):
        fit_memory_ratio([1.0], [0.5, 0.4])
    with pytest.raises(ValueError):
        fit_memory_ratio([1.0], [0.0])


def _run(model: str, nodes: int, turn: int, memory: str, seconds: float) -> dict:
    return {"model": model, "nodes": nodes, "pass": turn, "memory": memory, "measured_s": seconds}


def test_the_engine_step_pairs_rss_runs_with_the_live_ones():
    """The ratio pairs each rss run with the live run of its model, size and pass; where the live runs fell back to
    rss (no counting allocator) the curve is rss's and there is no ratio."""
    raw = {"ratio_nodes": 35_000,
           "runs": [_run(m, n, t, "live", s) for m, n, t, s in (("gcn", 35_000, 1, 0.5), ("sage", 35_000, 1, 0.6),
                                                                 ("gcn", 35_000, 2, 0.5), ("sage", 35_000, 2, 0.8),
                                                                 ("gcn", 12_500, 1, 0.1))],
           "memory_runs": [_run(m, 35_000, t, "rss", s) for m, t, s in (("gcn", 1, 1.0), ("sage", 1, 1.5),
                                                                         ("gcn", 2, 1.25), ("sage", 2, 1.6))]}
    assert memory_scale_of(raw) == ("live", {"rss": pytest.approx(2.25)})  # 2.0, 2.5, 2.5, 2.0
    fallen = {**raw, "runs": [{**r, "memory": "rss"} for r in raw["runs"]]}
    assert memory_scale_of(fallen) == ("rss", {})


def test_each_pass_runs_rss_first_then_live_in_its_order(tmp_path):
    first = child_plan((1, 2, 3), 0, 2, 2, 8, 2, tmp_path)
    second = child_plan((1, 2, 3), 1, 2, 2, 8, 2, tmp_path)
    assert [(r["memory"], r["model"]) for r in first[:2]] == [("rss", "gcn"), ("rss", "sage")]
    assert [r["spec"].split(",")[0] for r in first[2::2]] == ["synthetic:nodes=1", "synthetic:nodes=2",
                                                              "synthetic:nodes=3"]
    assert [r["spec"].split(",")[0] for r in second[2::2]][::-1] == [r["spec"].split(",")[0] for r in first[2::2]]
    assert all(r["memory"] == "live" for r in first[2:])
    check_plan(first)
    with pytest.raises(ValueError, match="rss runs before its live"):
        check_plan([first[-1], first[0]])
    with pytest.raises(ValueError, match="lacks"):
        check_plan([{"spec": "x"}])


def test_the_engine_step_writes_the_allocator_into_the_profile(monkeypatch, tmp_path):
    """What bench_engine found (a live curve, rss 2.1 x that) goes into the profile, its notes and its JSON; the
    plausibility of the scale is judged under rss, the microbenchmarks' allocator."""
    import sarlab.real.calibration.calibrate as calibrate_module
    from sarlab.simulator.calibration.calibration import Calibration, Findings

    raw = {"runs": [{}] * 4, "ratio_nodes": 3000, "compute_scale_memory": "live", "memory_scale": {"rss": 2.1}}
    monkeypatch.setattr(calibrate_module, "bench_engine", lambda cal, prof: (0.4, CURVE, raw))
    cal = Calibration(quick=True, quiet_tries=1, log=lambda _line: None)
    prof = calibrate_module._fit_engine(cal, Findings(), hand_profile())
    assert (prof.compute_scale, prof.compute_scale_curve) == (0.4, CURVE)
    assert prof.compute_scale_memory == "live" and prof.memory_scale == {"rss": 2.1}
    assert "memory_scale rss: 2.10" in prof.notes[-1]
    assert load_profile(save_profile(prof, tmp_path / "p.json")).memory_scale == {"rss": 2.1}
    assert prof.for_memory("rss").compute_scale == pytest.approx(0.84)  # inside [0.5, 2], where 0.4 alone is not
