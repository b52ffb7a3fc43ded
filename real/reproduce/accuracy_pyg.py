"""Public-split accuracy: sarlab's GCN on N workers against an independent single-process PyG GCN.

Both train the same model on the same split with the accuracy table's protocol
(:class:`~sarlab.real.reproduce.accuracy_table.AccuracyConfig`): ``layers`` graph convolutions of width
``hidden`` (self-loops, symmetric normalisation), ReLU and dropout ``dropout`` after every hidden layer (none on
the input, no BatchNorm), full-batch Adam with weight decay (L2 on every parameter) and a cosine learning rate
(epoch ``e`` of ``E``: ``lr (1 + cos(pi e / E)) / 2``), cross-entropy over the training nodes, the model after the
last epoch (no model selection), in ``dtype``. The reference is written with ``torch_geometric.nn.GCNConv`` and
plain torch only (no sarlab code); its weights start from PyG's own initialisation (Glorot) or, with
``init="linear"``, from ``nn.Linear``'s (Kaiming-uniform), which is what sarlab's GCN layer uses. Seeds set both
the initialisation and dropout, so per-seed numbers differ between the two; the means over seeds are compared.

Run: ``python -m sarlab.real.reproduce.accuracy_pyg --out results/accuracy_public_split`` (Cora and CiteSeer,
N = 4, 5 seeds).
"""
from __future__ import annotations

import argparse
import logging
import math
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import nn

from sarlab.common.machine import cpu_model, today, usable_cores
from sarlab.common.tables import MEASURED, write_csv
from sarlab.core.config import EngineConfig
from sarlab.data.graphs import Graph, load_graph
from sarlab.data.partition import partition
from sarlab.nn.model import ModelConfig
from sarlab.real.launch.jobs import Job
from sarlab.real.launch.launcher import launch
from sarlab.real.reproduce.accuracy_table import AccuracyConfig
from sarlab.training.trainer import DTYPES, TrainConfig

_log = logging.getLogger(__name__)

#: (name, graph spec): Planetoid's public split, shipped with sarlab
PUBLIC_GRAPHS = (("Cora", "planetoid:cora"), ("CiteSeer", "planetoid:citeseer"))


@dataclass(frozen=True)
class PublicSplitConfig:
    """What :func:`run_public_split` measures: ``graphs`` x ``seeds``, sarlab on ``workers`` workers (METIS parts)
    and the PyG reference, with ``protocol``'s training settings (its GCN shape, epochs, lr, weight decay, dtype).
    ``inits``: the PyG reference's initialisations (``pyg``: Glorot, PyG's default; ``linear``: as sarlab's)."""

    graphs: tuple = PUBLIC_GRAPHS
    workers: int = 4
    seeds: tuple = (0, 1, 2, 3, 4)
    inits: tuple = ("pyg", "linear")
    protocol: AccuracyConfig = AccuracyConfig()


class PygGCN(nn.Module):
    """``layers`` PyG ``GCNConv``s, ReLU + dropout between them."""

    def __init__(self, in_dim: int, hidden: int, classes: int, layers: int, dropout: float, init: str):
        from torch_geometric.nn import GCNConv

        super().__init__()
        dims = [in_dim] + [hidden] * (layers - 1) + [classes]
        self.convs = nn.ModuleList(GCNConv(dims[i], dims[i + 1]) for i in range(layers))
        self.dropout = dropout
        if init == "linear":  # nn.Linear's default: Kaiming-uniform weight; the bias stays zero as in both
            for conv in self.convs:
                nn.init.kaiming_uniform_(conv.lin.weight, a=math.sqrt(5))
        elif init != "pyg":
            raise ValueError(f"unknown init {init!r}")

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = nn.functional.dropout(torch.relu(x), self.dropout, self.training)
        return x


