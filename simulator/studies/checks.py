"""The paper's qualitative results and the simulator's speed, as numbers (``python -m
sarlab.simulator.studies.checks``).

The tests in ``tests/test_simulator_scaling.py`` assert these (on the ``icelake-hdr200`` preset, no tuning);
this module prints the values they check, as Markdown.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from sarlab.simulator.hardware.profile import Profile, icelake_hdr200
from sarlab.simulator.system.epoch import simulate_epoch
from sarlab.simulator.system.runspec import RunSpec
from sarlab.simulator.workload.model import ModelSpec
from sarlab.simulator.workload.workload import GRAPH_PRESETS, estimate_partition


def _peak(stats, spec: ModelSpec, mode: str, prof: Profile) -> float:
    return float(simulate_epoch(stats, spec, RunSpec(mode=mode), prof).peak_above_baseline_bytes.max())


def _time(stats, spec: ModelSpec, mode: str, prof: Profile) -> float:
    return float(simulate_epoch(stats, spec, RunSpec(mode=mode), prof).epoch_time_s.max())


def memory_slopes(prof: Profile) -> dict[str, float]:
    """Log-log slopes of peak memory per worker against N (``-1`` = memory ~ 1/N)."""
    papers = GRAPH_PRESETS["ogbn-papers100M"]
    products = GRAPH_PRESETS["ogbn-products"]
    sage = ModelSpec("sage", layers=3, hidden=256)
    gcn = ModelSpec("gcn", layers=3, hidden=256)
    wide = np.array([4, 8, 16, 32, 64, 128])
    few = np.array([4, 16, 64])

    def slope(workers, stats_of, spec, mode):
        peaks = [_peak(stats_of(int(n)), spec, mode, prof) for n in workers]
        return float(np.polyfit(np.log(workers), np.log(peaks), 1)[0])

    return {
        "sar, SAGE, papers100M (cut 0.3), N = 4..128": slope(wide, lambda n: papers.estimate(n, 0.3), sage, "sar"),
        "sar, GCN, products, N = 4..64": slope(few, products.estimate, gcn, "sar"),
        "oneshot, GCN, products (dense), N = 4..64": slope(few, products.estimate, gcn, "oneshot"),
        "oneshot, GCN, sparse products-sized graph (2 edges/node)": slope(
            few, lambda n: estimate_partition(2_449_029, 4_898_058, n, 100, 47, edge_cut=0.3), gcn, "oneshot"
        ),
    }


def time_ratios(prof: Profile) -> dict[str, float]:
    """sar / oneshot epoch-time ratios: GAT with and without fused kernels, GCN against N."""
    out: dict[str, float] = {}
    for n in (4, 16):
        stats = GRAPH_PRESETS["ogbn-products"].estimate(n, edge_cut=0.1)
        for fused in (False, True):
            spec = ModelSpec("gat", layers=3, hidden=128, heads=4, fused=fused)
            label = "fused" if fused else "unfused"
            out[f"GAT {label}, products, N={n}"] = _time(stats, spec, "sar", prof) / _time(stats, spec, "oneshot", prof)
    gcn = ModelSpec("gcn", layers=3, hidden=256)
    slow = replace(
        prof,
        inter_host=replace(prof.inter_host, latency_s=500e-6),
        intra_host=replace(prof.intra_host, latency_s=500e-6),
    )
    for name, p in (("", prof), (", 500 us latency", slow)):
        for n in (4, 16, 64, 128, 256):
            stats = GRAPH_PRESETS["ogbn-products"].estimate(n, edge_cut=0.1)
            out[f"GCN{name}, products, N={n}"] = _time(stats, gcn, "sar", p) / _time(stats, gcn, "oneshot", p)
    return out


def speed(workers: int = 128, repeats: int = 3) -> dict[str, float]:
    """Simulating one epoch of a 3-layer GCN on ``workers`` workers (``sar``, the partition drawn from the METIS
    pair-size law, the lockstep executor): best of ``repeats``; the partition is drawn outside the timing."""
    stats = GRAPH_PRESETS["ogbn-products"].estimate(workers, edge_cut=0.1)
    spec = ModelSpec("gcn", layers=3, hidden=256)
    best_cpu, best_wall, res = np.inf, np.inf, None
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        res = simulate_epoch(stats, spec, RunSpec(mode="sar"), icelake_hdr200())
        best_cpu = min(best_cpu, time.process_time() - cpu)
        best_wall = min(best_wall, time.perf_counter() - wall)
    assert res is not None
    return {"events": res.events, "messages": res.messages, "cpu_s": best_cpu, "wall_s": best_wall}


def main() -> int:
    prof = icelake_hdr200()
    print("| memory per worker vs N (log-log slope) | slope |\n|---|---|")
    for k, v in memory_slopes(prof).items():
        print(f"| {k} | {v:.2f} |")
    print("\n| sar / oneshot epoch time | ratio |\n|---|---|")
    for k, v in time_ratios(prof).items():
        print(f"| {k} | {v:.2f} |")
    print()
    for workers in (128, 1024):
        s = speed(workers, repeats=3 if workers <= 128 else 1)
        print(
            f"{workers} workers x 3 layers (GCN, sar, products, lockstep): {s['events']:,} steps, "
            f"{s['messages']:,} messages, {s['cpu_s']:.3f} s CPU ({s['wall_s']:.3f} s wall), "
            f"{s['messages'] / s['cpu_s']:,.0f} messages/s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
