"""Where the seconds of the sub-steps go (window 1): commbench groups with the calibration's sizes, with 256 bytes
only and with no timed repeat (fixed costs); progressbench's raw per-round times at P = 2, 4, 8 (40 rounds, three
runs, kept for the subset analysis of rounds.py); the pieces of the SpMM cache sweep's largest shape; the
first-use probe; sharebench's set-up. Writes JSON to the path given."""
import json
import sys
import time

import torch

from sarlab.core.memory import tune_malloc
from sarlab.real.calibration import hostbench, progressbench
from sarlab.real.calibration.memprobe import run_probe
from sarlab.real.calibration.opbench import random_shard
from sarlab.real.calibration.ranks import preload
from sarlab.real.calibration.sharebench import build_ops

out: dict = {"timings": {}}
T = out["timings"]


def timed(key, fn):
    t0 = time.perf_counter()
    r = fn()
    T[key] = round(time.perf_counter() - t0, 3)
    print(key, T[key], flush=True)
    return r


torch.set_num_threads(1)
tune_malloc(threshold=1 << 17)
timed("zygote", preload)
OLD = [256, 16384, 262144, 2097152]
for world in (2, 4, 8):
    timed(f"commbench w{world} old sizes", lambda w=world: hostbench.launch_commbench(
        w, 7, OLD, allreduce_sizes=hostbench.ALLREDUCE_SIZES))
    timed(f"commbench w{world} 256 only", lambda w=world: hostbench.launch_commbench(
        w, 7, [256], allreduce_sizes=hostbench.ALLREDUCE_SIZES))
    timed(f"commbench w{world} 256 no allreduce", lambda w=world: hostbench.launch_commbench(w, 7, [256]))
    timed(f"commbench w{world} fixed (0 repeats)", lambda w=world: hostbench.launch_commbench(w, 0, [256]))
out["progress"] = {}
for run in range(3):
    for p in (2, 4, 8):
        out["progress"].setdefault(str(p), []).append(
            timed(f"progress P{p} run{run}", lambda p=p: progressbench.measure(p, 3, 40)))
gen = torch.Generator().manual_seed(0)
shard = timed("sweep 1M random_shard", lambda: random_shard(1_000_000, 8, gen))
x = timed("sweep 1M randn", lambda: torch.randn(1_000_000, 256))
x2 = timed("sweep 1M empty.uniform_", lambda: torch.empty(1_000_000, 256).uniform_(-1, 1, generator=gen))
acc = timed("sweep 1M zeros", lambda: torch.zeros(1_000_000, 256))
for i in range(3):
    timed(f"sweep 1M spmm call {i}", lambda s=shard, x=x, a=acc: s.spmm(x, out=a))
del shard, x, x2, acc
timed("first use rss (fresh)", lambda: run_probe("rss"))
timed("first use live (forked)", lambda: run_probe("live", start="zygote"))
timed("sharebench build_ops", lambda: build_ops())
json.dump(out, open(sys.argv[1], "w"))
