"""Read a memory report: the memory columns of sarlab's records, and why a worker's memory falls with N.

Tutorial: docs/tutorials/memory_report.rst. About 20 s on 2 cores (two runs of 2 epochs); writes nothing.
"""
import pandas as pd

import sarlab
from sarlab import EngineConfig, ModelConfig

GRAPH = "synthetic:nodes=8000,degree=10,features=64,classes=8,seed=0"
MODEL = ModelConfig(model="sage", layers=3, hidden=256)

# 1. Train the same model on 1 and on 2 workers; every record carries the worker's memory.
records = pd.concat([sarlab.run(GRAPH, workers=n, model=MODEL, epochs=2, engine=EngineConfig(mode="sar")).records
                     for n in (1, 2)])

# 2. The columns, per (workers, rank, epoch), all MEASURED on this machine:
#    baseline_mem_bytes  what the worker holds before training: its partition, the model, the optimizer,
#                        torch itself (read after set-up)
#    peak_mem_bytes      the highest it reached during that epoch (baseline included)
mib = records.assign(baseline_MiB=records.baseline_mem_bytes / 2**20, peak_MiB=records.peak_mem_bytes / 2**20,
                     above_MiB=(records.peak_mem_bytes - records.baseline_mem_bytes) / 2**20)
print(mib[["workers", "rank", "epoch", "baseline_MiB", "peak_MiB", "above_MiB"]].round(1).to_string(index=False))

# 3. The summary a table would show: per worker count, the largest peak above the baseline over ranks and epochs.
#    That part is what training costs (activations kept for the backward, the remote rows in flight); it is the
#    part SAR divides by N. The baseline is mostly torch and the process, the same at any N.
above = mib.groupby("workers").above_MiB.max()
print(above.round(1).to_string())
print(f"peak above baseline per worker: {above[1]:.0f} MiB at N = 1, {above[2]:.0f} MiB at N = 2 "
      f"({above[1] / above[2]:.1f}x less)")
assert above[2] < above[1], "a worker of 2 should need less than one worker alone"
