#!/bin/bash
# The second quiet-window timing (results/host_model/budget/README.md): the full calibration on core 0 after
# commbench's third round was dropped and the live first-use probe forked.
set -u
cd "$(dirname "$0")/../../.."
D=results/host_model/budget
echo "calibrate_1core_full_2 start $(date -u +%FT%TZ) $(uptime)" >> $D/runs.log
/usr/bin/time -f "%e s wall, %U s user, %S s sys" taskset -c 0 .venv/bin/sarlab calibrate --accept-implausible \
   --out $D/profile_1core_full_2.json > $D/calibrate_1core_full_2.log 2>&1
echo "calibrate_1core_full_2 rc $? end $(date -u +%FT%TZ) $(uptime)" >> $D/runs.log
tail -1 $D/calibrate_1core_full_2.log >> $D/runs.log
