"""Compose results/host_model/host_model.csv and the table for the reading from the validation CSVs
(run from the repository root: .venv/bin/python results/host_model/compose_table.py)."""
import re
from pathlib import Path

import pandas as pd

O = Path("/work/main/results/host_model")
sets = [("validation_1core_calibration_to_2core_runs.csv", "1-core quick calibration, described as 2 cores", 2),
        ("validation_2core_calibration_to_1core_runs.csv", "2-core quick calibration, described as 1 core", 1),
        ("validation_2core_calibration_to_2core_runs.csv", "2-core quick calibration (same cores)", 2)]

load = {}  # (tag, model, nodes, P, T) -> 1-min load when the run started (runs.log)
lines = (O / "runs.log").read_text().splitlines()
for a, b in zip(lines, lines[1:]):
    m = re.search(r"start (\w+) (\w+) n=(\d+) P=(\d+) T=(\d+) load=([\d.]+)", a)
    if m and "done rc=0" in b:
        load[(m[1], m[2], int(m[3]), int(m[4]), int(m[5]))] = float(m[6])
rows = []
for f, prof, cores in sets:
    if not (O / f).exists():
        continue
    t = pd.read_csv(O / f)
    for _, r in t.iterrows():
        rows.append({"machine": "AMD EPYC VM (2 cores)", "profile": prof, "cores": cores, "P": int(r.workers),
                     "T": r.threads_used, "model": r.model, "nodes": int(r.num_nodes), "mode": r["mode"],
                     "measured_s": r.measured_epoch_time_s, "predicted_s": r.predicted_epoch_time_s,
                     "time_error": r.time_error, "memory_error": r.memory_error, "regime": r.host_regime,
                     "load_1min_at_start": load.get(("two" if "to_2core" in f else "one", r.model, int(r.num_nodes),
                                                     int(r.workers), int(r.threads_used)))})
df = pd.DataFrame(rows).sort_values(["profile", "model", "nodes", "P", "T"])
df.to_csv(O / "host_model.csv", index=False)
lines = ["| profile | cores | P | T | model | nodes | mode | measured (s) | predicted (s) | time error | memory error "
         "| regime | load |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
for _, r in df.iterrows():
    lines.append(f"| {r.profile} | {r.cores} | {r.P} | {r['T']:g} | {r.model} | {r.nodes:,} | {r['mode']} | "
                 f"{r.measured_s:.3g} | {r.predicted_s:.3g} | {r.time_error:+.1%} | {r.memory_error:+.1%} | "
                 f"{r.regime} | {r.load_1min_at_start:.1f} |")
print("\n".join(lines))
for prof, g in df.groupby("profile"):
    print(f"\n{prof}: median |time error| {g.time_error.abs().median():.1%}, max {g.time_error.abs().max():.1%}, "
          f"median |memory error| {g.memory_error.abs().median():.1%}, "
          f"max {g.memory_error.abs().max():.1%}, n={len(g)}")