def pyg_accuracy(graph: Graph, cfg: AccuracyConfig, seed: int, init: str = "pyg") -> dict:
    """Train :class:`PygGCN` on ``graph``'s split in one process; the final epoch's accuracies and loss."""
    dtype = DTYPES[cfg.dtype]
    torch.manual_seed(seed)
    model = PygGCN(graph.feature_dim, cfg.hidden, graph.num_classes, cfg.layers, cfg.dropout, init).to(dtype)
    x = torch.from_numpy(graph.features).to(dtype)
    y = torch.from_numpy(graph.labels)
    edge_index = torch.from_numpy(np.stack([graph.src, graph.dst]))
    masks = [torch.from_numpy(m) for m in (graph.train_mask, graph.val_mask, graph.test_mask)]
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    for epoch in range(cfg.epochs):
        for group in opt.param_groups:
            group["lr"] = cfg.lr * (1 + math.cos(math.pi * epoch / cfg.epochs)) / 2
        model.train()
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x, edge_index)[masks[0]], y[masks[0]])
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        pred = model(x, edge_index).argmax(1)
    accs = [float((pred[m] == y[m]).double().mean()) for m in masks]
    return {"train_acc": accs[0], "val_acc": accs[1], "test_acc": accs[2], "loss": float(loss.detach())}


def sarlab_accuracy(pdir: str, cfg: AccuracyConfig, workers: int, seed: int) -> dict:
    """sarlab's GCN on the partition ``pdir`` (``workers`` parts): rank 0's record of the last epoch."""
    job = Job("train", pdir, ModelConfig(model="gcn", layers=cfg.layers, hidden=cfg.hidden, dropout=cfg.dropout,
                                         seed=seed),
              TrainConfig(epochs=cfg.epochs, lr=cfg.lr, weight_decay=cfg.weight_decay, dtype=cfg.dtype,
                          eval_every=cfg.epochs, lr_schedule="cosine"),
              EngineConfig(mode="sar"), timeout_s=cfg.timeout_s, quiet=True)
    last = next(r for r in launch(job, workers) if r["epoch"] == cfg.epochs - 1 and r["rank"] == 0)
    return {k: float(last[k]) for k in ("train_acc", "val_acc", "test_acc", "loss")}


def run_public_split(cfg: PublicSplitConfig, log: Callable[[str], None] = _log.info) -> pd.DataFrame:
    """One row per (graph, implementation, seed): sarlab on ``cfg.workers`` and PyG (each init) on one process."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="sarlab-acc-") as tmp:
        for name, spec in cfg.graphs:
            graph = load_graph(spec)
            pdir = str(Path(tmp) / f"{name}-n{cfg.workers}")
            partition(graph, cfg.workers, pdir, source=spec)
            for seed in cfg.seeds:
                runs = [(f"sarlab N={cfg.workers}", cfg.workers, None)] + [
                    (f"pyg GCNConv init={init}", 1, init) for init in cfg.inits]
                for impl, workers, init in runs:
                    measured = (sarlab_accuracy(pdir, cfg.protocol, cfg.workers, seed) if init is None
                                else pyg_accuracy(graph, cfg.protocol, seed, init))
                    row = {"graph": name, "spec": spec, "impl": impl, "workers": workers, "seed": seed, **measured}
                    rows.append(row)
                    log(f"  {name} {impl} seed={seed}: test {row['test_acc']:.4f} val {row['val_acc']:.4f}")
    return pd.DataFrame(rows)


def public_split_summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per graph and implementation: mean and std of the test accuracy over seeds, and the difference of the
    mean from sarlab's (percentage points)."""
    out = runs.groupby(["graph", "impl"], sort=False).agg(seeds=("seed", "nunique"), test_mean=("test_acc", "mean"),
                                                          test_std=("test_acc", "std"), val_mean=("val_acc", "mean"))
    out = out.reset_index()
    ours = out[out.impl.str.startswith("sarlab")].set_index("graph").test_mean
    out["diff_vs_sarlab_points"] = 100 * (out.test_mean - out.graph.map(ours))
    return out


