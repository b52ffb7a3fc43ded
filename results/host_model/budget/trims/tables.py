"""Tables of compare.json (window 2): each fitted value of the old and the new code, run by run in the order run,
and for the GAT families the old runs' own timings refitted without the left-out shape (the shape set's effect
alone, free of the sitting's noise). Usage: .venv/bin/python results/host_model/budget/trims/tables.py compare.json"""
import json
import statistics
import sys

from sarlab.simulator.calibration.fitting import fit_op

LEFT_OUT = [20000, 16, 4, 32]
data = json.load(open(sys.argv[1]))


def cells(rows, key, scale=1.0, fmt="{:.3g}"):
    return " / ".join(fmt.format(r["value"][key] * scale) if r["value"].get(key) is not None else "-" for r in rows)


def span(rows, key):
    vals = [r["value"][key] for r in rows if r["value"].get(key) is not None]
    return (max(vals) - min(vals)) / statistics.median(vals) if len(vals) > 1 else 0.0


def value_rows(step, old, new, keys, fmt="{:.3g}"):
    """One row per (key, label, scale) of ``keys``, then the step's seconds row."""
    for key, label, scale in keys:
        med = statistics.median(r["value"][key] for r in new) / statistics.median(r["value"][key] for r in old)
        print(f"| {step} | {label} | {cells(old, key, scale, fmt)} | {cells(new, key, scale, fmt)} | "
              f"{span(old, key):.0%} | {med:.2f} |")
    print(f"| {step} | seconds | {' / '.join(str(r['seconds']) for r in old)} | "
          f"{' / '.join(str(r['seconds']) for r in new)} | | |")


print("| step | value | old (runs 1, 2, 3) | new (runs 1, 2, 3) | old spread | median new / old |")
print("|---|---|---|---|---|---|")
for name in ("gat_autograd", "gat_unfused"):
    value_rows(name, data[f"{name} old"], data[f"{name} new"],
               (("rate", "rate /s", 1), ("row_rate", "row rate /s", 1), ("overhead_s", "overhead us", 1e6),
                ("bwd_ratio", "bwd ratio", 1), ("parallel_eff", "thread eff", 1)))
value_rows("commbench", data["messages old"], data["messages new"],
           [(key, f"{key} us", 1e6) for key in ("p2p_call_s", "p2p_op_s", "p2p_wait_s", "p2p_msg_cpu_s")], "{:.1f}")
value_rows("spmm cache sweep", data["sweep old"], data["sweep new"],
           (("mem_rate", "mem rate /s", 1), ("llc_bytes", "llc MB", 1e-6)))
print()
print("GAT, the old runs' timings refitted without the left-out shape (rate, row rate, overhead us, bwd ratio):")
for name in ("gat_autograd", "gat_unfused"):
    for k, r in enumerate(data[f"{name} old"]):
        raw = r["raw"][name]
        fits = []
        for drop in (None, LEFT_OUT):
            keep = [i for i, s in enumerate(raw["shapes"]) if list(s) != drop]
            rows = [[1.0, n * d * h * c, n * h * c] for n, d, h, c in (raw["shapes"][i] for i in keep)]
            rate, over, row, ratio = fit_op(rows, [raw["fwd"][i] for i in keep], [raw["bwd"][i] for i in keep], 5e7)
            fits.append(f"{rate:.3g} / {row:.3g} / {over * 1e6:.0f} / {ratio:.2f}")
        print(f"  {name} old run {k + 1}: all shapes {fits[0]}; without {fits[1]}")
for key in ("share lead-in 4.0", "share lead-in 1.5", "first use, transients fresh", "first use, transients forked"):
    for r in data.get(key, []):
        print(f"{key}: {r['seconds']} s {json.dumps(r['value'])}")
