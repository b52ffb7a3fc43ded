import json, sys, time
import torch
from sarlab.core.memory import tune_malloc
from sarlab.real.calibration import hostbench, progressbench
from sarlab.real.calibration.harness import module_command, module_env
from sarlab.real.calibration.ranks import preload, run_group

T = {}
def timed(key, fn):
    t0 = time.perf_counter(); r = fn(); T[key] = round(time.perf_counter() - t0, 3)
    print(key, T[key], flush=True); return r

torch.set_num_threads(1); tune_malloc(threshold=1 << 17)
timed("zygote", preload)
for w in (2, 4, 8):
    cmd = module_command("commbench", "--help")
    timed(f"null group w{w}", lambda w=w: run_group([cmd]*w, [module_env()]*w, "null", 60))
for w in (2, 4, 8):
    timed(f"commbench w{w} 0 rep", lambda w=w: hostbench.launch_commbench(w, 0, [256]))
    timed(f"commbench w{w} 14 rep +ar", lambda w=w: hostbench.launch_commbench(w, 14, [256], allreduce_sizes=hostbench.ALLREDUCE_SIZES))
for p, r in ((2, 40), (4, 20), (8, 10)):
    timed(f"progress P{p} 0 rounds", lambda p=p: progressbench.measure(p, 3, 0))
    timed(f"progress P{p} {r} rounds", lambda p=p, r=r: progressbench.measure(p, 3, r))
json.dump(T, open(sys.argv[1], "w"))
