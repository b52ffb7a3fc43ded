"""A/B of the progress spread step alone (P = 2, 4, 8; 40 / 20 / 10 rounds of 3 SpMM calls), old = HEAD's
progressbench (ranks import harness + opbench), new = the working tree's; alternating; JSON to argv[1]."""
import json, sys, time
import torch
import h18old_progressbench as old_pb
from sarlab.real.calibration import progressbench as new_pb
from sarlab.real.calibration.ranks import preload
from sarlab.simulator.system.spread import fit_sigma
torch.set_num_threads(1)
preload()
pairs = int(sys.argv[2]); first = sys.argv[3] if len(sys.argv) > 3 else "old"
out = []
for i in range(2 * pairs):
    variant = ("old", "new")[(i + (first == "new")) % 2]
    pb = old_pb if variant == "old" else new_pb
    t0 = time.perf_counter()
    table = pb.spread_table([2, 4, 8], 3, 40, log=lambda s: None)
    dt = time.perf_counter() - t0
    sig = {p: fit_sigma(r["loss"], p, 2) for p, r in table.items()}
    out.append({"variant": variant, "s": dt, "sigma": sig, "table": table})
    print(variant, f"{dt:.2f}", " ".join(f"P{p}={v:.3f}" for p, v in sig.items()),
          " ".join(f"loss{p}={r['loss']:.3f}" for p, r in table.items()), flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)
