"""Side-by-side engine speed: this tree's engine against an earlier checkout of it, run alternately.

For every configuration (model, mode, N) the runs alternate ``base, new, new-rss, base, new, ...`` on the same
METIS partition, so that a change of machine load falls on both engines alike. ``base`` is the other checkout's
``sarlab train`` command line in a subprocess (its own modules: ``PYTHONPATH`` is its root); ``new`` and
``new-rss`` launch this tree's workers through :func:`sarlab.real.launch.launcher.launch`, with peak memory measured
``live`` (the default: counting allocator with a bounded block cache) and ``rss`` (VmHWM with every large tensor on
fresh pages, the method the base engine has). Per run it records the epoch time (slowest rank per epoch,
median over the epochs after the first), the peak memory per worker above its baseline (max over ranks and
measured epochs), the CPU seconds of all its processes (``getrusage`` of the waited-for children: set-up
included) and the 1-minute load before it. Speed-ups are ``base / new`` per interleaved pair of runs.

Run ``python -m benchmarks.engine_speed --help`` from the repository root; outputs
``<out>/engine_speed.{csv,md,png}``. The scaffold (ratios, report): :mod:`benchmarks.ab`.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import pandas as pd

from benchmarks import ab
from sarlab.common.machine import load_1min, usable_cores
from sarlab.common.paths import cache_dir
from sarlab.core.config import EngineConfig
from sarlab.nn.model import ModelConfig
from sarlab.real.bench.bench import EngineBenchConfig, cached_partition
from sarlab.real.launch.jobs import Job
from sarlab.real.launch.launcher import launch
from sarlab.training.trainer import TrainConfig

DEFAULT_OUT = str(cache_dir("engine-speed"))
ENGINES = ("base", "new", "new-rss")
DEFAULT_CONFIGS = ("sage:sar:2", "sage:sar:8", "gat-unfused:sar:2", "gat-fused:sar:2", "sage:sar:4",
                   "sage:oneshot:4", "gcn:sar:8", "gcn:sar:2")  # most telling first: a cut-short run keeps them


@dataclass(frozen=True)
class SpeedConfig:
    """What one comparison measures.

    Args:
        base_root: root of the other checkout (its kernels built in its own ``.build``).
        nodes, degree, features, classes: the synthetic graph (seed 0, METIS parts cached in ``cache``).
        hidden, layers: SAGE/GCN model; ``gat_hidden``, ``gat_heads``: GAT's (hidden is heads x channels).
        epochs: per run (the first is warm-up); ``reps``: runs of each engine per configuration.
        configs: ``model:mode:N`` strings, model one of ``sage``, ``gcn``, ``gat-fused``, ``gat-unfused``.
        rss_reps: runs of ``new-rss`` per configuration (its memory is the one compared with the base's).
        timeout_s: bound on one run.
    """

    base_root: str = ab.DEFAULT_BASE
    nodes: int = 30_000
    degree: int = 30
    features: int = 64
    classes: int = 16
    hidden: int = 256
    layers: int = 3
    gat_hidden: int = 128
    gat_heads: int = 8
    epochs: int = 4
    reps: int = 3
    rss_reps: int = 1
    configs: tuple[str, ...] = DEFAULT_CONFIGS
    cache: str = str(cache_dir("partitions"))
    timeout_s: float = 900.0

    def model(self, name: str) -> tuple[str, int, int, bool]:
        """(model, hidden, heads, fused) of a configuration's model name."""
        if name.startswith("gat"):
            return "gat", self.gat_hidden, self.gat_heads, name != "gat-unfused"
        return name, self.hidden, 4, True


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def base_command(cfg: SpeedConfig, pdir: str, name: str, mode: str, n: int, json_path: str) -> list[str]:
    """The base checkout's ``train`` command line for one run."""
    model, hidden, heads, fused = cfg.model(name)
    cmd = [sys.executable, "-m", "sarlab", "train", "--graph", pdir, "--workers", str(n), "--model", model,
           "--layers", str(cfg.layers), "--hidden", str(hidden), "--heads", str(heads), "--mode", mode,
           "--epochs", str(cfg.epochs), "--eval-every", "0", "--timeout", "600", "--json", json_path]
    return cmd + ([] if fused else ["--unfused"])


def run_base(cfg: SpeedConfig, pdir: str, name: str, mode: str, n: int) -> list[dict]:
    """One run of the base checkout's CLI in a subprocess; its metric records."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "records.json")
        env = {**os.environ, "PYTHONPATH": cfg.base_root}
        done = subprocess.run(base_command(cfg, pdir, name, mode, n, out), cwd=cfg.base_root, env=env,
                              capture_output=True, text=True, timeout=cfg.timeout_s)
        if done.returncode != 0:
            raise RuntimeError(f"base run failed ({done.returncode}):\n{done.stderr[-3000:]}")
        with open(out) as f:
            return json.load(f)


def run_new(cfg: SpeedConfig, pdir: str, name: str, mode: str, n: int, memory: str) -> list[dict]:
    """One run of this tree's engine through the launcher; its metric records."""
    model, hidden, heads, fused = cfg.model(name)
    job = Job("train", pdir, ModelConfig(model=model, layers=cfg.layers, hidden=hidden, heads=heads),
              TrainConfig(epochs=cfg.epochs, eval_every=0), EngineConfig(mode=mode, fused=fused),
              timeout_s=600.0, quiet=True, memory=memory)
    return launch(job, n, run_timeout_s=cfg.timeout_s, log=lambda _: None)


def run_row(records: list[dict]) -> dict:
    """Epoch time (slowest rank, median over epochs after the first) and peak above baseline of one run."""
    df = pd.DataFrame(records)
    measured = df[df.epoch > df.epoch.min()]
    per_epoch = measured.groupby("epoch").epoch_time_s.max()
    above = measured.peak_mem_bytes - measured.baseline_mem_bytes
    return {"epoch_time_s": float(per_epoch.median()), "epoch_time_min_s": float(per_epoch.min()),
            "peak_above_baseline_mib": float(above.max()) / 2**20,
            "peak_mib": float(measured.peak_mem_bytes.max()) / 2**20, "epochs_measured": len(per_epoch)}


def measure(cfg: SpeedConfig, log=print, progress_csv: str | None = None) -> pd.DataFrame:
    """Run every configuration, engines interleaved per repetition; one row per run."""
    rows: list[dict] = []
    bench = EngineBenchConfig(nodes=cfg.nodes, degree=cfg.degree, features=cfg.features, classes=cfg.classes,
                              cache=cfg.cache)
    t_start = time.perf_counter()
    for spec in cfg.configs:
        name, mode, workers = spec.split(":")
        n = int(workers)
        pdir = cached_partition(bench, n, log)
        for rep in range(cfg.reps):
            for engine in ENGINES:
                if engine == "new-rss" and rep >= cfg.rss_reps:
                    continue
                load, cpu0, t0 = load_1min(), _children_cpu_s(), time.perf_counter()
                if engine == "base":
                    recs = run_base(cfg, pdir, name, mode, n)
                else:
                    recs = run_new(cfg, pdir, name, mode, n, "rss" if engine == "new-rss" else "live")
                row = {"config": spec, "model": name, "mode": mode, "workers": n, "engine": engine, "rep": rep,
                       "load_1min_before": load, "wall_s": time.perf_counter() - t0,
                       "cpu_s": _children_cpu_s() - cpu0, **run_row(recs)}
                rows.append(row)
                log(f"[{time.perf_counter() - t_start:6.0f}s] {spec:<18} {engine:<8} rep {rep} epoch "
                    f"{row['epoch_time_s']:6.2f}s cpu {row['cpu_s']:6.1f}s peak+ {row['peak_above_baseline_mib']:7.1f} "
                    f"MiB load {load:.1f}")
                if progress_csv:
                    pd.DataFrame(rows).to_csv(progress_csv, index=False)
    return pd.DataFrame(rows)


def pair_ratios(runs: pd.DataFrame) -> pd.DataFrame:
    """Per configuration: base/new speed-ups of epoch time and CPU per interleaved pair (median, range),
    absolute medians, and memory ratios new/base (``live`` and ``rss``)."""
    out = []
    for spec, d in runs.groupby("config", sort=False):
        base = d[d.engine == "base"].set_index("rep")
        new = d[d.engine == "new"].set_index("rep")
        rss = d[d.engine == "new-rss"].set_index("rep")
        speed, cpu = ab.pair_ratio(d, "epoch_time_s"), ab.pair_ratio(d, "cpu_s")
        row = {"config": spec, "pairs": len(speed),
               "base_epoch_s": base.epoch_time_s.median(), "new_epoch_s": new.epoch_time_s.median(),
               "speedup_median": speed.median(), "speedup_min": speed.min(), "speedup_max": speed.max(),
               "cpu_speedup_median": cpu.median(), "cpu_speedup_min": cpu.min(), "cpu_speedup_max": cpu.max(),
               "base_peak_above_mib": base.peak_above_baseline_mib.max(),
               "new_live_peak_above_mib": new.peak_above_baseline_mib.max(),
               "new_rss_peak_above_mib": rss.peak_above_baseline_mib.max() if len(rss) else float("nan"),
               "load_median": d.load_1min_before.median(), "load_max": d.load_1min_before.max()}
        if len(rss):
            row["rss_speedup_median"] = (base.epoch_time_s.median() / rss.epoch_time_s.median())
        row["mem_rss_over_base"] = row["new_rss_peak_above_mib"] / row["base_peak_above_mib"]
        row["mem_live_over_base"] = row["new_live_peak_above_mib"] / row["base_peak_above_mib"]
        out.append(row)
    return pd.DataFrame(out)


def plot_ratios(rat: pd.DataFrame, path: str) -> None:
    """Epoch-time and CPU speed-ups per configuration (median bar, min-max whiskers) against the targets."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    x = range(len(rat))
    for ax, key, title in ((axes[0], "speedup", "epoch time base / new"), (axes[1], "cpu_speedup",
                                                                             "CPU seconds base / new")):
        med = rat[f"{key}_median"]
        err = [med - rat[f"{key}_min"], rat[f"{key}_max"] - med]
        ax.bar(x, med, yerr=err, capsize=3, color="tab:blue")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.axhline(1.25, color="tab:orange", ls="--", lw=0.8, label="1.25x (N=2,4 target)")
        ax.axhline(1.6, color="tab:red", ls="--", lw=0.8, label="1.6x (N=8 target)")
        ax.set_xticks(list(x), rat.config, rotation=45, ha="right", fontsize=8)
        ax.set_title(f"{title} (median, range over pairs)", fontsize=9)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def report_table(runs: pd.DataFrame, rat: pd.DataFrame) -> pd.DataFrame:
    """The report's table: per configuration the epoch times, the speed-ups with their spread, memory and load."""
    table = rat[["config", "pairs", "base_epoch_s", "new_epoch_s"]].copy()
    configs = [d for _, d in runs.groupby("config", sort=False)]
    table["speedup"] = [ab.spread(ab.pair_ratio(d, "epoch_time_s")) for d in configs]
    table["cpu_speedup"] = [ab.spread(ab.pair_ratio(d, "cpu_s")) for d in configs]
    return table.assign(base_peak_mib=rat.base_peak_above_mib, new_rss_peak_mib=rat.new_rss_peak_above_mib,
                        new_live_peak_mib=rat.new_live_peak_above_mib, mem_rss_over_base=rat.mem_rss_over_base,
                        mem_live_over_base=rat.mem_live_over_base, load=[
                            f"{a:.1f}-{b:.1f}" for a, b in zip(runs.groupby("config", sort=False)
                                                               .load_1min_before.min(), rat.load_max)])


def write_outputs(runs: pd.DataFrame, cfg: SpeedConfig, out: str, command: str) -> pd.DataFrame:
    """``engine_speed.csv`` (every run), ``engine_speed.md`` (ratios with spread) and ``engine_speed.png``."""
    os.makedirs(out, exist_ok=True)
    runs.to_csv(os.path.join(out, "engine_speed.csv"), index=False)
    rat = pair_ratios(runs)
    plot_ratios(rat, os.path.join(out, "engine_speed.png"))
    machine = (f", {usable_cores()} usable cores. Graph: synthetic nodes={cfg.nodes}, "
               f"degree={cfg.degree}, features={cfg.features}, classes={cfg.classes} (METIS). SAGE/GCN {cfg.layers} "
               f"layers hidden {cfg.hidden}; GAT hidden {cfg.gat_hidden}, {cfg.gat_heads} heads. {cfg.epochs} epochs "
               f"per run (first is warm-up), {cfg.reps} interleaved runs per engine.")
    reading = ("Speed-up = base / new per interleaved pair: median (min-max); epoch times in seconds are medians "
               "over runs. `cpu_speedup`: CPU seconds of all processes of a run, set-up (imports, loading) "
               "included, so it understates a per-epoch gain. Memory: peak per worker above its baseline, MiB, max "
               "over ranks; `rss` (VmHWM, the base's method) and `live` (counting allocator, the new default). "
               "`load`: the 1-minute load before the runs (min-max); wall times under a load above the core count "
               "are not the engines' quiet speed, and interleaving only spreads that load evenly.")
    ab.write_report(os.path.join(out, "engine_speed.md"), f"Engine speed: this tree vs {cfg.base_root}", machine,
                    report_table(runs, rat).round(2), command, reading)
    return rat


def build_parser() -> argparse.ArgumentParser:
    d = SpeedConfig()
    p = ab.parser("engine_speed", __doc__, d.base_root)
    for name in ("nodes", "degree", "features", "classes", "hidden", "layers", "gat_hidden", "gat_heads", "epochs",
                 "reps", "rss_reps"):
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=getattr(d, name))
    p.add_argument("--configs", default=",".join(d.configs), help="model:mode:N list (default %(default)s)")
    p.add_argument("--cache", default=d.cache, help="partition cache (default %(default)s)")
    p.add_argument("--out", default=DEFAULT_OUT, help="output folder (default %(default)s)")
    p.add_argument("--report-only", action="store_true", help="rewrite the outputs from <out>/engine_speed.csv")
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    cfg = SpeedConfig(base_root=a.base_root, nodes=a.nodes, degree=a.degree, features=a.features,
                      classes=a.classes, hidden=a.hidden, layers=a.layers, gat_hidden=a.gat_hidden,
                      gat_heads=a.gat_heads, epochs=a.epochs, reps=a.reps, rss_reps=a.rss_reps,
                      configs=tuple(c for c in a.configs.split(",") if c), cache=a.cache)
    args = [arg for arg in (argv if argv is not None else sys.argv[1:]) if arg != "--report-only"]
    command = ab.command_line("engine_speed", args)  # the measuring command, also in a report
    csv_path = os.path.join(a.out, "engine_speed.csv")
    if a.report_only:  # the finished runs' table, else what an interrupted measurement left
        partial = os.path.join(a.out, "engine_speed.partial.csv")
        runs = pd.read_csv(csv_path if os.path.exists(csv_path) else partial)
    else:
        ab.check_base_root(cfg.base_root, "sarlab")
        os.makedirs(a.out, exist_ok=True)
        runs = measure(cfg, progress_csv=os.path.join(a.out, "engine_speed.partial.csv"))
    rat = write_outputs(runs, cfg, a.out, command)
    print(rat.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
