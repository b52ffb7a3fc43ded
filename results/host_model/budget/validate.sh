#!/bin/bash
# Validations of the budget's profiles against EXISTING records (no new runs): as results/host_model/quiet_fix/
# README.md did with its profiles, and this VM's own campaign-12 loopback validation (30 configurations).
# `validate.sh` prices the first sitting's profiles; `validate.sh _2` the second sitting's (profile_*_2.json), into
# files with the same suffix.
set -u
S2=${1:-}
cd "$(dirname "$0")/../../.."
D=results/host_model/budget
Q=results/host_model/quiet_fix
P1=$D/profile_1core_full$S2.json
P2=$D/profile_2core_full$S2.json
S="describe:base=$P1,cores=2"
.venv/bin/sarlab simulate --validate $Q/records/two_*.json --profile $S \
   --validation-out $D/validation_1core_full_to_2core_runs$S2.csv > $D/validate_1to2$S2.log 2>&1
.venv/bin/sarlab simulate --validate results/host_model/quiet/records/two_*.json \
   results/host_model/quiet/records_rss/two_*.json results/host_model/quiet_alloc/records/two_*.json \
   --profile $S --validation-out $D/validation_1core_full_to_earlier_2core_runs$S2.csv > $D/validate_1to2_earlier$S2.log 2>&1
.venv/bin/sarlab simulate --validate $Q/records/two_*.json --profile $D/profile_2core_quick$S2.json \
   --validation-out $D/validation_2core_quick_to_2core_runs$S2.csv > $D/validate_quick_2to2$S2.log 2>&1
.venv/bin/sarlab simulate --validate $Q/records/two_*.json --profile $P2 \
   --validation-out $D/validation_2core_full_to_2core_runs$S2.csv > $D/validate_2to2$S2.log 2>&1
C=results/validation_c12
.venv/bin/sarlab simulate --validate $C/validation_c12_gcn_sage.csv $C/validation_c12_gat.csv --warmup 2 \
   --profile $P2 --validation-out $D/validation_2core_full_to_c12_loopback$S2.csv > $D/validate_c12$S2.log 2>&1
