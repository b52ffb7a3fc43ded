#!/bin/bash
# The sitting of results/host_model/width (2026-11-28 17:02-17:33 UTC, quiet 2-core VM, under the project's timing
# lock): a full calibration on both cores, then single-worker single-thread `sarlab train` runs (fresh processes,
# `--memory live`), alternating, three rounds: (1) the calibration's own engine graph at hidden 256 and 128 and the
# validation grid's graphs (20,000 and 60,000 nodes) at 128; (2) the engine graph at hidden 64, 128, 256, 512.
# Usage: bash results/host_model/width/run.sh OUT (writes OUT/profile.json, OUT/calibrate.log, OUT/*.json; ~32 min)
set -u
OUT=${1:?usage: run.sh OUT}; mkdir -p "$OUT"
cd "$(dirname "$0")/../../.."
ENG=synthetic:nodes=24000,degree=30,features=128,classes=16,seed=7   # real/calibration/engine_runs.py ENGINE_GRAPH
train() { # graph model hidden eval-every out [epochs]
  .venv/bin/sarlab train -q --graph "$1" --workers 1 --threads 1 --model "$2" --layers 3 --hidden "$3" --mode sar \
    --epochs "${6:-6}" --eval-every "$4" --memory live --json "$5" > /dev/null 2>&1
}
/usr/bin/time -f "%e s wall" .venv/bin/sarlab calibrate --accept-implausible --out "$OUT/profile.json" \
  > "$OUT/calibrate.log" 2>&1
for i in 1 2 3; do for m in gcn sage; do
  train $ENG $m 256 0 "$OUT/eng24_${m}_$i.json"
  train synthetic:nodes=20000,degree=20,features=64,classes=16,seed=0 $m 128 1 "$OUT/val20_${m}_$i.json"
  train synthetic:nodes=60000,degree=20,features=64,classes=16,seed=0 $m 128 1 "$OUT/val60_${m}_$i.json"
  train $ENG $m 128 0 "$OUT/eng24h128_${m}_$i.json"
done; done
for i in 1 2 3; do for h in 64 128 256 512; do for m in gcn sage; do
  train $ENG $m $h 0 "$OUT/h${h}_${m}_$i.json" 5
done; done; done
