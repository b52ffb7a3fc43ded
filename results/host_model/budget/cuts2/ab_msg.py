"""A/B of message costs alone: old (HEAD commbench, children import harness) vs new; raw post medians."""
import json, sys, time
import torch
from sarlab.core.memory import tune_malloc
from sarlab.real.calibration import hostbench
from sarlab.real.calibration.ranks import preload
from sarlab.simulator.calibration.calibration import Calibration, Findings

torch.set_num_threads(1); tune_malloc(threshold=1 << 17)
preload()
orig_cmd = hostbench.module_command
pairs = int(sys.argv[2])
order = sys.argv[3] if len(sys.argv) > 3 else "on"
out = []
for i in range(2 * pairs):
    variant = ("old", "new")[(i + (order == "no")) % 2]
    hostbench.module_command = (lambda m, *a: [sys.executable, "-m", f"h18old_{m}", *a]) if variant == "old" else orig_cmd
    cal, found = Calibration(), Findings()
    t0 = time.perf_counter()
    fit = hostbench.bench_messages(cal, found)
    dt = time.perf_counter() - t0
    posts = {r["world"]: {k.split(":")[0]: round(v["post_s"] * 1e6, 1) for k, v in r["medians"].items()} for r in found.raw["messages"]["runs"]}
    out.append({"variant": variant, "s": dt, "fit": fit, "posts_us": posts})
    print(variant, f"{dt:.2f}", " ".join(f"{k[4:]}={v*1e6:.1f}" for k, v in fit.items() if k.startswith("p2p")), posts, flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)
