"""The speed and memory cost of running a PyG model through sarlab.nn.pyg, against the same model in sarlab.nn.

GCN, SAGE (mean) and GAT (4 heads), two layers, hidden 64, no dropout: the built-in ``sarlab.nn`` model
(``model="gcn"|"sage"|"gat"``) and the same architecture written with PyG's layers (``model_fn=``), trained on the
same partition in mode ``sar`` at N = 2 and 4. Runs alternate (native, PyG, then PyG, native on the next repeat)
in one sitting. Per run: the median epoch time over epochs 2.. (rank 0's epochs; every rank waits for the others)
and the largest peak memory of any worker (``peak_mem_bytes``, the live-tensor peak over an epoch). Ratios are
PyG / native per repeat, then the median over repeats.

    .venv/bin/python results/pyg/cost.py     # writes results/pyg/cost.csv and cost.md
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
            "peak_mem_mib": float(rec.peak_mem_bytes.max()) / 2**20}


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
    wide = df.pivot_table(index=["repeat", "workers", "model"], columns="impl",
                          values=["epoch_time_s", "peak_mem_mib"]).reset_index()
    wide["time_ratio"] = wide[("epoch_time_s", "pyg")] / wide[("epoch_time_s", "native")]
    wide["mem_ratio"] = wide[("peak_mem_mib", "pyg")] / wide[("peak_mem_mib", "native")]
    summary = wide.groupby(["workers", "model"]).agg(
        native_epoch_s=(("epoch_time_s", "native"), "median"), pyg_epoch_s=(("epoch_time_s", "pyg"), "median"),
        time_ratio=("time_ratio", "median"), native_peak_mib=(("peak_mem_mib", "native"), "median"),
        pyg_peak_mib=(("peak_mem_mib", "pyg"), "median"), mem_ratio=("mem_ratio", "median")).reset_index()
    lines = ["# PyG layers through sarlab.nn.pyg vs the same model in sarlab.nn (mode sar)", "",
             f"Graph `{GRAPH}`; two layers, hidden {HIDDEN}, GAT {HEADS} heads; {EPOCHS} epochs per run (median of "
             f"epochs 2..), {REPEATS} repeats alternating the order; ratios are PyG / native (median over repeats).",
             "Machine: a shared 2-core VM under load from other agents' work at the same time (load average well "
             "above 2): the times are noisy; the ratios come from runs interleaved in one sitting.", "",
             "Command: `.venv/bin/python results/pyg/cost.py`", "",
             "| N | model | native epoch (s) | PyG epoch (s) | time ratio | native peak (MiB) | PyG peak (MiB) "
             "| memory ratio |", "|---|---|---|---|---|---|---|---|"]
    for r in summary.itertuples(index=False):
        lines.append(f"| {r.workers} | {r.model} | {r.native_epoch_s:.3f} | {r.pyg_epoch_s:.3f} | {r.time_ratio:.2f} | "
                     f"{r.native_peak_mib:.1f} | {r.pyg_peak_mib:.1f} | {r.mem_ratio:.2f} |")
    with open(os.path.join(HERE, "cost.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
