"""The head-to-head campaign's records priced (sarlab.simulator.studies.strategy_validation): measured epochs by hand
from hand-made records, every strategy predicted on loopback and on an emulated link, errors as predicted / measured -
1."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from sarlab.data.graphs import load_graph
from sarlab.data.partition import partition
from sarlab.simulator.studies.strategy_validation import main, measured_runs, strategy_kind


def records(times: dict) -> pd.DataFrame:
    """Two ranks, three epochs per (strategy, net, seed): rank r of epoch e took ``times[key][e] + r / 100``."""
    rows = []
    for (name, net, seed), epochs in times.items():
        for epoch, t in enumerate(epochs):
            for rank in (0, 1):
                rows.append({"mode": "sar", "model": "sage", "workers": 2, "rank": rank, "epoch": epoch,
                             "epoch_time_s": t + rank / 100, "strategy": name, "seed": seed, "net": net,
                             "staleness": int(name[-1]) if name.startswith("stale") else 0,
                             "fanouts": "5,5" if name == "sampling" else np.nan, "load_1min_before": 1.0})
    return pd.DataFrame(rows)


def test_measured_runs_take_the_median_of_the_slowest_rank_after_warmup():
    df = records({("sar", "loopback", 0): [9.0, 0.5, 0.3], ("stale-2", "loopback", 1): [9.0, 0.2, 0.4]})
    runs = measured_runs(df, warmup=1).set_index("strategy")
    assert runs.loc["sar", "measured_epoch_s"] == pytest.approx((0.51 + 0.31) / 2)
    assert runs.loc["stale-2", "measured_epoch_s"] == pytest.approx((0.21 + 0.41) / 2)
    assert runs.loc["stale-2", "staleness"] == 2 and runs.loc["sar", "epochs"] == 2
    assert strategy_kind("stale-1", 1) == ("stale", 1) and strategy_kind("oneshot", 0) == ("oneshot", 0)
    assert strategy_kind("sampling", 0) == ("sampling", 0)
    with pytest.raises(ValueError, match="strategy"):
        strategy_kind("dropedge", 0)


def test_every_strategy_priced_on_loopback_and_an_emulated_link(tmp_path):
    parts = tmp_path / "parts"
    partition(load_graph("synthetic:nodes=3000,degree=8,features=16,classes=4,train=0.3,seed=0"), 2, str(parts))
    link = tmp_path / "link.json"
    link.write_text(json.dumps({"net": "veth:rate=50mbit", "rate_bps": 50_000_000, "bandwidth_bidir_Bps": 6e6,
                                "latency_s": 1e-4}))
    times = {(name, net, seed): [1.0, 0.1 + seed / 100, 0.1 + seed / 100]
             for name in ("sar", "oneshot", "sampling", "stale-1") for net in ("loopback", "veth:rate=50mbit")
             for seed in (0, 1, 2)}
    csv = tmp_path / "records.csv"
    records(times).to_csv(csv, index=False)
    out = tmp_path / "val"
    assert main(["--records", str(csv), "--partition", str(parts), "--link", str(link), "--fanouts", "5,5",
                 "--batch-size", "256", "--out", str(out)]) == 0
    table = pd.read_csv(f"{out}.csv")
    assert len(table) == 24 and (table.predicted_epoch_s > 0).all()
    # measured: the slowest rank (rank 1, +0.01) of epochs 1 and 2
    np.testing.assert_allclose(table.measured_epoch_s, 0.11 + table.seed / 100)
    np.testing.assert_allclose(table.time_error, table.predicted_epoch_s / table.measured_epoch_s - 1)
    one = table.groupby(["strategy", "net"]).predicted_epoch_s.nunique()
    assert (one == 1).all()  # one prediction per (strategy, net), whatever the seed
    by = table.groupby(["strategy", "net"]).predicted_epoch_s.first()
    for name in ("sar", "oneshot", "stale-1"):  # a 6 MB/s link is slower than loopback's
        assert by[(name, "veth:rate=50mbit")] > by[(name, "loopback")]
    text = (tmp_path / "val.md").read_text()
    assert "| sampling | veth:rate=50mbit | 3 |" in text
