"""Predict a cluster before you run: epoch time and memory per worker of GraphSAGE on ogbn-products across the
SAR paper's cluster, then the planner's pick. Every number printed here is PREDICTED by the SimPy model.

Tutorial: docs/tutorials/predict_cluster.rst. Runs in about 10 s on 2 cores; writes nothing.
"""
import sarlab
from sarlab.simulator.hardware.profile import load_profile

# 1. The machine: a preset describing the paper's cluster (assumed figures, not a calibration of it).
cluster = load_profile("icelake-hdr200")
print(f"profile {cluster.name}: {cluster.meta['machine']}")
print(f"  {cluster.cores_per_host} cores and {cluster.mem_per_host_bytes / 2**30:.0f} GiB per host, "
      f"{cluster.workers_per_host} worker per host, "
      f"{cluster.inter_host.bandwidth_Bps * 8 / 1e9:.0f} Gbit/s between hosts")

# 2. One predicted epoch per (workers, mode): 3-layer GraphSAGE, hidden 256, as in the paper's figure 3.
table = sarlab.simulate("ogbn-products", workers=(4, 8, 16), model="sage", modes="sar,oneshot",
                        profile=cluster, layers=3, hidden=256, summary=True)
table["peak_GiB_per_worker"] = table.peak_mem_above_baseline_bytes / 2**30
print("\nPREDICTED (SimPy model, profile icelake-hdr200; one worker per host):")
columns = ["mode", "workers", "epoch_time_s", "comm_wait_mean_s", "peak_GiB_per_worker"]
print(table[columns].round(3).to_string(index=False))

sar = table[table["mode"] == "sar"].set_index("workers").peak_GiB_per_worker
assert sar.is_monotonic_decreasing, "SAR's memory per worker should fall as workers are added"
print(f"\nSAR's predicted peak per worker falls {sar.iloc[0] / sar.iloc[-1]:.1f}x from 4 to 16 workers")

# 3. The planner: which strategy and worker count, for 100 epochs, by time, cost and value.
picks = sarlab.plan("ogbn-products", epochs=100, model="sage", layers=3, hidden=256,
                    strategies="sar,oneshot", resources="cpu", max_workers=16, profile=cluster)["picks"]
for goal, pick in picks.items():
    print(f"{goal:>12}: {pick['strategy']} on {pick['workers']} x {pick['resource']}: "
          f"{pick['time_s']:.0f} s, ${pick['cost_usd']:.2f} (predicted)")
