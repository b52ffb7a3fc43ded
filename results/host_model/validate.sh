#!/bin/bash
# cross-core validation on the 2-core VM (issue 39 item 3)
cd /work/main
R=results/host_model/records; O=results/host_model
two=$(ls $R/two_*.json | xargs grep -L '^skip' ); one=$(ls $R/one_*.json | xargs grep -L '^skip')
echo "$(date -u +%T) validate start: $(uptime)"
.venv/bin/sarlab simulate --validate $two --profile describe:base=results/host_model/profile_1core_quick.json,cores=2 \
   --validation-out $O/validation_1core_calibration_to_2core_runs.csv
.venv/bin/sarlab simulate --validate $one --profile describe:base=results/host_model/profile_2core_quick.json,cores=1 \
   --validation-out $O/validation_2core_calibration_to_1core_runs.csv
.venv/bin/sarlab simulate --validate $two --profile results/host_model/profile_2core_quick.json \
   --validation-out $O/validation_2core_calibration_to_2core_runs.csv
echo "$(date -u +%T) validate done: $(uptime)"
