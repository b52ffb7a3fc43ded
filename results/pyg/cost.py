"""The speed and memory cost of running a PyG model through sarlab.nn.pyg, against the same model in sarlab.nn.

GCN, SAGE (mean) and GAT (4 heads), two layers, hidden 64, no dropout: the built-in ``sarlab.nn`` model
(``model="gcn"|"sage"|"gat"``) and the same architecture written with PyG's layers (``model_fn=``), trained on the
same partition in mode ``sar`` at N = 2 and 4. Runs alternate (native, PyG, then PyG, native on the next repeat)
in one sitting. Per run: the median epoch time over epochs 2.. (rank 0's epochs; every rank waits for the others)
and the largest peak memory of any worker: ``peak_mem_bytes`` (on the RSS scale: the worker's RSS before training
plus the live-tensor peak above it; importing PyG alone adds tens of MiB of RSS) and the live-tensor peak above the
baseline (what training allocates, the memory SAR bounds). Ratios are PyG / native per repeat, then the median over
repeats.

    .venv/bin/python results/pyg/cost.py             # writes results/pyg/cost.csv and cost.md
    .venv/bin/python results/pyg/cost.py --report    # cost.md again from cost.csv
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

import pandas as pd
import torch
from torch_geometric.nn import GATConv, GCNConv, SAGEConv

import sarlab

HERE = os.path.dirname(os.path.abspath(__file__))
GRAPH = "synthetic:nodes=10000,degree=10,features=64,classes=8,seed=0"
HIDDEN, HEADS, EPOCHS, REPEATS, WORKERS = 64, 4, 5, 2, (2, 4)


class TwoLayers(torch.nn.Module):
    """conv -> ReLU -> conv, with PyG layers (the built-in GNN's architecture without dropout or BatchNorm)."""

    def __init__(self, first, second):
        super().__init__()
        self.conv1, self.conv2 = first, second

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def pyg_gcn(i, c):
    return TwoLayers(GCNConv(i, HIDDEN), GCNConv(HIDDEN, c))


def pyg_sage(i, c):
    return TwoLayers(SAGEConv(i, HIDDEN), SAGEConv(HIDDEN, c))


def pyg_gat(i, c):
    return TwoLayers(GATConv(i, HIDDEN // HEADS, heads=HEADS), GATConv(HIDDEN, c, heads=1, concat=False))


MODELS = {"gcn": pyg_gcn, "sage": pyg_sage, "gat": pyg_gat}


def one_run(parts: str, workers: int, model: str, impl: str) -> dict:
    kw = dict(model_fn=MODELS[model]) if impl == "pyg" else dict(
        model=sarlab.ModelConfig(model=model, layers=2, hidden=HIDDEN, heads=HEADS))
    res = sarlab.run(parts, workers=workers, engine=sarlab.EngineConfig(mode="sar"), log=lambda m: None,
                     run_timeout_s=900,
                     train=sarlab.TrainConfig(epochs=EPOCHS, eval_every=0), **kw)
    rec = res.records
    return {"epoch_time_s": float(rec[(rec["rank"] == 0) & (rec.epoch >= 1)].epoch_time_s.median()),
            "peak_mem_mib": float(rec.peak_mem_bytes.max()) / 2**20,
            "above_baseline_mib": float((rec.peak_mem_bytes - rec.baseline_mem_bytes).max()) / 2**20}


def main() -> None:
    tmp = tempfile.mkdtemp(prefix="sarlab-pyg-cost-")
    rows = []
    try:
        graph = sarlab.load_graph(GRAPH)
        parts = {n: os.path.join(tmp, f"p{n}") for n in WORKERS}
        for n in WORKERS:
            sarlab.partition(graph, n, parts[n])
        for repeat in range(REPEATS):
            for n in WORKERS:
                for model in MODELS:
                    for impl in (("native", "pyg") if repeat % 2 == 0 else ("pyg", "native")):
                        t0 = time.perf_counter()
                        row = {"repeat": repeat, "workers": n, "model": model, "impl": impl,
                               **one_run(parts[n], n, model, impl)}
                        rows.append(row)
                        print(row, f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    df = pd.DataFrame(rows)
    df.to_csv(os.path.join(HERE, "cost.csv"), index=False)
    write_report(df)


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """Per (N, model): medians over repeats of each side and of the per-repeat ratios PyG / native."""
    keys = ["repeat", "workers", "model"]
    both = df[df.impl == "native"].merge(df[df.impl == "pyg"], on=keys, suffixes=("_native", "_pyg"))
    both["time_ratio"] = both.epoch_time_s_pyg / both.epoch_time_s_native
    both["mem_ratio"] = both.above_baseline_mib_pyg / both.above_baseline_mib_native
    cols = ["epoch_time_s_native", "epoch_time_s_pyg", "time_ratio", "peak_mem_mib_native", "peak_mem_mib_pyg",
            "above_baseline_mib_native", "above_baseline_mib_pyg", "mem_ratio"]
    return both.groupby(["workers", "model"], sort=False)[cols].median().reset_index()


def write_report(df: pd.DataFrame) -> None:
    summary = summarize(df)
    lines = ["# PyG layers through sarlab.nn.pyg vs the same model in sarlab.nn (mode sar)", "",
             f"Graph `{GRAPH}`; two layers, hidden {HIDDEN}, GAT {HEADS} heads; {EPOCHS} epochs per run (median of "
             f"epochs 2..), {REPEATS} repeats alternating the order; ratios are PyG / native (median over repeats).",
             "Peak: the largest worker's `peak_mem_bytes` (RSS scale: the RSS before training plus the live-tensor "
             "peak above it; importing PyG adds ~55 MiB of RSS to each worker). Above baseline: the live tensors "
             "training allocates (what SAR bounds), the memory ratio's basis.",
             "Machine: a shared 2-core VM under heavy load from other agents' work at the same time (load average "
             "20-30): the times are noisy; the ratios come from runs interleaved in one sitting.", "",
             "Command: `.venv/bin/python results/pyg/cost.py`", "",
             "| N | model | native epoch (s) | PyG epoch (s) | time ratio | native peak (MiB) | PyG peak (MiB) "
             "| native above baseline (MiB) | PyG above baseline (MiB) | memory ratio (above baseline) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in summary.itertuples(index=False):
        lines.append(f"| {r.workers} | {r.model} | {r.epoch_time_s_native:.3f} | {r.epoch_time_s_pyg:.3f} | "
                     f"{r.time_ratio:.2f} | {r.peak_mem_mib_native:.1f} | {r.peak_mem_mib_pyg:.1f} | "
                     f"{r.above_baseline_mib_native:.1f} | {r.above_baseline_mib_pyg:.1f} | {r.mem_ratio:.2f} |")
    with open(os.path.join(HERE, "cost.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    if "--report" in sys.argv:  # the summary again from cost.csv
        write_report(pd.read_csv(os.path.join(HERE, "cost.csv")))
    else:
        main()
