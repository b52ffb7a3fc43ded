"""Where one engine epoch's time goes, measured and priced, per op family (issue 39's diagnosis).

``python results/host_model/quiet_fix/op_profile.py MODEL MEMORY PROFILE [OUT.json [GRAPH HIDDEN]]``: one worker of
one thread runs MODEL (3 x HIDDEN, default 128, ``sar``) on GRAPH (default
``synthetic:nodes=20000,degree=20,features=64,classes=16,seed=0``, the validation grid's graph) under MEMORY (``live``
or ``rss``) as ``sarlab train`` would (``sarlab.real.calibration.engine_runs.run_one``, no evaluation), 5 epochs;
epoch 3 under ``torch.profiler`` (self CPU time per aten op, summed into GEMM (``mm``/``addmm``), the sparse
aggregation (``ShardAggregate*``) and the rest); the minor page faults and thread CPU seconds of each epoch's forward
and backward. Beside it, what PROFILE prices for the same configuration at a compute scale of 1, per op family (the
epoch with the family made free, subtracted from the whole). Run in a fresh process per MEMORY (the counting allocator
cannot be taken out of a process).
"""

from __future__ import annotations

import json
import resource
import sys
import tempfile
import time
from dataclasses import replace

import pandas as pd
import torch

import sarlab.real.calibration.engine_runs as engine_runs
from sarlab.core import memory
from sarlab.simulator.hardware.provenance import resolve_profile
from sarlab.simulator.system.replay import simulate_row

GRAPH = "synthetic:nodes=20000,degree=20,features=64,classes=16,seed=0"
FAMILIES = ("gemm", "spmm", "gat_fused", "elementwise")


def measured(model: str, method: str, parts: str, graph: str = GRAPH, hidden: int = 128) -> dict:
    """The engine epoch of ``model`` under ``method``: profiler split of epoch 3, faults and CPU seconds per epoch."""
    split: dict[str, float] = {}
    cpu, faults = [], []
    forward_backward, step = engine_runs.Trainer.forward_backward, engine_runs.Trainer.step

    def timed(self, epoch):
        f0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.thread_time()
        out = forward_backward(self, epoch)
        cpu.append(time.thread_time() - t0)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
        return out

    def profiled(self, epoch, baseline):
        if epoch != 3:
            return step(self, epoch, baseline)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            out = step(self, epoch, baseline)
        for event in prof.key_averages():
            name = event.key
            kind = ("gemm" if name in ("aten::mm", "aten::addmm") else
                    "aggregation" if name.startswith("ShardAggregate") else "other")
            split[kind] = split.get(kind, 0.0) + event.self_cpu_time_total / 1e6
        return out

    engine_runs.Trainer.forward_backward, engine_runs.Trainer.step = timed, profiled
    run = {"spec": graph, "partition_dir": parts, "model": model, "layers": 3, "hidden": hidden, "epochs": 5,
           "threads": 1, "memory": method}
    records = engine_runs.run_one(run)
    return {"epoch_s": [r["epoch_time_s"] for r in records], "forward_backward_cpu_s": cpu,
            "minor_faults": faults, "profiler_self_cpu_s_epoch3": split, "record": records[-1]}


def priced(record: dict, profile_spec: str) -> dict:
    """PROFILE's epoch for the record's configuration at compute scale 1, and each family's share of it."""
    prof = resolve_profile(profile_spec)[0]
    prof = prof.for_memory(record["mem_method"])
    one = prof.with_scale(1.0)
    row = pd.Series({**record, "measured_epoch_time_s": record["epoch_time_s"], "label": ""})
    total = float(simulate_row(row, one).epoch_time_s.max())
    out = {"scale_1_s": total, "compute_scale": float(simulate_row(row, prof).compute_scale)}
    for family in FAMILIES:
        if family not in one.ops:
            continue
        cost = one.ops[family]
        free = replace(cost, rate=1e30, overhead_s=0.0, row_rate=None if cost.row_rate is None else 1e30,
                       fresh_rate=None, mem_rate=None)
        out[family] = total - float(simulate_row(row, replace(one, ops={**one.ops, family: free})).epoch_time_s.max())
    return out


def main() -> int:
    model, method, profile_spec = sys.argv[1:4]
    memory.tune_malloc()
    with tempfile.TemporaryDirectory(prefix="op-profile-") as tmp:
        graph, hidden = (sys.argv[5], int(sys.argv[6])) if len(sys.argv) > 6 else (GRAPH, 128)
        result = measured(model, method, tmp + "/parts", graph, hidden)
        result["priced"] = priced(result["record"], profile_spec)
    result["record"] = {k: v for k, v in result["record"].items() if isinstance(v, (int, float, str, bool))}
    text = json.dumps({"model": model, "memory": method, **result}, indent=1, default=str)
    if len(sys.argv) > 4:
        with open(sys.argv[4], "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
