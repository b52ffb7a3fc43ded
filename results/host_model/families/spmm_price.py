"""What the simulator prices for the SpMM ops of one GCN epoch (3 x 128) on one worker and on each rank of two, at
scale 1 and without family factors (the microbenchmarks' own price), beside what p2prof.py measures (p2prof.log):

    .venv/bin/python results/host_model/families/spmm_price.py PROFILE.json P1_DIR P2_DIR

P1_DIR / P2_DIR: one- and two-part partitions of synthetic:nodes=20000,degree=20,features=64,classes=16,seed=0
(`sarlab partition --parts 1|2 --out DIR`). 2026-11-28 with profile_2core_s17.json: one worker 11.4 ms (measured
17.3), two ranks 24.3 ms summed (measured 24.6-27.8).
"""

import sys
from dataclasses import replace

import numpy as np

from sarlab.simulator.hardware.profile import load_profile
from sarlab.simulator.system.costs import CostModel
from sarlab.simulator.workload.layers import layer_plans
from sarlab.simulator.workload.model import ModelSpec
from sarlab.simulator.workload.workload import load_manifest


def main() -> None:
    prof = replace(load_profile(sys.argv[1]).with_scale(1.0), family_scale={})
    cm = CostModel(prof, threads=1)
    plans = layer_plans(ModelSpec("gcn", layers=3, hidden=128), feature_dim=64, num_classes=16)
    for pdir in sys.argv[2:4]:
        st = load_manifest(f"{pdir}/manifest.json")
        parts = len(st.nodes_per_part)
        edges, n, halo = st.edges_per_shard, st.nodes_per_part, st.halo_rows
        for p in range(parts):
            fwd = bwd = 0.0
            for plan in plans:
                for q in range(parts):
                    src = n[p] if q == p else halo[p][q]
                    fwd += sum(float(np.sum(cm.op_seconds(o))) for o in plan.shard_fwd(edges[p][q], n[p], src)
                               if o.family == "spmm")
                    bwd += sum(float(np.sum(cm.op_seconds(o)))
                               for o in plan.shard_bwd(edges[p][q], n[p], src, in_place=q == p) if o.family == "spmm")
            print(f"{parts} part(s), rank {p}: edges {np.asarray(edges[p]).tolist()}, "
                  f"halo {np.asarray(halo[p]).tolist()}: SpMM forward {fwd * 1e3:.1f} ms, backward {bwd * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
