"""``sarlab bench engine``: per-worker peak memory and epoch time vs number of workers, every mode."""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time

import pandas as pd

FULL = {"nodes": 500_000, "degree": 30, "features": 128, "classes": 16, "hidden": 256, "layers": 3,
        "workers": "1,2,4,8", "epochs": 3}
QUICK = {"nodes": 4000, "degree": 10, "features": 16, "classes": 4, "hidden": 32, "layers": 2,
         "workers": "1,2", "epochs": 2}


def summarize(records: pd.DataFrame, warmup: int = 1) -> pd.DataFrame:
    """One row per (model, mode, workers): epoch time = median over measured epochs of the slowest rank;
    peak = max over ranks and measured epochs of (VmHWM - post-setup RSS)."""
    df = records[records.epoch >= warmup] if records.epoch.max() >= warmup else records
    df = df.assign(peak_above_baseline=df.peak_mem_bytes - df.baseline_mem_bytes)
    keys = ["label", "model", "mode", "workers"]
    per_epoch = df.groupby(keys + ["epoch"]).agg(epoch_time_s=("epoch_time_s", "max"),
                                                 comm_wait_s=("comm_wait_s", "max"),
                                                 bytes_sent=("bytes_sent", "sum"),
                                                 peak=("peak_above_baseline", "max"),
                                                 peak_abs=("peak_mem_bytes", "max"),
                                                 loss=("loss", "first"))
    out = per_epoch.groupby(keys).agg(epoch_time_s=("epoch_time_s", "median"),
                                      comm_wait_s=("comm_wait_s", "median"),
                                      bytes_sent_per_epoch=("bytes_sent", "median"),
                                      peak_mem_above_baseline_bytes=("peak", "max"),
                                      peak_mem_bytes=("peak_abs", "max"), loss=("loss", "last")).reset_index()
    return out


def ratios(summary: pd.DataFrame) -> pd.DataFrame:
    """Side-by-side ratios per (model, workers): memory of oneshot and sa over sar (and oneshot over sar+fused),
    and the inverse ratios of epoch time."""
    rows = []
    for (label, model, n), d in summary.groupby(["label", "model", "workers"]):
        by = d.set_index("mode")
        if "sar" not in by.index:
            continue
        row = {"label": label, "model": model, "workers": n}
        pairs = [("oneshot", "sar"), ("sa", "sar"), ("oneshot", "sar+fused")]
        for other, base in pairs:
            if other in by.index and base in by.index:
                row[f"{other}_over_{base}_mem"] = (by.loc[other, "peak_mem_above_baseline_bytes"]
                                                   / by.loc[base, "peak_mem_above_baseline_bytes"])
                row[f"{base}_over_{other}_time"] = by.loc[base, "epoch_time_s"] / by.loc[other, "epoch_time_s"]
        rows.append(row)
    return pd.DataFrame(rows)


