"""``sarlab bench kernels``: one GAT layer of the engine, fused and unfused, against PyG's (and DGL's) ``GATConv``.

The CPU analogue of SAR's section 4.1 experiment, on the layer the engine trains with: ``sarlab.nn.GATConv``
on one process (a world-1 :class:`~sarlab.core.shards.ShardedGraph`), with the fused C++ kernels (``fused``) and
in plain torch autograd (``unfused``), against ``torch_geometric.nn.GATConv`` (``pyg``) and DGL's ``GATConv``
(``dgl``, where ``import dgl`` works) with the same weights. A synthetic graph with a skewed in-degree
(products-like mean degree), heads H in {2,4,8} with 50 features per head (in = out = 50H), no self-loops;
forward, backward and forward+backward time and peak memory (VmHWM after a reset, above the RSS just before),
medians over repetitions taken side by side. A STREAM-like copy/triad measured in the same run gives the
machine's DRAM bandwidth; each layer's achieved bandwidth is the bytes it must minimally move
(:func:`min_bytes`) over its time. The fused shard kernels are also timed alone (``kernel_only``).

:func:`run_kernel_bench` runs a :class:`KernelBenchConfig` and returns the result dict (also the ``--json``
output); :func:`sarlab.real.bench.kernel_bench_plot.write_outputs` writes ``<prefix>.csv`` and ``<prefix>.png``;
:func:`main` is the command line.
"""
from __future__ import annotations

import argparse
import gc
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import NamedTuple

import numpy as np
import torch
from torch_geometric.nn import GATConv as PyGGATConv

from sarlab import kernels
from sarlab.common.machine import cpu_model, load_1min, today
from sarlab.common.paths import cache_dir
from sarlab.core import memory
from sarlab.core.config import EngineConfig
from sarlab.core.shards import ShardedGraph
from sarlab.nn import GATConv
from sarlab.real.bench.kernel_bench_plot import format_table, write_outputs
from sarlab.real.commands.options import progress, write_json
from sarlab.real.launch import outputs

_log = logging.getLogger(__name__)

DEFAULT_OUT = str(cache_dir("bench-kernels"))
PHASES = ("forward", "backward", "fwd+bwd")
Log = Callable[[str], None]
Runner = Callable[[torch.Tensor], torch.Tensor]
Measurement = dict[str, tuple[float, int]]  # phase -> (seconds, peak bytes above the RSS before it)


@dataclass(frozen=True)
class KernelBenchConfig:
    """What ``sarlab bench kernels`` measures (the defaults are figure 2's full run).

    Args:
        nodes, degree: the synthetic graph (N nodes, N x degree edges); seed: graph, weight and input seed.
        heads: head counts H, one layer each, with ``channels`` features per head (in = out = H x channels).
        reps: timed repetitions (peak memory: min(reps, 3) more).
        stream_elems: float64 elements per array of the STREAM-like bandwidth probe.
        negative_slope: LeakyReLU slope of the attention logits.
        threads: torch/OpenMP threads for the run (None: keep the process's setting).
    """

    nodes: int = 20_000
    degree: int = 50
    heads: tuple[int, ...] = (2, 4, 8)
    channels: int = 50
    reps: int = 5
    seed: int = 0
    stream_elems: int = 1 << 26
    negative_slope: float = 0.2
    threads: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "heads", tuple(int(h) for h in self.heads))
        if self.nodes < 2 or self.degree < 1 or self.reps < 1 or self.channels < 1:
            raise ValueError("the kernel benchmark needs nodes >= 2, degree >= 1, reps >= 1 and channels >= 1")
        if not self.heads or min(self.heads) < 1:
            raise ValueError(f"heads must be one or more head counts >= 1, got {self.heads}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")

    @classmethod
    def quick(cls) -> KernelBenchConfig:
        """A smoke test in seconds: a tiny graph, one repetition, one thread (no OpenMP spin-waiting on a
        busy machine)."""
        return cls(nodes=1_000, degree=8, heads=(2, 4), reps=1, stream_elems=1 << 22, threads=1)

    def with_sizes(self, **sizes) -> KernelBenchConfig:
        """A copy with the given fields replaced (a None value keeps the field), validated again."""
        return replace(self, **{name: value for name, value in sizes.items() if value is not None})


