"""Window 5b (JSON to the path given): gat_autograd's one-thread fit (cores = 1: no thread speed-ups) with all
shapes (old) and without (20000, 16, 4, 32) (new), alternating, 3 pairs: does the backward ratio move with them?"""
import json
import sys
import time

import torch

from sarlab.core.memory import tune_malloc
from sarlab.real.calibration import gatbench
from sarlab.real.calibration.harness import set_threads
from sarlab.simulator.calibration.calibration import Calibration, Findings

cal, out = Calibration(), {}
tune_malloc(threshold=1 << 17)
set_threads(1)
for rep in range(3):
    for old in ((True, False) if rep % 2 == 0 else (False, True)):
        gatbench.UNFUSED_LEFT_OUT = frozenset() if old else frozenset({(20000, 16, 4, 32)})
        found, t0 = Findings(), time.perf_counter()
        cost = gatbench.bench_gat_autograd(cal, found, 1, torch.Generator().manual_seed(0))
        raw = found.raw["gat_autograd"]
        row = {"rate": cost.rate, "row_rate": cost.row_rate, "bwd_ratio": cost.bwd_ratio,
               "per_shape": {str(tuple(s)): b / f for s, f, b in zip(raw["shapes"], raw["fwd"], raw["bwd"])},
               "seconds": round(time.perf_counter() - t0, 1)}
        out.setdefault("old" if old else "new", []).append(row)
        print("old" if old else "new", json.dumps(row), flush=True)
        json.dump(out, open(sys.argv[1], "w"))
