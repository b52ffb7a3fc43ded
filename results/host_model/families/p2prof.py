"""Per-op time of one epoch under torch.profiler: one worker on the whole graph against each rank of two (issue 39's
own-validation misses at P >= 2, 2026-11-28 20:45 UTC, the Zen 5 VM; p2prof.log). Not the launcher: the ranks are
spawned here with a gloo group on 127.0.0.1 and built as a worker builds them.

    .venv/bin/sarlab partition --graph synthetic:nodes=20000,degree=20,features=64,classes=16,seed=0 --parts 2 --out P2
    .venv/bin/python results/host_model/families/p2prof.py P2 2 gcn 128 /tmp/p2   # ranks on both cores
    taskset -c 0 .venv/bin/python results/host_model/families/p2prof.py P1 1 gcn 128 /tmp/p1   # (a --parts 1 partition)

Profiler times are wall times of each op on its thread: run ranks on cores of their own (on one core they include the
other rank's time slices)."""
import collections
import json
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile


def rank_main(rank, world, pdir, model, hidden, out):
    from sarlab import kernels
    from sarlab.core import memory
    from sarlab.core.comm import Comm
    from sarlab.core.config import EngineConfig
    from sarlab.core.shards import Shard, ShardedGraph
    from sarlab.data.partition import load_manifest, load_part
    from sarlab.nn.model import ModelConfig
    from sarlab.training.trainer import TrainConfig, Trainer

    plain = Shard.spmm
    spent = {"on": False, "fwd": [0, 0.0], "transposed": [0, 0.0]}

    def timed_spmm(self, x, transpose=False, out=None, backend=None):  # the kernels' own CPU time, per call
        t0 = time.thread_time()
        result = plain(self, x, transpose=transpose, out=out, backend=backend)
        if spent["on"]:
            kind = spent["transposed" if transpose else "fwd"]
            kind[0] += 1
            kind[1] += time.thread_time() - t0
        return result

    Shard.spmm = timed_spmm
    memory.tune_malloc()
    memory.use_method("live")
    kernels.backend("auto")
    torch.set_num_threads(1)
    if world > 1:
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29533", rank=rank, world_size=world)
    part = load_part(pdir, rank, load_manifest(pdir), verify=True)
    graph = ShardedGraph.from_partition(part, Comm(rank, world), EngineConfig(mode="sar"))
    tr = Trainer(graph, part, ModelConfig(model=model, layers=3, hidden=hidden), TrainConfig(epochs=6, eval_every=0))
    base = memory.baseline_bytes()
    times = []
    for e in range(4):
        times.append(tr.step(e, base)["epoch_time_s"])
    spent["on"] = True
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        rec = tr.step(4, base)
    spent["on"] = False
    (nf, sf), (nt, st) = spent["fwd"], spent["transposed"]
    print(f"rank {rank}: Shard.spmm CPU {1e3 * sf:.1f} ms in {nf} calls, transposed {1e3 * st:.1f} ms in {nt}",
          flush=True)
    by = {ev.key: ev.self_cpu_time_total / 1e6 for ev in prof.key_averages()}
    json.dump({"rank": rank, "epoch": rec["epoch_time_s"], "compute": rec.get("compute_s"),
               "wait": rec.get("comm_wait_s"), "times": times, "ops": by}, open(f"{out}_{rank}.json", "w"))
    if world > 1:
        dist.destroy_process_group()

if __name__ == "__main__":
    pdir, world, model, hidden, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
    if world == 1:
        rank_main(0, 1, pdir, model, hidden, out)
    else:
        mp.spawn(rank_main, args=(world, pdir, model, hidden, out), nprocs=world)
    res = [json.load(open(f"{out}_{r}.json")) for r in range(world)]
    tot = collections.Counter()
    for r in res:
        tot.update(r["ops"])
        print(f"rank {r['rank']}: epoch {r['epoch']:.3f} compute {r['compute']} wait {r['wait']}")
    print("summed over ranks, top ops:", [(k, round(v, 4)) for k, v in tot.most_common(14)])
    print("sum of self CPU:", round(sum(tot.values()), 4))