class Implementation(NamedTuple):
    """One GAT layer under test: the backend it computes with and a function from input rows to its output."""

    backend: str
    run: Runner


# ------------------------------------------------------------------------------------------------ machine, graph
def stream_bandwidth(elems: int, reps: int = 5) -> dict[str, float]:
    """STREAM-like copy (a = b) and triad (a = b + s c) in float64 with torch's threads, best of reps.

    .. math:: \\mathrm{copy} = 16n / t,\\qquad \\mathrm{triad} = 24n / t \\quad [\\mathrm{bytes/s}]

    Args:
        elems: array length n (choose well above the last-level cache).
        reps: repetitions (the best is kept, as STREAM does).
    """
    a = torch.zeros(elems, dtype=torch.float64)
    b = torch.full((elems,), 1.0, dtype=torch.float64)
    c = torch.full((elems,), 2.0, dtype=torch.float64)
    best_copy = best_triad = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        a.copy_(b)
        best_copy = min(best_copy, time.perf_counter() - start)
        start = time.perf_counter()
        torch.add(b, c, alpha=3.0, out=a)
        best_triad = min(best_triad, time.perf_counter() - start)
    return {"copy_GBps": 16 * elems / best_copy / 1e9, "triad_GBps": 24 * elems / best_triad / 1e9,
            "elems": float(elems)}


