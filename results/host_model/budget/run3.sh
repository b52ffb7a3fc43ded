#!/bin/bash
set -u
# The second sitting (README.md): run2.sh (full on core 0), then --quick and the full calibration on both cores.
cd "$(dirname "$0")/../../.."
bash results/host_model/budget/run2.sh
D=results/host_model/budget
for name in 2core_quick_2:--quick 2core_full_2:; do
  tag=${name%%:*}; flag=${name#*:}
  echo "calibrate_$tag start $(date -u +%FT%TZ) $(uptime)" >> $D/runs.log
  /usr/bin/time -f "%e s wall, %U s user, %S s sys" .venv/bin/sarlab calibrate $flag --accept-implausible \
     --out $D/profile_$tag.json > $D/calibrate_$tag.log 2>&1
  echo "calibrate_$tag rc $? end $(date -u +%FT%TZ) $(uptime)" >> $D/runs.log
  tail -1 $D/calibrate_$tag.log >> $D/runs.log
done
echo ALLDONE >> $D/runs.log
