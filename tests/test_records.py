"""The one metric-record summary, checked by hand on a tiny table."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from sarlab.common.records import RECORD_COLUMNS, describe, summarize


def _records() -> pd.DataFrame:
    rows = []
    # two ranks, three epochs; rank 1 is slower and holds more memory; epoch 0 is warm-up
    times = {(0, 0): 9.0, (0, 1): 1.0, (0, 2): 2.0, (1, 0): 9.5, (1, 1): 3.0, (1, 2): 2.5}
    for (rank, epoch), t in times.items():
        rows.append({"mode": "sar", "model": "gcn", "workers": 2, "rank": rank, "epoch": epoch, "epoch_time_s": t,
                     "compute_s": t - 0.5 * rank, "comm_wait_s": 0.5 * rank, "bytes_sent": 100 * (rank + 1),
                     "bytes_recv": 0, "peak_mem_bytes": 1000 + 100 * rank + epoch, "baseline_mem_bytes": 900 - rank,
                     "loss": 1.0 / (epoch + 1), "train_acc": 0.5, "val_acc": 0.6, "test_acc": 0.7})
    return pd.DataFrame(rows)


def test_summary_by_hand():
    row = summarize(_records()).iloc[0]
    # slowest rank per measured epoch: epoch 1 -> 3.0, epoch 2 -> 2.5; median 2.75
    assert row.epoch_time_s == pytest.approx(2.75)
    assert row.epoch_spread == pytest.approx(0.5 / 2.75)
    assert row.comm_wait_s == pytest.approx(0.5) and row.comm_wait_mean_s == pytest.approx(0.25)
    # compute: rank 0 = t, rank 1 = t - 0.5; max per epoch: epoch 1 -> 2.5, epoch 2 -> 2.0; median 2.25
    assert row.compute_s == pytest.approx(2.25) and row.compute_mean_s == pytest.approx((1.75 + 2.0) / 2)
    assert row.bytes_sent_per_epoch == 300 and row.bytes_sent_per_worker == 150
    # worst (rank, epoch) by peak: rank 1, epoch 2 -> 1102 with baseline 899; max difference is the same row
    assert (row.peak_mem_bytes, row.baseline_mem_bytes, row.peak_mem_above_baseline_bytes) == (1102, 899, 203)
    assert row.loss == pytest.approx(1 / 3) and row.epochs == 2 and row.ranks == 2


def test_missing_optional_columns_are_nan_and_warmup_falls_back():
    df = _records()[["mode", "model", "workers", "rank", "epoch", "epoch_time_s", "peak_mem_bytes",
                     "baseline_mem_bytes"]]
    row = summarize(df[df.epoch == 0]).iloc[0]  # no epoch >= 1: all records count
    assert row.epoch_time_s == 9.5 and row.epochs == 1
    assert math.isnan(row.bytes_sent_per_epoch) and math.isnan(row.comm_wait_s) and math.isnan(row.loss)


def test_describe_and_columns():
    text = describe(_records())
    assert "loss 0.3333" in text and "2.750s" in text
    assert len(set(RECORD_COLUMNS)) == len(RECORD_COLUMNS)


def test_runs_of_one_configuration_pool_their_epochs_not_their_ranks():
    """Two runs of one configuration (records from two files): an epoch's time is one run's slowest rank."""
    per_run = {"a.csv": [(1.0, 2.0), (4.0, 1.0)], "b.csv": [(3.0, 0.5), (1.0, 10.0)]}  # (rank 0, rank 1) per epoch
    rows = [{"mode": "sar", "model": "gcn", "workers": 2, "rank": rank, "epoch": epoch, "epoch_time_s": t,
             "peak_mem_bytes": 10, "baseline_mem_bytes": 1, "records_path": path}
            for path, epochs in per_run.items() for epoch, times in enumerate(epochs, start=1)
            for rank, t in enumerate(times)]  # fmt: skip
    row = summarize(pd.DataFrame(rows)).iloc[0]
    # slowest rank per run and epoch: a -> 2, 4; b -> 3, 10: the median of the four is 3.5 (taking the slowest
    # rank of both runs per epoch number would give 3 and 10, median 6.5)
    assert row.epoch_time_s == pytest.approx(3.5) and row.epochs == 4 and row.ranks == 2
    assert row.epoch_spread == pytest.approx((10 - 2) / 3.5)
