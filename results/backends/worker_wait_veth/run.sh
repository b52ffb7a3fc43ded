# ccl on veth N=8: CCL_WORKER_WAIT=0 vs 1 (explicit), alternating, 2 repeats; gloo once between
set -x
cd /work/main
O=results/backends/worker_wait_veth; mkdir -p $O
date -u
for step in ccl:0:r1 ccl:1:r1 gloo:x:r1 ccl:1:r2 ccl:0:r2; do
  IFS=: read b w r <<< "$step"
  env $( [ $w != x ] && echo CCL_WORKER_WAIT=$w ) .venv/bin/sarlab bench engine \
      --graph synthetic:nodes=20000,degree=10,features=64,classes=8,seed=0 \
      --models gcn,sage,gat --modes sar,oneshot --workers 8 --epochs 6 --hidden 64 --layers 2 --net veth:rate=1gbit \
      --backend $b --prefix ${b}_ww${w}_$r --out $O || exit 22
  uptime
done
date -u
