"""``sarlab bench engine``: per-worker peak memory and epoch time vs number of workers, every mode and model.

:func:`run_engine_bench` runs the configurations of an :class:`EngineBenchConfig` (a synthetic graph, METIS
parts cached on disk, every model x mode x N) and returns their metric records; :func:`write_outputs` writes
``<prefix>.csv`` (every record), ``<prefix>_summary.csv``, ``<prefix>_ratios.csv``, ``<prefix>.png`` and
``<prefix>.md``. The command line is a thin layer over both.
"""
from __future__ import annotations

import argparse
import hashlib
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import pandas as pd

from sarlab.common.figures import plot_engine_bench
from sarlab.common.machine import cpu_model, today, usable_cores
from sarlab.common.paths import cache_dir
from sarlab.common.records import summarize
from sarlab.common.tables import md_table
from sarlab.core.comm import check_backend
from sarlab.core.config import MODES, EngineConfig
from sarlab.data.graphs import load_graph
from sarlab.data.partition import is_partition_dir, partition
from sarlab.data.validate_data import InputError
from sarlab.nn.model import ModelConfig
from sarlab.real.calibration.engine_runs import speed_probe
from sarlab.real.commands.options import add_memory_arg, add_net_arg, write_json
from sarlab.real.launch import outputs
from sarlab.real.launch.jobs import Job
from sarlab.real.launch.launcher import launch, preflight
from sarlab.real.launch.lifecycle import interruptible
from sarlab.simulator.calibration import probe
from sarlab.training.trainer import TrainConfig

_log = logging.getLogger(__name__)

DEFAULT_OUT = str(cache_dir("bench-engine"))


@dataclass(frozen=True)
class EngineBenchConfig:
    """What ``sarlab bench engine`` measures.

    Args:
        nodes, degree, features, classes: the synthetic graph (seed 0); ``graph``, when set, is any graph spec
            ``sarlab train`` takes (e.g. ``planetoid:cora``) and replaces the synthetic one.
        hidden, layers, heads, batchnorm: the model; ``models`` a tuple of ``gcn``, ``sage``, ``sage-max``, ``gat``.
        workers: worker counts N; ``epochs`` per configuration (epoch 0 is warm-up in the summaries).
        modes: ``sar``, ``sa``, ``oneshot``, each also as ``MODE+fused`` (:func:`parse_mode`): GAT with the fused
            attention kernels (``oneshot+fused``: vanilla with fused kernels, the DGL-like baseline); plain modes
            run GAT unfused; other models skip the ``+fused`` entries.
        prefetch: ring rounds fetched ahead (a tuple runs each; ``prefetch`` then keys the summaries);
            ``timeout_s``: bound on any wait of a worker.
        net: the network the workers talk over, ``loopback`` or ``veth:rate=R[,hosts=H]`` (see
            :mod:`sarlab.real.launch.netspec`); recorded in every record's ``net`` column.
        cache: partition cache directory (one METIS partition per graph and N, reused across runs).
        probe: run the simulator's speed probe around every configuration (``probe_*`` columns).
        memory: the workers' peak-memory method, ``live`` or ``rss`` (see :mod:`sarlab.core.memory`).
        backends: torch.distributed backends; with several, every configuration runs once per backend, back to
            back, the order alternating from one configuration to the next (``gloo, ccl`` then ``ccl, gloo``), so
            that both see the same machine; recorded in every record's ``backend`` column.
    """

    nodes: int = 500_000
    degree: int = 30
    features: int = 128
    classes: int = 16
    hidden: int = 256
    layers: int = 3
    workers: tuple[int, ...] = (1, 2, 4, 8)
    epochs: int = 3
    models: tuple[str, ...] = ("gcn", "sage")
    modes: tuple[str, ...] = ("sar", "sa", "oneshot")
    heads: int = 4
    batchnorm: bool = False
    prefetch: int | tuple[int, ...] = 1
    timeout_s: float = 600.0
    cache: str = str(cache_dir("partitions"))
    probe: bool = False
    net: str = "loopback"
    memory: str = "live"
    graph: str = ""
    backends: tuple[str, ...] = ("gloo",)

    @property
    def prefetches(self) -> tuple[int, ...]:
        return self.prefetch if isinstance(self.prefetch, tuple) else (self.prefetch,)

    @property
    def graph_spec(self) -> str:
        if self.graph:
            return self.graph
        return (f"synthetic:nodes={self.nodes},degree={self.degree},features={self.features},"
                f"classes={self.classes},seed=0")


