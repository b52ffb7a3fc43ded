#!/bin/bash
# N = 4 on 2 cores (2 ranks per core): ccl without its worker thread (CCL_WORKER_OFFLOAD=0, the default since
# 7919270) against ccl with it (CCL_WORKER_WAIT=1, the default before) and gloo; three configurations of the
# validation set, three repeats, the three variants rotating their order per configuration and repeat; loopback.
# Run from the repository root: bash results/backends/offload_n4/run.sh   (~15 min). Each run's outputs go to
# .cache/offload_n4/ (not committed); records.csv (every record, with variant and repeat), runs.csv (one row per run)
# and summary.csv (medians over the repeats) to this folder.
set -euo pipefail
D=results/backends/offload_n4
R=.cache/offload_n4
BIG="--nodes 110000 --degree 28 --features 80 --hidden 240"
GAT="--nodes 40000 --degree 24 --hidden 96 --batchnorm"
i=0
run() {  # variant repeat model mode graph-flags
  local v=$1 r=$2 model=$3 mode=$4; shift 4
  local envs=() backend=ccl
  case $v in
    gloo) backend=gloo ;;
    offload0) ;;                                                  # the default now
    workerwait) envs=(CCL_WORKER_OFFLOAD=1 CCL_WORKER_WAIT=1) ;;  # the default before
  esac
  env "${envs[@]}" .venv/bin/sarlab bench engine "$@" --models "$model" --modes "$mode" --workers 4 --epochs 5 \
    --memory rss --backend $backend --timeout 120 --out $R --prefix "${model}_${mode}_${v}_r${r}" > /dev/null
  echo "$(date -u +%T) r$r $v $model $mode: $(grep '^| ' $R/${model}_${mode}_${v}_r${r}.md | tail -1)"
}
for r in 1 2 3; do
  for cfg in "sage sar $BIG" "gcn sa $BIG" "gat sar $GAT"; do
    order=(gloo offload0 workerwait)
    for k in 0 1 2; do run "${order[$(( (i + k) % 3 ))]}" $r $cfg; done
    i=$((i + 1))
  done
done
.venv/bin/python - "$D" "$R" <<'PY'
import glob, sys
import pandas as pd
from sarlab.common.records import summarize
d, r = sys.argv[1], sys.argv[2]
rows, records = [], []
for path in sorted(glob.glob(f"{r}/*_r[0-9].csv")):
    model, mode, variant, rep = path.rsplit("/", 1)[1][:-4].split("_")
    recs = pd.read_csv(path)
    records.append(recs.assign(variant=variant, repeat=int(rep[1:])))
    s = summarize(recs, keys=(), warmup=2).iloc[0]
    rows.append({"model": model, "mode": mode, "variant": variant, "repeat": int(rep[1:]),
                 "epoch_s": s.epoch_time_s, "compute_s": s.compute_s, "wait_s": s.comm_wait_s})
pd.concat(records, ignore_index=True).to_csv(f"{d}/records.csv", index=False)
runs = pd.DataFrame(rows)
runs.to_csv(f"{d}/runs.csv", index=False)
med = runs.pivot_table(index=["model", "mode"], columns="variant", values=["epoch_s", "compute_s", "wait_s"],
                       aggfunc="median")
med.columns = [f"{v}_{q}" for q, v in med.columns]
med["offload0_over_gloo"] = med.offload0_epoch_s / med.gloo_epoch_s
med["workerwait_over_gloo"] = med.workerwait_epoch_s / med.gloo_epoch_s
med["offload0_over_workerwait"] = med.offload0_epoch_s / med.workerwait_epoch_s
med.round(4).to_csv(f"{d}/summary.csv")
print(med.round(3).to_string())
PY
