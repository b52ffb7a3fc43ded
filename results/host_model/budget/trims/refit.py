"""Refit committed full profiles' raw timings without a shape (no new measurements): the GAT families without
their largest shape (20000, 16, 4, 32), and the SpMM cache sweep without its 1,000,000-row shape.
Usage: .venv/bin/python results/host_model/budget/trims/refit.py PROFILE.json ..."""
import json
import sys

from sarlab.simulator.calibration.fitting import fit_cache, fit_op

DROP = [20000, 16, 4, 32]


def gat(raw: dict, name: str, drop: list | None) -> tuple:
    r = raw[name]
    keep = [i for i, s in enumerate(r["shapes"]) if list(s) != drop]
    rows = [[1.0, n * d * h * c, n * h * c] for n, d, h, c in (r["shapes"][i] for i in keep)]
    return fit_op(rows, [r["fwd"][i] for i in keep], [r["bwd"][i] for i in keep], 5e7)


def cache(raw: dict, ops: dict, n: int) -> tuple:
    sw = raw["spmm"]["cache_sweep"]
    work = [float(a * b * c) for a, b, c in sw["shapes"]][:n]
    return fit_cache(work, sw["edge_s"][:n], sw["gathered_bytes"][:n], ops["spmm"]["rate"])


for path in sys.argv[1:]:
    prof = json.load(open(path))
    raw = prof["meta"]["raw"]
    print(path)
    for name in ("gat_autograd", "gat_unfused", "gat_fused"):
        if name in raw and DROP in [list(s) for s in raw[name]["shapes"]]:
            for label, drop in (("all shapes", None), ("without largest", DROP)):
                rate, over, row, ratio = gat(raw, name, drop)
                print(f"  {name:13s} {label:16s} rate {rate:.3g} row {row or 0:.3g} overhead {over * 1e6:7.1f} us "
                      f"bwd x{ratio:.2f}")
    if raw.get("spmm", {}).get("cache_sweep", {}).get("shapes"):
        for n in (4, 3):
            llc, mem = cache(raw, prof["ops"], n)
            print(f"  spmm cache sweep, {n} shapes: llc {llc / 1e6:.1f} MB, mem_rate {mem:.3g}")