QUICK = EngineBenchConfig(nodes=4000, degree=10, features=16, classes=4, hidden=32, layers=2, workers=(1, 2),
                          epochs=2)
SIZE_FIELDS = ("nodes", "degree", "features", "classes", "hidden", "layers", "epochs")
VARYING_KEYS = ("prefetch", "net", "backend")  # summary keys only where a set of records holds several values
#: (numerator, denominator) modes of the ratio table, where a run has both
RATIO_PAIRS = (("oneshot", "sar"), ("sa", "sar"), ("oneshot", "sar+fused"), ("oneshot+fused", "sar+fused"),
               ("oneshot", "oneshot+fused"))


def parse_mode(spec: str) -> tuple[str, bool]:
    """``(engine mode, fused)`` of a mode spec: ``sar``, ``sa``, ``oneshot``, or one of them with ``+fused`` (GAT's
    fused attention kernels; the plain spec runs GAT unfused).

    Args:
        spec: the mode as ``--modes`` lists it and the records' ``mode`` column keeps it.
    """
    mode, plus, variant = spec.strip().partition("+")
    if mode not in MODES or (plus and variant != "fused"):
        raise InputError(f"bench mode {spec!r}: write one of {', '.join(MODES)}, optionally with +fused "
                         "(GAT's fused kernels), e.g. oneshot+fused")
    return mode, bool(plus)


def ratios(summary: pd.DataFrame) -> pd.DataFrame:
    """Side-by-side ratios per (model, workers[, prefetch, net, backend]): memory of each :data:`RATIO_PAIRS`
    numerator over its denominator (oneshot and sa over sar, oneshot and oneshot+fused over sar+fused, oneshot over
    oneshot+fused), and the inverse ratios of epoch time; pairs a run lacks are left out."""
    rows = []
    keys = ["label", "model", "workers"] + [k for k in VARYING_KEYS if k in summary.columns]
    for values, d in summary.groupby(keys):
        by = d.set_index("mode")
        row = dict(zip(keys, values))
        for other, base in RATIO_PAIRS:
            if other in by.index and base in by.index:
                row[f"{other}_over_{base}_mem"] = (by.loc[other, "peak_mem_above_baseline_bytes"]
                                                   / by.loc[base, "peak_mem_above_baseline_bytes"])
                row[f"{base}_over_{other}_time"] = by.loc[base, "epoch_time_s"] / by.loc[other, "epoch_time_s"]
        if len(row) > len(keys):
            rows.append(row)
    return pd.DataFrame(rows)


def summary_table(records: pd.DataFrame, warmup: int = 1) -> pd.DataFrame:
    """One row per (label, model, mode, N) in the columns the benchmark has always written; ``prefetch``, ``net``
    and ``backend`` join the keys when the records hold more than one value of them."""
    varying = [k for k in VARYING_KEYS if k in records.columns and records[k].nunique() > 1]
    keys = ["label", "model", "mode", "workers", *varying]
    table = summarize(records, keys=keys, warmup=warmup)
    return table[[*keys, "epoch_time_s", "comm_wait_s", "bytes_sent_per_epoch", "peak_mem_above_baseline_bytes",
                  "peak_mem_bytes", "loss"]]


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
             "epochs of the peak minus the post-setup baseline (method in the records' `mem_method`: live tensor "
             "bytes, or VmHWM minus the RSS).", "",
             md_table(s[cols].sort_values(["label", "workers", "mode"]))]
    if len(rat):
        lines += ["", "Ratios measured side by side in this run:", "", md_table(rat.round(3))]
    outputs.write_bytes(path, "\n".join(lines) + "\n")


def keep_manifest(pdir: str, dest: str) -> None:
    """Copy a partition's manifest.json (its sizes, edges per shard and halo rows: a few KB) to
    ``dest/<partition dir name>.json``, so that `sarlab simulate --validate` of the records works on the
    exact partition in a clone without the partition cache."""
    with open(os.path.join(pdir, "manifest.json"), "rb") as f:
        outputs.write_bytes(os.path.join(dest, os.path.basename(pdir) + ".json"), f.read())


