#!/bin/bash
# Price the committed records of results/host_model/width with the calibration of the same sitting (profile.json)
# and print one line per set: usage bash results/host_model/width/validate.sh (simulation only, ~1 min). The CSVs go
# to .cache/width/ (ignored); the table in README.md is this script's output.
set -eu
cd "$(dirname "$0")/../../.."
D=results/host_model/width; W=.cache/width; mkdir -p $W
for k in h64 h128 h256 h512 eng24 eng24h128 val20 val60; do
  .venv/bin/sarlab simulate --validate $D/records/${k}_*.json --profile $D/profile.json --validation-out $W/$k.csv \
    > $W/$k.log 2>&1
done
.venv/bin/python - $W <<'PY'
import sys
import pandas as pd
w = sys.argv[1]
for k in ("h64", "h128", "h256", "h512", "eng24", "eng24h128", "val20", "val60"):
    for _, r in pd.read_csv(f"{w}/{k}.csv").iterrows():
        print(f"{k:10s} {r['model']:5s} nodes {r['num_nodes']:6d} hidden {r['hidden']:4d} measured "
              f"{r['measured_epoch_time_s']:.3f} s predicted {r['predicted_epoch_time_s']:.3f} s "
              f"error {100 * r['time_error']:+6.1f} %")
PY
