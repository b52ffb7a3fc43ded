#!/bin/bash
# Issue #39's many-core check, the ONE script run on the lent machine (README.md beside this file says how to call it
# and why the phases come in this order). From the repository root there:
#     bash results/host_model/manycore/device.sh
# Phases, each logged with the seconds since the start and the load average, each under the script's own deadline
# (DEADLINE_S seconds from the start, default 540; a phase or run that would not fit is skipped, and the log says so):
#   setup    install the carried wheels into $SITE, print the versions, build the C++ kernels in the foreground
#   sar      the grid in `sar`: P = 1, 8, 2, 4 x sage, gcn, gat (P = 1 once per model: one worker takes the same
#            one-shard path in every mode, sarlab/core/aggregate.py run_aggregation), sarlab's default threads (C / P)
#   calib    `sarlab calibrate` (full), its wall time; stopped when it cannot finish in time, then `--quick` instead
#   oneshot  the grid in `oneshot` at P = 8, 2, 4
#   repeat   what time is left: the sar runs again, in reverse order (records *_r2.json), for the runs' repeatability
#   validate `sarlab simulate --validate` of the records with the profile measured here (a check that it works on
#            that machine's stack), and with one described from this project's 2-core VM calibration (cores=16), time
#            permitting; validate_here.sh does both back home from the same files
# After every run and phase everything so far is packed into $OUT/manycore.tar.gz (one folder, manycore_run/) and the
# log copied to $OUT/device.log, so a cut-short call still brings back what it measured.
#
# Everything is a variable (defaults: the 16-core configuration). SMALL=1 is the local test's configuration (P = 1, 2,
# a 20,000-node graph, --quick calibration). PY (python3), SITE (/tmp/site), WHEELS (.whl/*.whl; empty: install
# nothing), WORK (/tmp/manycore: cache, kernel build, partitions; the script runs there, outside the repository, so
# that the checkout's sarlab/ folder cannot shadow the installed package), OUT, DEADLINE_S, GRAPH, LAYERS, HIDDEN,
# EPOCHS, MODELS, SAR_PS, ONESHOT_PS, TRAIN_FLAGS, CAL (full|quick|none), CAL_MAX, QUICK_MAX, CAL_RESERVE, VAL_RESERVE,
# RUN_MAX, RUN_EST, PHASES, VM_PROFILE.
{ # the whole script is one block, read before it runs: an edit of this file meanwhile cannot break a running call
set -u
START=$(date +%s)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
SMALL=${SMALL:-0}
PY=${PY:-python3}
SITE=${SITE:-/tmp/site}
WHEELS=${WHEELS-$ROOT/.whl/*.whl}
WORK=${WORK:-/tmp/manycore}
OUT=${OUT:-$WORK/out}
DEADLINE_S=${DEADLINE_S:-540}
LAYERS=${LAYERS:-3}; HIDDEN=${HIDDEN:-128}
MODELS=${MODELS:-sage gcn gat}
if [ "$SMALL" = 1 ]; then
  GRAPH=${GRAPH:-synthetic:nodes=20000,degree=20,features=64,classes=16,seed=0}
  EPOCHS=${EPOCHS:-3}; SAR_PS=${SAR_PS:-1 2}; ONESHOT_PS=${ONESHOT_PS:-2}; CAL=${CAL:-quick}
else
  # the issue's graph (its SAGE 3 x 256 epochs: 0.52-0.92 s at P = 1..8 there); 3 x 128 keeps the grid in budget
  GRAPH=${GRAPH:-synthetic:nodes=200000,degree=30,features=64,classes=16,seed=0}
  EPOCHS=${EPOCHS:-5}; SAR_PS=${SAR_PS:-1 8 2 4}; ONESHOT_PS=${ONESHOT_PS:-8 2 4}; CAL=${CAL:-full}
fi
CAL_MAX=${CAL_MAX:-300}        # the longest the full calibration may run (its own estimate for 16 cores: ~190 s)
QUICK_MAX=${QUICK_MAX:-60}     # the --quick fallback's limit (~20-60 s); also kept free when the full one is cut
CAL_RESERVE=${CAL_RESERVE:-250} # seconds the sar grid leaves for the calibration that follows it
RUN_MAX=${RUN_MAX:-150}        # one training run's limit
RUN_EST=${RUN_EST:-25}         # a run's expected seconds before one of its model has been timed
VAL_RESERVE=${VAL_RESERVE:-40} # seconds the repeat phase leaves for the validation after it
TRAIN_FLAGS=${TRAIN_FLAGS:-}   # more `sarlab train` flags for every run (e.g. --eval-every 0)
PHASES=${PHASES:-setup sar calib oneshot repeat validate}
# this project's own full calibration on its 2-core VM (the base of the described profile), newest sitting
VM_PROFILE=${VM_PROFILE:-$(ls "$ROOT"/results/host_model/families/profile_2core_s*[0-9].json 2>/dev/null | sort -V | tail -1)}

export PYTHONUNBUFFERED=1 SARLAB_CACHE_DIR=$WORK/cache PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
R=$WORK/manycore_run                  # what comes back (packed whole)
rm -rf "$R"; mkdir -p "$R/records" "$OUT" "$SITE" || exit 1
cd "$WORK" || exit 1
LOG=$R/device.log
SARLAB=("$PY" -m sarlab)

el() { echo $(( $(date +%s) - START )); }
left() { echo $(( DEADLINE_S - $(el) )); }
ld() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo n/a; }
say() { printf '[%4ss] %s (load %s)\n' "$(el)" "$*" "$(ld)" | tee -a "$LOG"; }
pack() {  # the whole results folder into $OUT (overwritten each time), and the log beside it
  tar -czf "$OUT/manycore.tar.gz.part" -C "$WORK" manycore_run 2>/dev/null && mv -f "$OUT/manycore.tar.gz.part" "$OUT/manycore.tar.gz"
  cp -f "$LOG" "$OUT/device.log" 2>/dev/null
}
reap() {  # end what a stopped step left behind: the processes whose environment carries its marker (ours only)
  local mark=$1 p n=0
  for p in /proc/[0-9]*; do
    [ "${p#/proc/}" = $$ ] && continue
    if grep -qxzF "MANYCORE_STEP=$mark" "$p/environ" 2>/dev/null; then kill -KILL "${p#/proc/}" 2>/dev/null && n=$((n+1)); fi
  done
  [ $n -gt 0 ] && say "  reaped $n leftover process(es) of $mark"
}
# step NAME LIMIT_S LOGFILE CMD...: run CMD (marked, output to LOGFILE) for at most LIMIT_S seconds; sets STEP_RC
# (124 when stopped) and STEP_S (wall seconds, 2 decimals). WATCH (a function name, optional) is called every 0.2 s
# with the log file and the seconds so far, and may ask for an early stop by returning 1.
now_us() { if [ -n "${EPOCHREALTIME:-}" ]; then echo "${EPOCHREALTIME/./}"; else date +%s%6N; fi; }
step() {
  local name=$1 limit=$2 logf=$3; shift 3
  local t0 pid stopped=0 so_far
  t0=$(now_us)
  MANYCORE_STEP=$name "$@" > "$logf" 2>&1 &
  pid=$!
  while kill -0 $pid 2>/dev/null; do
    sleep 0.2  # the step's wall time is read to 0.2 s
    so_far=$(( ($(now_us) - t0) / 1000000 ))
    if [ "$so_far" -ge "$limit" ] || { [ -n "${WATCH:-}" ] && ! "$WATCH" "$logf" "$so_far"; }; then
      stopped=1; kill -TERM $pid 2>/dev/null
      for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 $pid 2>/dev/null || break; sleep 1; done
      kill -KILL $pid 2>/dev/null
      break
    fi
  done
  wait $pid 2>/dev/null; STEP_RC=$?
  STEP_S=$(( ($(now_us) - t0) / 10000 )); STEP_S=$(( STEP_S / 100 )).$(printf '%02d' $(( STEP_S % 100 )))
  [ $stopped = 1 ] && STEP_RC=124
  reap "$name"
}

# ---------------------------------------------------------------------------------------------------------- setup
phase_setup() {
  say "phase setup: wheels -> $SITE, versions, kernels"
  if [ -n "$WHEELS" ]; then
    # the line of the device README's nvidia-h200 note
    # shellcheck disable=SC2086
    if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" $WHEELS \
         >> "$LOG" 2>&1; then say "  installed: $(ls $WHEELS | xargs -n1 basename | tr '\n' ' ')"
    else  # wheels are zip files: unpacked as they are, they import the same (no entry-point scripts, not needed)
      say "  pip install FAILED (see above): unpacking the wheels into $SITE instead"
      "$PY" -c 'import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]' "$SITE" $WHEELS
    fi
  fi
  {
    echo "date: $(date -u +%FT%TZ)   uname: $(uname -srm)"
    echo "nproc: $(nproc)   cpu model: $( (lscpu 2>/dev/null | sed -n 's/^Model name: *//p'; sed -n 's/^model name\s*: //p' /proc/cpuinfo 2>/dev/null) | head -1)"
    echo "memory: $(sed -n 's/^MemTotal: *//p' /proc/meminfo 2>/dev/null)   compiler: $( (c++ --version || g++ --version) 2>/dev/null | head -1)"
    "$PY" - <<'PY'
import importlib, importlib.metadata, os, sys, sysconfig
print(f"python {sys.version.split()[0]} at {sys.executable}; affinity {len(os.sched_getaffinity(0))} cores")
for name in ("torch", "torch_geometric", "numpy", "scipy", "pandas", "simpy", "pymetis", "ninja", "sarlab"):
    try:
        mod = importlib.import_module(name)
        try:
            version = importlib.metadata.version(name.replace("_", "-"))
        except importlib.metadata.PackageNotFoundError:
            version = getattr(mod, "__version__", "?")
        print(f"{name} {version} from {os.path.dirname(mod.__file__)}")
    except Exception as exc:
        print(f"{name} MISSING: {exc!r}")
import torch
info = [line.strip() for line in torch.__config__.parallel_info().splitlines() if "backend" in line or "OpenMP" in line]
print(f"torch threads {torch.get_num_threads()}; {'; '.join(info[:3])}")
inc = sysconfig.get_paths()["include"]
print(f"Python.h {'found' if os.path.exists(os.path.join(inc, 'Python.h')) else 'MISSING'} in {inc} (the kernels' build needs it)")
PY
  } > "$R/env.txt" 2>&1
  cp "$(dirname "${WHEELS%% *}")/SOURCE.txt" "$R/" 2>/dev/null  # the commit the wheel was built from (prepare.sh)
  sed 's/^/  /' "$R/env.txt" | tee -a "$LOG"
  grep -q "^sarlab .* from $SITE" "$R/env.txt" || say "  WARNING: sarlab is not imported from $SITE"
  step kernels 240 "$R/build_kernels.log" "${SARLAB[@]}" build-kernels
  say "  build-kernels rc=$STEP_RC ${STEP_S}s: $(tail -1 "$R/build_kernels.log")"
}

