"""Fused GAT kernel speed: this tree's C++ shard kernels against another checkout's, in alternating processes.

Every measurement is its own child process (``cwd`` the checkout's root) that imports that checkout's ``kernels``
package, builds the same random graph and inputs from the seed, runs one untimed forward+backward, then times
``inner`` calls of ``gat_forward_shard`` and ``gat_backward_shard`` (precomputed transpose) with
``time.process_time`` (CPU seconds of the process, every thread; 1 torch thread by default) and wall clock, and
reports their medians and checksums of the results. The children alternate ``base, new, new, base, ...`` per
head count, so a change of machine load falls on both; ``ratio = base / new`` per interleaved pair (median and
min-max over the pairs) for forward, backward and fwd+bwd. The graph: ``nodes`` destination = source rows,
``edges`` edges, a Pareto in-degree and Zipf-like source popularity (``--graph skewed``) or uniform ones, edges
sorted by (destination, source) as the engine's shards are (``--shuffle-rows``: each row's sources in random
order).

Run ``python -m benchmarks.kernel_speed --base-root /tmp/base --out DIR`` from the repository root; writes
``DIR/kernel_speed.{csv,md}``. The scaffold (alternation, children, ratios, report): :mod:`benchmarks.ab`.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, fields
from types import ModuleType

import numpy as np
import pandas as pd
import torch

from benchmarks import ab
from sarlab.common.machine import load_1min, usable_cores
from sarlab.common.paths import cache_dir

DEFAULT_OUT = str(cache_dir("kernel-speed"))
ENGINES = ("base", "new")
PHASES = ("fwd", "bwd", "total")
# The child: this tree's packages first (for this module), the measured checkout's ``kernels`` loaded by path.
_CHILD = ("import sys; sys.path[0] = sys.argv[2]; from benchmarks.kernel_speed import child_main; "
          "child_main(sys.argv[1:])")


@dataclass(frozen=True)
class SpeedConfig:
    """One comparison.

    Args:
        base_root: the other checkout (its ``kernels`` built in its own ``.build``).
        nodes, edges, channels, heads: graph rows (destinations = sources), edges, channels per head, head counts.
        seed: graph and input seed; graph: ``skewed`` or ``uniform`` degrees and popularity.
        shuffle_rows: each row's sources in random order instead of sorted.
        dtype: ``float32`` or ``float64``; slope: LeakyReLU slope.
        reps: processes per engine and head count; inner: timed calls per process; threads: torch threads.
        timeout_s: bound on one child.
    """

    base_root: str = ab.DEFAULT_BASE
    nodes: int = 20_000
    edges: int = 1_000_000
    channels: int = 50
    heads: tuple[int, ...] = (2, 4, 8)
    seed: int = 0
    graph: str = "skewed"
    shuffle_rows: bool = False
    dtype: str = "float32"
    slope: float = 0.2
    reps: int = 5
    inner: int = 3
    threads: int = 1
    timeout_s: float = 600.0


def make_graph(nodes: int, edges: int, seed: int, graph: str = "skewed",
               shuffle_rows: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded random CSR ``(rowptr, col)`` over ``nodes`` rows with exactly ``edges`` edges.

    skewed: in-degrees multinomial with Pareto(2)+1 weights, sources drawn with popularity ~ rank^-0.6 (ranks
    shuffled); uniform: both uniform. Sources sorted within each row unless ``shuffle_rows``.

    Args:
        nodes, edges: rows and edges; seed: numpy seed; graph: skewed | uniform; shuffle_rows: see above.
    """
    rng = np.random.default_rng(seed)
    if graph == "skewed":
        weight = rng.pareto(2.0, nodes) + 1.0
        popularity = 1.0 / np.arange(1, nodes + 1) ** 0.6
        popularity = popularity[rng.permutation(nodes)]
    elif graph == "uniform":
        weight, popularity = np.ones(nodes), np.ones(nodes)
    else:
        raise ValueError(f"graph must be skewed or uniform, got {graph!r}")
    degree = rng.multinomial(edges, weight / weight.sum())
    col = rng.choice(nodes, size=edges, p=popularity / popularity.sum())
    dst = np.repeat(np.arange(nodes), degree)
    col = col[np.lexsort((rng.random(edges) if shuffle_rows else col, dst))]
    rowptr = np.zeros(nodes + 1, dtype=np.int64)
    np.cumsum(degree, out=rowptr[1:])
    return torch.from_numpy(rowptr), torch.from_numpy(col.astype(np.int64))


