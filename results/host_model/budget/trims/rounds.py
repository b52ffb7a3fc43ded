"""progressbench: sigma, loss and the fitted sigma_P from the first 10, 20 and all 40 rounds of three 40-round runs
per P (profile_steps.json of window 1; rounds 1-10 and 1-20 are what the new rank-round rule runs at P = 8 and 4),
and from every disjoint 10- and 20-round block (their spread: how much a shorter run can move).
Usage: .venv/bin/python results/host_model/budget/trims/rounds.py results/host_model/budget/trims/profile_steps.json"""
import json
import statistics
import sys

from sarlab.real.calibration.progressbench import summarize
from sarlab.simulator.system.spread import fit_sigma

CORES = 2
data = json.load(open(sys.argv[1]))["progress"]
for p, runs in data.items():
    p = int(p)
    print(f"P={p}")
    for k, times in enumerate(runs):
        cells = []
        for n in (10, 20, 40):
            s = summarize([t[:n] for t in times])
            fit = fit_sigma(s["loss"], p, CORES)
            cells.append(f"{n:2d}: sigma {s['sigma']:.3f} loss {s['loss']:.3f} fit {fit:.3f}")
        print(f"  run {k}  " + " | ".join(cells))
    for n in (10, 20):
        fits = [fit_sigma(summarize([t[b:b + n] for t in times])["loss"], p, CORES)
                for times in runs for b in range(0, 40, n)]
        sig = [summarize([t[b:b + n] for t in times])["sigma"] for times in runs for b in range(0, 40, n)]
        print(f"  {n}-round blocks: fit {min(fits):.3f}-{max(fits):.3f} (median {statistics.median(fits):.3f}), "
              f"sigma {min(sig):.3f}-{max(sig):.3f}")
    full = [fit_sigma(summarize(t)["loss"], p, CORES) for t in runs]
    print(f"  40-round runs: fit {min(full):.3f}-{max(full):.3f}")
