#!/bin/bash
# issue 39, quiet_fix: first-use bytes per allocator, GEMM results on fresh pages priced apart; full calibration on
# core 0, --quick on both cores, a fresh both-core grid (live and rss), engine op profiles, validations.
cd /work/main
D=results/host_model/quiet_fix; mkdir -p $D/records
LOG=$D/runs.log
ld() { cut -d' ' -f1-3 /proc/loadavg; }
echo "$(date -u +%T) start load=$(ld) HEAD=$(git rev-parse --short HEAD) uptime: $(uptime)" >> $LOG
echo "    uncommitted in the tree: $(git status --short | tr '\n' ' ')" >> $LOG
t0=$(date +%s)
/usr/bin/time -f "%e s wall, %U s user, %S s sys" taskset -c 0 .venv/bin/sarlab calibrate --accept-implausible \
   --out $D/profile_1core_full.json > $D/calibrate_1core_full.log 2>&1
echo "$(date -u +%T) full calibrate on core 0: rc=$? $(( $(date +%s)-t0 ))s load=$(ld) uptime: $(uptime)" >> $LOG
t0=$(date +%s)
/usr/bin/time -f "%e s wall, %U s user, %S s sys" .venv/bin/sarlab calibrate --quick --accept-implausible \
   --out $D/profile_2core_quick.json > $D/calibrate_2core_quick.log 2>&1
echo "$(date -u +%T) calibrate --quick on both cores: rc=$? $(( $(date +%s)-t0 ))s load=$(ld) uptime: $(uptime)" >> $LOG
run() { # tag cpus P T model nodes memory
  tag=$1; cpus=$2; P=$3; T=$4; m=$5; n=$6; mem=$7
  f=$D/records/${tag}_${mem}_${m}_n${n}_P${P}_T${T}.json
  g="synthetic:nodes=$n,degree=20,features=64,classes=16,seed=0"
  t0=$(date +%s)
  timeout 400 taskset -c $cpus .venv/bin/sarlab train -q --graph $g --workers $P --threads $T --model $m \
     --layers 3 --hidden 128 --mode sar --epochs 4 --timeout 300 --memory $mem --json $f > /dev/null 2>&1
  echo "$(date -u +%T) $tag $mem $m n=$n P=$P T=$T rc=$? $(( $(date +%s)-t0 ))s load=$(ld)" >> $LOG
}
for m in gcn sage gat; do
  for mem in live rss; do
    run two 0,1 1 2 $m 20000 $mem; run two 0,1 2 1 $m 20000 $mem; run two 0,1 4 1 $m 20000 $mem
  done
done
echo "$(date -u +%T) grid done load=$(ld) uptime: $(uptime)" >> $LOG
mkdir -p $D/op_profile
for m in gcn sage gat; do
  for mem in live rss; do
    t0=$(date +%s)
    timeout 300 taskset -c 0 .venv/bin/python $D/op_profile.py $m $mem $D/profile_1core_full.json \
       $D/op_profile/${m}_${mem}.json > $D/op_profile/${m}_${mem}.log 2>&1
    echo "$(date -u +%T) op_profile $m $mem rc=$? $(( $(date +%s)-t0 ))s load=$(ld)" >> $LOG
  done
done
CAL="synthetic:nodes=12500,degree=30,features=128,classes=16,seed=7"  # the calibration's smallest engine graph
for m in gcn sage; do
  t0=$(date +%s)
  timeout 300 taskset -c 0 .venv/bin/python $D/op_profile.py $m live $D/profile_1core_full.json \
     $D/op_profile/${m}_live_calgraph.json $CAL 256 > $D/op_profile/${m}_live_calgraph.log 2>&1
  echo "$(date -u +%T) op_profile $m live on the calibration graph rc=$? $(( $(date +%s)-t0 ))s load=$(ld)" >> $LOG
done
P1=$D/profile_1core_full.json
.venv/bin/sarlab simulate --validate $D/records/two_*.json --profile describe:base=$P1,cores=2 \
   --validation-out $D/validation_1core_full_to_2core_runs.csv > $D/validate_1to2.log 2>&1
.venv/bin/sarlab simulate --validate $D/records/two_*.json --profile $D/profile_2core_quick.json \
   --validation-out $D/validation_2core_quick_to_2core_runs.csv > $D/validate_quick_2to2.log 2>&1
.venv/bin/sarlab simulate --validate results/host_model/quiet/records/two_*.json \
   results/host_model/quiet/records_rss/two_*.json results/host_model/quiet_alloc/records/two_*.json \
   --profile describe:base=$P1,cores=2 --validation-out $D/validation_1core_full_to_earlier_2core_runs.csv \
   > $D/validate_1to2_earlier.log 2>&1
echo "$(date -u +%T) ALL DONE load=$(ld) uptime: $(uptime)" >> $LOG

