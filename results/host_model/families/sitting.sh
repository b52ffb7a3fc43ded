#!/bin/bash
# One sitting of issue 39's validation with per-family compute factors (README.md): a full calibration on core 0,
# a grid of runs on both cores at two graph sizes, the full calibration on both cores, a grid confined to core 0
# (the reverse direction), `--quick`; then every validation. Usage: bash sitting.sh TAG (outputs get TAG's suffix).
# PASSES=2 runs each grid twice (the second pass in reverse order, records *_r2.json), so that repeats.py can set
# the errors beside the runs' own repeatability; EPOCHS (default 4) is each run's epochs (the first is warm-up).
set -u
TAG=${1:?usage: sitting.sh TAG}
PASSES=${PASSES:-1}; EPOCHS=${EPOCHS:-4}
cd "$(dirname "$0")/../../.."
D=results/host_model/families; R=$D/records_$TAG; mkdir -p $R
LOG=$D/runs_$TAG.log
ld() { cut -d' ' -f1-3 /proc/loadavg; }
say() { echo "$(date -u +%T) $* load=$(ld)" >> $LOG; }
say "sitting $TAG (passes $PASSES, epochs $EPOCHS) start HEAD=$(git rev-parse --short HEAD) $(git status --short | wc -l) changed files"
calibrate() { # tag, then the command's prefix and flags
  local tag=$1; shift
  say "calibrate_$tag start"
  /usr/bin/time -f "%e s wall, %U s user, %S s sys" "$@" --accept-implausible --out $D/profile_${tag}_$TAG.json \
     > $D/calibrate_${tag}_$TAG.log 2>&1
  say "calibrate_$tag rc=$? $(tail -1 $D/calibrate_${tag}_$TAG.log)"
}
run() { # where (both|core0) nodes P T model [record suffix]
  local where=$1 n=$2 P=$3 T=$4 m=$5 sfx=${6:-} pin=""
  [ "$where" = core0 ] && pin="taskset -c 0"
  local f=$R/${where}_${m}_n${n}_P${P}_T${T}${sfx}.json t0=$(date +%s)
  timeout 400 $pin .venv/bin/sarlab train -q --graph synthetic:nodes=$n,degree=20,features=64,classes=16,seed=0 \
     --workers $P --threads $T --model $m --layers 3 --hidden 128 --mode sar --epochs $EPOCHS --timeout 300 \
     --memory live --json $f > /dev/null 2>&1
  say "run $where $m n=$n P=$P T=$T$sfx rc=$? $(( $(date +%s)-t0 ))s"
}
grid() { # where sizes models workers-threads pairs...; pass 2 (PASSES=2) runs the same list backwards, suffix _r2
  local where=$1 sizes=$2 models=$3; shift 3
  local list=() n m pt
  for n in $sizes; do for m in $models; do for pt in "$@"; do list+=("$n ${pt%x*} ${pt#*x} $m"); done; done; done
  for item in "${list[@]}"; do run $where $item; done
  if [ "$PASSES" = 2 ]; then
    local i
    for (( i=${#list[@]}-1; i>=0; i-- )); do run $where ${list[$i]} _r2; done
  fi
}
calibrate 1core taskset -c 0 .venv/bin/sarlab calibrate
grid both "20000 60000" "gcn sage gat" 1x2 2x1 4x1
calibrate 2core .venv/bin/sarlab calibrate
grid core0 20000 "gcn sage gat" 1x1 2x1
calibrate quick .venv/bin/sarlab calibrate --quick
say "sitting $TAG runs done"
# each record's partition manifest beside it (<stem>_manifests/<dir>.json, what `sarlab bench engine` keeps:
# sarlab.real.bench.bench.keep_manifest), so that a fresh clone replays the same halos
.venv/bin/python - $R/*.json <<'PY'
import json, os, sys
from sarlab.real.bench.bench import keep_manifest
for path in sys.argv[1:]:
    rec = json.load(open(path))
    dest = path[: -len(".json")] + "_manifests"
    os.makedirs(dest, exist_ok=True)
    keep_manifest((rec[0] if isinstance(rec, list) else rec)["partition_dir"], dest)
PY
# NOFAMILY=1: the same profiles without their family factors too (the A/B of s1-s11); PLOTS=1 keeps the main
# validations' plots (s12 on keeps neither: the tree that travels to a lent device machine has a 64 MiB limit, and
# `sarlab simulate --validate` redraws any plot from the committed CSV's records)
NOFAMILY=${NOFAMILY:-0}; PLOTS=${PLOTS:-0}
if [ "$NOFAMILY" = 1 ]; then for p in 1core 2core; do
  .venv/bin/python -c "import json,sys; d=json.load(open(sys.argv[1])); d.pop('family_scale',None); \
json.dump(d,open(sys.argv[2],'w'),indent=1)" $D/profile_${p}_$TAG.json $D/profile_${p}_$TAG.nofamily.json
done; fi
val() { # name, profile spec, records...
  local name=$1 spec=$2; shift 2
  .venv/bin/sarlab simulate --validate "$@" --profile "$spec" --validation-out $D/validation_${name}_$TAG.csv \
     > $D/validate_${name}_$TAG.log 2>&1
  case $PLOTS$name in 0*|*nofamily*|*_p1|*_p2) rm -f $D/validation_${name}_$TAG.png ;; esac
}
variants=""; [ "$NOFAMILY" = 1 ] && variants=".nofamily"
for v in "" $variants; do  # with PASSES=2 these pool both runs of a configuration (the median of their epochs)
  val 1core${v}_to_both "describe:base=$D/profile_1core_$TAG$v.json,cores=2" $R/both_*.json
  val 2core${v}_to_both $D/profile_2core_$TAG$v.json $R/both_*.json
  val 2core${v}_to_core0 "describe:base=$D/profile_2core_$TAG$v.json,cores=1" $R/core0_*.json
done
if [ "$PASSES" = 2 ]; then  # each pass on its own (validation_NAME_p1_TAG.csv, ..._p2_TAG.csv): repeats.py TAG
  for p in p1 p2; do
    if [ $p = p1 ]; then both=$(ls $R/both_*.json | grep -v _r2.json); core=$(ls $R/core0_*.json | grep -v _r2.json)
    else both=$(ls $R/both_*_r2.json); core=$(ls $R/core0_*_r2.json); fi
    val 1core_to_both_$p "describe:base=$D/profile_1core_$TAG.json,cores=2" $both
    val 2core_to_both_$p $D/profile_2core_$TAG.json $both
    val 2core_to_core0_$p "describe:base=$D/profile_2core_$TAG.json,cores=1" $core
  done
  .venv/bin/python $D/repeats.py $TAG --rows > $D/repeats_$TAG.log 2>&1
fi
say "sitting $TAG validations done"
