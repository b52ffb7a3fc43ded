"""The accuracy table (the SAR paper's accuracy protocol): GCN, GraphSAGE and GAT on Cora, CiteSeer (Planetoid's public
split, shipped with sarlab) and a products-like graph,
plain / with label augmentation, each with and without Correct & Smooth, mean and std over seeds on one worker,
and a check that N workers give the same numbers.

:func:`run_accuracy` trains every (graph, model, label augmentation, seed) for ``epochs`` epochs with a cosine
learning rate and C&S after the last epoch (one run gives both the plain and the C&S accuracy), on one worker;
then the check runs (``check_graphs`` x models x both label settings x ``check_seeds``) again on
``check_workers``. :func:`write_accuracy` writes ``accuracy.csv`` (every run), ``accuracy_summary.csv`` (means and
stds) and ``accuracy.md`` (the table, the N check, the settings and the command).
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from sarlab.common.machine import cpu_model, today, usable_cores
from sarlab.common.tables import MEASURED, write_csv
from sarlab.core.config import EngineConfig
from sarlab.data.graphs import load_graph
from sarlab.data.partition import is_partition_dir, partition
from sarlab.nn.model import ModelConfig
from sarlab.real.launch.jobs import Job
from sarlab.real.launch.launcher import launch
from sarlab.training.trainer import TrainConfig

_log = logging.getLogger(__name__)

#: the table's columns: (name, label augmentation on, accuracy column)
CELLS = (("plain", False, "test_acc"), ("+ label aug", True, "test_acc"), ("+ C&S", False, "cs_test_acc"),
         ("+ label aug + C&S", True, "cs_test_acc"))
#: the accuracies compared between one and N workers
CHECKED = ("train_acc", "val_acc", "test_acc", "cs_train_acc", "cs_val_acc", "cs_test_acc", "loss")


@dataclass(frozen=True)
class AccuracyConfig:
    """The protocol: graphs, models, seeds, the N check, and the training settings every run shares.

    Args:
        graphs: (name, graph spec, C&S preset): the C&S authors' ogbn-arxiv setting for the citation graphs
            (Cora and CiteSeer with Planetoid's public split), ogbn-products' for the products-like one.
        models: GNN models; layers, hidden, heads, dropout: their shape (GAT: ``hidden`` = heads x per-head).
        seeds: initialisation/dropout/label-augmentation seeds of the one-worker runs.
        check_workers, check_seeds, check_graphs: the runs repeated on N workers (every model, both label settings).
        epochs, lr, weight_decay: Adam with a cosine learning rate; label_aug: share of training labels shown.
        dtype: float64, so N workers round like one to ~1e-12 and the accuracies agree exactly.
        parallel: training runs at once (each its own launch of worker processes); changes no number.
    """

    graphs: tuple = (("Cora", "planetoid:cora", "arxiv"), ("CiteSeer", "planetoid:citeseer", "arxiv"),
                     ("products-like", "synthetic:nodes=10000,degree=15,features=100,classes=47,noise=4,seed=0,"
                                       "train=0.08,val=0.02", "products"))
    models: tuple = ("gcn", "sage", "gat")
    seeds: tuple = (0, 1, 2, 3, 4)
    check_workers: int = 4
    check_seeds: tuple = (0,)
    check_graphs: tuple = ("Cora",)
    layers: int = 2
    hidden: int = 64
    heads: int = 4
    dropout: float = 0.5
    epochs: int = 100
    lr: float = 0.01
    weight_decay: float = 5e-4
    label_aug: float = 0.5
    dtype: str = "float64"
    timeout_s: float = 600.0
    parallel: int = 1


def _partition_dir(spec: str, workers: int, cache: Path) -> str:
    """The cached METIS partition of ``spec`` into ``workers`` parts (made on first use)."""
    pdir = os.path.join(cache, f"{spec.replace(':', '_').replace(',', '_').replace('/', '_')}-n{workers}")
    if not is_partition_dir(pdir):
        partition(load_graph(spec), workers, pdir, source=spec)
    return pdir


def _run(cfg: AccuracyConfig, pdir: str, workers: int, model: str, label_aug: float, seed: int,
         preset: str) -> dict:
    """Rank 0's record of the last epoch of one training run."""
    job = Job("train", pdir, ModelConfig(model=model, layers=cfg.layers, hidden=cfg.hidden, heads=cfg.heads,
                                         dropout=cfg.dropout, seed=seed),
              TrainConfig(epochs=cfg.epochs, lr=cfg.lr, weight_decay=cfg.weight_decay, dtype=cfg.dtype,
                          eval_every=cfg.epochs, lr_schedule="cosine", label_aug=label_aug, correct_smooth=preset),
              EngineConfig(mode="sar"), timeout_s=cfg.timeout_s, quiet=True)
    return next(r for r in launch(job, workers) if r["epoch"] == cfg.epochs - 1 and r["rank"] == 0)


def _run_row(cfg: AccuracyConfig, item: tuple) -> dict:
    """The table row of one run ``item`` = (graph name, spec, C&S preset, partition dir, N, model, label_aug,
    seed)."""
    graph_name, spec, preset, pdir, workers, model, label_aug, seed = item
    last = _run(cfg, pdir, workers, model, label_aug, seed, preset)
    return {"graph": graph_name, "spec": spec, "cs_preset": preset, "model": model, "label_aug": label_aug,
            "seed": seed, "workers": workers, **{k: last[k] for k in CHECKED}}


def run_accuracy(cfg: AccuracyConfig, cache: Path, log: Callable[[str], None] = _log.info) -> pd.DataFrame:
    """One row per run: graph, model, label_aug, seed, workers, final accuracies (and C&S's), loss."""
    plan = [(name, spec, preset, 1, cfg.seeds) for name, spec, preset in cfg.graphs]
    plan += [(name, spec, preset, cfg.check_workers, cfg.check_seeds) for name, spec, preset in cfg.graphs
             if name in cfg.check_graphs]
    items = []
    for graph_name, spec, preset, workers, seeds in plan:
        pdir = _partition_dir(spec, workers, cache)
        items += [(graph_name, spec, preset, pdir, workers, model, label_aug, seed) for model in cfg.models
                  for label_aug in (0.0, cfg.label_aug) for seed in seeds]
    rows = []
    with ProcessPoolExecutor(max(1, cfg.parallel)) as pool:
        for row in pool.map(_run_row, [cfg] * len(items), items):
            rows.append(row)
            log(f"  {row['graph']} {row['model']} label_aug={row['label_aug']} seed={row['seed']} "
                f"N={row['workers']}: test {row['test_acc']:.4f} C&S {row['cs_test_acc']:.4f}")
    return pd.DataFrame(rows)


def accuracy_summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean and std (over seeds) of the test accuracy of every cell, one row per (graph, model), one worker."""
    out = []
    single = runs[runs.workers == 1]
    for (graph, model), d in single.groupby(["graph", "model"], sort=False):
        row = {"graph": graph, "model": model, "workers": 1, "seeds": int(d.seed.nunique())}
        for name, aug, col in CELLS:
            values = d[(d.label_aug > 0) == aug][col]
            row[f"{name} mean"], row[f"{name} std"] = values.mean(), values.std(ddof=1)
        out.append(row)
    return pd.DataFrame(out)


def n_check(runs: pd.DataFrame) -> pd.DataFrame:
    """Every run repeated on N > 1 workers beside its one-worker twin: the largest difference of the accuracies
    and the relative difference of the final loss."""
    keys = ["graph", "model", "label_aug", "seed"]
    many = runs[runs.workers > 1]
    one = runs[runs.workers == 1].set_index(keys)
    rows = []
    for _, r in many.iterrows():
        twin = one.loc[tuple(r[k] for k in keys)]
        acc_diff = max(abs(r[c] - twin[c]) for c in CHECKED if c != "loss")
        rows.append({**{k: r[k] for k in keys}, "workers": int(r["workers"]), "max_acc_diff": acc_diff,
                     "loss_rel_diff": abs(r["loss"] - twin["loss"]) / abs(twin["loss"]),
                     "test_acc": r["test_acc"], "cs_test_acc": r["cs_test_acc"]})
    return pd.DataFrame(rows)


def _fmt(mean: float, std: float) -> str:
    return f"{100 * mean:.2f} ± {100 * std:.2f}" if std == std else f"{100 * mean:.2f}"


def write_accuracy(runs: pd.DataFrame, cfg: AccuracyConfig, out: Path, command: str) -> pd.DataFrame:
    """``accuracy.csv`` (every run), ``accuracy_summary.csv`` and ``accuracy.md``; returns the summary."""
    out.mkdir(parents=True, exist_ok=True)
    cpu, date = cpu_model(), today()
    runs = runs.assign(kind=MEASURED, machine=cpu, cores=usable_cores(), date=date)
    write_csv(runs, out / "accuracy.csv")
    table = accuracy_summary(runs)
    write_csv(table.assign(kind=MEASURED), out / "accuracy_summary.csv")
    check = n_check(runs)
    names = [name for name, _, _ in CELLS]
    lines = [f"# Accuracy: plain / label augmentation / Correct & Smooth ({MEASURED})", "",
             f"Produced by `{command}` on {cpu} ({usable_cores()} cores), {date}. Every run: {cfg.layers} layers, "
             f"hidden {cfg.hidden} (GAT: {cfg.heads} heads), dropout {cfg.dropout}, {cfg.epochs} epochs of full-batch "
             f"Adam (lr {cfg.lr}, cosine decay to 0, weight decay {cfg.weight_decay}), {cfg.dtype}, engine mode `sar`; "
             f"label augmentation shows {cfg.label_aug:.0%} of the training labels as inputs each epoch (loss on the "
             f"rest; all training labels shown at inference); C&S after the last epoch on the eval outputs with the "
             f"preset named below. Test accuracy in %, mean ± std (ddof 1) over seeds {list(cfg.seeds)} on one worker. "
             "Raw runs: [accuracy.csv](accuracy.csv); this table: [accuracy_summary.csv](accuracy_summary.csv).", "",
             "| graph (C&S preset) | model | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    presets = dict(zip(runs.graph, runs.cs_preset))
    for _, r in table.iterrows():
        lines.append(f"| {r['graph']} ({presets[r['graph']]}) | {r['model']} | "
                     + " | ".join(_fmt(r[f'{n} mean'], r[f'{n} std']) for n in names) + " |")
    lines += ["", "Graphs: " + "; ".join(f"{name} = `{spec}`" for name, spec, _ in cfg.graphs) + ".", "",
              "## Effect (percentage points of mean test accuracy over the plain run)", "",
              "| graph | model | + label aug | + C&S | + label aug + C&S |", "|---|---|---|---|---|"]
    for _, r in table.iterrows():
        deltas = [100 * (r[f"{n} mean"] - r["plain mean"]) for n in names[1:]]
        lines.append(f"| {r['graph']} | {r['model']} | " + " | ".join(f"{d:+.2f}" for d in deltas) + " |")
    if len(check):
        worst_acc, worst_loss = float(check.max_acc_diff.max()), float(check.loss_rel_diff.max())
        lines += ["", f"## One worker against {sorted(set(check.workers))} workers", "",
                  f"{len(check)} runs repeated on N = {', '.join(str(n) for n in sorted(set(check.workers)))} "
                  f"(METIS parts): graphs {sorted(set(check.graph))}, every model, with and without label "
                  f"augmentation, seeds {sorted(set(check.seed))}. Compared with the one-worker run of the same seed: "
                  f"train/val/test accuracy and C&S's train/val/test accuracy (largest difference over all of them "
                  f"and runs: {worst_acc:.3g}) and the final training loss (largest relative difference "
                  f"{worst_loss:.2g}).", "",
                  "| graph | model | label aug | seed | N | test acc | C&S test acc | max acc diff vs N=1 | "
                  "loss rel diff |", "|---|---|---|---|---|---|---|---|---|"]
        for _, r in check.iterrows():
            lines.append(f"| {r['graph']} | {r['model']} | {r['label_aug']:g} | {r['seed']} | {r['workers']} | "
                         f"{100 * r['test_acc']:.2f} | {100 * r['cs_test_acc']:.2f} | {r['max_acc_diff']:.3g} | "
                         f"{r['loss_rel_diff']:.2g} |")
    (out / "accuracy.md").write_text("\n".join(lines) + "\n")
    return table
