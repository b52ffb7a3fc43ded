#!/bin/bash
# The shipped default profile (simulator/profiles/epyc-2core.json) before and after its replacement, on committed
# records it was not fitted to. Usage: bash results/host_model/shipped_profile/compare.sh [OLD_REV]
# OLD_REV (default ab0d224) is the commit whose epyc-2core.json is "before". Writes summary.csv beside this script
# and the per-configuration validations under .cache/shipped_profile/ (ignored). Simulation only: ~2 min on 2 cores.
set -eu
OLD_REV=${1:-ab0d224}
cd "$(dirname "$0")/../../.."
D=results/host_model/shipped_profile; W=.cache/shipped_profile; mkdir -p $W
git show "$OLD_REV:simulator/profiles/epyc-2core.json" > $W/before.json
cp simulator/profiles/epyc-2core.json $W/after.json
F=results/host_model/families; Q=results/host_model/quiet/records; C=results/validation_c12
val() { # set name, then validate's arguments (records, options)
  local set=$1; shift
  for p in before after; do
    .venv/bin/sarlab simulate --validate "$@" --profile $W/$p.json --validation-out $W/${set}_$p.csv \
      > $W/${set}_$p.log 2>&1
  done
}
val quiet_2026-11-27 $Q/two_*.json
val s8 $F/records_s8/both_*.json
val s9 $F/records_s9/both_*.json
val s11 $F/records_s11/both_*.json
val c12_loopback_rss $C/validation_c12_gcn_sage.csv $C/validation_c12_gat.csv --warmup 2
val c12_network_rss $C/c12_gcn_sage_500mbit.csv $C/c12_gcn_sage_1gbit.csv $C/c12_gat_200mbit.csv \
  $C/c12_gat_fused_400mbit.csv --warmup 2 \
  --link $C/link_veth_200mbit.json $C/link_veth_400mbit.json $C/link_veth_500mbit.json $C/link_veth_1gbit.json
.venv/bin/python - $W $D/summary.csv <<'PY'
import sys
import pandas as pd
w, out = sys.argv[1:3]
rows = []
for s in ("quiet_2026-11-27", "s8", "s9", "s11", "c12_loopback_rss", "c12_network_rss"):
    for p in ("before", "after"):
        v = pd.read_csv(f"{w}/{s}_{p}.csv")
        t, m = 100 * v["time_error"].abs(), 100 * v["memory_error"].abs()
        rows.append({"records": s, "profile": p, "allocator": ",".join(sorted(set(v["mem_method"]))), "n": len(v),
                     "time_median_pct": t.median(), "time_worst_pct": t.max(), "rows_over_30": int((t > 30).sum()),
                     "time_bias_pct": 100 * v["time_error"].median(),
                     "memory_median_pct": m.median(), "memory_worst_pct": m.max()})
df = pd.DataFrame(rows).round(1)
df.to_csv(out, index=False)
print(df.to_string(index=False))
PY
