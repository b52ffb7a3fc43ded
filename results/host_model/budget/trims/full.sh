#!/bin/bash
# Windows 3 and 5 (TAG=_interim, _final): the whole full calibration with the trims, on both cores, timed; then the calibration tests.
set -u
cd "$(dirname "$0")/../../../.."
D=results/host_model/budget/trims
echo "calibrate start $(date -u +%FT%TZ) $(uptime)" >> $D/runs.log
/usr/bin/time -f "%e s wall, %U s user, %S s sys" .venv/bin/sarlab calibrate --accept-implausible \
   --out /tmp/meas3/helper_profile.json > $D/calibrate_2core_full${TAG:-}.log 2>&1
echo "calibrate rc $? end $(date -u +%FT%TZ) $(uptime)" >> $D/runs.log
tail -1 $D/calibrate_2core_full${TAG:-}.log >> $D/runs.log
cp /tmp/meas3/helper_profile.json $D/profile_2core_full${TAG:-}.json
.venv/bin/python -m pytest tests/test_simulator_calibrate.py tests/test_simulator_calibrate_kernels.py \
   tests/test_simulator_describe.py tests/test_simulator_spread.py -q -x > $D/tests${TAG:-}.log 2>&1
echo "tests rc $? $(tail -1 $D/tests${TAG:-}.log)" >> $D/runs.log
