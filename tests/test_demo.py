"""``sarlab demo``'s reading of its own table: it says what the measured numbers show, not what SAR promises."""
from __future__ import annotations

import pandas as pd

from sarlab.real.commands.demo import _doublings, reading


def _table(sar: list[float], oneshot: float) -> pd.DataFrame:
    rows = [{"mode": "sar", "workers": n, "peak_MiB_above_baseline": m} for n, m in zip((1, 2, 4), sar)]
    return pd.DataFrame([*rows, {"mode": "oneshot", "workers": 4, "peak_MiB_above_baseline": oneshot}])


def test_worker_counts_double_up_to_the_largest():
    assert _doublings(4) == [1, 2, 4]
    assert _doublings(6) == [1, 2, 4, 6]
    assert _doublings(2) == [1, 2]


def test_reading_states_the_measured_fall_and_the_ratio():
    text = reading(_table([166.6, 97.9, 57.9], 51.1))
    assert "fell from 167 MiB on 1 worker to 58 MiB on 4" in text and "2.9x less; ideal 4x" in text
    assert "oneshot on 4 workers: 51 MiB vs sar 58 MiB" in text


def test_reading_says_so_when_memory_did_not_fall():
    text = reading(_table([50.0, 55.0, 60.0], 70.0))
    assert "did not fall" in text and "did not show it" in text