def make_graph(nodes: int, degree: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Deterministic synthetic CSR ``(rowptr, col)`` with a power-law in-degree of mean ``degree``.

    In-degrees follow a Pareto(2) profile rescaled to E = nodes x degree edges; sources are drawn with
    Zipf-like popularity so out-degrees are skewed too; edges are sorted by destination.

    Args:
        nodes: N; degree: mean in-degree; seed: numpy seed.
    """
    rng = np.random.default_rng(seed)
    edges = nodes * degree
    weight = rng.pareto(2.0, nodes) + 1.0
    in_degree = np.minimum(np.floor(weight / weight.sum() * edges).astype(np.int64), nodes)
    shortfall = edges - int(in_degree.sum())
    if shortfall > 0:  # hand the rounding remainder to the nodes with spare capacity
        room = np.flatnonzero(in_degree < nodes)
        np.add.at(in_degree, rng.choice(room, size=shortfall, replace=True), 1)
    popularity = 1.0 / np.arange(1, nodes + 1) ** 0.6
    popularity = popularity[rng.permutation(nodes)]
    popularity /= popularity.sum()
    col = rng.choice(nodes, size=int(in_degree.sum()), p=popularity)
    rowptr = np.zeros(nodes + 1, dtype=np.int64)
    np.cumsum(in_degree, out=rowptr[1:])
    return torch.from_numpy(rowptr), torch.from_numpy(col.astype(np.int64))


# ------------------------------------------------------------------------------------------------ layers
def _pyg_layer(layer: GATConv, edge_index: torch.Tensor) -> Runner:
    conv = PyGGATConv(layer.in_channels, layer.out_channels, heads=layer.heads, add_self_loops=False,
                      negative_slope=layer.negative_slope)
    with torch.no_grad():
        conv.lin.weight.copy_(layer.lin.weight)
        conv.att_src.copy_(layer.att_src.view_as(conv.att_src))
        conv.att_dst.copy_(layer.att_dst.view_as(conv.att_dst))
        conv.bias.copy_(layer.bias)
    return lambda x: conv(x, edge_index)


def _dgl_layer(layer: GATConv, source: torch.Tensor, destination: torch.Tensor, nodes: int) -> Runner:
    import dgl  # optional extra: pip install -e '.[dgl]'
    from dgl.nn.pytorch import GATConv as DGLGATConv

    graph = dgl.graph((source, destination), num_nodes=nodes)
    conv = DGLGATConv(layer.in_channels, layer.out_channels, layer.heads, negative_slope=layer.negative_slope,
                      allow_zero_in_degree=True)
    with torch.no_grad():
        conv.fc.weight.copy_(layer.lin.weight)
        conv.attn_l.copy_(layer.att_src.view_as(conv.attn_l))
        conv.attn_r.copy_(layer.att_dst.view_as(conv.attn_r))
        conv.bias.copy_(layer.bias.view_as(conv.bias))
    return lambda x: conv(graph, x).reshape(x.shape[0], -1)


def build_implementations(cfg: KernelBenchConfig, heads: int, rowptr: torch.Tensor, col: torch.Tensor,
                          notes: list[str]) -> dict[str, Implementation]:
    """Name -> :class:`Implementation` for every layer that can run here, all with the same weights.

    ``fused`` and ``unfused`` are one ``sarlab.nn.GATConv`` on two world-1 graphs whose engine configs
    differ only in ``fused``; a layer that cannot be built adds a line to ``notes``.
    """
    nodes = rowptr.numel() - 1
    torch.manual_seed(cfg.seed)
    layer = GATConv(heads * cfg.channels, cfg.channels, heads=heads, concat=True,
                    negative_slope=cfg.negative_slope, add_self_loops=False)
    destination = torch.repeat_interleave(torch.arange(nodes), rowptr.diff())
    fused_graph = ShardedGraph.single(col, destination, nodes, EngineConfig(fused=True))
    unfused_graph = ShardedGraph.single(col, destination, nodes, EngineConfig(fused=False))
    implementations = {
        "fused": Implementation(kernels.backend(), lambda x: layer(fused_graph, x)),
        "unfused": Implementation("torch", lambda x: layer(unfused_graph, x)),
        "pyg": Implementation("torch", _pyg_layer(layer, torch.stack([col, destination]))),
    }
    try:
        implementations["dgl"] = Implementation("dgl", _dgl_layer(layer, col, destination, nodes))
    except Exception as exc:  # dgl missing or broken: say so, keep going
        first_line = str(exc).splitlines()[0] if str(exc) else ""
        note = (f"DGL GATConv skipped: {type(exc).__name__}: {first_line} "
                "(DGL is the optional extra `pip install -e '.[dgl]'`)")
        if note not in notes:
            notes.append(note)
    return implementations


# ------------------------------------------------------------------------------------------------ measuring
def min_bytes(phase: str, nodes: int, edges: int, in_ch: int, out_ch: int, itemsize: int) -> int:
    """Bytes a GAT layer must move at least: features once, the CSR once, parameters once.

    .. math::
        B_{fwd} = s(N F_{in} + N F_{out} + F_{in} F_{out}) + 8(N + 1 + E),\\quad
        B_{bwd} = s(2 N F_{in} + N F_{out} + 2 F_{in} F_{out}) + 8(N + 1 + E)

    Args:
        phase: 'forward', 'backward' or 'fwd+bwd'; nodes, edges: graph size;
        in_ch, out_ch: layer widths; itemsize: bytes per feature value.
    """
    graph = 8 * (nodes + 1 + edges)
    forward = itemsize * (nodes * in_ch + nodes * out_ch + in_ch * out_ch) + graph
    backward = itemsize * (2 * nodes * in_ch + nodes * out_ch + 2 * in_ch * out_ch) + graph
    return {"forward": forward, "backward": backward, "fwd+bwd": forward + backward}[phase]


def measure_once(run: Runner, x: torch.Tensor, grad: torch.Tensor) -> Measurement:
    """Time and peak memory of one forward and one backward (heap trimmed first, VmHWM reset per phase)."""
    x.grad = None
    gc.collect()
    memory.trim_malloc()
    memory.reset_peak()
    rss_before = memory.rss_bytes()
    start = time.perf_counter()
    out = run(x)
    forward_s = time.perf_counter() - start
    peak_forward = memory.peak_bytes()
    memory.reset_peak()
    rss_mid = memory.rss_bytes()
    start = time.perf_counter()
    out.backward(grad)
    backward_s = time.perf_counter() - start
    peak_backward = memory.peak_bytes()
    del out
    x.grad = None
    return {"forward": (forward_s, max(0, peak_forward - rss_before)),
            "backward": (backward_s, max(0, peak_backward - rss_mid)),
            "fwd+bwd": (forward_s + backward_s, max(0, max(peak_forward, peak_backward) - rss_before))}


def check_agreement(implementations: dict[str, Implementation], x: torch.Tensor) -> dict[str, float]:
    """Max |out - out_pyg| of every implementation (a check that all compute the same layer)."""
    with torch.no_grad():
        reference = implementations["pyg"].run(x)
        return {name: float((impl.run(x) - reference).abs().max()) for name, impl in implementations.items()}


def sample_all(implementations: dict[str, Implementation], x: torch.Tensor, grad: torch.Tensor, reps: int,
               label: str, log: Log) -> dict[str, list[Measurement]]:
    """One warm-up, then ``reps`` repetitions in each of which every implementation runs once (side by side)."""
    samples: dict[str, list[Measurement]] = {name: [] for name in implementations}
    for impl in implementations.values():  # warm-up: allocator, caches, lazy initialisation, the CSC transpose
        measure_once(impl.run, x, grad)
    for rep in range(reps):
        for name, impl in implementations.items():
            samples[name].append(measure_once(impl.run, x, grad))
        log(f"  {label} rep {rep + 1}/{reps}: " + ", ".join(
            f"{name} {samples[name][-1]['fwd+bwd'][0] * 1e3:.0f} ms {samples[name][-1]['fwd+bwd'][1] / 2**20:.0f} MiB"
            for name in implementations))
    return samples


def _inputs(cfg: KernelBenchConfig, heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(cfg.seed + heads)
    x = torch.randn(cfg.nodes, heads * cfg.channels, generator=gen).requires_grad_(True)
    return x, torch.randn(cfg.nodes, heads * cfg.channels, generator=gen)


def kernel_only(cfg: KernelBenchConfig, heads: int, rowptr: torch.Tensor, col: torch.Tensor) -> dict[str, float]:
    """Time the fused shard kernels alone (no projection, no layer), medians over ``cfg.reps``.

    Reports the rows they gather: one [H*C] source row and one index per edge in the forward, two passes
    (CSR for s_dst, CSC for the source side) in the backward.
    """
    backend = kernels.backend()
    nodes, channels, edges = rowptr.numel() - 1, cfg.channels, col.numel()
    gen = torch.Generator().manual_seed(cfg.seed)
    z = torch.randn(nodes, heads, channels, generator=gen)
    s_dst, s_src = torch.randn(nodes, heads, generator=gen), torch.randn(nodes, heads, generator=gen)
    transpose = kernels.csr_transpose(rowptr, col, nodes, backend=backend)
    m, l, acc = kernels.gat_forward_shard(rowptr, col, s_dst, s_src, z, cfg.negative_slope, backend=backend)
    out = kernels.gat_finalize(m, l, acc)
    grad = torch.randn_like(out)
    delta = (grad * out).sum(-1)
    forward_s, backward_s = [], []
    for _ in range(cfg.reps + 1):  # the first is warm-up
        start = time.perf_counter()
        kernels.gat_forward_shard(rowptr, col, s_dst, s_src, z, cfg.negative_slope, backend=backend)
        forward_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        kernels.gat_backward_shard(rowptr, col, s_dst, s_src, z, cfg.negative_slope, m, l, grad, delta,
                                   backend=backend, transpose=transpose)
        backward_s.append(time.perf_counter() - start)
    forward, backward = statistics.median(forward_s[1:]), statistics.median(backward_s[1:])
    per_pass = edges * (8 + heads * channels * z.element_size())
    return {"heads": heads, "backend": backend, "forward_s": forward, "backward_s": backward,
            "forward_gathered_GBps": per_pass / forward / 1e9, "backward_gathered_GBps": 2 * per_pass / backward / 1e9}


def _rows(cfg: KernelBenchConfig, heads: int, edges: int, x: torch.Tensor, implementations: dict[str, Implementation],
          times: dict[str, list[Measurement]], peaks: dict[str, list[Measurement]], mem_reps: int) -> list[dict]:
    """One result row per implementation x phase: median time, median peak, minimal bytes and bandwidth."""
    rows = []
    in_ch, dtype = heads * cfg.channels, str(x.dtype).replace("torch.", "")
    for name, impl in implementations.items():
        for phase in PHASES:
            seconds = statistics.median(sample[phase][0] for sample in times[name])
            nbytes = min_bytes(phase, cfg.nodes, edges, in_ch, in_ch, x.element_size())
            rows.append({"impl": name, "backend": impl.backend, "heads": heads, "phase": phase, "time_s": seconds,
                         "peak_mem_bytes": int(statistics.median(sample[phase][1] for sample in peaks[name])),
                         "min_bytes": nbytes, "achieved_GBps": nbytes / seconds / 1e9, "nodes": cfg.nodes,
                         "edges": edges, "channels_per_head": cfg.channels, "dtype": dtype, "reps": cfg.reps,
                         "mem_reps": mem_reps, "threads": torch.get_num_threads()})
    return rows


def run_kernel_bench(cfg: KernelBenchConfig, log: Log = _log.info) -> dict:
    """Run every head count of ``cfg``; return the rows, STREAM figures, agreement and machine facts.

    Timings first (``cfg.reps`` side-by-side repetitions), then peak memory in separate repetitions. The
    calling process's glibc malloc is tuned as the engine's workers tune theirs (:func:`sarlab.core.memory.tune_malloc`)
    and trimmed before every measured pass, so that RSS follows the live tensors.

    Returns a dict with keys ``config``, ``stream``, ``loadavg_1min_start_end``, ``rows`` (one per
    implementation x heads x phase, the columns of :data:`sarlab.real.bench.kernel_bench_plot.CSV_COLUMNS`),
    ``kernel_only``, ``notes``, ``agreement`` (heads -> implementation -> max |out - out_pyg|), ``cpu``,
    ``date``, ``threads``, ``torch``, ``edges``.
    """
    threads_before = torch.get_num_threads()
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    try:
        return _run(cfg, log)
    finally:
        torch.set_num_threads(threads_before)


def _run(cfg: KernelBenchConfig, log: Log) -> dict:
    gc.collect()
    gc.freeze()  # what the imports made: each measurement's collection then walks only the benchmark's own objects
    try:
        return _measure(cfg, log)
    finally:
        gc.unfreeze()


def _measure(cfg: KernelBenchConfig, log: Log) -> dict:
    notes: list[str] = []
    if not memory.tune_malloc():
        notes.append("could not tune glibc malloc: peak memory may under-count reused heap pages")
    if not memory.reset_peak():
        notes.append("cannot reset VmHWM (/proc/self/clear_refs): peak memory readings are not per phase")
    load_start = load_1min()
    log(f"kernels backend: {kernels.backend()}; torch threads: {torch.get_num_threads()}")
    log(f"STREAM-like bandwidth, {cfg.stream_elems:,} float64 per array ...")
    stream = stream_bandwidth(cfg.stream_elems, reps=3 if cfg.reps == 1 else 5)
    log(f"  copy {stream['copy_GBps']:.1f} GB/s, triad {stream['triad_GBps']:.1f} GB/s")
    rowptr, col = make_graph(cfg.nodes, cfg.degree, cfg.seed)
    edges = col.numel()
    log(f"graph: {cfg.nodes:,} nodes, {edges:,} edges, max in-degree {int(rowptr.diff().max())}")
    agreement: dict[str, dict[str, float]] = {}
    times: dict[int, dict[str, list[Measurement]]] = {}
    kernel_rows: list[dict] = []
    for heads in cfg.heads:
        implementations = build_implementations(cfg, heads, rowptr, col, notes)
        x, grad = _inputs(cfg, heads)
        agreement[str(heads)] = check_agreement(implementations, x)
        log(f"heads={heads}: max |out - pyg| " + ", ".join(f"{k} {v:.1e}" for k, v in agreement[str(heads)].items()))
        times[heads] = sample_all(implementations, x, grad, cfg.reps, f"time heads={heads}", log)
        kernel_rows.append(kernel_only(cfg, heads, rowptr, col))
        alone = kernel_rows[-1]
        log(f"  kernels alone heads={heads}: forward {alone['forward_s'] * 1e3:.1f} ms "
            f"({alone['forward_gathered_GBps']:.1f} GB/s gathered), backward {alone['backward_s'] * 1e3:.1f} ms "
            f"({alone['backward_gathered_GBps']:.1f} GB/s gathered)")
        del implementations, x, grad
        gc.collect()
    mem_reps = min(cfg.reps, 3)
    rows: list[dict] = []
    for heads in cfg.heads:
        implementations = build_implementations(cfg, heads, rowptr, col, notes)
        x, grad = _inputs(cfg, heads)
        peaks = sample_all(implementations, x, grad, mem_reps, f"memory heads={heads}", log)
        rows += _rows(cfg, heads, edges, x, implementations, times[heads], peaks, mem_reps)
        del implementations, x, grad
        gc.collect()
    pyg = {(r["heads"], r["phase"]): r for r in rows if r["impl"] == "pyg"}
    for r in rows:
        reference = pyg[(r["heads"], r["phase"])]
        r["speedup_vs_pyg"] = reference["time_s"] / r["time_s"]
        r["mem_ratio_vs_pyg"] = (r["peak_mem_bytes"] / reference["peak_mem_bytes"]
                                 if reference["peak_mem_bytes"] > 0 else float("nan"))
        r["bw_fraction"] = r["achieved_GBps"] / stream["triad_GBps"]
    return {"config": asdict(cfg), "stream": stream, "loadavg_1min_start_end": [load_start, load_1min()],
            "rows": rows, "kernel_only": kernel_rows, "notes": notes, "agreement": agreement, "cpu": cpu_model(),
            "date": today(), "threads": torch.get_num_threads(), "torch": torch.__version__, "edges": edges}


def build_parser() -> argparse.ArgumentParser:
    """The options of ``sarlab bench kernels``."""
    full, quick = KernelBenchConfig(), KernelBenchConfig.quick()
    p = argparse.ArgumentParser(
        prog="sarlab bench kernels",
        description="One GAT layer of the engine (sarlab.nn.GATConv on one process), fused C++ kernels and "
                    "unfused torch, against PyG's GATConv (and DGL's where it imports): forward/backward time, "
                    "peak memory, bandwidth. Writes <out>/<prefix>.csv and <prefix>.png.")
    p.add_argument("--quick", action="store_true",
                   help=f"{quick.nodes:,} nodes, degree {quick.degree}, heads {list(quick.heads)}, one repetition, "
                        "one thread (seconds)")
    p.add_argument("--out", default=DEFAULT_OUT,
                   help="output directory (default %(default)s, not committed; pass --out results to update the "
                        "committed results)")
    p.add_argument("--prefix", default="kernels", help="output file name prefix (default %(default)s)")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the whole result as JSON")
    p.add_argument("--force", action="store_true", help="replace <out>/<prefix>.csv, .png and --json when they exist "
                   "and this command did not write them (in sarlab's cache, the default --out, it replaces them "
                   "without)")
    p.add_argument("--nodes", type=int, default=None, help=f"node count (default {full.nodes:,})")
    p.add_argument("--degree", type=int, default=None, help=f"mean in-degree (default {full.degree})")
    p.add_argument("--heads", type=int, nargs="+", default=None, help=f"head counts (default {list(full.heads)})")
    p.add_argument("--reps", type=int, default=None, help=f"timed repetitions (default {full.reps})")
    p.add_argument("--seed", type=int, default=None, help="graph, weight and input seed (default 0)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch/OpenMP threads (default: torch's default; 1 with --quick)")
    return p


def main(argv: list[str] | None = None) -> int:
    """``sarlab bench kernels``; returns the exit status."""
    parser = build_parser()
    a = parser.parse_args(argv)
    base = KernelBenchConfig.quick() if a.quick else KernelBenchConfig()
    try:
        cfg = base.with_sizes(nodes=a.nodes, degree=a.degree, reps=a.reps, seed=a.seed, threads=a.threads,
                              heads=None if a.heads is None else tuple(a.heads))
    except ValueError as err:
        parser.error(str(err))
    outputs.check_dir(a.out, "--out", a.force, writes=(f"{a.prefix}.csv", f"{a.prefix}.png"))  # before measuring
    outputs.check_file(os.path.join(a.out, f"{a.prefix}.csv"), f"--out {a.out!r} with --prefix", force=True)
    if a.json:
        outputs.check_file(a.json, "--json", a.force)
    result = run_kernel_bench(cfg, progress)
    for note in result["notes"]:
        progress(note)
    print(format_table(result))
    paths = write_outputs(result, a.out, a.prefix)
    write_json(a.json, result)
    progress("wrote " + ", ".join(paths + ([a.json] if a.json else [])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
