"""`sarlab bench network`: the summary of records measured on emulated links (hand-made records)."""
from __future__ import annotations

import pandas as pd
import pytest

from sarlab.real.bench.network_scaling import main, summarize_network


def _records(rate: str, epoch_s: list[float], wait_s: float, sent: int) -> list[dict]:
    rows = []
    for rank in range(2):
        for epoch, t in enumerate(epoch_s):
            rows.append({"label": "gcn", "model": "gcn", "mode": "sar", "fused": False, "prefetch": 1,
                         "net": f"veth:rate={rate}", "workers": 2, "rank": rank, "epoch": epoch,
                         "epoch_time_s": t + 0.1 * rank, "compute_s": t - wait_s, "comm_wait_s": wait_s,
                         "bytes_sent": sent, "bytes_recv": sent, "peak_mem_bytes": 300 + rank,
                         "baseline_mem_bytes": 100, "loss": 1.0})
    return rows


def test_rate_comm_share_and_wire_bound():
    # 100 mbit = 12.5 MB/s; 25 MB sent per worker and epoch need 2 s on the wire
    df = pd.DataFrame(_records("100mbit", [9.0, 3.0, 3.2, 2.8], 1.5, 25_000_000)
                      + _records("400mbit", [9.0, 1.0, 1.0, 1.0], 0.25, 25_000_000))
    t = summarize_network(df, warmup=1).set_index("rate")
    assert t.loc["100mbit", "epoch_time_s"] == pytest.approx(3.1)  # slowest rank (+0.1), median of 3.0/3.2/2.8
    assert t.loc["100mbit", "wire_bound_s"] == pytest.approx(2.0)
    assert t.loc["400mbit", "wire_bound_s"] == pytest.approx(0.5)
    assert t.loc["100mbit", "comm_share"] == pytest.approx(1.5 / 3.1)
    assert t.loc["100mbit", "peak_mem_above_baseline_bytes"] == 201


def test_cli_writes_three_files_and_refuses_loopback_records(tmp_path):
    path = tmp_path / "r.csv"
    pd.DataFrame(_records("200mbit", [2.0, 1.0, 1.0], 0.5, 1_000_000)).to_csv(path, index=False)
    assert main([str(path), "--out", str(tmp_path / "ns"), "--warmup", "1"]) == 0
    for end in (".csv", ".md", ".png"):
        assert (tmp_path / f"ns{end}").stat().st_size > 0
    bare = tmp_path / "bare.csv"
    pd.DataFrame(_records("200mbit", [1.0], 0.1, 10)).drop(columns="net").to_csv(bare, index=False)
    with pytest.raises(ValueError, match="no `net` column"):
        main([str(bare), "--out", str(tmp_path / "x")])
