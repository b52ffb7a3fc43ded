"""The rss first-use probe started two ways, alternating in one sitting: ``fresh`` (a fresh interpreter per family,
the transients' process forked from the zygote after them) and ``parent`` (one fresh interpreter sets up once and
forks a child per family, which re-faults the parent's resident file pages first, then measures the transients),
and as a control ``notouch``: the same probe parent with the re-fault left out (``touch_pages`` a no-op).

    python compare.py OUT.json ORDER      # ORDER like fresh,parent,parent,fresh,fresh,parent

Each run's wall seconds (the whole ``run_probe`` call, as the calibration's memory step pays it), the load average
before it, every family's first-use MiB, each family process's RSS before it ran (``baseline``) and the transients;
written to OUT.json after every run."""
import json
import os
import subprocess
import sys
import time

from sarlab.real.calibration import memprobe
from sarlab.real.calibration.harness import ROOT, module_env
from sarlab.real.calibration.ranks import preload

MIB = 1 << 20
NO_TOUCH = ("from sarlab.real.calibration import memprobe as m; m.touch_pages = lambda runs: 0; "
            "m.main(['--forked', '--transients'])")


def probe(start: str) -> dict:
    if start != "notouch":
        return memprobe.run_probe("rss", start=start)
    done = subprocess.run([sys.executable, "-c", NO_TOUCH], capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env=module_env(), check=True)
    return memprobe.merge([done.stdout])

out_path, order = sys.argv[1], sys.argv[2].split(",")
preload()  # the zygote the fresh path's transients fork from, started before the first timed run
runs = []
for start in order:
    load = open("/proc/loadavg").read().split()[:3]
    t0 = time.perf_counter()
    result = probe(start)
    seconds = time.perf_counter() - t0
    row = {"start": start, "seconds": round(seconds, 2), "loadavg_before": load,
           "loadavg_after": open("/proc/loadavg").read().split()[:3],
           "affinity": sorted(os.sched_getaffinity(0)),
           "first_use_mib": {k: round(v / MIB, 3) for k, v in result["first_use"].items()},
           "baseline_mib": {k: round(v / MIB, 2) for k, v in result.get("baseline", {}).items()},
           "transients": result["transients"],
           "parent": result.get("parent", {}), "touched": result.get("touched", {})}
    runs.append(row)
    print(f"{start:6s} {seconds:6.1f} s  load {' '.join(load)}  "
          + "  ".join(f"{k} {v:.2f}" for k, v in row["first_use_mib"].items()), flush=True)
    with open(out_path, "w") as f:
        json.dump(runs, f, indent=1)