# ---------------------------------------------------------------------------------------------------------- runs
declare -A LAST_S  # a model's longest run so far (seconds): the estimate of its next one
run() {  # mode P model [suffix] [reserve_s]: one training run; records in records/<mode>_<model>_P<P><sfx>.json
  local mode=$1 P=$2 m=$3 sfx=${4:-} reserve=${5:-0}
  local name=${mode}_${m}_P${P}${sfx} est=${LAST_S[$m]:-$RUN_EST} avail
  avail=$(( $(left) - reserve ))
  if [ "$avail" -lt "$est" ]; then say "  skip run $name: needs ~${est}s, ${avail}s left (the deadline less ${reserve}s kept for what follows)"; return; fi
  # a started run may run into the reserve (the calibration's limit shrinks to what is left): stopped, it gives nothing
  local f=$R/records/$name.json lim=$(( $(left) - 5 < RUN_MAX ? $(left) - 5 : RUN_MAX ))
  step "run-$name" "$lim" "$R/records/$name.log" "${SARLAB[@]}" train -q --graph "$GRAPH" --workers "$P" \
      --model "$m" --layers "$LAYERS" --hidden "$HIDDEN" --mode "$mode" --epochs "$EPOCHS" --timeout 120 \
      --memory live $TRAIN_FLAGS --json "$f"
  local s=${STEP_S%.*}
  [ "$s" -gt "${LAST_S[$m]:-0}" ] && LAST_S[$m]=$(( s + 2 ))
  local summary=""
  if [ -s "$f" ]; then  # keep the partition's manifest beside the records, as sitting.sh does (keep_manifest)
    summary=$("$PY" - "$f" <<'PY'
import json, os, shutil, statistics, sys
path = sys.argv[1]
text = open(path).read()
try:
    recs = json.loads(text)
except ValueError:
    recs = [json.loads(line) for line in text.splitlines() if line.strip()]
recs = recs if isinstance(recs, list) else [recs]
pdir = recs[0].get("partition_dir") or ""
dest = path[: -len(".json")] + "_manifests"
if pdir and os.path.exists(os.path.join(pdir, "manifest.json")):
    os.makedirs(dest, exist_ok=True)
    shutil.copyfile(os.path.join(pdir, "manifest.json"), os.path.join(dest, os.path.basename(pdir) + ".json"))
else:
    print(f"NO MANIFEST ({pdir!r})", end=" ")
last = max(r["epoch"] for r in recs)
ep = [max(r["epoch_time_s"] for r in recs if r["epoch"] == e) for e in range(1, last + 1)]
peak = max(r["peak_mem_bytes"] - r.get("baseline_mem_bytes", 0) for r in recs) / 2**20
print(f"T={recs[0].get('threads')} epochs(after the 1st) median {statistics.median(ep):.3f}s "
      f"[{min(ep):.3f}-{max(ep):.3f}], wait {max(r['comm_wait_s'] for r in recs if r['epoch'] >= 1):.3f}s, "
      f"peak {peak:.0f} MiB", end="")
PY
)
  fi
  say "  run $name rc=$STEP_RC ${STEP_S}s $summary"
  [ "$STEP_RC" = 0 ] || tail -5 "$R/records/$name.log" | sed 's/^/    | /' | tee -a "$LOG"
  pack
}
calib_pending() { case " $PHASES " in *" calib "*) [ -z "${CAL_DONE:-}" ];; *) false;; esac; }
phase_sar() {
  say "phase sar: P = $SAR_PS x $MODELS, $GRAPH, ${LAYERS}x$HIDDEN, $EPOCHS epochs"
  local reserve=0 P m
  calib_pending && [ "$CAL" != none ] && reserve=$CAL_RESERVE
  for P in $SAR_PS; do for m in $MODELS; do run sar "$P" "$m" "" "$reserve"; done; done
}
phase_oneshot() {
  say "phase oneshot: P = $ONESHOT_PS x $MODELS (P = 1 is the sar run: one worker, one path)"
  local P m
  for P in $ONESHOT_PS; do for m in $MODELS; do [ "$P" = 1 ] || run oneshot "$P" "$m"; done; done
}
phase_repeat() {
  say "phase repeat: the sar runs again, last first (*_r2.json), while time is left"
  local list=() P m i
  for P in $SAR_PS; do for m in $MODELS; do list+=("$P $m"); done; done
  for (( i=${#list[@]}-1; i>=0; i-- )); do
    set -- ${list[$i]}; run sar "$1" "$2" _r2 "$VAL_RESERVE"
  done
}

# ---------------------------------------------------------------------------------------------------------- calib
cal_watch() {  # stop the full calibration at once when its own estimate for a quiet machine already exceeds the limit
  local logf=$1 so_far=$2 exp
  [ -n "${CAL_CHECKED:-}" ] && return 0
  exp=$(sed -n 's/.*expected ~\([0-9.]*\) min on a quiet machine.*/\1/p' "$logf" | head -1)
  [ -z "$exp" ] && return 0
  CAL_CHECKED=1
  exp=$(awk -v m="$exp" 'BEGIN {printf "%d", m * 60}')
  say "  calibration expects ~${exp}s on a quiet machine; allowed ${CAL_LIMIT}s"
  if [ "$exp" -gt "$CAL_LIMIT" ]; then say "  cannot finish in time: stopped"; return 1; fi
  return 0
}
calibrate() {  # kind(full|quick) limit_s
  local kind=$1 flags=""; CAL_LIMIT=$2; CAL_CHECKED=""
  [ "$kind" = quick ] && flags=--quick
  say "  calibrate $kind (limit ${CAL_LIMIT}s)"
  WATCH=$([ "$kind" = full ] && echo cal_watch) step "cal-$kind" "$CAL_LIMIT" "$R/calibrate_$kind.log" \
      "${SARLAB[@]}" calibrate $flags --accept-implausible --force --out "$R/profile_$kind.json" \
      --json "$R/calibrate_${kind}_summary.json"
  say "  calibrate $kind rc=$STEP_RC wall ${STEP_S}s: $(grep -v '^\s*$' "$R/calibrate_$kind.log" | tail -2 | tr '\n' ' ')"
  echo "calibrate $kind rc=$STEP_RC wall_s=$STEP_S limit_s=$CAL_LIMIT" >> "$R/calibration_walls.txt"
  pack
  [ "$STEP_RC" = 0 ] && [ -s "$R/profile_$kind.json" ]
}
phase_calib() {
  CAL_DONE=1
  say "phase calib ($CAL)"
  [ "$CAL" = none ] && return
  local lim
  if [ "$CAL" = full ]; then
    lim=$(( $(left) - QUICK_MAX )); [ $lim -gt "$CAL_MAX" ] && lim=$CAL_MAX
    if [ $lim -ge 60 ] && calibrate full $lim; then PROFILE=$R/profile_full.json; return; fi
    [ $lim -lt 60 ] && say "  skip the full calibration: ${lim}s left for it"
  fi
  lim=$(left); [ $lim -gt "$QUICK_MAX" ] && lim=$QUICK_MAX
  if [ $lim -ge 20 ]; then calibrate quick $lim && PROFILE=$R/profile_quick.json
  else say "  skip calibrate --quick: ${lim}s left"; fi
}

# ---------------------------------------------------------------------------------------------------------- validate
validate() {  # name profile-spec limit: `sarlab simulate --validate` of every record
  local name=$1 spec=$2 lim=$3
  step "val-$name" "$lim" "$R/validate_$name.log" "${SARLAB[@]}" simulate --validate "$R"/records/*.json \
      --profile "$spec" --validation-out "$R/validation_$name.csv" --force
  say "  validate $name rc=$STEP_RC ${STEP_S}s: $(grep 'median |error|' "$R/validate_$name.log" | tail -1)"
  pack
}
phase_validate() {
  say "phase validate"
  ls "$R"/records/*.json > /dev/null 2>&1 || { say "  no records"; return; }
  if [ -n "${PROFILE:-}" ]; then
    if [ "$(left)" -ge 30 ]; then validate own "$PROFILE" $(( $(left) - 5 )); else say "  skip: $(left)s left"; fi
  fi
  if [ -n "$VM_PROFILE" ] && [ "$(left)" -ge 40 ]; then
    validate described "describe:base=$VM_PROFILE,cores=$(nproc)" $(( $(left) - 5 ))
  else say "  skip the described profile (done at home by validate_here.sh)"; fi
}

say "device.sh: root $ROOT, work $WORK, deadline ${DEADLINE_S}s, phases: $PHASES$([ "$SMALL" = 1 ] && echo ' (SMALL)')"
for ph in $PHASES; do
  if [ "$(left)" -le 5 ]; then say "deadline: phase $ph and the rest skipped"; break; fi
  "phase_$ph"
  say "phase $ph done"
  pack
done
say "device.sh done: $(ls "$R"/records/*.json 2>/dev/null | wc -l) record files, profile ${PROFILE:-none}"
pack
exit 0
}