def write_public_split(runs: pd.DataFrame, cfg: PublicSplitConfig, out: Path, command: str) -> pd.DataFrame:
    """``accuracy_public_split.csv`` (every run), ``accuracy_public_split_summary.csv`` and
    ``accuracy_public_split.md``; returns the summary."""
    out.mkdir(parents=True, exist_ok=True)
    cpu, date = cpu_model(), today()
    write_csv(runs.assign(kind=MEASURED, machine=cpu, cores=usable_cores(), date=date),
              out / "accuracy_public_split.csv")
    summary = public_split_summary(runs)
    write_csv(summary.assign(kind=MEASURED), out / "accuracy_public_split_summary.csv")
    p = cfg.protocol
    lines = [f"# GCN on Planetoid's public split: sarlab (N = {cfg.workers}) against PyG ({MEASURED})", "",
             f"Produced by `{command}` on {cpu} ({usable_cores()} cores), {date}. Graphs: "
             + "; ".join(f"{n} = `{s}`" for n, s in cfg.graphs) + " (Cora 140/500/1000 train/val/test nodes, "
             f"CiteSeer 120/500/1000). Both implementations: {p.layers}-layer GCN, hidden {p.hidden}, ReLU and dropout "
             f"{p.dropout} after the hidden layer (none on the input, no BatchNorm), {p.epochs} epochs of full-batch "
             f"Adam (lr {p.lr}, cosine decay to 0, weight decay {p.weight_decay} on every parameter), {p.dtype}, "
             f"the model after the last epoch (no model selection). sarlab: engine mode `sar` on {cfg.workers} worker "
             "processes (METIS parts). PyG: `torch_geometric.nn.GCNConv` in one process "
             "(`sarlab.real.reproduce.accuracy_pyg`, file real/reproduce/accuracy_pyg.py), initialised as PyG "
             "does (Glorot, "
             "`init=pyg`) and as sarlab's layer does (`nn.Linear`'s Kaiming-uniform, `init=linear`). Seeds "
             f"{list(cfg.seeds)} set initialisation and dropout (different random streams in the two, so the "
             "means are compared, not the seeds). Raw runs: "
             "[accuracy_public_split.csv](accuracy_public_split.csv).", "",
             "## Test accuracy (%), mean ± std over seeds", "",
             "| graph | implementation | seeds | test acc | val acc | difference from sarlab (points) |",
             "|---|---|---|---|---|---|"]
    for _, r in summary.iterrows():
        lines.append(f"| {r['graph']} | {r['impl']} | {r['seeds']} | {100 * r['test_mean']:.2f} ± "
                     f"{100 * r['test_std']:.2f} | {100 * r['val_mean']:.2f} | {r['diff_vs_sarlab_points']:+.2f} |")
    lines += ["", "## Per seed (test accuracy, %)", "", "| graph | implementation | "
              + " | ".join(f"seed {s}" for s in cfg.seeds) + " |", "|---|---|" + "---|" * len(cfg.seeds)]
    for (graph, impl), d in runs.groupby(["graph", "impl"], sort=False):
        lines.append(f"| {graph} | {impl} | " + " | ".join(f"{100 * v:.1f}" for v in d.sort_values("seed").test_acc)
                     + " |")
    (out / "accuracy_public_split.md").write_text("\n".join(lines) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sarlab.real.reproduce.accuracy_pyg", description=__doc__.split(
        "\n")[0])
    p.add_argument("--out", required=True, help="folder for accuracy_public_split.{csv,md}")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--seeds", type=int, default=5, help="seeds 0..S-1 (default %(default)s)")
    p.add_argument("--epochs", type=int, default=AccuracyConfig.epochs)
    p.add_argument("--threads", type=int, default=1, help="torch threads of the PyG reference (default %(default)s)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = PublicSplitConfig(workers=args.workers, seeds=tuple(range(args.seeds)),
                            protocol=replace(AccuracyConfig(), epochs=args.epochs))
    runs = run_public_split(cfg, log=lambda line: print(line, file=sys.stderr, flush=True))
    command = "python -m sarlab.real.reproduce.accuracy_pyg " + " ".join(argv if argv is not None else
                                                                              sys.argv[1:])
    print(write_public_split(runs, cfg, Path(args.out), command).to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
