#!/bin/bash
# Run HERE after the device call (README.md beside this file): unpack what device.sh brought back and validate its
# records with `sarlab simulate --validate`:
#   own        the profile calibrated there (profile_full.json; profile_quick.json where the full one did not finish)
#   described  this project's own 2-core VM calibration described as the device: describe:base=VM,cores=C
#   described_spec  the same plus the two numbers a spec sheet would give, taken from the device's profile: one
#              core's GEMM rate and the memory bandwidth (only where the device calibrated)
# Usage: bash results/host_model/manycore/validate_here.sh TARBALL [TAG]
#   TARBALL  manycore.tar.gz from the run tool's files (its folder manycore_run/)
#   TAG      folder under results/host_model/manycore/ (default: h200_<date of the run>)
#   VM_PROFILE (env) the base of the described profiles (default: the newest families/profile_2core_s*.json)
# Writes into results/host_model/manycore/TAG/: the unpacked run (records/, profiles, logs), validation_*.csv/.png/
# .log and table.md (machine, cores, P, T, model, mode, measured, predicted, error), and prints the table.
set -euo pipefail
TARBALL=$(realpath "${1:?usage: validate_here.sh TARBALL [TAG]}")
cd "$(dirname "$0")/../../.."
ROOT=$PWD
SARLAB=${SARLAB:-$ROOT/.venv/bin/sarlab}
PY=${PY:-$ROOT/.venv/bin/python}
VM_PROFILE=${VM_PROFILE:-$(ls results/host_model/families/profile_2core_s*[0-9].json | sort -V | tail -1)}

TMP=$(mktemp -d /tmp/manycore-unpack.XXXXXX); trap 'rm -rf "$TMP"' EXIT
tar -xzf "$TARBALL" -C "$TMP"
[ -d "$TMP/manycore_run" ] || { echo "no manycore_run/ in $TARBALL" >&2; exit 1; }
TAG=${2:-h200_$(sed -n 's/^date: \([0-9-]*\)T.*/\1/p' "$TMP/manycore_run/env.txt" 2>/dev/null | tr -d - || true)}
[ "$TAG" = h200_ ] && TAG=h200_$(date -u +%Y%m%d)
D=results/host_model/manycore/$TAG
mkdir -p "$D"
cp -a "$TMP/manycore_run/." "$D/"
echo "unpacked into $D: $(ls "$D"/records/*.json 2>/dev/null | wc -l) record files"
ls "$D"/records/*.json > /dev/null 2>&1 || { echo "no records to validate" >&2; exit 1; }
CORES=$(sed -n 's/.*affinity \([0-9]*\) cores.*/\1/p' "$D/env.txt" | head -1)
CORES=${CORES:-$(sed -n 's/^nproc: \([0-9]*\).*/\1/p' "$D/env.txt" | head -1)}
OWN=""
for k in full quick; do
  if [ -s "$D/profile_$k.json" ]; then OWN=$D/profile_$k.json; break; fi
done

val() {  # name profile-spec: the project's validation, its log and CSV (and PNG) in $D
  local name=$1 spec=$2
  echo; echo "== $name: --profile $spec"
  if "$SARLAB" simulate --validate "$D"/records/*.json --profile "$spec" --validation-out "$D/validation_$name.csv" \
       --force > "$D/validate_$name.log" 2>&1; then
    grep -v '^[0-9]* records from ' "$D/validate_$name.log"   # the file list is long; the rest is the table
  else
    echo "validation $name FAILED:"; tail -20 "$D/validate_$name.log"; rm -f "$D/validation_$name.csv"
  fi
}
[ -n "$OWN" ] && val own "$OWN"
val described "describe:base=$VM_PROFILE,cores=$CORES"
if [ -n "$OWN" ]; then
  # the device's one-core GEMM rate and its memory bandwidth (what its elementwise benchmark reached on all cores:
  # sarlab.simulator.hardware.describe.base_bandwidth), read from its own profile
  SPEC=$("$PY" - "$OWN" <<'PY'
import sys
from sarlab.simulator.hardware.describe import base_bandwidth
from sarlab.simulator.hardware.profile import load_profile
p = load_profile(sys.argv[1])
print(f"gemm={p.op('gemm').rate:.4g},membw={base_bandwidth(p) / 1e9:.4g}")
PY
) && val described_spec "describe:base=$VM_PROFILE,cores=$CORES,$SPEC"
fi

# one table of every validation: the columns the issue asks for, from the validations' CSVs (nothing recomputed)
"$PY" - "$D" "$VM_PROFILE" <<'PY' | tee "$D/table.md"
import json, re, sys
from pathlib import Path
import pandas as pd
d, vm = Path(sys.argv[1]), sys.argv[2]
env = (d / "env.txt").read_text() if (d / "env.txt").exists() else ""
cpu = (re.findall(r"cpu model: (.*)", env) or ["?"])[0].strip()
cores = (re.findall(r"affinity (\d+) cores", env) or re.findall(r"nproc: (\d+)", env) or ["?"])[0]
names = {"own": "its own calibration", "described": f"described: {Path(vm).name} + cores={cores}",
         "described_spec": f"described: {Path(vm).name} + cores, gemm, membw"}
for name, label in names.items():
    f = d / f"validation_{name}.csv"
    if not f.exists():
        continue
    t = pd.read_csv(f).sort_values(["mode", "model", "workers"])
    print(f"\n{cpu} ({cores} cores), profile {label}\n")
    print("| machine | cores | P | T | model | mode | measured (s) | predicted (s) | error | memory error | regime |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for _, r in t.iterrows():
        print(f"| {cpu} | {cores} | {int(r.workers)} | {r.threads_used:g} | {r.model} | {r['mode']} | "
              f"{r.measured_epoch_time_s:.3g} | {r.predicted_epoch_time_s:.3g} | {r.time_error:+.1%} | "
              f"{r.memory_error:+.1%} | {r.host_regime} |")
    e, m = t.time_error.abs(), t.memory_error.abs()
    print(f"\nmedian |time error| {e.median():.1%} (max {e.max():.1%}, over 30 %: {int((e > 0.3).sum())} of {len(t)}); "
          f"median |memory error| {m.median():.1%} (max {m.max():.1%})")
PY
echo; echo "wrote $D/table.md; calibration wall times: $(cat "$D/calibration_walls.txt" 2>/dev/null | tr '\n' ';')"
