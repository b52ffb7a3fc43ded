#!/bin/bash
# The quiet-window timings of issue 39's calibration budget (results/host_model/budget/README.md):
# a full calibration confined to core 0, a quick and a full one on both cores; uptime before and after each.
set -u
cd "$(dirname "$0")/../../.."
D=results/host_model/budget
step() {  # NAME COMMAND...: run it under /usr/bin/time, its log in $D/NAME.log, the load in $D/runs.log
    local name=$1; shift
    echo "$name start $(date -u +%FT%TZ) $(uptime)" >> $D/runs.log
    /usr/bin/time -f "%e s wall, %U s user, %S s sys" "$@" > $D/$name.log 2>&1
    echo "$name rc $? end $(date -u +%FT%TZ) $(uptime)" >> $D/runs.log
    tail -1 $D/$name.log >> $D/runs.log
}
step calibrate_1core_full taskset -c 0 .venv/bin/sarlab calibrate --accept-implausible --out $D/profile_1core_full.json
step calibrate_2core_quick .venv/bin/sarlab calibrate --quick --accept-implausible --out $D/profile_2core_quick.json
step calibrate_2core_full .venv/bin/sarlab calibrate --accept-implausible --out $D/profile_2core_full.json
