"""``sarlab demo``: GraphSAGE on a built-in synthetic graph, ``sar`` vs ``oneshot``, as a table."""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time

import pandas as pd

DEMO_GRAPH = "synthetic:nodes=30000,degree=20,features=64,classes=8,homophily=0.6,noise=2.5,seed=0"


def run_demo(workers: int = 4, epochs: int = 5, json_path: str | None = None) -> int:
    from sarlab.config import EngineConfig
    from sarlab.graphs import load_graph
    from sarlab.nn.model import ModelConfig
    from sarlab.partition import partition, report
    from sarlab.train import TrainConfig

    from .jobs import Job
    from .launcher import launch

    t0 = time.perf_counter()
    tmp = tempfile.mkdtemp(prefix="sarlab-demo-")
    try:
        print(f"demo graph: {DEMO_GRAPH}", flush=True)
        graph = load_graph(DEMO_GRAPH)
        pdir = os.path.join(tmp, "parts")
        print(report(partition(graph, workers, pdir)), flush=True)
        model = ModelConfig(model="sage", layers=3, hidden=128, aggr="mean", dropout=0.3, batchnorm=True)
        records = []
        for mode in ("sar", "oneshot"):
            print(f"\ntraining GraphSAGE (3 layers, hidden 128) in mode {mode} on {workers} workers", flush=True)
            job = Job("train", pdir, model, TrainConfig(epochs=epochs, lr=0.01), EngineConfig(mode=mode))
            records += launch(job, workers)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    df = pd.DataFrame(records)
    print("\n" + demo_table(df).to_string(index=False))
    print(f"\n(epoch time: median over epochs after the first, slowest rank; peak memory: per worker above its "
          f"post-setup baseline, max over ranks and epochs; bytes: sent+received by all workers per epoch)"
          f"\ndemo finished in {time.perf_counter() - t0:.0f}s", flush=True)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(records, f)
    return 0


def demo_table(df: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for mode, d in df.groupby("mode", sort=False):
        last = d[d.epoch == d.epoch.max()].iloc[0]
        steady = d[d.epoch > 0] if d.epoch.max() > 0 else d
        rows.append({
            "mode": mode,
            "workers": int(last.workers),
            "loss": round(float(last.loss), 4),
            "train_acc": round(float(last.train_acc), 3),
            "val_acc": round(float(last.val_acc), 3),
            "test_acc": round(float(last.test_acc), 3),
            "epoch_s": round(float(steady.groupby("epoch").epoch_time_s.max().median()), 3),
            "peak_MiB/worker": round(float((d.peak_mem_bytes - d.baseline_mem_bytes).max()) / 2**20, 1),
            "MiB_exchanged/epoch": round(float(steady.groupby("epoch")[["bytes_sent", "bytes_recv"]].sum()
                                               .sum(axis=1).median()) / 2**20, 1),
        })
    return pd.DataFrame(rows)


if __name__ == "__main__":
    sys.exit(run_demo())
