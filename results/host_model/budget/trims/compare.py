"""Window 2: each trim against the code it replaces, in one sitting, alternating old / new (ABA order), as
calibrate() runs the steps (one thread, the engine's malloc settings, cores = 2). Writes JSON to the path given.

- GAT autograd and unfused: all shapes (old) against without (20000, 16, 4, 32) (new), thread speed-ups included;
- commbench: two rounds of 7 repeats over 256 B - 2 MB (old) against one round of 14 repeats of 256 B (new);
- SpMM cache sweep: randn rows and a transposed index (old) against constant rows, no transpose (new);
- sharebench at the old 4 s lead-in and the new 1.5 s; the first-use probe with the transients' process fresh (old)
  and forked after the families (new)."""
import json
import sys
import time
from dataclasses import asdict

import torch

from sarlab.core.memory import tune_malloc
from sarlab.real.calibration import gatbench, hostbench, memprobe, opbench
from sarlab.real.calibration.harness import set_threads, time_call
from sarlab.real.calibration.ranks import preload
from sarlab.simulator.calibration.calibration import Calibration, Findings
from sarlab.simulator.calibration.fitting import fit_cache

CORES = 2
cal = Calibration()
out: dict = {}


def record(key: str, fn) -> None:
    found = Findings()
    t0 = time.perf_counter()
    value = fn(found)
    seconds = time.perf_counter() - t0
    row = {"seconds": round(seconds, 2), "value": value, "raw": found.raw}
    out.setdefault(key, []).append(row)
    print(f"{key}: {seconds:.1f} s {json.dumps(value)[:300]}", flush=True)
    json.dump(out, open(sys.argv[1], "w"))


def gat(name: str, old: bool):
    def run(found):
        gatbench.UNFUSED_LEFT_OUT = frozenset() if old else frozenset({(20000, 16, 4, 32)})
        fn = gatbench.bench_gat_autograd if name == "gat_autograd" else gatbench.bench_gat_unfused
        cost = fn(cal, found, CORES, torch.Generator().manual_seed(0))
        return asdict(cost)
    return run


def messages(old: bool):
    def run(found):
        if old:
            hostbench.MESSAGE_REPEATS, hostbench.MESSAGE_SIZES = 7, (256, 16384, 262144, 2097152)
            return hostbench.bench_messages(cal, found, rounds=2)
        hostbench.MESSAGE_REPEATS, hostbench.MESSAGE_SIZES = 14, (256,)
        return hostbench.bench_messages(cal, found, rounds=1)
    return run


def sweep(old: bool):
    def run(found):
        gen = torch.Generator().manual_seed(0)
        work, edge_s, gathered = [], [], []
        for n, deg, f in opbench.cache_sweep(cal):
            big = opbench.random_shard(n, deg, gen, transpose=old)
            src = torch.randn(n, f) if old else torch.ones(n, f)
            acc = torch.zeros(n, f)
            t = time_call(lambda sh=big, x=src, s=acc: sh.spmm(x, out=s), 2)
            work.append(float(n * deg * f))
            edge_s.append(t - 69.2e-6 - n * f / 9.09e8)  # the 2-core profile's overhead and row rate
            gathered.append(float(n * f * 4))
            del big, src, acc
        llc, mem = fit_cache(work, edge_s, gathered, 6.69e9)
        return {"edge_s": edge_s, "llc_bytes": llc, "mem_rate": mem}
    return run


def share(lead_in: float):
    def run(found):
        hostbench.SHARE_LEAD_IN_S = lead_in
        etas = hostbench.bench_share(cal, found, CORES, 1)
        return {"etas": etas, "late_s": found.raw["share"]["late_s"]}
    return run


def first_use(forked: bool):
    def run(found):
        memprobe.TRANSIENTS_FORKED = forked
        return memprobe.run_probe("rss")
    return run


tune_malloc(threshold=1 << 17)
set_threads(1)
preload()
for rep in range(3):
    order = (True, False) if rep % 2 == 0 else (False, True)
    for name in ("gat_autograd", "gat_unfused"):
        for old in order:
            record(f"{name} {'old' if old else 'new'}", gat(name, old))
    for old in order:
        record(f"messages {'old' if old else 'new'}", messages(old))
    for old in order:
        record(f"sweep {'old' if old else 'new'}", sweep(old))
record("share lead-in 4.0", share(4.0))
record("share lead-in 1.5", share(1.5))
record("first use, transients fresh", first_use(False))
record("first use, transients forked", first_use(True))
