"""``sarlab strategies``: full-batch ``sar``/``oneshot``, mini-batch ``sampling`` and stale halos head to head.

Every strategy trains the same model on the same METIS partition and network, from the same seeds; runs are
interleaved (seed by seed, net by net, the strategy order rotated) so a change of machine load spreads over all of
them. Per run (:func:`run_table`):

* ``epoch_time_s``: median over epochs >= 1 of the slowest rank's training time (evaluation excluded);
* ``time_to_target_s``: training time summed over epochs (slowest rank each) until validation accuracy first
  reaches ``target`` (NaN if never);
* ``best_val_acc``, ``test_at_best_val``: the best validation accuracy and the test accuracy of that epoch;
  ``best_test_acc``: the best test accuracy of any epoch (an optimistic figure, reported because the issue asks);
* ``peak_mem_mib``: peak memory above the worker's baseline, max over ranks and epochs;
* ``mib_per_epoch``: bytes all ranks sent per epoch (median over epochs >= 1), MiB.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shlex
import sys
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from sarlab.common.machine import cpu_model, load_1min, today, usable_cores
from sarlab.common.paths import cache_dir
from sarlab.common.records import METRIC_COLUMNS, measured_epochs
from sarlab.core.config import EngineConfig, SamplingConfig
from sarlab.data.graphs import load_graph
from sarlab.data.partition import is_partition_dir, partition
from sarlab.nn.model import ModelConfig
from sarlab.real.commands.options import progress
from sarlab.real.launch import outputs
from sarlab.real.launch.jobs import Job
from sarlab.real.launch.launcher import LaunchError, WorkerError, launch
from sarlab.real.launch.netspec import NetSpec
from sarlab.training.trainer import TrainConfig

#: columns of ``OUT.records.csv`` besides the metric columns (the configuration is in ``OUT.md``)
RECORD_EXTRAS = ("strategy", "seed", "net", "staleness", "steps", "fanouts", "batch_size", "round_batches", "rounds",
                 "sample_s", "fetch_wait_s", "input_rows", "remote_input_rows", "sampled_edges", "seeds",
                 "round_input_rows", "round_remote_rows", "load_1min_before", "load_1min_after", "command")
#: where the hand-written reading of ``OUT.md`` starts
READING_HEADING = "## Reading"


@dataclass(frozen=True)
class Strategy:
    """One way to train: an exact mode, a staleness bound, or sampled mini-batches."""

    name: str
    mode: str = "sar"
    staleness: int = 0
    sampling: SamplingConfig | None = None

    def engine(self, prefetch: int = 1) -> EngineConfig:
        return EngineConfig(mode=self.mode, prefetch=prefetch, staleness=self.staleness)


def default_strategies(fanouts: tuple[int, ...], batch_size: int) -> tuple[Strategy, ...]:
    """``sar``, ``oneshot``, ``sampling`` and ``sar`` with staleness 1 and 2."""
    return (Strategy("sar"), Strategy("oneshot", mode="oneshot"),
            Strategy("sampling", sampling=SamplingConfig(fanouts=fanouts, batch_size=batch_size)),
            Strategy("stale-1", staleness=1), Strategy("stale-2", staleness=2))


@dataclass(frozen=True)
class StrategiesConfig:
    """What to compare.

    Args:
        graph: graph spec (a products-like synthetic graph by default).
        workers: worker processes.
        model: the model every strategy trains.
        epochs, lr: optimisation (Adam, constant rate).
        seeds: model seeds (one run per seed, strategy and network).
        nets: network specs.
        target: validation accuracy that "time to target" waits for.
        threads: threads per worker.
        cache: where the partition is kept between runs.
    """

    graph: str = "synthetic:nodes=30000,degree=15,features=64,classes=16,noise=4,seed=0"
    workers: int = 4
    model: ModelConfig = ModelConfig(model="sage", layers=2, hidden=64)
    epochs: int = 30
    lr: float = 0.01
    seeds: tuple[int, ...] = (0, 1, 2)
    nets: tuple[str, ...] = ("loopback",)
    target: float = 0.8
    threads: int = 1
    cache: str = str(cache_dir("partitions-strategies"))


def cached_partition(cfg: StrategiesConfig) -> str:
    """The METIS partition of ``cfg.graph`` into ``cfg.workers`` parts, made on first use."""
    key = hashlib.sha256(f"{cfg.graph}|{cfg.workers}|metis".encode()).hexdigest()[:12]
    pdir = os.path.join(cfg.cache, f"{key}-n{cfg.workers}")
    if not is_partition_dir(pdir):
        progress(f"generating {cfg.graph}; partitioning into {cfg.workers} parts -> {pdir}")
        partition(load_graph(cfg.graph), cfg.workers, pdir, source=cfg.graph)
    return pdir


def plan(cfg: StrategiesConfig, strategies: tuple[Strategy, ...]) -> list[tuple[int, str, Strategy]]:
    """(seed, net, strategy) in the order they run: interleaved, the strategy order rotated every block."""
    order, block = [], 0
    for seed in cfg.seeds:
        for net in cfg.nets:
            shift = block % len(strategies)
            order += [(seed, net, s) for s in strategies[shift:] + strategies[:shift]]
            block += 1
    return order


def run_one(cfg: StrategiesConfig, pdir: str, strategy: Strategy, seed: int, net: str, command: str = "") -> list[dict]:
    """The metric records of one training run, labelled with the strategy, seed and machine load."""
    job = Job("train", pdir, replace(cfg.model, seed=seed), TrainConfig(epochs=cfg.epochs, lr=cfg.lr),
              strategy.engine(), threads=cfg.threads, quiet=True, label=strategy.name, sampling=strategy.sampling,
              timeout_s=300.0)
    load_before = load_1min()
    records = launch(job, cfg.workers, net=net, log=progress)
    for rec in records:
        rec.update(strategy=strategy.name, seed=seed, load_1min_before=load_before, load_1min_after=load_1min(),
                   command=command)
    return records


def run_table(records: pd.DataFrame, target: float) -> pd.DataFrame:
    """One row per (strategy, net, seed) with the columns of the module docstring."""
    rows = []
    for (name, net, seed), df in records.groupby(["strategy", "net", "seed"], sort=False):
        per_epoch = df.groupby("epoch").agg(time=("epoch_time_s", "max"), val=("val_acc", "first"),
                                            test=("test_acc", "first"), sent=("bytes_sent", "sum")).sort_index()
        elapsed = per_epoch.time.cumsum()
        reached = per_epoch.index[per_epoch.val >= target]
        best = per_epoch.val.idxmax()
        late = measured_epochs(df)
        late_epochs = late.groupby("epoch").agg(time=("epoch_time_s", "max"), sent=("bytes_sent", "sum"))
        rows.append({
            "strategy": name, "net": net, "seed": seed, "epochs": len(per_epoch),
            "epoch_time_s": float(late_epochs.time.median()),
            "time_to_target_s": float(elapsed[reached[0]]) if len(reached) else float("nan"),
            "epochs_to_target": int(reached[0]) + 1 if len(reached) else -1,
            "best_val_acc": float(per_epoch.val.max()), "test_at_best_val": float(per_epoch.test[best]),
            "best_test_acc": float(per_epoch.test.max()),
            "peak_mem_mib": float((df.peak_mem_bytes - df.baseline_mem_bytes).max() / 2**20),
            "mib_per_epoch": float(late_epochs.sent.median() / 2**20),
            "load_1min": float(df.load_1min_before.iloc[0]),
        })
    return pd.DataFrame(rows)


def seed_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation over seeds of every measured column, per (net, strategy)."""
    cols = ["epoch_time_s", "time_to_target_s", "best_val_acc", "test_at_best_val", "best_test_acc",
            "peak_mem_mib", "mib_per_epoch"]
    grouped = table.groupby(["net", "strategy"], sort=False)
    out = grouped[cols].agg(["mean", "std"])
    out.columns = [f"{c}_{stat}" for c, stat in out.columns]
    out["seeds"] = grouped.size()
    out["reached_target"] = grouped.time_to_target_s.apply(lambda t: int(t.notna().sum()))
    out = out.reset_index()
    nets, names = list(dict.fromkeys(table.net)), list(dict.fromkeys(table.strategy))
    rank = {n: i for i, n in enumerate(["sar", "oneshot", "sampling", "stale-1", "stale-2"])}
    names.sort(key=lambda n: rank.get(n, len(rank)))
    order = out.net.map(nets.index) * len(names) + out.strategy.map(names.index)
    return out.iloc[order.argsort(kind="stable")].reset_index(drop=True)


