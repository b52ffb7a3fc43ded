"""The fused GAT kernels on the shard shapes of a 20,000-node METIS partition, one thread, against the s3 profile's
gat_fused pricing (before its family factor): one worker runs one shard of 20,000 rows x 19 edges; each of two workers
a local shard of 10,000 x 16 and a remote one of 10,000 x 3. Five rounds over the shapes, median of each.
Usage: .venv/bin/python results/host_model/families/gat_shards.py"""

import json
import math
import statistics
from pathlib import Path

import torch

from sarlab import kernels
from sarlab.nn.gat import AttentionAggregation
from sarlab.real.calibration.gatbench import gat_calls, gat_inputs
from sarlab.real.calibration.harness import time_call

torch.set_num_threads(1)
op = json.loads((Path(__file__).resolve().parent / "profile_2core_s3.json").read_text())["ops"]["gat_fused"]
heads, ch = 4, 32
att = AttentionAggregation(heads, ch, 0.2, False, True, kernels.backend("auto"))
gen = torch.Generator().manual_seed(0)
shapes = [(20000, 19), (10000, 16), (10000, 3)]
calls = {s: gat_calls(att, *gat_inputs(s[0], s[1], heads, ch, gen)) for s in shapes}
times: dict = {s: [] for s in shapes}
for _ in range(5):
    for s in shapes:
        fwd, bwd = calls[s]
        times[s].append(time_call(fwd, 3) + time_call(bwd, 3))
priced = {}
for n, d in shapes:
    active = n * (1 - math.exp(-d))
    one = op["overhead_s"] + n * d * heads * ch / op["rate"] + active * heads * ch / op["row_rate"]
    priced[(n, d)] = one * (1 + op["bwd_ratio"])
    runs = ", ".join(f"{t * 1e3:.1f}" for t in times[(n, d)])
    print(f"{n} rows x {d} edges: forward + backward {statistics.median(times[(n, d)]) * 1e3:.1f} ms median "
          f"({runs}), priced {priced[(n, d)] * 1e3:.1f} ms")
med = {s: statistics.median(v) for s, v in times.items()}
real = 2 * (med[(10000, 16)] + med[(10000, 3)]) / med[(20000, 19)] - 1
model = 2 * (priced[(10000, 16)] + priced[(10000, 3)]) / priced[(20000, 19)] - 1
print(f"two workers' shards over one worker's: measured {real:+.0%}, priced {model:+.0%}")
