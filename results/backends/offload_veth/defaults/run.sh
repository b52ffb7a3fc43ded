#!/bin/bash
# ccl on emulated one-rank hosts after 118e9b6 (no oneCCL worker thread where the machine's ranks outnumber its cores),
# gloo beside it (alternating per configuration), then ccl with the thread forced (CCL_WORKER_OFFLOAD=1) at N = 4, 8
cd "$(dirname "$0")/../../../.."  # the repository root
O=${1:-.cache/offload_veth_defaults}; mkdir -p $O  # the committed files came from: run.sh results/backends/offload_veth/defaults
G="--net veth:rate=1gbit --graph synthetic:nodes=20000,degree=10,features=64,classes=8,seed=0 --models gcn,sage,gat --modes sar,oneshot --epochs 6 --hidden 64 --layers 2"
echo "$(date -u +%H:%M:%S) defaults" >> $O/times.txt
.venv/bin/sarlab bench engine $G --workers 2,4,8 --backend gloo,ccl --prefix veth_defaults --out $O > $O/veth_defaults.log 2>&1
echo "$(date -u +%H:%M:%S) thread" >> $O/times.txt
CCL_WORKER_OFFLOAD=1 .venv/bin/sarlab bench engine $G --workers 4,8 --backend ccl --prefix veth_ccl_thread --out $O > $O/veth_ccl_thread.log 2>&1
echo "$(date -u +%H:%M:%S) done" >> $O/times.txt
