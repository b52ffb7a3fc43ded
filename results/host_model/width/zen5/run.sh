#!/bin/bash
# The width grid of results/host_model/width/zen5 (2026-11-28 20:00-20:06 UTC, the Zen 5 VM, under the project's timing
# lock, right after sitting s15): single-worker, single-thread `sarlab train` runs on the validation grid's 60,000-node
# graph (no calibration runs it), hidden 32-512, GCN / SAGE / GAT (4 heads), two rounds; then each record's partition
# manifest beside it. Usage: bash results/host_model/width/zen5/run.sh OUT (~10 min)
set -u
OUT=${1:?usage: run.sh OUT}; mkdir -p "$OUT"
cd "$(dirname "$0")/../../../.."
G=synthetic:nodes=60000,degree=20,features=64,classes=16,seed=0
train() { .venv/bin/sarlab train -q --graph "$G" --workers 1 --threads 1 --model "$1" --layers 3 --hidden "$2" \
    --mode sar --epochs 5 --eval-every 0 --memory live --json "$3" > /dev/null 2>&1; }
for i in 1 2; do for h in 32 64 128 256 512; do for m in gcn sage gat; do
  train $m $h "$OUT/h${h}_${m}_$i.json"
done; done; done
.venv/bin/python - "$OUT"/h*.json <<'PY'
import json, os, sys
from sarlab.real.bench.bench import keep_manifest
for path in sys.argv[1:]:
    rec = json.load(open(path))
    dest = path[: -len(".json")] + "_manifests"
    os.makedirs(dest, exist_ok=True)
    keep_manifest((rec[0] if isinstance(rec, list) else rec)["partition_dir"], dest)
PY
