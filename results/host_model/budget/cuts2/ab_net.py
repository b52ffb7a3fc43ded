"""A/B of the network sub-steps as `sarlab calibrate` runs them (full, 2 cores): message costs (commbench 2, 4, 8)
and progress spread (progressbench P = 2, 4, 8). old = HEAD's modules (children import harness/opbench), new = the
working tree's. Alternating old/new; prints seconds and fitted values; JSON to argv[1]."""
import json, sys, time
import torch
import h18old_progressbench as old_pb
from sarlab.core.memory import tune_malloc
from sarlab.real.calibration import hostbench, progressbench as new_pb
from sarlab.real.calibration.ranks import preload
from sarlab.simulator.calibration.calibration import Calibration, Findings
from sarlab.simulator.system.spread import fit_sigma

torch.set_num_threads(1); tune_malloc(threshold=1 << 17)
preload()
orig_cmd = hostbench.module_command
pairs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
out = []
for i in range(2 * pairs):
    variant = "old" if i % 2 == 0 else "new"
    if variant == "old":
        hostbench.module_command = lambda m, *a: [sys.executable, "-m", f"h18old_{m}", *a] if m in ("commbench", "sharebench") else orig_cmd(m, *a)
        pb = old_pb
    else:
        hostbench.module_command = orig_cmd
        pb = new_pb
    cal, found = Calibration(), Findings()
    t0 = time.perf_counter()
    fit = hostbench.bench_messages(cal, found)
    t1 = time.perf_counter()
    table = pb.spread_table([2, 4, 8], 3, 40, log=lambda s: None)
    t2 = time.perf_counter()
    sig = {p: fit_sigma(r["loss"], p, 2) for p, r in table.items()}
    row = {"variant": variant, "messages_s": round(t1 - t0, 2), "progress_s": round(t2 - t1, 2),
           "fit": {k: v for k, v in fit.items() if k.startswith("p2p_")}, "sigma": sig,
           "raw_sigma": {p: r["sigma"] for p, r in table.items()}, "round_s": {p: r["round_s"] for p, r in table.items()}}
    out.append(row)
    print(variant, row["messages_s"], row["progress_s"],
          " ".join(f"{k[4:]}={v*1e6:.1f}us" for k, v in row["fit"].items()),
          " ".join(f"P{p}={v:.3f}" for p, v in sig.items()), flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)
