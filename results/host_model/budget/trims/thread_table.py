"""The table of thread.json (window 4): each thread efficiency by run, the median, seconds, most others' CPU."""
import json
import statistics
import sys

for key, runs in json.load(open(sys.argv[1])).items():
    effs = " / ".join(f"{r['eff']:.2f}" for r in runs)
    secs = " / ".join(str(r["seconds"]) for r in runs)
    med = statistics.median(r["eff"] for r in runs)
    print(f"| {key} | {effs} | {med:.2f} | {secs} | {max(r['others'] for r in runs):.1%} |")
