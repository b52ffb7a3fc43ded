#!/bin/bash
# ccl where ranks share cores: the new default (CCL_WORKER_OFFLOAD=0) against the earlier one (CCL_WORKER_WAIT=1)
# and gloo, on the third validation's graphs, loopback, one sitting, the three rotating their order per configuration.
# Run from the repository root: bash results/backends/offload/run.sh
set -euo pipefail
D=results/backends/offload
BIG="--nodes 110000 --degree 28 --features 80 --hidden 240"
GAT="--nodes 40000 --degree 24 --hidden 96 --batchnorm"
i=0
run() {  # variant model mode N graph-flags
  local v=$1 model=$2 mode=$3 n=$4; shift 4
  local envs=() backend=ccl
  case $v in
    gloo) backend=gloo ;;
    offload0) ;;                                          # the default now
    workerwait) envs=(CCL_WORKER_OFFLOAD=1 CCL_WORKER_WAIT=1) ;;  # the default before
  esac
  env "${envs[@]}" .venv/bin/sarlab bench engine "$@" --models "$model" --modes "$mode" --workers "$n" --epochs 5 \
    --memory rss --backend $backend --timeout 120 --out $D --prefix "${model}_${mode}_n${n}_$v" > /dev/null
  echo "$(date -u +%T) $v $model $mode N=$n: $(grep '^| ' $D/${model}_${mode}_n${n}_$v.md | tail -1)"
}
config() {  # model mode N graph-flags: the three variants, order rotated per configuration
  local order=(gloo offload0 workerwait)
  for k in 0 1 2; do run "${order[$(( (i + k) % 3 ))]}" "$@"; done
  i=$((i + 1))
}
for n in 8 4; do
  config sage sar $n $BIG
  config gcn sa $n $BIG
  config gat sar $n $GAT
done
config gcn sar 8 $BIG
config gcn oneshot 8 $BIG
config sage sa 8 $BIG
config sage oneshot 8 $BIG
config gat sa 8 $GAT
config gat oneshot 8 $GAT
