#!/bin/bash
# cross-core validation grid: real runs (records) on both cores and confined to core 0
cd /work/main
OUT=/tmp/hm/rec; mkdir -p $OUT
LOG=/tmp/hm/grid.log
run() { # tag cpus P T model nodes
  tag=$1; cpus=$2; P=$3; T=$4; m=$5; n=$6
  f=$OUT/${tag}_${m}_n${n}_P${P}_T${T}.json
  [ -s $f ] && return
  g="synthetic:nodes=$n,degree=20,features=64,classes=16,seed=0"
  echo "$(date -u +%T) start $tag $m n=$n P=$P T=$T load=$(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG
  t0=$(date +%s)
  taskset -c $cpus .venv/bin/sarlab train -q --graph $g --workers $P --threads $T --model $m \
     --layers 3 --hidden 128 --mode sar --epochs 4 --timeout 300 --json $f > $OUT/${tag}_${m}_n${n}_P${P}_T${T}.log 2>&1
  echo "$(date -u +%T) done rc=$? $(( $(date +%s)-t0 ))s load=$(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG
}
for n in 20000 50000; do
 for m in gcn sage gat; do
  run two 0,1 1 2 $m $n
  run two 0,1 2 1 $m $n

  run two 0,1 4 1 $m $n
  run one 0 1 1 $m $n
  run one 0 2 1 $m $n
 done
done
echo "$(date -u +%T) ALL DONE" >> $LOG
