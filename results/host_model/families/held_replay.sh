#!/bin/bash
# The replay behind AGGREGATION_TIMED_FACTORS = True (6d8e74e): sittings s15-s17's calibrations with GEMM's and the
# shared factor as least squares fitted them and the aggregation families at their timed factors, pricing the
# sittings' own records (cross-core, own, reverse). Usage: bash results/host_model/families/held_replay.sh (~1 min;
# profiles and CSVs to .cache/held/), prints median |time error| (worst, and over the P >= 2 rows).
set -eu
cd "$(dirname "$0")/../../.."
D=results/host_model/families; O=.cache/held; mkdir -p $O
.venv/bin/python - $D $O <<'PY'
import json, sys
from pathlib import Path
D, O = map(Path, sys.argv[1:])
for s in ("s15", "s16", "s17"):
    for t in ("1core", "2core"):
        p = json.loads((D / f"profile_{t}_{s}.json").read_text())
        if s == "s17":  # its code recorded the timed factors and used least squares
            timed, lsq = p["meta"]["raw"]["engine"]["aggregation_factors"], p["family_scale"]
        else:  # its code used the timed factors with the rest refitted; agg_ab.py wrote the least-squares ones
            timed = {k: p["family_scale"][k] for k in ("spmm", "gat_fused")}
            lsq = json.loads((D / f"profile_{t}_{s}.lsq.json").read_text())["family_scale"]
        (O / f"profile_{t}_{s}.held.json").write_text(json.dumps({**p, "family_scale": {**lsq, **timed}}))
PY
for s in s15 s16 s17; do R=$D/records_$s
  .venv/bin/sarlab simulate --validate $R/both_*.json --profile "describe:base=$O/profile_1core_$s.held.json,cores=2" \
    --validation-out $O/cross_$s.csv > /dev/null 2>&1
  .venv/bin/sarlab simulate --validate $R/both_*.json --profile $O/profile_2core_$s.held.json \
    --validation-out $O/own_$s.csv > /dev/null 2>&1
  .venv/bin/sarlab simulate --validate $R/core0_*.json --profile "describe:base=$O/profile_2core_$s.held.json,cores=1" \
    --validation-out $O/rev_$s.csv > /dev/null 2>&1
done
.venv/bin/python - $O <<'PY'
import sys
import pandas as pd
for s in ("s15", "s16", "s17"):
    cells = []
    for k in ("cross", "own", "rev"):
        d = pd.read_csv(f"{sys.argv[1]}/{k}_{s}.csv")
        e, p2 = d.time_error.abs() * 100, d[d.workers > 1].time_error.abs() * 100
        cells.append(f"{k} {e.median():4.1f} % (worst {e.max():4.1f}, P >= 2 {p2.median():4.1f})")
    print(s, " | ".join(cells))
PY
