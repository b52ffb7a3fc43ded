"""A/B of the co-location step (bench_share, full, 2 cores, 1-thread ranks): old = HEAD's hostbench + sharebench
(fixed 4 s lead-in, 0.4 s windows for every family, 0.4 s gaps; children import opbench), new = the working tree's.
Alternating; seconds and etas (median and per pair) to argv[1]."""
import json, sys, time
import torch
import h18old_hostbench as old_hb
from sarlab.real.calibration import hostbench as new_hb
from sarlab.real.calibration.ranks import preload
from sarlab.simulator.calibration.calibration import Calibration, Findings

torch.set_num_threads(1)
preload()
orig = old_hb.module_command
old_hb.module_command = lambda m, *a: [sys.executable, "-m", f"h18old_{m}", *a] if m == "sharebench" else orig(m, *a)
pairs = int(sys.argv[2]); first = sys.argv[3] if len(sys.argv) > 3 else "old"
out = []
for i in range(2 * pairs):
    variant = ("old", "new")[(i + (first == "new")) % 2]
    hb = old_hb if variant == "old" else new_hb
    f = Findings(); t0 = time.perf_counter()
    e = hb.bench_share(Calibration(), f, 2)
    dt = time.perf_counter() - t0
    r = f.raw["share"]
    out.append({"variant": variant, "s": dt, "eta": e, "per_pair": r["eta_per_pair"], "window_s": r["window_s"],
                "late_s": r["late_s"], "warmup_s": r.get("warmup_s"), "notes": f.notes})
    print(variant, f"{dt:.2f}", " ".join(f"{k[:8]}={v:.2f}" for k, v in e.items()), flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)
