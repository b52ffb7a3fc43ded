"""Figure 8 (SAR paper, appendix B): message-flow-graph pruning and label augmentation on a products-like graph with
a low label rate, measured here.

:func:`run_fig8_curves` trains the four combinations (plain, label augmentation, MFG, both) for ``epochs`` epochs
and returns their metric records (MFG changes no number, only the time per epoch); :func:`run_fig8_rates` measures
epoch time and peak memory with and without MFG at several label rates; :func:`write_fig8` writes
``<prefix>_curves.csv``, ``<prefix>_rates.csv`` and ``<prefix>.png``.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from sarlab.common.figures import face
from sarlab.common.machine import cpu_model, today, usable_cores
from sarlab.common.records import summarize
from sarlab.common.tables import MEASURED, measured_banner, write_csv
from sarlab.core.config import EngineConfig
from sarlab.data.graphs import load_graph
from sarlab.data.partition import is_partition_dir, partition
from sarlab.nn.model import ModelConfig
from sarlab.real.launch.jobs import Job
from sarlab.real.launch.launcher import launch
from sarlab.training.trainer import TrainConfig

_log = logging.getLogger(__name__)

#: (label, label augmentation, MFG) of the training curves
VARIANTS = (("plain", False, False), ("label aug", True, False), ("MFG", False, True), ("label aug + MFG", True, True))


@dataclass(frozen=True)
class Fig8Config:
    """What figure 8 measures.

    Args:
        graph: products-like synthetic graph spec (its ``train`` is the curves' label rate).
        rates: label rates (train fractions) of the epoch-time/memory panel.
        model, layers, hidden, dropout, lr: a GraphSAGE-mean model trained with a cosine learning rate.
        label_aug: share of the training nodes whose label is an input each epoch.
        workers: N; epochs: of the curves; rate_epochs: per rate (epoch 0 is warm-up).
        curve_dtype: of the curves (float64: a pruned run then gives the unpruned run's numbers to ~1e-10; in
            float32 the two runs round differently and drift apart over the epochs); the rates run in float32.
    """

    graph: str = "synthetic:nodes=20000,degree=15,features=100,classes=47,noise=4,seed=0,train=0.01,val=0.05"
    rates: tuple = (0.01, 0.1, 0.6)
    model: str = "sage"
    layers: int = 3
    hidden: int = 128
    dropout: float = 0.5
    lr: float = 0.01
    label_aug: float = 0.5
    workers: int = 4
    epochs: int = 100
    eval_every: int = 5
    rate_epochs: int = 4
    curve_dtype: str = "float64"
    timeout_s: float = 600.0


def _with_rate(spec: str, rate: float) -> str:
    params = [p for p in spec.split(":", 1)[1].split(",") if not p.startswith("train=")]
    return "synthetic:" + ",".join(params + [f"train={rate:g}"])


def _partition(spec: str, workers: int, cache: Path, log) -> str:
    pdir = os.path.join(cache, f"{spec.replace(':', '_').replace(',', '_')}-n{workers}")
    if not is_partition_dir(pdir):
        log(f"partitioning {spec} into {workers} parts")
        partition(load_graph(spec), workers, pdir, source=spec)
    return pdir


def _job(cfg: Fig8Config, pdir: str, epochs: int, label_aug: bool, mfg: bool, eval_every: int, label: str,
         dtype: str = "float32") -> Job:
    return Job("train", pdir, ModelConfig(model=cfg.model, layers=cfg.layers, hidden=cfg.hidden, dropout=cfg.dropout),
               TrainConfig(epochs=epochs, lr=cfg.lr, eval_every=eval_every, lr_schedule="cosine", mfg=mfg,
                           label_aug=cfg.label_aug if label_aug else 0.0, dtype=dtype),
               EngineConfig(mode="sar"), timeout_s=cfg.timeout_s, quiet=True, label=label)


def run_fig8_curves(cfg: Fig8Config, cache: Path, log: Callable[[str], None] = _log.info) -> pd.DataFrame:
    """The four training runs (records of every rank and epoch, ``variant`` column)."""
    pdir = _partition(cfg.graph, cfg.workers, cache, log)
    out = []
    for name, label_aug, mfg in VARIANTS:
        records = launch(_job(cfg, pdir, cfg.epochs, label_aug, mfg, cfg.eval_every, name, cfg.curve_dtype),
                         cfg.workers)
        last = max(records, key=lambda r: (r["epoch"], -r["rank"]))
        log(f"  {name}: final loss {last['loss']:.4f} val {last['val_acc']:.3f} test {last['test_acc']:.3f}")
        out += [dict(r, variant=name) for r in records]
    return pd.DataFrame(out)


def run_fig8_rates(cfg: Fig8Config, cache: Path, log: Callable[[str], None] = _log.info) -> pd.DataFrame:
    """Epoch time and peak memory with and without MFG at every label rate (summaries, one row each)."""
    rows = []
    for rate in cfg.rates:
        pdir = _partition(_with_rate(cfg.graph, rate), cfg.workers, cache, log)
        for mfg in (False, True):
            records = pd.DataFrame(launch(_job(cfg, pdir, cfg.rate_epochs, False, mfg, 0, f"rate {rate}"),
                                          cfg.workers))
            row = summarize(records, keys=()).iloc[0].to_dict()
            rows.append({"label_rate": rate, "mfg": mfg, **row})
            log(f"  label rate {rate:g} mfg={mfg}: epoch {row['epoch_time_s']:.2f}s, peak above baseline "
                f"{row['peak_mem_above_baseline_bytes'] / 2**20:.0f} MiB, "
                f"sent {row['bytes_sent_per_epoch'] / 2**20:.0f} MiB")
    table = pd.DataFrame(rows)
    base = table[~table.mfg].set_index("label_rate")
    for col, name in (("epoch_time_s", "time_saving"), ("peak_mem_above_baseline_bytes", "memory_saving"),
                      ("bytes_sent_per_epoch", "traffic_saving")):
        table[name] = [1.0 - r[col] / base.loc[r["label_rate"], col] for _, r in table.iterrows()]
    return table


def write_fig8(curves: pd.DataFrame, rates: pd.DataFrame, cfg: Fig8Config, out: Path,
               prefix: str = "fig8_mfg_label_aug_products-like_measured", load: tuple = (np.nan, np.nan)) -> None:
    """Write both tables and the three-panel figure (accuracy vs epoch, accuracy vs training time, MFG savings)."""
    out.mkdir(parents=True, exist_ok=True)
    cpu, cores, date = cpu_model(), usable_cores(), today()
    meta = {"kind": MEASURED, "machine": cpu, "cores": cores, "date": date, "graph": cfg.graph,
            "workers": cfg.workers, "model": cfg.model, "layers": cfg.layers, "hidden": cfg.hidden}
    curves = curves.assign(**{k: v for k, v in meta.items() if k != "workers"})
    write_csv(curves, out / f"{prefix}_curves.csv")
    write_csv(rates.assign(**meta), out / f"{prefix}_rates.csv")
    fig, axes = plt.subplots(1, 3, figsize=(16, 5.2))
    styles = {"plain": ("C0", "-"), "label aug": ("C1", "-"), "MFG": ("C0", ":"), "label aug + MFG": ("C1", ":")}
    for name, _, _ in VARIANTS:
        d = curves[curves.variant == name]
        per_epoch = d.groupby("epoch").agg(time=("epoch_time_s", "max"), val=("val_acc", "first"),
                                           loss=("loss", "first"))
        evaluated = per_epoch.dropna(subset=["val"])
        color, style = styles[name]
        width = 3.0 if style == "-" else 1.6
        axes[0].plot(evaluated.index + 1, evaluated.val, style, color=color, lw=width, label=name)
        elapsed = per_epoch.time.cumsum()
        axes[1].plot(elapsed.loc[evaluated.index], evaluated.val, style, color=color, lw=width,
                     label=f"{name} ({per_epoch.time.iloc[1:].median():.2f} s/epoch)")
    axes[0].set_xlabel("epoch")
    axes[1].set_xlabel("training time (s, sum of the slowest worker's epoch times)")
    for ax in axes[:2]:
        ax.set_ylabel("validation accuracy")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_title("MFG curves (dotted) lie on the unpruned ones: same numbers", fontsize=9)
    x = np.arange(len(cfg.rates))
    for k, (mfg, color) in enumerate(((False, "C7"), (True, "C2"))):
        d = rates[rates.mfg == mfg].set_index("label_rate").reindex(list(cfg.rates))
        bars = axes[2].bar(x + (k - 0.5) * 0.38, d.epoch_time_s, 0.38, color=color,
                           label="MFG" if mfg else "no MFG")
        if mfg:
            axes[2].bar_label(bars, [f"time {-t:+.0%}\nmem {-m:+.0%}" for t, m in zip(d.time_saving, d.memory_saving)],
                              fontsize=7)
    axes[2].set_ylim(0, 1.3 * float(rates.epoch_time_s.max()))  # room for the bar labels
    axes[2].set_xticks(x, [f"{r:.0%}" for r in cfg.rates])
    axes[2].set_xlabel("label rate (training nodes / nodes)")
    axes[2].set_ylabel("epoch time (s, median, slowest worker)")
    axes[2].set_title("epoch time with and without MFG\n(labels: MFG's change of epoch time and of peak memory above "
                      "baseline)", fontsize=9)
    axes[2].legend(fontsize=8)
    axes[2].grid(alpha=0.3, axis="y")
    banner = measured_banner(cpu, cores, date, f"{cfg.workers} worker processes share these {cores} cores (gloo on "
                             f"loopback); 1-min load {load[0]:.1f} -> {load[1]:.1f}")
    g = load_graph(cfg.graph)
    title = (f"Figure 8 (CPU analogue): {cfg.layers}-layer GraphSAGE (mean), hidden {cfg.hidden}, dropout "
             f"{cfg.dropout}, sar on {cfg.workers} workers, curves in {cfg.curve_dtype}, epoch times in float32; "
             f"products-like synthetic graph, {g.num_nodes:,} nodes, {g.num_edges:,} edges, {g.num_classes} classes, "
             f"{g.train_mask.mean():.0%} of nodes labelled for training; {cfg.epochs} epochs, Adam lr {cfg.lr} with "
             f"cosine decay; label augmentation: {cfg.label_aug:.0%} of the training labels as inputs each epoch")
    fig.tight_layout(rect=(0, 0, 1, face(fig, MEASURED, banner, title)))
    fig.savefig(out / f"{prefix}.png", dpi=120)
    plt.close(fig)
