#!/bin/bash
# Prices the committed width records (records/) with the 2-core calibrations of sittings s12 (no per-edge cost), s13
# (per-edge cost), s15 (per-edge cost, the timed aggregation factor with the rest refitted), s15's least-squares refit
# (../../families/agg_ab.py), s15 under the final rule (../../families/held_replay.sh) and s18 (the final code): one
# line per width, median measured / predicted epoch and the error per model.
# Usage: bash results/host_model/width/zen5/validate.sh (simulation only, ~1 min); CSVs to .cache/width_zen5/.
set -eu
cd "$(dirname "$0")/../../../.."
W=results/host_model/width/zen5; F=results/host_model/families; O=.cache/width_zen5; mkdir -p $O
[ -f .cache/held/profile_2core_s15.held.json ] || bash $F/held_replay.sh > /dev/null  # s15 under the final rule
for t in s12 s13 s15 s15.lsq s15.held s18; do
  P=$F/profile_2core_$t.json; [ $t = s15.held ] && P=.cache/held/profile_2core_s15.held.json
  echo "== $P"
  for h in 32 64 128 256 512; do
    .venv/bin/sarlab simulate --validate $W/records/h${h}_*.json --profile $P \
      --validation-out $O/${t}_h$h.csv > $O/${t}_h$h.log 2>&1
  done
  .venv/bin/python - $O $t <<'PY'
import sys
import pandas as pd
out, tag = sys.argv[1:]
for h in (32, 64, 128, 256, 512):
    d = pd.read_csv(f"{out}/{tag}_h{h}.csv")
    g = d.groupby("model").agg(m=("measured_epoch_time_s", "median"), p=("predicted_epoch_time_s", "median"))
    print(f"  hidden {h:3d}  " + "  ".join(f"{k} {r.m:.3f} / {r.p:.3f} s {100 * (r.p / r.m - 1):+6.1f} %"
                                         for k, r in g.iterrows()))
PY
done
