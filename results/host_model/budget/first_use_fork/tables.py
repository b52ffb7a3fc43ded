"""The README's tables from sitting_2core.json and sitting_core0.json: each run's wall seconds, load average before
it, and every family's first-use MiB; then per family the fresh runs' range against the parent runs' range."""
import json

FAMILIES = ("autograd", "spmm", "max_aggr", "gat_unfused", "gat_autograd", "gat_fused")
for name in ("sitting_2core.json", "sitting_core0.json"):
    runs = json.load(open(name))
    print(f"\n{name}\n| run | start | seconds | load (1 min) before | " + " | ".join(FAMILIES) + " | baseline MiB |")
    print("|---" * (5 + len(FAMILIES)) + "|")
    for i, r in enumerate(runs, 1):
        base = r["baseline_mib"].values()
        print(f"| {i} | {r['start']} | {r['seconds']:.1f} | {r['loadavg_before'][0]} | "
              + " | ".join(f"{r['first_use_mib'][f]:.2f}" for f in FAMILIES)
              + f" | {min(base):.2f}-{max(base):.2f} |")
runs = json.load(open("sitting_2core.json")) + json.load(open("sitting_core0.json"))
print("\n| family | fresh (5 runs) | parent (5 runs) | parent, no re-fault (1 run) |\n|---|---|---|---|")
for f in FAMILIES:
    cols = []
    for start in ("fresh", "parent", "notouch"):
        v = [r["first_use_mib"][f] for r in runs if r["start"] == start]
        cols.append(f"{min(v):.2f}-{max(v):.2f}" if len(v) > 1 else f"{v[0]:.2f}")
    print(f"| {f} | " + " | ".join(cols) + " |")
