"""Tables of compare.jsonl: each family's seconds and fitted values, old (every run) against new (0.6 s budget)."""

import json
import statistics
import sys
from pathlib import Path

runs = [json.loads(line) for line in Path(sys.argv[1] if len(sys.argv) > 1 else
                                          Path(__file__).with_name("compare.jsonl")).read_text().splitlines()]
old = [r for r in runs if r["budget"] == float("inf")]
new = [r for r in runs if r["budget"] != float("inf")]
print(f"runs in order: {', '.join('old' if r in old else 'new' for r in runs)}; load at each end: "
      + ", ".join(f"{r['load']:.2f}" for r in runs))
def total(r):
    return sum(f["seconds"] for f in r["families"].values())


print("total seconds: old " + " / ".join(f"{total(r):.1f}" for r in old)
      + ", new " + " / ".join(f"{total(r):.1f}" for r in new))
print("| family | value | old (runs 1-3) | new (runs 1-3) | old spread | median new / old |")
print("|---|---|---|---|---|---|")
for fam in old[0]["families"]:
    for key in ("seconds", "rate", "row_rate", "overhead_s", "bwd_ratio", "eff", "mem_rate"):
        o = [r["families"][fam][key] for r in old]
        n = [r["families"][fam][key] for r in new]
        if any(v is None for v in o + n) or (key in ("bwd_ratio",) and len(set(o + n)) == 1):
            continue
        spread = (max(o) - min(o)) / statistics.median(o) if statistics.median(o) else 0.0
        ratio = statistics.median(n) / statistics.median(o) if statistics.median(o) else float("nan")
        fmt = (lambda v: f"{v:.1f}") if key == "seconds" else (lambda v: f"{v:.3g}")
        print(f"| {fam} | {key} | {' / '.join(map(fmt, o))} | {' / '.join(map(fmt, n))} | "
              f"{100 * spread:.0f} % | {ratio:.2f} |")
