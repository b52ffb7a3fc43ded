"""Window 4: the GAT forms' thread efficiency on the shape the old code timed it on, (20000, 16, 4, 32), and on the
new code's slowest shape (10000, 32, 2, 32), alternating, 4 rounds, with spmm's (unchanged code) as the sitting's
control; each parallel_eff as calibrate() runs it (3 rounds of one and two threads). Writes JSON to the path given."""
import json
import sys
import time

import torch

from sarlab.core.memory import tune_malloc
from sarlab.nn.gat import AttentionAggregation
from sarlab.real.calibration.gatbench import SLOPE, autograd_calls, gat_calls, gat_inputs
from sarlab.real.calibration.harness import busy_and_own, set_threads
from sarlab.real.calibration.opbench import parallel_eff, random_shard
from sarlab.simulator.calibration.calibration import Calibration, Findings

cal, out = Calibration(), {}
tune_malloc(threshold=1 << 17)
set_threads(1)
gen = torch.Generator().manual_seed(0)
shard = random_shard(16000, 64, gen)  # spmm's slowest shape
x, state = torch.randn(16000, 64), torch.zeros(16000, 64)
calls = {"spmm (control)": lambda: shard.spmm(x, out=state)}
for autograd in (False, True):
    for label, (n, d, h, c) in (("old shape", (20000, 16, 4, 32)), ("new shape", (10000, 32, 2, 32))):
        att = AttentionAggregation(h, c, SLOPE, self_loops=False, fused=False, backend=None)
        fwd, _ = (autograd_calls if autograd else gat_calls)(att, *gat_inputs(n, d, h, c, gen))
        calls[f"{'gat_autograd' if autograd else 'gat_unfused'} {label}"] = fwd
for rep in range(4):
    keys = list(calls) if rep % 2 == 0 else [list(calls)[0], *reversed(list(calls)[1:])]
    for key in keys:
        found = Findings()
        a, t0 = busy_and_own(), time.perf_counter()
        eff = parallel_eff(cal, found, 2, calls[key], "x")
        b, wall = busy_and_own(), time.perf_counter() - t0
        others = max((b[0] - a[0]) - (b[1] - a[1]), 0.0) / (2 * wall)
        row = {"eff": eff, "rounds": found.raw["thread_eta_rounds"]["x"], "seconds": round(wall, 2),
               "others": round(others, 3)}
        out.setdefault(key, []).append(row)
        print(key, json.dumps(row), flush=True)
        json.dump(out, open(sys.argv[1], "w"))
