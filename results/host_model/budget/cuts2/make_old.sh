#!/bin/sh
# The "old" side of the A/B scripts: HEAD's (a749630) commbench, progressbench, sharebench and hostbench as
# top-level modules h18old_* in $1 (default /tmp/h18/oldmods), their self-references renamed; run a script with
# PYTHONPATH=$1 so that the zygote (and so every forked rank) finds them.
set -e
OUT=${1:-/tmp/h18/oldmods}
mkdir -p "$OUT"
for m in commbench progressbench sharebench; do
  git show a749630:real/calibration/$m.py | sed "s/sarlab\.real\.calibration\.$m\b/h18old_$m/g" > "$OUT/h18old_$m.py"
done
git show a749630:real/calibration/hostbench.py \
  | sed "s/from sarlab.real.calibration.sharebench import GAP_S/from h18old_sharebench import GAP_S/" > "$OUT/h18old_hostbench.py"
