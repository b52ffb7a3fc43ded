"""The gloo-vs-ccl benchmark plumbing: ``sarlab bench engine --backend gloo,ccl`` runs every configuration once per
backend with the order alternating, refuses an unknown backend before anything runs; the campaign report's
speed-ups and medians equal a computation by hand; the network list parses specs with commas."""

from __future__ import annotations

import pandas as pd
import pytest

from benchmarks import backend_bench, backend_report
from sarlab.data.validate_data import InputError
from sarlab.real.bench import bench
from sarlab.real.bench.bench import build_parser, config_from_args


def test_backends_alternate_per_configuration(monkeypatch):
    launched = []

    def fake_launch(job, n, net, log):
        launched.append((job.model.model, job.engine.mode, n, job.backend))
        return [{"epoch": 0, "epoch_time_s": 1.0, "peak_mem_bytes": 2, "baseline_mem_bytes": 1, "mode": "?",
                 "backend": job.backend}]

    monkeypatch.setattr(bench, "launch", fake_launch)
    monkeypatch.setattr(bench, "cached_partition", lambda cfg, n, log=print: f"/nowhere/n{n}")
    cfg = bench.EngineBenchConfig(workers=(2, 4), models=("gcn",), modes=("sar", "oneshot"), backends=("gloo", "ccl"))
    records = bench.run_engine_bench(cfg, log=lambda line: None)
    assert launched == [("gcn", "sar", 2, "gloo"), ("gcn", "sar", 2, "ccl"),
                        ("gcn", "oneshot", 2, "ccl"), ("gcn", "oneshot", 2, "gloo"),
                        ("gcn", "sar", 4, "gloo"), ("gcn", "sar", 4, "ccl"),
                        ("gcn", "oneshot", 4, "ccl"), ("gcn", "oneshot", 4, "gloo")]
    assert list(records["backend"]) == [b for *_, b in launched]


def test_command_line_backend_and_graph():
    cfg = config_from_args(build_parser().parse_args(["--backend", "gloo", "--graph", "planetoid:cora"]))
    assert cfg.backends == ("gloo",) and cfg.graph_spec == "planetoid:cora"
    assert config_from_args(build_parser().parse_args([])).backends == ("gloo",)
    with pytest.raises(InputError, match="unknown backend 'glo'"):
        config_from_args(build_parser().parse_args(["--backend", "gloo,glo"]))


def test_net_list_keeps_spec_options_together():
    assert backend_bench._nets("loopback,veth:rate=1gbit,hosts=2") == ["loopback", "veth:rate=1gbit,hosts=2"]
    assert backend_bench._nets("veth:rate=1gbit") == ["veth:rate=1gbit"]


def test_report_tables_by_hand(tmp_path):
    """Two repeats: gloo 4 and 6 us, ccl 2 and 2 us -> medians 5 and 2, speed-up 2.50x, per-repeat 2.00-3.00;
    epochs: gloo 0.3 s, ccl 0.1 s (median over epochs 1, 2 of the slower rank) -> 3.00x."""
    coll = pd.DataFrame({"net": "loopback", "op": "all_reduce", "bytes": 4096, "rep": [0, 0, 1, 1],
                         "backend": ["gloo", "ccl", "ccl", "gloo"], "seconds": [4e-6, 2e-6, 2e-6, 6e-6]})
    coll["GBps"] = coll.bytes / coll.seconds / 1e9
    coll.to_csv(tmp_path / backend_report.COLL_FILE, index=False)
    rec = []
    for backend, t in (("gloo", 0.3), ("ccl", 0.1)):
        for rank in (0, 1):
            for epoch in (0, 1, 2):
                rec.append({"net": "loopback", "model": "gcn", "mode": "sar", "workers": 2, "backend": backend,
                            "rank": rank, "epoch": epoch, "epoch_time_s": (9.0 if epoch == 0 else t) - 0.01 * rank,
                            "comm_wait_s": 0.0, "peak_mem_bytes": 10, "baseline_mem_bytes": 1, "loss": 1.5})
    pd.DataFrame(rec).to_csv(tmp_path / backend_report.EPOCH_FILE, index=False)
    paths = backend_report.write_report(str(tmp_path))
    text = (tmp_path / backend_report.TABLES).read_text()
    assert "| all_reduce | 4 KiB | 0.819 | 2.048 | 5 | 2 | 2.50x | 2.00-3.00 |" in text, text
    assert "| gcn | sar | 2 | 0.3 | 0.1 | 3.00x |" in text, text
    assert all(p.startswith(str(tmp_path)) for p in paths) and (tmp_path / backend_report.PLOT).stat().st_size > 0
