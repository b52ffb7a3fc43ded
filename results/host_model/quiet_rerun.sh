#!/bin/bash
# issue 39 on a quieter VM: quick calibrations on 1 and 2 cores, the full calibration's wall time, the cross-core grid
cd /work/main
D=results/host_model/quiet; mkdir -p $D/records
LOG=$D/runs.log
echo "$(date -u +%T) start load=$(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG
t0=$(date +%s); taskset -c 0 .venv/bin/sarlab calibrate --quick --accept-implausible --out $D/profile_1core_quick.json > $D/calibrate_1core_quick.log 2>&1
echo "$(date -u +%T) calibrate --quick on core 0: rc=$? $(( $(date +%s)-t0 ))s load=$(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG
t0=$(date +%s); .venv/bin/sarlab calibrate --quick --accept-implausible --out $D/profile_2core_quick.json > $D/calibrate_2core_quick.log 2>&1
echo "$(date -u +%T) calibrate --quick on both cores: rc=$? $(( $(date +%s)-t0 ))s load=$(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG
run() { # tag cpus P T model nodes
  tag=$1; cpus=$2; P=$3; T=$4; m=$5; n=$6
  f=$D/records/${tag}_${m}_n${n}_P${P}_T${T}.json
  g="synthetic:nodes=$n,degree=20,features=64,classes=16,seed=0"
  t0=$(date +%s)
  timeout 400 taskset -c $cpus .venv/bin/sarlab train -q --graph $g --workers $P --threads $T --model $m \
     --layers 3 --hidden 128 --mode sar --epochs 4 --timeout 300 --json $f > /dev/null 2>&1
  echo "$(date -u +%T) $tag $m n=$n P=$P T=$T rc=$? $(( $(date +%s)-t0 ))s load=$(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG
}
for n in 20000 50000; do
 for m in gcn sage gat; do
  run two 0,1 1 2 $m $n; run two 0,1 2 1 $m $n; run two 0,1 4 1 $m $n
  run one 0 1 1 $m $n; run one 0 2 1 $m $n
 done
done
two=$(ls $D/records/two_*.json); one=$(ls $D/records/one_*.json)
.venv/bin/sarlab simulate --validate $two --profile describe:base=$D/profile_1core_quick.json,cores=2 \
   --validation-out $D/validation_1core_calibration_to_2core_runs.csv > $D/validate_1to2.log 2>&1
.venv/bin/sarlab simulate --validate $one --profile describe:base=$D/profile_2core_quick.json,cores=1 \
   --validation-out $D/validation_2core_calibration_to_1core_runs.csv > $D/validate_2to1.log 2>&1
.venv/bin/sarlab simulate --validate $two --profile $D/profile_2core_quick.json \
   --validation-out $D/validation_2core_calibration_to_2core_runs.csv > $D/validate_2to2.log 2>&1
echo "$(date -u +%T) grid and validation done load=$(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG
t0=$(date +%s); .venv/bin/sarlab calibrate --accept-implausible --out /tmp/hq/full_profile.json > $D/calibrate_full.log 2>&1
echo "$(date -u +%T) full calibrate on both cores: rc=$? $(( $(date +%s)-t0 ))s load=$(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG
echo "$(date -u +%T) ALL DONE" >> $LOG
