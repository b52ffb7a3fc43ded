"""The metric record: one row per (rank, epoch), its columns and defaults, and the one summary of many.

Measured runs (``real/``), simulated runs (``simulator/``) and the notebooks read and write the same
records; this module is the only place that lists the columns.

Summary of one configuration (:func:`summarize`), over the measured epochs (``epoch >= warmup`` when there
are any, else all):

* ``epoch_time_s``: median over epochs of the slowest rank's epoch time; ``epoch_spread`` is
  ``(max - min) / median`` of those per-epoch times. Records of one configuration from several runs (a
  :data:`RUN_COLUMN` naming each run's file) pool their epochs: an epoch is one run's;
* ``comm_wait_s``, ``compute_s``: median over epochs of the slowest rank's value; ``*_mean_s``: of the mean
  over ranks;
* ``bytes_sent_per_epoch``: median over epochs of the bytes all ranks sent; ``bytes_sent_per_worker``: of
  their mean;
* ``peak_mem_above_baseline_bytes``: max over ranks and epochs of ``peak_mem_bytes - baseline_mem_bytes``;
  ``peak_mem_bytes`` and ``baseline_mem_bytes``: the (rank, epoch) with the largest ``peak_mem_bytes``;
* ``loss``: the loss of the last epoch; ``epochs``, ``ranks``: how many were summarised.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas is imported where a summary is made: the workers import the columns without it
    import pandas as pd

#: the ``backend`` column's values: the torch.distributed backends the engine knows
BACKENDS = ("gloo", "nccl", "ccl", "mpi")

#: what every worker measures, once per (rank, epoch)
METRIC_COLUMNS = ("mode", "model", "workers", "rank", "epoch", "epoch_time_s", "compute_s", "comm_wait_s",
                  "bytes_sent", "bytes_recv", "peak_mem_bytes", "baseline_mem_bytes", "loss", "train_acc",
                  "val_acc", "test_acc")
#: the configuration a record was measured (or simulated) under
CONFIG_COLUMNS = ("graph", "partition_dir", "num_nodes", "num_edges", "feature_dim", "num_classes", "num_relations",
                  "layers", "hidden", "heads", "aggr", "bases", "fused", "self_loops", "prefetch", "dtype", "batchnorm",
                  "dropout", "threads", "net", "backend", "mfg", "label_aug", "lr_schedule", "correct_smooth")
#: what a run with ``correct_smooth`` adds to its last epoch's record (NaN in the other records)
CS_COLUMNS = ("cs_train_acc", "cs_val_acc", "cs_test_acc")
#: which sarlab measured a record: ``sarlab.version.version_string()`` (version, and the git commit from a checkout)
VERSION_COLUMN = "sarlab_version"
RECORD_COLUMNS = METRIC_COLUMNS + CONFIG_COLUMNS
#: values of configuration columns that older records do not carry
CONFIG_DEFAULTS = {"label": "", "graph": "", "partition_dir": "", "heads": 1, "aggr": "mean", "fused": False,
                   "self_loops": True,
                   "prefetch": 1, "dtype": "float32", "batchnorm": False, "dropout": 0.0, "threads": 0,
                   "net": "loopback", "backend": "gloo", "num_relations": 1, "bases": 0, "mfg": False, "label_aug": 0.0,
                   "lr_schedule": "constant", "correct_smooth": ""}
#: the column that names the file a record was read from: records of one configuration from several files are runs
RUN_COLUMN = "records_path"
#: the keys that tell one configuration from another in a set of records
CONFIG_KEYS = ("label", "graph", "partition_dir", "num_nodes", "num_edges", "feature_dim", "num_classes",
               "num_relations", "model", "layers", "hidden", "heads", "aggr", "bases", "fused", "self_loops", "mode",
               "workers",
               "prefetch", "dtype", "batchnorm", "dropout", "threads", "net", "backend", "mfg", "label_aug")


def measured_epochs(records: pd.DataFrame, warmup: int = 1) -> pd.DataFrame:
    """The records of epochs ``>= warmup`` (all records when no epoch is that late)."""
    late = records.epoch >= warmup
    return records[late] if late.any() else records


def summarize(records: pd.DataFrame, keys: Sequence[str] = ("model", "mode", "workers"),
              warmup: int = 1) -> pd.DataFrame:
    """One row per configuration (``keys`` present in ``records``) with the columns of the module docstring."""
    df = measured_epochs(records, warmup)
    keys = [k for k in keys if k in df.columns]
    df = df.assign(peak_above=df.peak_mem_bytes - df.baseline_mem_bytes)
    has = set(df.columns)

    def col(name: str) -> str:  # a missing optional column summarises as NaN
        return name if name in has else "_nan"

    df = df.assign(_nan=math.nan)
    run = [RUN_COLUMN] if RUN_COLUMN in has else []  # runs of one configuration are not one run's ranks
    per_epoch = df.groupby([*keys, *run, "epoch"], dropna=False, sort=False).agg(
        epoch_time=("epoch_time_s", "max"), compute=(col("compute_s"), "max"),
        compute_mean=(col("compute_s"), "mean"), wait=(col("comm_wait_s"), "max"),
        wait_mean=(col("comm_wait_s"), "mean"), sent=(col("bytes_sent"), lambda b: b.sum(min_count=1)),
        sent_mean=(col("bytes_sent"), "mean"), peak_above=("peak_above", "max"), ranks=("rank", "nunique"),
        loss=(col("loss"), "first"))
    grouped = per_epoch.groupby(keys, dropna=False, sort=False) if keys else per_epoch.groupby(lambda _: 0)
    out = grouped.agg(
        epoch_time_s=("epoch_time", "median"),
        epoch_spread=("epoch_time", lambda t: (t.max() - t.min()) / t.median() if len(t) and t.median() else 0.0),
        compute_s=("compute", "median"), compute_mean_s=("compute_mean", "median"),
        comm_wait_s=("wait", "median"), comm_wait_mean_s=("wait_mean", "median"),
        bytes_sent_per_epoch=("sent", "median"), bytes_sent_per_worker=("sent_mean", "median"),
        peak_mem_above_baseline_bytes=("peak_above", "max"), loss=("loss", "last"),
        epochs=("epoch_time", "size"), ranks=("ranks", "max"))
    worst = df.loc[df.groupby(keys, dropna=False, sort=False).peak_mem_bytes.idxmax()] if keys else \
        df.loc[[df.peak_mem_bytes.idxmax()]]
    worst = worst.set_index(keys)[["peak_mem_bytes", "baseline_mem_bytes"]] if keys else \
        worst[["peak_mem_bytes", "baseline_mem_bytes"]].set_axis(out.index)
    out = out.join(worst)
    return out.reset_index() if keys else out.reset_index(drop=True)


def describe(records: pd.DataFrame | list) -> str:
    """One line for a finished run: final loss and accuracies (and Correct & Smooth's when it ran), steady epoch
    time, peak memory per worker."""
    import pandas as pd

    df = pd.DataFrame(records)
    last = df[df.epoch == df.epoch.max()].iloc[0]
    row = summarize(df, keys=(), warmup=1).iloc[0]
    cs = ""
    if all(c in df.columns for c in CS_COLUMNS) and not math.isnan(float(last.cs_test_acc)):
        cs = (f" (after Correct & Smooth: train acc {last.cs_train_acc:.3f} val acc {last.cs_val_acc:.3f} "
              f"test acc {last.cs_test_acc:.3f})")
    return (f"final: loss {last.loss:.4f} train acc {last.train_acc:.3f} val acc {last.val_acc:.3f} "
            f"test acc {last.test_acc:.3f}{cs}; epoch time (median over epochs>0, max over ranks) "
            f"{row.epoch_time_s:.3f}s; peak memory per worker above baseline (max) "
            f"{row.peak_mem_above_baseline_bytes / 2**20:.1f} MiB")
