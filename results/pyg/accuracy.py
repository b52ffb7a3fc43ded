"""GCN on Cora (public split) as PyG's example writes it: plain PyG vs the same model trained by sarlab at N = 4.

Both sides: the model unmodified (two GCNConv, hidden 16, dropout 0.5, cached=True), row-normalised features
(PyG's NormalizeFeatures), Adam lr 0.01 with weight decay 5e-4 on every parameter (sarlab's TrainConfig has one
weight decay; PyG's example puts it on conv1 only), 200 epochs, full batch, float32; the same initial weights per
seed (the model built under torch.manual_seed(seed)); the test accuracy after the last epoch. What differs: the
dropout masks (drawn per worker in sarlab).

    .venv/bin/python results/pyg/accuracy.py          # writes results/pyg/accuracy.csv and accuracy.md
    .venv/bin/python results/pyg/accuracy.py --seeds 3 4     # those seeds only, added to accuracy.csv
"""
from __future__ import annotations

import os
import sys
import time

import pandas as pd
import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from torch_geometric.nn import GCNConv

import sarlab

SEEDS, EPOCHS, WORKERS, LR, WEIGHT_DECAY = range(5), 200, 4, 0.01, 5e-4
HERE = os.path.dirname(os.path.abspath(__file__))


class GCN(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels):
        super().__init__()
        self.conv1 = GCNConv(in_channels, hidden_channels, cached=True)
        self.conv2 = GCNConv(hidden_channels, out_channels, cached=True)

    def forward(self, x, edge_index, edge_weight=None):
        x = F.dropout(x, p=0.5, training=self.training)
        x = self.conv1(x, edge_index, edge_weight).relu()
        x = F.dropout(x, p=0.5, training=self.training)
        x = self.conv2(x, edge_index, edge_weight)
        return x


def model_fn(in_dim, num_classes):
    return GCN(in_dim, 16, num_classes)


def plain_pyg(data, seed: int) -> float:
    torch.manual_seed(seed)
    model = model_fn(data.num_features, int(data.y.max()) + 1)
    opt = torch.optim.Adam(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    for _ in range(EPOCHS):
        model.train()
        opt.zero_grad()
        out = model(data.x, data.edge_index)
        F.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(1)
    return float((pred[data.test_mask] == data.y[data.test_mask]).float().mean())


def with_sarlab(data, seed: int) -> float:
    res = sarlab.run(data, workers=WORKERS, model_fn=model_fn, model=sarlab.ModelConfig(seed=seed),
                     train=sarlab.TrainConfig(epochs=EPOCHS, lr=LR, weight_decay=WEIGHT_DECAY, eval_every=EPOCHS),
                     log=lambda m: None, run_timeout_s=900)
    last = res.records[res.records.epoch == EPOCHS - 1]
    return float(last.test_acc.iloc[0])


def report(df: pd.DataFrame) -> str:
    """The markdown summary of the per-seed rows."""
    pyg_acc, sar_acc = 100 * df.pyg_test_acc, 100 * df.sarlab_n4_test_acc
    return "\n".join([
        f"# GCN on Cora (public split): plain PyG vs sarlab N = 4, {len(df)} seeds", "",
        "Command: `.venv/bin/python results/pyg/accuracy.py` (settings in its docstring; `--seeds 3 4` runs some "
        "seeds and adds them to accuracy.csv, `--report` rewrites this file from it).", "",
        "| | mean test accuracy (%) | std (%) | min | max |", "|---|---|---|---|---|",
        f"| plain PyG | {pyg_acc.mean():.2f} | {pyg_acc.std():.2f} | {pyg_acc.min():.1f} | {pyg_acc.max():.1f} |",
        f"| sarlab N = 4 | {sar_acc.mean():.2f} | {sar_acc.std():.2f} | {sar_acc.min():.1f} | {sar_acc.max():.1f} |",
        "", f"Difference of the means: {sar_acc.mean() - pyg_acc.mean():+.2f} points (target: within 0.5).", "",
        "Per seed (test accuracy, %): "
        + "; ".join(f"seed {int(r.seed)}: PyG {100 * r.pyg_test_acc:.1f}, sarlab {100 * r.sarlab_n4_test_acc:.1f}"
                    for r in df.itertuples()), ""])


def main(argv: list[str]) -> None:
    csv = os.path.join(HERE, "accuracy.csv")
    if "--report" not in argv:
        seeds = [int(a) for a in argv[argv.index("--seeds") + 1:]] if "--seeds" in argv else list(SEEDS)
        data = T.NormalizeFeatures()(sarlab.to_pyg(sarlab.datasets.load("cora")))
        for seed in seeds:
            t0 = time.perf_counter()
            row = {"seed": seed, "pyg_test_acc": plain_pyg(data, seed), "sarlab_n4_test_acc": with_sarlab(data, seed)}
            print(row, f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
            old = pd.read_csv(csv) if os.path.exists(csv) else pd.DataFrame()
            rows = pd.concat([old[old.seed != seed] if len(old) else old, pd.DataFrame([row])])
            rows.sort_values("seed").to_csv(csv, index=False)
    df = pd.read_csv(csv).sort_values("seed")
    text = report(df)
    with open(os.path.join(HERE, "accuracy.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main(sys.argv[1:])
