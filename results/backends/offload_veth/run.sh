#!/bin/bash
# exploratory: ccl on emulated one-rank hosts at N = 8, with and without CCL_WORKER_OFFLOAD=0, gloo once between
cd "$(dirname "$0")/../../.."  # the repository root
O=${1:-.cache/offload_veth}; mkdir -p $O  # the committed files came from: run.sh results/backends/offload_veth
run() { # $1 label, $2 backend, rest env
  local label=$1 backend=$2; shift 2
  echo "$(date -u +%H:%M:%S) $label" >> $O/times.txt
  env "$@" .venv/bin/sarlab bench engine --net veth:rate=1gbit --graph synthetic:nodes=20000,degree=10,features=64,classes=8,seed=0 \
    --models gcn,sage,gat --modes sar,oneshot --workers 8 --epochs 6 --hidden 64 --layers 2 --backend $backend \
    --prefix $label --out $O > $O/$label.log 2>&1
}
run ccl_r1 ccl X=1; run ccloff_r1 ccl CCL_WORKER_OFFLOAD=0; run gloo gloo X=1
run ccloff_r2 ccl CCL_WORKER_OFFLOAD=0; run ccl_r2 ccl X=1
echo "$(date -u +%H:%M:%S) done" >> $O/times.txt
