"""`sarlab bench engine`'s mode specs: MODE and MODE+fused (GAT's fused kernels, e.g. the DGL-like vanilla
oneshot+fused), what each launches, and the ratio table over the pairs a run has."""

from __future__ import annotations

import pandas as pd
import pytest

from sarlab.data.validate_data import InputError
from sarlab.real.bench import bench
from sarlab.real.bench.bench import build_parser, config_from_args, parse_mode, ratios


@pytest.mark.parametrize(("spec", "expected"), [
    ("sar", ("sar", False)), ("sa", ("sa", False)), ("oneshot", ("oneshot", False)),
    ("sar+fused", ("sar", True)), ("oneshot+fused", ("oneshot", True)), ("sa+fused", ("sa", True)),
])
def test_parse_mode(spec, expected):
    assert parse_mode(spec) == expected


@pytest.mark.parametrize("spec", ["vanilla", "oneshot+unfused", "sar+", "+fused", "fused", "oneshot+fused+x"])
def test_parse_mode_refuses_unknown_specs(spec):
    with pytest.raises(InputError, match="bench mode"):
        parse_mode(spec)


def test_command_line_accepts_oneshot_fused_and_refuses_typos():
    """The lead's command parses to the three GAT modes; a typo is refused before anything runs."""
    a = build_parser().parse_args(["--models", "gat", "--modes", "oneshot,oneshot+fused,sar+fused",
                                   "--workers", "2,4,8", "--nodes", "24000", "--degree", "16", "--features", "64",
                                   "--classes", "16", "--hidden", "48", "--heads", "4", "--batchnorm",
                                   "--epochs", "4", "--memory", "rss"])
    cfg = config_from_args(a)
    assert cfg.modes == ("oneshot", "oneshot+fused", "sar+fused") and cfg.models == ("gat",)
    assert cfg.workers == (2, 4, 8) and cfg.batchnorm and cfg.memory == "rss"
    with pytest.raises(InputError, match="oneshot\\+fsued"):
        config_from_args(build_parser().parse_args(["--models", "gat", "--modes", "oneshot+fsued"]))


def test_launched_engine_configs(monkeypatch):
    """What each (model, mode) launches: GAT gets fused kernels exactly for +fused; other models skip +fused
    entries and run their plain modes; the records keep the spec as asked."""
    launched = []

    def fake_launch(job, n, net, log):
        launched.append((job.model.model, job.engine.mode, job.engine.fused, n))
        return [{"epoch": 0, "epoch_time_s": 1.0, "peak_mem_bytes": 2, "baseline_mem_bytes": 1, "mode": "?"}]

    monkeypatch.setattr(bench, "launch", fake_launch)
    monkeypatch.setattr(bench, "cached_partition", lambda cfg, n, log=print: f"/nowhere/n{n}")
    cfg = bench.EngineBenchConfig(workers=(2,), models=("gat", "gcn"), modes=("oneshot", "oneshot+fused", "sar+fused"))
    records = bench.run_engine_bench(cfg, log=lambda line: None)
    assert launched == [("gat", "oneshot", False, 2), ("gat", "oneshot", True, 2), ("gat", "sar", True, 2),
                        ("gcn", "oneshot", True, 2)]
    assert list(records["mode"]) == ["oneshot", "oneshot+fused", "sar+fused", "oneshot"]


def test_ratios_without_plain_sar():
    """A run of oneshot, oneshot+fused and sar+fused (no plain sar) still gets its ratios: by hand, memory 8/2 = 4
    (oneshot over sar+fused), 4/2 = 2 (oneshot+fused over sar+fused), 8/4 = 2 (oneshot over oneshot+fused); time
    sar+fused / oneshot+fused = 3/1.5 = 2."""
    summary = pd.DataFrame({"label": "gat", "model": "gat", "workers": 4,
                            "mode": ["oneshot", "oneshot+fused", "sar+fused"],
                            "peak_mem_above_baseline_bytes": [8.0, 4.0, 2.0], "epoch_time_s": [6.0, 1.5, 3.0]})
    row = ratios(summary).iloc[0]
    assert row["oneshot_over_sar+fused_mem"] == 4.0
    assert row["oneshot+fused_over_sar+fused_mem"] == 2.0
    assert row["oneshot_over_oneshot+fused_mem"] == 2.0
    assert row["sar+fused_over_oneshot+fused_time"] == 2.0
    assert "oneshot_over_sar_mem" not in row
    assert ratios(summary[summary["mode"] == "oneshot"]).empty  # nothing to compare


def test_gat_vanilla_fused_runs_and_matches_the_unfused_loss(tmp_path):
    """`sarlab bench engine --models gat --modes oneshot,oneshot+fused,sar+fused` on a tiny graph at N = 2 (two
    worker processes; the launcher bounds every wait and fails with the rank's traceback): every mode runs, GAT
    is fused exactly for +fused, and epoch 0's loss (the same initial weights; fused kernels or plain autograd,
    one shot or ring rounds) agrees across the modes to float32 round-off."""
    cfg = bench.EngineBenchConfig(nodes=400, degree=6, features=8, classes=3, hidden=8, layers=2, workers=(2,),
                                  epochs=1, models=("gat",), modes=("oneshot", "oneshot+fused", "sar+fused"),
                                  heads=2, timeout_s=120.0, cache=str(tmp_path))
    records = bench.run_engine_bench(cfg, log=lambda line: None)
    first = records[records.epoch == 0].groupby("mode").agg(loss=("loss", "max"), fused=("fused", "max"))
    assert dict(first.fused) == {"oneshot": False, "oneshot+fused": True, "sar+fused": True}
    assert first.loss["oneshot+fused"] == pytest.approx(first.loss["oneshot"], rel=1e-4)
    assert first.loss["sar+fused"] == pytest.approx(first.loss["oneshot"], rel=1e-4)