def write_markdown(summary: pd.DataFrame, rat: pd.DataFrame, path: str, title: str, command: str) -> None:
    """The summary and ratio tables as Markdown, with how they were produced."""
    s = summary.copy()
    s["epoch_s"] = s.epoch_time_s.round(2)
    s["comm_wait_s"] = s.comm_wait_s.round(2)
    s["peak_MiB_above_baseline"] = (s.peak_mem_above_baseline_bytes / 2**20).round(1)
    s["MiB_sent_per_epoch"] = (s.bytes_sent_per_epoch / 2**20).round(1)
    cols = ["label", "mode", "workers", "epoch_s", "comm_wait_s", "peak_MiB_above_baseline", "MiB_sent_per_epoch"]
    lines = [f"# {title}", "", f"Command: `{command}`", "",
             "Epoch time: median over epochs after the first of the slowest rank; peak: max over ranks and those "
             "epochs of VmHWM minus the post-setup RSS.", "",
             _md_table(s[cols].sort_values(["label", "workers", "mode"]))]
    if len(rat):
        lines += ["", "Ratios measured side by side in this run:", "", _md_table(rat.round(3))]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def _md_table(df: pd.DataFrame) -> str:
    head = "| " + " | ".join(str(c) for c in df.columns) + " |"
    rule = "|" + "---|" * len(df.columns)
    rows = ["| " + " | ".join(str(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, rule, *rows])


def plot(summary: pd.DataFrame, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {"sar": "o-", "sa": "s--", "oneshot": "^:", "sar+fused": "D-"}
    colors = {label: f"C{i}" for i, label in enumerate(sorted(summary.label.unique()))}
    shades = {"sar": 1.0, "sar+fused": 0.75, "sa": 0.55, "oneshot": 0.4}
    for (label, mode), d in summary.groupby(["label", "mode"]):
        d = d.sort_values("workers")
        kw = dict(color=colors[label], alpha=shades.get(mode, 1.0), label=f"{label} {mode}")
        axes[0].plot(d.workers, d.peak_mem_above_baseline_bytes / 2**20, styles.get(mode, "x-"), **kw)
        axes[1].plot(d.workers, d.epoch_time_s, styles.get(mode, "x-"), **kw)
    for ax, ylabel in zip(axes, ["peak memory per worker above baseline (MiB)", "epoch time (s)"]):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("workers (N)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    import textwrap

    fig.suptitle("\n".join(textwrap.wrap(title, 150)), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="sarlab bench engine", description=(
        "Measure per-worker peak memory (VmHWM above the post-setup RSS) and epoch time for N workers, "
        "every mode and model, on a synthetic graph; writes <out>/engine_scaling.csv (every record), "
        "engine_scaling_summary.csv, engine_scaling_ratios.csv and engine_scaling.png."))
    p.add_argument("--quick", action="store_true", help="tiny graph, N=1,2 (a smoke test, seconds)")
    for key, value in FULL.items():
        p.add_argument(f"--{key}", type=type(value), default=None, help=f"default {value} (quick: {QUICK[key]})")
    p.add_argument("--models", default="gcn,sage", help="comma list; gat, sage-max also accepted")
    p.add_argument("--modes", default="sar,sa,oneshot", help="comma list; for gat also sar+fused")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--batchnorm", action="store_true")
    p.add_argument("--prefetch", type=int, default=1)
    p.add_argument("--out", default="results", help="output directory (default %(default)s)")
    p.add_argument("--prefix", default="engine_scaling", help="output file prefix (default %(default)s)")
    p.add_argument("--cache", default=".cache/partitions", help="partition cache directory")
    p.add_argument("--timeout", type=float, default=600.0, help="per-wait timeout of workers (s)")
    p.add_argument("--json", help="write the summary rows here")
    p.add_argument("--probe", action="store_true",
                   help="run the simulator's speed probe (a fixed 1-worker GCN run, 10-30 s) before the first and "
                        "after every configuration and add its epoch time to the records (probe_* columns), so "
                        "`sarlab simulate --validate` can follow the machine's speed drift")
    a = p.parse_args(argv)
    a.argv = list(sys.argv[3:] if argv is None else argv)
    base = QUICK if a.quick else FULL
    cfg = {k: getattr(a, k) if getattr(a, k) is not None else v for k, v in base.items()}
    return run(a, cfg)


def keep_manifest(pdir: str, dest: str) -> None:
    """Copy a partition's manifest.json (its sizes, edges per shard and halo rows: a few KB) to
    ``dest/<partition dir name>.json``, so that `sarlab simulate --validate` of the records works on the
    exact partition in a clone without the partition cache."""
    import shutil

    os.makedirs(dest, exist_ok=True)
    shutil.copyfile(os.path.join(pdir, "manifest.json"), os.path.join(dest, os.path.basename(pdir) + ".json"))


class _Prober:
    """Runs :func:`simulator.calibrate.speed_probe` between configurations and gives each configuration's
    records the probes on both sides of it (``probe_before_s``, ``probe_after_s``, their geometric mean
    ``probe_epoch_s``) plus the probe's configuration."""

    def __init__(self, cache: str, manifests: str | None = None) -> None:
        from simulator.calibrate import PROBE_GRAPH

        key = hashlib.sha256(f"{PROBE_GRAPH}|1|metis".encode()).hexdigest()[:12]
        self.pdir = os.path.join(cache, f"probe-{key}-n1")
        self.manifests = manifests
        self.last: dict | None = None

    def run(self, t_start: float) -> dict:
        from simulator.calibrate import speed_probe

        t0 = time.perf_counter()
        self.last = speed_probe(self.pdir)
        if self.manifests:
            keep_manifest(self.pdir, self.manifests)
        print(f"[{time.perf_counter() - t_start:6.0f}s] speed probe: epoch {self.last['probe_epoch_s']:.2f}s "
              f"({time.perf_counter() - t0:.0f}s)", flush=True)
        return self.last

    def attach(self, recs: list[dict], t_start: float) -> None:
        before = self.last
        assert before is not None
        after = self.run(t_start)
        cols = {k: v for k, v in after.items() if k not in ("probe_epoch_s", "probe_time")}
        cols.update(probe_before_s=before["probe_epoch_s"], probe_after_s=after["probe_epoch_s"],
                    probe_epoch_s=(before["probe_epoch_s"] * after["probe_epoch_s"]) ** 0.5)
        for r in recs:
            r.update(cols)


def run(a, cfg: dict) -> int:
    from sarlab.config import EngineConfig
    from sarlab.graphs import load_graph
    from sarlab.nn.model import ModelConfig
    from sarlab.partition import is_partition_dir, partition
    from sarlab.train import TrainConfig

    from .jobs import Job
    from .launcher import launch

    spec = (f"synthetic:nodes={cfg['nodes']},degree={cfg['degree']},features={cfg['features']},"
            f"classes={cfg['classes']},seed=0")
    workers = [int(w) for w in str(cfg["workers"]).split(",")]
    os.makedirs(a.out, exist_ok=True)
    raw_path = os.path.join(a.out, f"{a.prefix}.csv")
    graph = None
    records = []
    t_start = time.perf_counter()
    from simulator.calibrate import cpu_model

    machine = cpu_model()  # in every record: `sarlab simulate --validate` warns when the profile is another CPU's
    probe = _Prober(a.cache, os.path.join(a.out, f"{a.prefix}_manifests")) if a.probe else None
    if probe is not None:
        probe.run(t_start)
    for n in workers:
        key = hashlib.sha256(f"{spec}|{n}|metis".encode()).hexdigest()[:12]
        pdir = os.path.join(a.cache, f"{key}-n{n}")
        if not is_partition_dir(pdir):
            if graph is None:
                print(f"generating {spec}", flush=True)
                graph = load_graph(spec)
            print(f"partitioning into {n} parts -> {pdir}", flush=True)
            partition(graph, n, pdir, source=spec)
        keep_manifest(pdir, os.path.join(a.out, f"{a.prefix}_manifests"))
        for model_spec in a.models.split(","):
            model, _, aggr = model_spec.partition("-")
            modes = a.modes.split(",")
            if n == 1:  # one worker: every mode takes the same single-shard path, measure it once
                modes = modes[:1]
            for mode_spec in modes:
                mode, _, variant = mode_spec.partition("+")
                if variant and model != "gat":
                    continue
                fused = variant == "fused"
                mcfg = ModelConfig(model=model, layers=cfg["layers"], hidden=cfg["hidden"], aggr=aggr or "mean",
                                   heads=a.heads, batchnorm=a.batchnorm)
                ecfg = EngineConfig(mode=mode, prefetch=a.prefetch, fused=fused if model == "gat" else True)
                label = model_spec
                job = Job("train", pdir, mcfg, TrainConfig(epochs=cfg["epochs"], eval_every=0), ecfg,
                          timeout_s=a.timeout, quiet=True, label=label)
                t0 = time.perf_counter()
                recs = launch(job, n)
                for r in recs:
                    r["mode"] = mode_spec
                    r["machine"] = machine
                if probe is not None:
                    probe.attach(recs, t_start)
                records += recs
                df = pd.DataFrame(recs)
                last = df[df.epoch == df.epoch.max()]
                print(f"[{time.perf_counter() - t_start:6.0f}s] N={n} {model_spec:<9} {mode_spec:<10} epoch "
                      f"{last.epoch_time_s.max():7.2f}s peak/worker above baseline "
                      f"{(last.peak_mem_bytes - last.baseline_mem_bytes).max() / 2**20:8.1f} MiB "
                      f"({time.perf_counter() - t0:.0f}s)", flush=True)
                pd.DataFrame(records).to_csv(raw_path, index=False)  # progressive: a crash keeps what ran
    df = pd.DataFrame(records)
    summary = summarize(df)
    summary.to_csv(os.path.join(a.out, f"{a.prefix}_summary.csv"), index=False)
    rat = ratios(summary)
    rat.to_csv(os.path.join(a.out, f"{a.prefix}_ratios.csv"), index=False)
    title = (f"measured on {machine} ({os.cpu_count()} cores), {time.strftime('%Y-%m-%d')}: {spec}, "
             f"{cfg['layers']} layers, hidden {cfg['hidden']}, gloo on loopback")
    plot(summary, os.path.join(a.out, f"{a.prefix}.png"), title)
    write_markdown(summary, rat, os.path.join(a.out, f"{a.prefix}.md"), title,
                   "sarlab bench engine " + " ".join(a.argv))
    print(summary.to_string(index=False))
    print(rat.to_string(index=False))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"summary": summary.to_dict("records"), "ratios": rat.to_dict("records")}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