class _Prober:
    """Runs the simulator's speed probe between configurations and gives each configuration's records the
    probes on both sides of it (``probe_before_s``, ``probe_after_s``, their geometric mean ``probe_epoch_s``)
    plus the probe's configuration."""

    def __init__(self, cache: str, manifests: str | None = None, log: Callable[[str], None] = _log.info) -> None:
        key = hashlib.sha256(f"{probe.PROBE_GRAPH}|1|metis".encode()).hexdigest()[:12]
        self.pdir = os.path.join(cache, f"probe-{key}-n1")
        self.manifests, self.log = manifests, log
        self.last: dict | None = None

    def run(self, t_start: float) -> dict:
        t0 = time.perf_counter()
        self.last = speed_probe(self.pdir)
        if self.manifests:
            keep_manifest(self.pdir, self.manifests)
        self.log(f"[{time.perf_counter() - t_start:6.0f}s] speed probe: epoch {self.last['probe_epoch_s']:.2f}s "
                 f"({time.perf_counter() - t0:.0f}s)")
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


def cached_partition(cfg: EngineBenchConfig, workers: int, log: Callable[[str], None] = _log.info) -> str:
    """The cached METIS partition of the benchmark graph into ``workers`` parts (made on first use)."""
    spec = cfg.graph_spec
    key = hashlib.sha256(f"{spec}|{workers}|metis".encode()).hexdigest()[:12]
    pdir = os.path.join(cfg.cache, f"{key}-n{workers}")
    if not is_partition_dir(pdir):
        log(f"generating {spec}; partitioning into {workers} parts -> {pdir}")
        partition(load_graph(spec), workers, pdir, source=spec)
    return pdir


def run_engine_bench(cfg: EngineBenchConfig, log: Callable[[str], None] = _log.info, manifests: str | None = None,
                     progress_csv: str | None = None) -> pd.DataFrame:
    """Run every configuration of ``cfg``; returns all metric records (one per rank and epoch).

    ``manifests``: keep each partition's manifest there; ``progress_csv``: rewrite the records so far after every
    configuration (a crash keeps what ran).
    """
    machine = cpu_model()  # in every record: `sarlab simulate --validate` warns when the profile is another CPU's
    t_start = time.perf_counter()
    prober = _Prober(cfg.cache, manifests, log) if cfg.probe else None
    if prober is not None:
        prober.run(t_start)
    records: list[dict] = []
    turn = 0  # configurations run so far: the backends' order alternates with it
    for n in cfg.workers:
        pdir = cached_partition(cfg, n, log)
        if manifests:
            keep_manifest(pdir, manifests)
        for model_spec in cfg.models:
            modes = cfg.modes[:1] if n == 1 else cfg.modes  # one worker: every mode is the same single-shard path
            for mode_spec in modes:
                if parse_mode(mode_spec)[1] and model_spec.partition("-")[0] != "gat":
                    continue
                for prefetch in cfg.prefetches if n > 1 else cfg.prefetches[:1]:  # one worker fetches nothing
                    order = cfg.backends if turn % 2 == 0 else cfg.backends[::-1]
                    turn += 1
                    for backend in order:
                        records += _run_one(cfg, pdir, n, model_spec, mode_spec, prefetch, machine, prober, t_start,
                                            log, backend)
                    if progress_csv:
                        outputs.write_csv(progress_csv, pd.DataFrame(records))
    return pd.DataFrame(records)


