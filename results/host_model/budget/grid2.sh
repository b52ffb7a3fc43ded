#!/bin/bash
# A fresh both-core grid in the sitting of run2.sh's calibrations (the quiet_fix grid: GCN/SAGE/GAT 3 x 128, sar,
# 4 epochs, synthetic 20k nodes; P = 1 (T = 2), 2, 4 (T = 1); live and rss), then the validations against it.
set -u
cd "$(dirname "$0")/../../.."
D=results/host_model/budget; R=$D/records_2; mkdir -p $R
LOG=$D/runs.log
ld() { cut -d' ' -f1-3 /proc/loadavg; }
echo "$(date -u +%T) grid2 start load=$(ld) HEAD=$(git rev-parse --short HEAD)" >> $LOG
run() { # P T model memory
  P=$1; T=$2; m=$3; mem=$4
  f=$R/two_${mem}_${m}_n20000_P${P}_T${T}.json
  t0=$(date +%s)
  timeout 400 .venv/bin/sarlab train -q --graph synthetic:nodes=20000,degree=20,features=64,classes=16,seed=0 \
     --workers $P --threads $T --model $m --layers 3 --hidden 128 --mode sar --epochs 4 --timeout 300 --memory $mem \
     --json $f > /dev/null 2>&1
  echo "$(date -u +%T) two $mem $m n=20000 P=$P T=$T rc=$? $(( $(date +%s)-t0 ))s load=$(ld)" >> $LOG
}
for m in gcn sage gat; do
  for mem in live rss; do run 1 2 $m $mem; run 2 1 $m $mem; run 4 1 $m $mem; done
done
echo "$(date -u +%T) grid2 done load=$(ld)" >> $LOG
.venv/bin/sarlab simulate --validate $R/two_*.json --profile describe:base=$D/profile_1core_full_2.json,cores=2 \
   --validation-out $D/validation_1core_full_2_to_same_sitting_runs.csv > $D/validate_1to2_same_sitting.log 2>&1
.venv/bin/sarlab simulate --validate $R/two_*.json --profile $D/profile_2core_full_2.json \
   --validation-out $D/validation_2core_full_2_to_same_sitting_runs.csv > $D/validate_2to2_same_sitting.log 2>&1
.venv/bin/sarlab simulate --validate $R/two_*.json --profile describe:base=$D/profile_1core_full.json,cores=2 \
   --validation-out $D/validation_1core_full_to_same_sitting_runs.csv > $D/validate_1to2_first_profile_same_sitting.log 2>&1