def load_kernels(root: str) -> ModuleType:
    """Import the ``kernels`` package of checkout ``root`` as ``kernels`` (its relative imports resolve there).

    Args:
        root: the checkout's root directory.
    """
    if "kernels" in sys.modules:
        raise RuntimeError("kernels is already imported in this process: measure each checkout in its own")
    package = os.path.join(root, "kernels")
    spec = importlib.util.spec_from_file_location("kernels", os.path.join(package, "__init__.py"),
                                                  submodule_search_locations=[package])
    if spec is None or spec.loader is None:
        raise ImportError(f"no kernels package under {root}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["kernels"] = module
    spec.loader.exec_module(module)
    return module


def measure_kernels(kernels: ModuleType, cfg: SpeedConfig, heads: int) -> dict:
    """Median CPU and wall seconds of ``inner`` forward and backward shard calls, and checksums of the results.

    Args:
        kernels: a checkout's ``kernels`` package; cfg: the comparison; heads: H.
    """
    torch.set_num_threads(cfg.threads)
    dtype = getattr(torch, cfg.dtype)
    rowptr, col = make_graph(cfg.nodes, cfg.edges, cfg.seed, cfg.graph, cfg.shuffle_rows)
    gen = torch.Generator().manual_seed(cfg.seed + heads)
    z = torch.randn(cfg.nodes, heads, cfg.channels, generator=gen, dtype=dtype)
    s_dst, s_src = (torch.randn(cfg.nodes, heads, generator=gen, dtype=dtype) for _ in range(2))
    grad = torch.randn(cfg.nodes, heads, cfg.channels, generator=gen, dtype=dtype)
    transpose = kernels.csr_transpose(rowptr, col, cfg.nodes, backend="cpp")

    def forward():
        return kernels.gat_forward_shard(rowptr, col, s_dst, s_src, z, cfg.slope, backend="cpp")

    def backward(m, l, delta):
        return kernels.gat_backward_shard(rowptr, col, s_dst, s_src, z, cfg.slope, m, l, grad, delta,
                                          backend="cpp", transpose=transpose)

    m, l, acc = forward()
    out = kernels.gat_finalize(m, l, acc)
    delta = (grad * out).sum(-1)
    grads = backward(m, l, delta)  # warm-up: allocator, caches, lazy initialisation
    times: dict[str, list[float]] = {key: [] for key in ("fwd_cpu_s", "bwd_cpu_s", "fwd_wall_s", "bwd_wall_s")}
    for _ in range(cfg.inner):
        c0, w0 = time.process_time(), time.perf_counter()
        forward()
        c1, w1 = time.process_time(), time.perf_counter()
        backward(m, l, delta)
        c2, w2 = time.process_time(), time.perf_counter()
        times["fwd_cpu_s"].append(c1 - c0)
        times["bwd_cpu_s"].append(c2 - c1)
        times["fwd_wall_s"].append(w1 - w0)
        times["bwd_wall_s"].append(w2 - w1)
    row = {key: statistics.median(values) for key, values in times.items()}
    checks = {"out": out, "grad_s_dst": grads[0], "grad_s_src": grads[1], "grad_z": grads[2]}
    row.update({f"sum_{name}": float(t.double().abs().sum()) for name, t in checks.items()})
    return row


def child_main(argv: list[str]) -> None:
    """The child process: ``ROOT TREE CONFIG_JSON HEADS``; prints one JSON line of :func:`measure_kernels`."""
    root, _tree, config, heads = argv
    values = json.loads(config)
    cfg = SpeedConfig(**{**values, "heads": tuple(values["heads"])})
    print(json.dumps(measure_kernels(load_kernels(root), cfg, int(heads))), flush=True)


def run_child(cfg: SpeedConfig, root: str, heads: int) -> dict:
    """One measurement of ``root``'s kernels in a fresh process (:func:`benchmarks.ab.run_json_child`)."""
    return ab.run_json_child(["-c", _CHILD, os.path.abspath(root), ab.TREE_ROOT, json.dumps(asdict(cfg)), str(heads)],
                          root, cfg.threads, cfg.timeout_s)


def measure(cfg: SpeedConfig, log=print) -> pd.DataFrame:
    """Every (rep, heads) pair of processes, base and new alternating (the first of a pair alternates too)."""
    roots = {"base": cfg.base_root, "new": ab.TREE_ROOT}
    rows = []
    start = time.perf_counter()
    for rep in range(cfg.reps):
        for heads in cfg.heads:
            for engine in ab.alternating(ENGINES, rep + heads):
                load = load_1min()
                row = {"engine": engine, "heads": heads, "rep": rep, "load_1min": load,
                       **run_child(cfg, roots[engine], heads)}
                rows.append(row)
                log(f"[{time.perf_counter() - start:6.0f}s] H={heads} {engine:<4} rep {rep}: fwd "
                    f"{row['fwd_cpu_s'] * 1e3:7.1f} ms bwd {row['bwd_cpu_s'] * 1e3:7.1f} ms CPU, load {load:.1f}")
    return pd.DataFrame(rows)


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Per head count: median CPU ms of each engine and phase, ratios base/new per pair (median, min-max), the
    largest relative difference of the result checksums, and the load range."""
    runs = runs.assign(total_cpu_s=runs.fwd_cpu_s + runs.bwd_cpu_s)
    out = []
    for heads, d in runs.groupby("heads"):
        base = d[d.engine == "base"].set_index("rep")
        new = d[d.engine == "new"].set_index("rep")
        row: dict = {"heads": heads, "pairs": len(ab.pair_ratio(d, "total_cpu_s"))}
        for phase in PHASES:
            key = f"{phase}_cpu_s"
            row[f"base_{phase}_ms"] = round(base[key].median() * 1e3, 1)
            row[f"new_{phase}_ms"] = round(new[key].median() * 1e3, 1)
        for phase in PHASES:
            key = f"{phase}_cpu_s"
            row[f"ratio_{phase}"] = ab.spread(ab.pair_ratio(d, key))
        sums = [c for c in d.columns if c.startswith("sum_")]
        rel = [(base[c].median() - new[c].median()) / max(abs(base[c].median()), 1e-300) for c in sums]
        row["max_rel_checksum_diff"] = f"{max(abs(r) for r in rel):.1e}" if rel else "n/a"
        row["load_1min"] = f"{d.load_1min.min():.1f}-{d.load_1min.max():.1f}"
        out.append(row)
    return pd.DataFrame(out)


def write_outputs(runs: pd.DataFrame, cfg: SpeedConfig, out: str, command: str) -> pd.DataFrame:
    """``kernel_speed.csv`` (every process) and ``kernel_speed.md`` (the summary with its conditions)."""
    os.makedirs(out, exist_ok=True)
    runs.to_csv(os.path.join(out, "kernel_speed.csv"), index=False)
    table = summarize(runs)
    order = "shuffled" if cfg.shuffle_rows else "sorted (as the engine's shards)"
    machine = (f", {usable_cores()} usable cores, {cfg.threads} torch thread(s). Graph: "
               f"{cfg.graph}, {cfg.nodes} rows, {cfg.edges} edges, sources within a row {order}, seed {cfg.seed}; "
               f"{cfg.channels} channels per head, {cfg.dtype}, slope {cfg.slope}. {cfg.reps} processes per engine "
               f"and head count, alternating, each the median of {cfg.inner} timed calls after one warm-up.")
    reading = ("CPU milliseconds (`time.process_time`, all threads) per call of `gat_forward_shard` (fwd) and "
               "`gat_backward_shard` with a precomputed transpose (bwd), medians over processes; `ratio` = base / new "
               "per interleaved pair: median (min-max), above 1 means this tree is faster. `max_rel_checksum_diff`: "
               "largest relative difference between the engines' sums of |output| and |gradients|. `load_1min`: the "
               "1-minute load before each process (min-max).")
    ab.write_report(os.path.join(out, "kernel_speed.md"), f"Fused GAT kernel speed: this tree vs {cfg.base_root}",
                    machine, table, command, reading)
    return table


def build_parser() -> argparse.ArgumentParser:
    d = SpeedConfig()
    p = ab.parser("kernel_speed", __doc__, d.base_root)
    for f in fields(SpeedConfig):
        if f.name in ("base_root", "heads", "shuffle_rows"):
            continue
        p.add_argument(f"--{f.name.replace('_', '-')}", type=type(getattr(d, f.name)), default=getattr(d, f.name),
                       help="default %(default)s")
    p.add_argument("--heads", default=",".join(map(str, d.heads)), help="head counts (default %(default)s)")
    p.add_argument("--shuffle-rows", action="store_true", help="sources of a row in random order")
    p.add_argument("--out", default=DEFAULT_OUT, help="output folder (default %(default)s)")
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    values = {f.name: getattr(a, f.name) for f in fields(SpeedConfig) if f.name != "heads"}
    cfg = SpeedConfig(**values, heads=tuple(int(h) for h in a.heads.split(",") if h))
    if cfg.graph not in ("skewed", "uniform") or cfg.dtype not in ("float32", "float64"):
        raise SystemExit("--graph must be skewed|uniform and --dtype float32|float64")
    ab.check_base_root(cfg.base_root, "kernels")
    command = ab.command_line("kernel_speed", argv)
    runs = measure(cfg)
    table = write_outputs(runs, cfg, a.out, command)
    print(table.to_string(index=False))
    print(f"wrote {os.path.join(a.out, 'kernel_speed.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