def _run_one(cfg: EngineBenchConfig, pdir: str, n: int, model_spec: str, mode_spec: str, prefetch: int,
             machine: str, prober: _Prober | None, t_start: float, log: Callable[[str], None],
             backend: str = "gloo") -> list[dict]:
    """One configuration: launch it and return its records (mode spelled as asked, machine, probes)."""
    model, _, aggr = model_spec.partition("-")
    mode, fused = parse_mode(mode_spec)
    mcfg = ModelConfig(model=model, layers=cfg.layers, hidden=cfg.hidden, aggr=aggr or "mean",
                       heads=cfg.heads, batchnorm=cfg.batchnorm)
    ecfg = EngineConfig(mode=mode, prefetch=prefetch, fused=fused if model == "gat" else True)
    job = Job("train", pdir, mcfg, TrainConfig(epochs=cfg.epochs, eval_every=0), ecfg,
              timeout_s=cfg.timeout_s, quiet=True, label=model_spec, memory=cfg.memory, backend=backend)
    t0 = time.perf_counter()
    recs = launch(job, n, net=cfg.net, log=log)
    for r in recs:
        r["mode"] = mode_spec
        r["machine"] = machine
    if prober is not None:
        prober.attach(recs, t_start)
    last = pd.DataFrame(recs)
    last = last[last.epoch == last.epoch.max()]
    shown = f" prefetch {prefetch}" if len(cfg.prefetches) > 1 else ""
    shown += f" {backend}" if len(cfg.backends) > 1 else ""
    log(f"[{time.perf_counter() - t_start:6.0f}s] N={n} {model_spec:<9} {mode_spec:<10}{shown} epoch "
        f"{last.epoch_time_s.max():7.2f}s peak/worker above baseline "
        f"{(last.peak_mem_bytes - last.baseline_mem_bytes).max() / 2**20:8.1f} MiB "
        f"({time.perf_counter() - t0:.0f}s)")
    return recs


