"""benchmarks.kernel_roofline: the kernels' times set against the measured roofs, checked by hand."""
import pandas as pd
import pytest

from benchmarks.kernel_roofline import against_roofs, run_child
from benchmarks.kernel_speed import SpeedConfig


def test_against_roofs_by_hand():
    cfg = SpeedConfig(nodes=10, edges=1000, channels=5, heads=(2,))
    speed = pd.DataFrame([
        {"engine": "new", "heads": 2, "fwd_cpu_s": 0.001, "bwd_cpu_s": 0.004},
        {"engine": "new", "heads": 2, "fwd_cpu_s": 0.003, "bwd_cpu_s": 0.004},  # median fwd 2 ms
        {"engine": "base", "heads": 2, "fwd_cpu_s": 9.0, "bwd_cpu_s": 9.0},  # ignored
    ])
    roofs = pd.DataFrame([{"heads": 2, "sgemm_gflops": 0.05, "gather_GBps": 0.1, "spmm_ms": 0.5}])
    row = against_roofs(speed, roofs, cfg).iloc[0]
    # E H C = 1000 * 2 * 5 = 10_000; fwd 2 ms, bwd 4 ms
    assert row.new_fwd_ms == 2.0 and row.new_bwd_ms == 4.0
    assert row.fwd_over_spmm == pytest.approx(4.0)  # 2 ms / 0.5 ms
    assert row.bwd_over_2spmm == pytest.approx(4.0)  # 4 ms / (2 * 0.5 ms)
    assert row.fwd_gflops == pytest.approx(0.01)  # 2 * 10_000 FLOP / 2 ms
    assert row.bwd_gflops == pytest.approx(0.01)  # 4 * 10_000 FLOP / 4 ms
    assert row.fwd_of_sgemm == pytest.approx(0.2)
    assert row.fwd_gather_GBps == pytest.approx(0.02)  # 10_000 * 4 B / 2 ms
    assert row.bwd_gather_GBps == pytest.approx(0.02)  # 2 * 10_000 * 4 B / 4 ms


def test_roof_child_runs_in_a_fresh_process():
    """The roof measurements run in a child of this tree (benchmarks.ab.run_json_child) and come
    back whole."""
    roofs = run_child(SpeedConfig(nodes=200, edges=2000, channels=4, heads=(2,), timeout_s=300), 2)
    assert roofs["heads"] == 2
    assert roofs["sgemm_gflops"] > 0 and roofs["gather_GBps"] > 0 and roofs["spmm_ms"] > 0
