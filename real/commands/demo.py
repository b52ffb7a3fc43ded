"""``sarlab demo``: GraphSAGE on a built-in synthetic graph, ``sar`` vs ``oneshot``, as a table."""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import pandas as pd

from sarlab.common.records import summarize
from sarlab.core.config import EngineConfig
from sarlab.data.graphs import load_graph
from sarlab.data.partition import partition, report
from sarlab.nn.model import ModelConfig
from sarlab.real.commands.options import write_json
from sarlab.real.launch.jobs import Job
from sarlab.real.launch.launcher import launch
from sarlab.training.trainer import TrainConfig

DEMO_GRAPH = "synthetic:nodes=30000,degree=20,features=64,classes=8,homophily=0.6,noise=2.5,seed=0"


def run_demo(workers: int = 4, epochs: int = 5, json_path: str | None = None) -> int:
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
    print(f"\n(epoch time: median over epochs after the first, slowest rank; peak_MiB_above_baseline: per "
          f"worker, the peak above its post-setup baseline, max over ranks and epochs; bytes: sent+received by "
          f"all workers per epoch)"
          f"\ndemo finished in {time.perf_counter() - t0:.0f}s", flush=True)
    write_json(json_path, records)
    return 0


def demo_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per mode: final loss and accuracies, steady epoch time, peak memory, bytes exchanged (sent and
    received by all workers per epoch)."""
    summary = summarize(df.assign(bytes_sent=df.bytes_sent + df.bytes_recv), keys=("mode",)).set_index("mode")
    rows = []
    for mode, d in df.groupby("mode", sort=False):
        last, row = d[d.epoch == d.epoch.max()].iloc[0], summary.loc[mode]
        rows.append({
            "mode": mode, "workers": int(last.workers), "loss": round(float(last.loss), 4),
            "train_acc": round(float(last.train_acc), 3), "val_acc": round(float(last.val_acc), 3),
            "test_acc": round(float(last.test_acc), 3), "epoch_s": round(float(row.epoch_time_s), 3),
            "peak_MiB_above_baseline": round(float(row.peak_mem_above_baseline_bytes) / 2**20, 1),
            "MiB_exchanged/epoch": round(float(row.bytes_sent_per_epoch) / 2**20, 1),
        })
    return pd.DataFrame(rows)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sarlab demo", description="GraphSAGE on a built-in 30k-node graph, "
                                "4 workers, sar vs oneshot: accuracy, epoch time, peak memory, bytes.")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--json", help="write the metric records here")
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    return run_demo(workers=a.workers, epochs=a.epochs, json_path=a.json)


if __name__ == "__main__":
    sys.exit(main())
