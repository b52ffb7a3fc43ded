"""Per-op CPU time of one GCN / SAGE epoch at hidden 64 and 256 (torch.profiler, one thread, after two warm-up epochs).

    taskset -c 0 .venv/bin/python results/host_model/width/profile_ops.py gcn,sage PARTITION_DIR

PARTITION_DIR: a one-part partition of the engine graph (``sarlab partition --graph
synthetic:nodes=24000,degree=30,features=128,classes=16,seed=7 --parts 1 --out DIR``). Prints each epoch's time, the
self CPU time of the GEMMs (``aten::mm``/``addmm``) and of everything else, and the top ops by name
(``ShardAggregate`` / ``ShardAggregateBackward``: the sparse aggregation's forward and backward).
"""

from __future__ import annotations

import collections
import gc
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from sarlab import kernels
from sarlab.core import memory
from sarlab.core.comm import Comm
from sarlab.core.config import EngineConfig
from sarlab.core.shards import ShardedGraph
from sarlab.data.partition import load_manifest, load_part
from sarlab.nn.model import ModelConfig
from sarlab.training.trainer import TrainConfig, Trainer


def main() -> None:
    models, pdir = sys.argv[1].split(","), sys.argv[2]
    memory.tune_malloc()
    memory.use_method("live")  # sarlab train's default allocator
    kernels.backend("auto")
    torch.set_num_threads(1)
    part = load_part(pdir, 0, load_manifest(pdir), verify=True)
    for model in models:
        for hidden in (64, 256):
            graph = ShardedGraph.from_partition(part, Comm(0, 1), EngineConfig(mode="sar"))
            trainer = Trainer(graph, part, ModelConfig(model=model, layers=3, hidden=hidden),
                              TrainConfig(epochs=4, eval_every=0))
            base = memory.baseline_bytes()
            for epoch in range(2):
                trainer.step(epoch, base)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                rec = trainer.step(2, base)
            by_op = collections.Counter({ev.key: ev.self_cpu_time_total / 1e6 for ev in prof.key_averages()})
            gemm = sum(v for k, v in by_op.items() if k in ("aten::mm", "aten::addmm"))
            print(f"{model} hidden {hidden}: epoch {rec['epoch_time_s']:.3f} s, GEMM {gemm:.3f} s, "
                  f"other ops {sum(by_op.values()) - gemm:.3f} s")
            print("   top:", [(k, round(v, 3)) for k, v in by_op.most_common(8)])
            del trainer, graph
            gc.collect()


if __name__ == "__main__":
    main()
