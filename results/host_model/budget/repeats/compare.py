"""Old (every timed run: REPEAT_BUDGET_S = inf) against new (runs stop after 0.6 s, at least 3) time_call, on every
op family as a full calibration times it (the engine's malloc settings; one thread, then the thread speed-ups on
all cores), alternating old / new / new / old / old / new. Prints one JSON line per run: each family's fitted values
and seconds.

    .venv/bin/python results/host_model/budget/repeats/compare.py > results/host_model/budget/repeats/compare.jsonl
"""

from __future__ import annotations

import json
import math
import os
import time

import torch

from sarlab.core.memory import tune_malloc
from sarlab.real.calibration import gatbench, harness, opbench
from sarlab.simulator.calibration.calibration import Calibration, Findings


def one_run(budget: float, seed: int) -> dict:
    harness.REPEAT_BUDGET_S = budget
    cal, found = Calibration(log=lambda _s: None, seed=seed), Findings()
    gen = torch.Generator().manual_seed(seed)
    cores = len(os.sched_getaffinity(0))
    harness.set_threads(1)
    steps = {
        "gemm": lambda: opbench.bench_gemm(cal, found, cores),
        "spmm": lambda: opbench.bench_spmm(cal, found, cores, gen),
        "max_aggr": lambda: opbench.bench_max(cal, found, cores, gen),
        "gat_unfused": lambda: gatbench.bench_gat_unfused(cal, found, cores, gen),
        "gat_autograd": lambda: gatbench.bench_gat_autograd(cal, found, cores, gen),
        "elementwise": lambda: opbench.bench_elementwise(cal, found, cores),
        "gat_fused": lambda: gatbench.bench_gat_fused(cal, found, cores, gen),
    }
    out = {"budget": budget, "cores": cores, "load": os.getloadavg()[0], "families": {}}
    for name, fn in steps.items():
        t0 = time.perf_counter()
        cost = fn()
        out["families"][name] = {"seconds": time.perf_counter() - t0, "rate": cost.rate, "overhead_s": cost.overhead_s,
                                 "row_rate": cost.row_rate, "bwd_ratio": cost.bwd_ratio, "eff": cost.parallel_eff,
                                 "mem_rate": cost.mem_rate}
    return out


if __name__ == "__main__":
    tune_malloc(threshold=1 << 17)  # as calibrate() runs the op families: large outputs on fresh pages
    for i, budget in enumerate([math.inf, 0.6, 0.6, math.inf, math.inf, 0.6]):
        print(json.dumps(one_run(budget, seed=i // 2)), flush=True)