def _kept_reading(path: str) -> str:
    """The hand-written ``## Reading`` section of an earlier ``OUT.md`` (kept when the tables are rewritten)."""
    if not os.path.exists(path):
        return ""
    with open(path) as f:
        text = f.read()
    at = text.find(READING_HEADING)
    return text[at:] if at >= 0 else ""


def _pm(row, col: str, fmt: str) -> str:
    """``mean ± std`` of ``col`` in a :func:`seed_summary` row (``n/a`` when no seed has a value)."""
    mean, std = getattr(row, f"{col}_mean"), getattr(row, f"{col}_std")
    return "n/a" if mean != mean else f"{mean:{fmt}}" + ("" if std != std else f" ± {std:{fmt}}")


def _md_table(summary: pd.DataFrame) -> str:
    head = ("| net | strategy | epoch time (s) | time to target (s) | reached | best val | test at best val | "
            "best test | peak MiB/worker | MiB sent/epoch |")
    lines = [head, "|" + "---|" * 10]
    for r in summary.itertuples():
        cells = [_pm(r, c, fmt) for c, fmt in (("epoch_time_s", ".3f"), ("time_to_target_s", ".2f"))]
        cells.append(f"{r.reached_target}/{r.seeds}")
        cells += [_pm(r, c, fmt) for c, fmt in (("best_val_acc", ".4f"), ("test_at_best_val", ".4f"),
                                                ("best_test_acc", ".4f"), ("peak_mem_mib", ".1f"),
                                                ("mib_per_epoch", ".2f"))]
        lines.append(f"| {r.net} | {r.strategy} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_outputs(records: pd.DataFrame, cfg: StrategiesConfig, out: str, command: str) -> pd.DataFrame:
    """``OUT.csv`` (one row per run), ``OUT.records.csv`` (every metric record), ``OUT.md`` and ``OUT.png``."""
    table = run_table(records, cfg.target)
    summary = seed_summary(table)
    outputs.write_csv(out + ".csv", table)
    slim = records[[c for c in (*METRIC_COLUMNS, *RECORD_EXTRAS) if c in records.columns]].copy()
    if "command" in slim.columns:  # once, not on every row
        slim["command"] = [slim.command.iloc[0]] + [""] * (len(slim) - 1)
    outputs.write_csv(out + ".records.csv", slim)
    loads = table.load_1min
    reading = _kept_reading(out + ".md")
    outputs.write_bytes(out + ".md", (
                f"# Training strategies head to head ({today()})\n\n"
                f"Graph `{cfg.graph}`, {cfg.workers} workers x {cfg.threads} thread(s), model {cfg.model.model} "
                f"{cfg.model.layers} layers hidden {cfg.model.hidden}, Adam lr {cfg.lr}, {cfg.epochs} epochs, seeds "
                f"{', '.join(map(str, cfg.seeds))}; target validation accuracy {cfg.target}.\n\n"
                f"Machine: {cpu_model()}, {usable_cores()} usable cores, shared with other jobs: 1-min load "
                f"{loads.min():.1f} .. {loads.max():.1f} (median {loads.median():.1f}) at the start of the runs, so "
                "times are indicative only; configurations were interleaved.\n\n"
                f"Command: `{command}`\n\n"
                "Mean ± standard deviation over seeds; time to target sums training epochs (evaluation excluded) "
                "over the runs that reached it; peak memory is above each worker's baseline.\n\n"
                + _md_table(summary) + "\n" + ("\n" + reading if reading else "")))
    with outputs.staged_file(out + ".png") as png:
        plot(summary, png)
    return summary


def plot(summary: pd.DataFrame, path: str) -> None:
    """Five panels (epoch time, time to target, test accuracy at best validation, memory, bytes), bars per net."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("epoch_time_s", "epoch time (s)"), ("time_to_target_s", "time to target (s)"),
              ("test_at_best_val", "test acc. at best val."), ("peak_mem_mib", "peak MiB / worker"),
              ("mib_per_epoch", "MiB sent / epoch")]
    nets = list(dict.fromkeys(summary.net))
    strategies = list(dict.fromkeys(summary.strategy))
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6))
    width = 0.8 / max(len(nets), 1)
    for ax, (col, title) in zip(axes, panels):
        for k, net in enumerate(nets):
            sub = summary[summary.net == net].set_index("strategy").reindex(strategies)
            x = np.arange(len(strategies)) + k * width
            ax.bar(x, sub[f"{col}_mean"], width, yerr=sub[f"{col}_std"].fillna(0), label=net, capsize=2)
        ax.set_xticks(np.arange(len(strategies)) + width * (len(nets) - 1) / 2)
        ax.set_xticklabels(strategies, rotation=30, ha="right")
        ax.set_title(title)
        if col == "test_at_best_val":
            low = np.nanmin(summary[f"{col}_mean"])
            ax.set_ylim(max(0.0, low - 0.05), min(1.0, np.nanmax(summary[f"{col}_mean"]) + 0.02))
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_strategies(cfg: StrategiesConfig, strategies: tuple[Strategy, ...], out: str | None = None,
                   command: str = "") -> pd.DataFrame:
    """Run every (seed, net, strategy) of :func:`plan`; returns all metric records (written as they come when
    ``out`` is given, so an interrupted campaign keeps what it measured)."""
    pdir = cached_partition(cfg)
    records: list[dict] = []
    order = plan(cfg, strategies)
    for i, (seed, net, strategy) in enumerate(order):
        progress(f"[{i + 1}/{len(order)}] {strategy.name} seed {seed} on {net} (load {load_1min():.1f})")
        try:
            records += run_one(cfg, pdir, strategy, seed, net, command)
        except (LaunchError, WorkerError) as err:  # one failed run must not lose the campaign: say so, go on
            progress(f"run failed: {strategy.name} seed {seed} on {net}: {str(err).splitlines()[0]}")
            continue
        if out:
            write_outputs(pd.DataFrame(records), cfg, out, command)
    return pd.DataFrame(records)


def build_parser() -> argparse.ArgumentParser:
    d = StrategiesConfig()
    p = argparse.ArgumentParser(prog="sarlab strategies", description=__doc__.splitlines()[0])
    p.add_argument("--graph", default=d.graph, help="graph spec (default %(default)s)")
    p.add_argument("--workers", type=int, default=d.workers)
    p.add_argument("--model", default=d.model.model)
    p.add_argument("--layers", type=int, default=d.model.layers)
    p.add_argument("--hidden", type=int, default=d.model.hidden)
    p.add_argument("--epochs", type=int, default=d.epochs)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--seeds", default=",".join(map(str, d.seeds)), help="comma list (default %(default)s)")
    p.add_argument("--nets", default="loopback", help="comma list of network specs separated by ';' "
                   "(e.g. 'loopback;veth:rate=200mbit')")
    p.add_argument("--target", type=float, default=d.target, help="validation accuracy to reach")
    p.add_argument("--fanouts", default="15,10", help="sampling fan-outs, hop 1 first (default %(default)s)")
    p.add_argument("--batch-size", type=int, default=1024, help="sampling batch per worker (default %(default)s)")
    p.add_argument("--strategies", default="sar,oneshot,sampling,stale-1,stale-2", help="which to run")
    p.add_argument("--threads", type=int, default=d.threads)
    p.add_argument("--cache", default=d.cache, help="partition cache directory")
    p.add_argument("--out", required=True, help="output prefix: OUT.csv, OUT.records.csv, OUT.md, OUT.png (existing "
                   "ones, --from-records' among them, are replaced only with --force; OUT.md keeps its reading)")
    p.add_argument("--force", action="store_true", help="replace the OUT.* files when they exist")
    p.add_argument("--from-records", metavar="CSV",
                   help="run nothing: rewrite the outputs from a campaign's OUT.records.csv (e.g. with another "
                        "--target)")
    return p


#: what ``--out OUT`` gets
OUTPUT_ENDINGS = (".csv", ".records.csv", ".md", ".png")


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    nets = tuple(str(NetSpec.parse(n)) for n in a.nets.split(";") if n.strip())
    cfg = StrategiesConfig(graph=a.graph, workers=a.workers, model=ModelConfig(model=a.model, layers=a.layers,
                                                                               hidden=a.hidden),
                           epochs=a.epochs, lr=a.lr, seeds=tuple(int(s) for s in a.seeds.split(",")), nets=nets,
                           target=a.target, threads=a.threads, cache=a.cache)
    fanouts = tuple(int(f) for f in a.fanouts.split(","))
    chosen = {s.name: s for s in default_strategies(fanouts, a.batch_size)}
    unknown = [n for n in a.strategies.split(",") if n not in chosen]
    if unknown:
        raise SystemExit(f"error: unknown strategies {unknown}: choose from {', '.join(chosen)}")
    strategies = tuple(chosen[n] for n in a.strategies.split(","))
    for end in OUTPUT_ENDINGS:  # before anything runs
        outputs.check_file(a.out + end, "--out", a.force)
    args = sys.argv[1:] if argv is None else argv
    command = "python -m sarlab.real.bench.head_to_head " + " ".join(shlex.quote(x) for x in args)
    if a.from_records:
        records = pd.read_csv(a.from_records)
        if "command" in records.columns:  # the campaign's own command, then this rewrite
            command = f"{records.command.iloc[0]}`, outputs rewritten by `{command}"
    else:
        records = run_strategies(cfg, strategies, a.out, command)
    summary = write_outputs(records, cfg, a.out, command)
    print(summary.to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
