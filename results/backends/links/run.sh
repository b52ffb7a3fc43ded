# netbench gloo vs ccl at veth 1gbit, alternating, 2 repeats each
set -x
cd /work/main
O=results/backends/links; mkdir -p $O
date -u
for r in 1 2; do
  if [ $r = 1 ]; then order="gloo ccl"; else order="ccl gloo"; fi
  for b in $order; do
    .venv/bin/sarlab netbench --net veth:rate=1gbit --backend $b --out $O/link_veth_1gbit_${b}_r$r.json || exit 21
    uptime
  done
done
date -u