def write_outputs(records: pd.DataFrame, cfg: EngineBenchConfig, out: str, prefix: str,
                  command: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Write the records, summary, ratios, figure and Markdown; returns (summary, ratios)."""
    os.makedirs(out, exist_ok=True)
    outputs.write_csv(os.path.join(out, f"{prefix}.csv"), records)
    summary = summary_table(records)
    outputs.write_csv(os.path.join(out, f"{prefix}_summary.csv"), summary)
    rat = ratios(summary)
    outputs.write_csv(os.path.join(out, f"{prefix}_ratios.csv"), rat)
    network = "loopback" if cfg.net == "loopback" else f"an emulated network ({cfg.net})"
    title = (f"measured on {cpu_model()} ({usable_cores()} cores), {today()}: {cfg.graph_spec}, "
             f"{cfg.layers} layers, hidden {cfg.hidden}, {' and '.join(cfg.backends)} on {network}")
    with outputs.staged_file(os.path.join(out, f"{prefix}.png")) as png:
        plot_engine_bench(summary, png, title)
    write_markdown(summary, rat, os.path.join(out, f"{prefix}.md"), title, command)
    return summary, rat


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sarlab bench engine", description=(
        "Measure per-worker peak memory (above the post-setup baseline; --memory) and epoch time for N workers, every "
        "mode and model, on a synthetic graph; writes <out>/<prefix>.csv (every record), <prefix>_summary.csv, "
        "<prefix>_ratios.csv, <prefix>.png and <prefix>.md."))
    p.add_argument("--quick", action="store_true", help="tiny graph, N=1,2 (a smoke test, seconds)")
    full = EngineBenchConfig()
    for key in SIZE_FIELDS:
        value = getattr(full, key)
        p.add_argument(f"--{key}", type=type(value), default=None,
                       help=f"default {value} (quick: {getattr(QUICK, key)})")
    p.add_argument("--graph", default="", help="any graph spec `sarlab train` takes (e.g. planetoid:cora) instead of "
                   "the synthetic graph of --nodes/--degree/--features/--classes")
    p.add_argument("--workers", default=None, help="comma list of N (default 1,2,4,8; quick: 1,2)")
    p.add_argument("--models", default="gcn,sage", help="comma list; gat, sage-max also accepted")
    p.add_argument("--modes", default="sar,sa,oneshot", help="comma list of sar, sa, oneshot; each also as MODE+fused "
                   "(GAT with the fused kernels: sar+fused = SAR+FAK, oneshot+fused = the DGL-like vanilla)")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--batchnorm", action="store_true")
    p.add_argument("--prefetch", default="1", help="ring rounds fetched ahead; a comma list runs each (default 1)")
    add_net_arg(p)
    add_memory_arg(p)
    p.add_argument("--backend", default="gloo", help="comma list of torch.distributed backends (gloo, ccl): each "
                   "configuration runs once per backend, alternating their order (default %(default)s)")
    p.add_argument("--out", default=DEFAULT_OUT, help="output directory (default %(default)s, in sarlab's cache, "
                   "replaced by every run; pass --out results to update the committed results)")
    p.add_argument("--prefix", default="engine_scaling", help="output file prefix (default %(default)s)")
    p.add_argument("--cache", default=full.cache, help="partition cache directory (default %(default)s)")
    p.add_argument("--timeout", type=float, default=600.0, help="per-wait timeout of workers (s)")
    p.add_argument("--json", help="write the summary rows here")
    p.add_argument("--force", action="store_true", help="replace the files of --out/--prefix and --json when they "
                   "exist and this command did not write them (in sarlab's cache, the default --out, it replaces "
                   "them without)")
    p.add_argument("--probe", action="store_true",
                   help="run the simulator's speed probe (a fixed 1-worker GCN run, 10-30 s) before the first and "
                        "after every configuration and add its epoch time to the records (probe_* columns), so "
                        "`sarlab simulate --validate` can follow the machine's speed drift")
    return p


def config_from_args(a: argparse.Namespace) -> EngineBenchConfig:
    """The :class:`EngineBenchConfig` the arguments describe (``--quick`` changes the size defaults)."""
    base = QUICK if a.quick else EngineBenchConfig()
    sizes = {k: getattr(a, k) for k in SIZE_FIELDS if getattr(a, k) is not None}
    workers = tuple(int(w) for w in a.workers.split(",")) if a.workers else base.workers
    prefetches = tuple(int(k) for k in a.prefetch.split(","))
    prefetch = prefetches if len(prefetches) > 1 else prefetches[0]
    modes = tuple(m.strip() for m in a.modes.split(",") if m.strip())
    for mode in modes:
        parse_mode(mode)  # every mode is known before the first configuration runs
    for n in workers:
        a.net.hosts_for(n)  # every N fits the network spec, before the first configuration runs
    backends = tuple(dict.fromkeys(b.strip() for b in a.backend.split(",") if b.strip()))
    for backend in backends:  # one line naming what is missing, before the first configuration runs
        try:
            check_backend(backend)
        except (ValueError, RuntimeError) as err:
            raise InputError(str(err)) from err
    cfg = replace(base, **sizes, workers=workers, models=tuple(a.models.split(",")), modes=modes,
                  heads=a.heads, batchnorm=a.batchnorm, prefetch=prefetch, timeout_s=a.timeout, cache=a.cache,
                  probe=a.probe, net=str(a.net), memory=a.memory, graph=a.graph, backends=backends)
    return cfg


def check_outputs(a: argparse.Namespace) -> None:
    """``--out``/``--prefix``, ``--cache`` and ``--json`` before anything runs: one
    :class:`~sarlab.real.launch.outputs.OutputError` naming the option and the path."""
    outputs.check_dir(a.out, "--out", a.force, writes=tuple(f"{a.prefix}{end}" for end in OUTPUT_ENDINGS))
    outputs.check_file(os.path.join(a.out, f"{a.prefix}.csv"), f"--out {a.out!r} with --prefix", force=True)
    outputs.check_dir(a.cache, "--cache")  # a partition cache: sarlab's own
    if a.json:
        outputs.check_file(a.json, "--json", a.force)


#: what ``<out>/<prefix>`` gets: the records, summary, ratios, figure, Markdown and the partitions' manifests
OUTPUT_ENDINGS = (".csv", "_summary.csv", "_ratios.csv", ".png", ".md", "_manifests/*.json")


@interruptible
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[3:] if argv is None else argv)
    a = build_parser().parse_args(argv)
    cfg = config_from_args(a)
    check_outputs(a)
    preflight(max(cfg.workers), a.net)
    os.makedirs(a.out, exist_ok=True)
    records = run_engine_bench(cfg, manifests=os.path.join(a.out, f"{a.prefix}_manifests"),
                               progress_csv=os.path.join(a.out, f"{a.prefix}.csv"))
    summary, rat = write_outputs(records, cfg, a.out, a.prefix, "sarlab bench engine " + " ".join(argv))
    print(summary.to_string(index=False))
    print(rat.to_string(index=False))
    print(f"outputs: {os.path.abspath(a.out)}/{a.prefix}*")
    write_json(a.json, {"summary": summary.to_dict("records"), "ratios": rat.to_dict("records")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
