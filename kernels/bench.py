"""Benchmark one GAT layer: fused kernel vs unfused torch vs PyG GATConv (vs DGL when importable).

The CPU analogue of SAR's section 4.1 experiment: a synthetic graph with a skewed in-degree
(products-like mean degree), heads H in {2,4,8} with 50 features per head (in = out = 50H), timing the
forward, backward and forward+backward passes and their peak memory (VmHWM after a reset, relative to the
RSS just before), medians over repetitions taken side by side. A STREAM-like copy/triad measured in the
same run gives the machine's DRAM bandwidth; each kernel's achieved bandwidth is the bytes a layer must
minimally move (read x and the graph once, write the output; the backward reads x, the graph and the
output gradient, writes the input gradient) divided by its time.

Run ``python -m kernels.bench --help`` (or ``sarlab bench kernels``).
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import gc
import json
import os
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from . import _loader
from .gat import GATLayer, csr_transpose

PHASES = ("forward", "backward", "fwd+bwd")
CSV_COLUMNS = (
    "impl",
    "backend",
    "heads",
    "phase",
    "time_s",
    "peak_mem_bytes",
    "speedup_vs_pyg",
    "mem_ratio_vs_pyg",
    "min_bytes",
    "achieved_GBps",
    "bw_fraction",
    "nodes",
    "edges",
    "channels_per_head",
    "dtype",
    "reps",
    "mem_reps",
    "threads",
)


@dataclass(frozen=True)
class BenchConfig:
    """What to run: graph size, heads, repetitions."""

    nodes: int
    degree: int
    heads: tuple[int, ...]
    channels: int
    reps: int
    seed: int
    stream_elems: int
    negative_slope: float = 0.2


FULL = BenchConfig(nodes=20_000, degree=50, heads=(2, 4, 8), channels=50, reps=5, seed=0, stream_elems=1 << 26)
QUICK = BenchConfig(nodes=1_000, degree=8, heads=(2, 4), channels=50, reps=1, seed=0, stream_elems=1 << 22)


# ------------------------------------------------------------------------------------------------ machine
def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (platform.processor() as a fallback)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
        found = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
        if found:
            return found.group(1).strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _status_kib(field: str) -> int:
    text = Path("/proc/self/status").read_text()
    found = re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE)
    if not found:
        raise RuntimeError(f"{field} not in /proc/self/status; peak memory needs Linux procfs")
    return int(found.group(1))


def release_freed_memory_to_os() -> bool:
    """Make glibc return freed blocks to the OS so RSS tracks live tensors (True if it could).

    Sets a fixed 64 KiB mmap threshold (no dynamic growth) and a small trim threshold, then trims:
    without this a later op can reuse pages an earlier op freed and its peak reads as zero.
    """
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        libc.mallopt(m_mmap_threshold, 1 << 16)
        libc.mallopt(m_trim_threshold, 1 << 16)
        libc.malloc_trim(0)
        return True
    except (OSError, AttributeError):
        return False


def reset_peak() -> int:
    """Reset VmHWM to the current RSS (write 5 to clear_refs) and return that RSS in bytes."""
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")
    return _status_kib("VmRSS") * 1024


def peak_bytes() -> int:
    """VmHWM (peak resident set since the last reset) in bytes."""
    return _status_kib("VmHWM") * 1024


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
    return {
        "copy_GBps": 16 * elems / best_copy / 1e9,
        "triad_GBps": 24 * elems / best_triad / 1e9,
        "elems": float(elems),
    }


# ------------------------------------------------------------------------------------------------ graph
def make_graph(nodes: int, degree: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Deterministic synthetic CSR with a power-law in-degree of mean ``degree`` (E = nodes * degree).

    In-degrees follow a Pareto(2) profile rescaled to the target edge count; sources are drawn with
    Zipf-like popularity so out-degrees are skewed too; edges are sorted by destination.

    Args:
        nodes: N; degree: mean in-degree; seed: numpy seed.
    """
    rng = np.random.default_rng(seed)
    edges = nodes * degree
    weight = rng.pareto(2.0, nodes) + 1.0
    in_deg = np.floor(weight / weight.sum() * edges).astype(np.int64)
    in_deg = np.minimum(in_deg, nodes)
    shortfall = edges - int(in_deg.sum())
    if shortfall > 0:  # hand the rounding remainder to the nodes with spare capacity
        room = np.flatnonzero(in_deg < nodes)
        extra = rng.choice(room, size=shortfall, replace=True)
        np.add.at(in_deg, extra, 1)
    popularity = 1.0 / np.arange(1, nodes + 1) ** 0.6
    popularity = popularity[rng.permutation(nodes)]
    popularity /= popularity.sum()
    col = rng.choice(nodes, size=int(in_deg.sum()), p=popularity)
    rowptr = np.zeros(nodes + 1, dtype=np.int64)
    np.cumsum(in_deg, out=rowptr[1:])
    return torch.from_numpy(rowptr), torch.from_numpy(col.astype(np.int64))


# ------------------------------------------------------------------------------------------------ impls
Runner = Callable[[torch.Tensor], torch.Tensor]


def _make_pyg(layer: GATLayer, in_ch: int, heads: int, channels: int, edge_index: torch.Tensor) -> Runner:
    from torch_geometric.nn import GATConv

    conv = GATConv(in_ch, channels, heads=heads, add_self_loops=False, negative_slope=layer.negative_slope)
    with torch.no_grad():
        conv.lin.weight.copy_(layer.lin.weight)
        conv.att_src.copy_(layer.att_src)
        conv.att_dst.copy_(layer.att_dst)
        conv.bias.copy_(layer.bias)
    return lambda x: conv(x, edge_index)


def _make_dgl(
    layer: GATLayer, in_ch: int, heads: int, channels: int, rowptr: torch.Tensor, col: torch.Tensor
) -> Runner:
    import dgl
    from dgl.nn.pytorch import GATConv as DGLGATConv

    row = torch.repeat_interleave(torch.arange(rowptr.numel() - 1), rowptr.diff())
    graph = dgl.graph((col, row), num_nodes=rowptr.numel() - 1)
    conv = DGLGATConv(in_ch, channels, heads, negative_slope=layer.negative_slope, allow_zero_in_degree=True)
    with torch.no_grad():
        conv.fc.weight.copy_(layer.lin.weight)
        conv.attn_l.copy_(layer.att_src)
        conv.attn_r.copy_(layer.att_dst)
        conv.bias.copy_(layer.bias)
    return lambda x: conv(graph, x).reshape(x.shape[0], -1)


def build_impls(
    cfg: BenchConfig, heads: int, rowptr: torch.Tensor, col: torch.Tensor, notes: list[str]
) -> dict[str, tuple[str, Runner]]:
    """Name -> (backend, runner) for every implementation that can run here (same weights for all)."""
    in_ch = heads * cfg.channels
    torch.manual_seed(cfg.seed)
    fused = GATLayer(in_ch, cfg.channels, heads, cfg.negative_slope, impl="fused")
    unfused = GATLayer(in_ch, cfg.channels, heads, cfg.negative_slope, impl="unfused")
    unfused.load_state_dict(fused.state_dict())
    backend = _loader.resolve(None)
    transpose = csr_transpose(rowptr, col, rowptr.numel() - 1, backend=backend)  # graph structure, reused
    row = torch.repeat_interleave(torch.arange(rowptr.numel() - 1), rowptr.diff())
    edge_index = torch.stack([col, row])
    impls: dict[str, tuple[str, Runner]] = {
        "fused": (backend, lambda x: fused(x, rowptr, col, transpose)),
        "unfused": ("torch", lambda x: unfused(x, rowptr, col)),
        "pyg": ("torch", _make_pyg(fused, in_ch, heads, cfg.channels, edge_index)),
    }
    try:
        impls["dgl"] = ("dgl", _make_dgl(fused, in_ch, heads, cfg.channels, rowptr, col))
    except Exception as exc:  # dgl missing or broken: say so, keep going
        note = f"DGL GATConv skipped: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        if note not in notes:
            notes.append(note)
    return impls


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
    fwd = itemsize * (nodes * in_ch + nodes * out_ch + in_ch * out_ch) + graph
    bwd = itemsize * (2 * nodes * in_ch + nodes * out_ch + 2 * in_ch * out_ch) + graph
    return {"forward": fwd, "backward": bwd, "fwd+bwd": fwd + bwd}[phase]


def measure_once(run: Runner, x: torch.Tensor, grad: torch.Tensor) -> dict[str, tuple[float, int]]:
    """Time and peak memory of one forward and one backward: phase -> (seconds, peak bytes)."""
    x.grad = None
    gc.collect()
    release_freed_memory_to_os()
    rss_before = reset_peak()
    start = time.perf_counter()
    out = run(x)
    t_fwd = time.perf_counter() - start
    peak_fwd = peak_bytes()
    rss_mid = reset_peak()
    start = time.perf_counter()
    out.backward(grad)
    t_bwd = time.perf_counter() - start
    peak_bwd = peak_bytes()
    del out
    x.grad = None
    return {
        "forward": (t_fwd, max(0, peak_fwd - rss_before)),
        "backward": (t_bwd, max(0, peak_bwd - rss_mid)),
        "fwd+bwd": (t_fwd + t_bwd, max(0, max(peak_fwd, peak_bwd) - rss_before)),
    }


def check_agreement(impls: dict[str, tuple[str, Runner]], x: torch.Tensor) -> dict[str, float]:
    """Max |out - out_pyg| of every implementation (a sanity check that all compute the same layer)."""
    with torch.no_grad():
        reference = impls["pyg"][1](x)
        return {name: float((run(x) - reference).abs().max()) for name, (_, run) in impls.items()}


def _sample_all(
    impls: dict[str, tuple[str, Runner]],
    x: torch.Tensor,
    grad: torch.Tensor,
    reps: int,
    label: str,
    log: Callable[[str], None],
) -> dict[str, list[dict[str, tuple[float, int]]]]:
    """One warm-up, then ``reps`` repetitions with every implementation run side by side in each."""
    samples: dict[str, list[dict[str, tuple[float, int]]]] = {name: [] for name in impls}
    for _name, (_, run) in impls.items():  # warm-up (allocator, caches, lazy init)
        measure_once(run, x, grad)
    for rep in range(reps):
        for name, (_, run) in impls.items():
            samples[name].append(measure_once(run, x, grad))
        log(
            f"  {label} rep {rep + 1}/{reps}: "
            + ", ".join(
                f"{n} {samples[n][-1]['fwd+bwd'][0] * 1e3:.0f} ms {samples[n][-1]['fwd+bwd'][1] / 2**20:.0f} MiB"
                for n in impls
            )
        )
    return samples


def _inputs(cfg: BenchConfig, heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(cfg.seed + heads)
    x = torch.randn(cfg.nodes, heads * cfg.channels, generator=gen).requires_grad_(True)
    return x, torch.randn(cfg.nodes, heads * cfg.channels, generator=gen)


def kernel_only(cfg: BenchConfig, heads: int, rowptr: torch.Tensor, col: torch.Tensor) -> dict[str, float]:
    """Time the fused shard kernels alone (no linear layer), medians over cfg.reps.

    Reports the rows they gather: one [H*C] source row and one index per edge in the forward, two
    passes (CSR for s_dst, CSC for the source side) in the backward.

    Args:
        cfg: benchmark configuration; heads: H; rowptr, col: the graph.
    """
    from .gat import gat_backward_shard, gat_finalize, gat_forward_shard

    backend = _loader.resolve(None)
    nodes, channels, edges = rowptr.numel() - 1, cfg.channels, col.numel()
    gen = torch.Generator().manual_seed(cfg.seed)
    z = torch.randn(nodes, heads, channels, generator=gen)
    s_dst, s_src = torch.randn(nodes, heads, generator=gen), torch.randn(nodes, heads, generator=gen)
    transpose = csr_transpose(rowptr, col, nodes, backend=backend)
    state = gat_forward_shard(rowptr, col, s_dst, s_src, z, cfg.negative_slope, backend=backend)
    out = gat_finalize(*state)
    grad = torch.randn_like(out)
    delta = (grad * out).sum(-1)
    fwd, bwd = [], []
    for _ in range(cfg.reps + 1):
        start = time.perf_counter()
        gat_forward_shard(rowptr, col, s_dst, s_src, z, cfg.negative_slope, backend=backend)
        fwd.append(time.perf_counter() - start)
        start = time.perf_counter()
        gat_backward_shard(
            rowptr,
            col,
            s_dst,
            s_src,
            z,
            cfg.negative_slope,
            state[0],
            state[1],
            grad,
            delta,
            backend=backend,
            transpose=transpose,
        )
        bwd.append(time.perf_counter() - start)
    t_fwd, t_bwd = statistics.median(fwd[1:]), statistics.median(bwd[1:])
    per_pass = edges * (8 + heads * channels * z.element_size())
    return {
        "heads": heads,
        "backend": backend,
        "forward_s": t_fwd,
        "backward_s": t_bwd,
        "forward_gathered_GBps": per_pass / t_fwd / 1e9,
        "backward_gathered_GBps": 2 * per_pass / t_bwd / 1e9,
    }


def run_bench(cfg: BenchConfig, log: Callable[[str], None] = print) -> dict:
    """Run every configuration; return rows, STREAM figures and metadata.

    Timings come first with the default allocator; peak memory is then measured in separate
    repetitions after glibc is told to hand freed pages back (see :func:`release_freed_memory_to_os`).
    """
    notes: list[str] = []
    load_start = os.getloadavg()[0]
    log(f"STREAM-like bandwidth, {cfg.stream_elems:,} float64 per array ...")
    stream = stream_bandwidth(cfg.stream_elems, reps=3 if cfg.reps == 1 else 5)
    log(f"  copy {stream['copy_GBps']:.1f} GB/s, triad {stream['triad_GBps']:.1f} GB/s")
    rowptr, col = make_graph(cfg.nodes, cfg.degree, cfg.seed)
    edges = col.numel()
    log(f"graph: {cfg.nodes:,} nodes, {edges:,} edges, max in-degree {int(rowptr.diff().max())}")
    agreement: dict[str, dict[str, float]] = {}
    times: dict[int, dict[str, list[dict[str, tuple[float, int]]]]] = {}
    kernel_rows: list[dict] = []
    for heads in cfg.heads:
        impls = build_impls(cfg, heads, rowptr, col, notes)
        x, grad = _inputs(cfg, heads)
        agreement[str(heads)] = check_agreement(impls, x)
        log(f"heads={heads}: max |out - pyg| " + ", ".join(f"{k} {v:.1e}" for k, v in agreement[str(heads)].items()))
        times[heads] = _sample_all(impls, x, grad, cfg.reps, f"time heads={heads}", log)
        kernel_rows.append(kernel_only(cfg, heads, rowptr, col))
        k = kernel_rows[-1]
        log(
            f"  kernels alone heads={heads}: forward {k['forward_s'] * 1e3:.1f} ms "
            f"({k['forward_gathered_GBps']:.1f} GB/s gathered), backward {k['backward_s'] * 1e3:.1f} ms "
            f"({k['backward_gathered_GBps']:.1f} GB/s gathered)"
        )
        del impls, x, grad
        gc.collect()
    if not release_freed_memory_to_os():
        notes.append("could not tune glibc malloc: peak memory may under-count reused heap pages")
    mem_reps = min(cfg.reps, 3)
    rows: list[dict] = []
    for heads in cfg.heads:
        in_ch = heads * cfg.channels
        impls = build_impls(cfg, heads, rowptr, col, notes)
        x, grad = _inputs(cfg, heads)
        peaks = _sample_all(impls, x, grad, mem_reps, f"memory heads={heads}", log)
        for name, (backend, _) in impls.items():
            for phase in PHASES:
                seconds = statistics.median(s[phase][0] for s in times[heads][name])
                peak = int(statistics.median(s[phase][1] for s in peaks[name]))
                nbytes = min_bytes(phase, cfg.nodes, edges, in_ch, in_ch, x.element_size())
                rows.append(
                    {
                        "impl": name,
                        "backend": backend,
                        "heads": heads,
                        "phase": phase,
                        "time_s": seconds,
                        "peak_mem_bytes": peak,
                        "min_bytes": nbytes,
                        "achieved_GBps": nbytes / seconds / 1e9,
                        "nodes": cfg.nodes,
                        "edges": edges,
                        "channels_per_head": cfg.channels,
                        "dtype": str(x.dtype).replace("torch.", ""),
                        "reps": cfg.reps,
                        "mem_reps": mem_reps,
                        "threads": torch.get_num_threads(),
                    }
                )
        del impls, x, grad
        gc.collect()
    pyg = {(r["heads"], r["phase"]): r for r in rows if r["impl"] == "pyg"}
    for r in rows:
        ref = pyg[(r["heads"], r["phase"])]
        r["speedup_vs_pyg"] = ref["time_s"] / r["time_s"]
        r["mem_ratio_vs_pyg"] = (
            r["peak_mem_bytes"] / ref["peak_mem_bytes"] if ref["peak_mem_bytes"] > 0 else float("nan")
        )
        r["bw_fraction"] = r["achieved_GBps"] / stream["triad_GBps"]
    return {
        "config": asdict(cfg),
        "stream": stream,
        "loadavg_1min_start_end": [load_start, os.getloadavg()[0]],
        "rows": rows,
        "kernel_only": kernel_rows,
        "notes": notes,
        "agreement": agreement,
        "cpu": cpu_model(),
        "date": _dt.date.today().isoformat(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "edges": edges,
    }


# ------------------------------------------------------------------------------------------------ output
def write_csv(result: dict, path: Path) -> None:
    """One row per impl x heads x phase."""
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in result["rows"]:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})


def plot(result: dict, path: Path) -> None:
    """Figure-2-style bars: fwd+bwd time and peak memory against heads, one bar per implementation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["rows"] if r["phase"] == "fwd+bwd"]
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    heads = list(dict.fromkeys(r["heads"] for r in rows))
    lookup = {(r["impl"], r["heads"]): r for r in rows}
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    width = 0.8 / len(impls)
    for k, impl in enumerate(impls):
        pos = np.arange(len(heads)) + (k - (len(impls) - 1) / 2) * width
        picked = [lookup[(impl, h)] for h in heads]
        times = [r["time_s"] * 1e3 for r in picked]
        mems = [r["peak_mem_bytes"] / 2**20 for r in picked]
        bars_t = axes[0].bar(pos, times, width, label=impl)
        bars_m = axes[1].bar(pos, mems, width, label=impl)
        if impl != "pyg":  # label each bar with its ratio to PyG GATConv
            axes[0].bar_label(bars_t, [f"{r['speedup_vs_pyg']:.1f}x" for r in picked], fontsize=7)
            axes[1].bar_label(bars_m, [f"{r['mem_ratio_vs_pyg']:.2f}" for r in picked], fontsize=7)
    titles = ("forward+backward time (ms); label: speedup vs PyG", "peak memory (MiB); label: ratio to PyG")
    for ax, label in zip(axes, titles, strict=True):
        ax.set_xticks(np.arange(len(heads)), [str(h) for h in heads])
        ax.set_xlabel("attention heads (50 features each)")
        ax.set_title(label, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(impls), bbox_to_anchor=(0.5, 0.94), frameon=False)
    fig.suptitle(f"One GAT layer, {result['config']['nodes']:,} nodes, {result['edges']:,} edges")
    load = result.get("loadavg_1min_start_end", [float("nan")] * 2)
    fig.text(
        0.5,
        0.005,
        f"measured on {result['cpu']}, {result['threads']} threads, {result['date']} "
        f"(1-min load average {load[0]:.1f} at start, {load[1]:.1f} at end)",
        ha="center",
        fontsize=8,
    )
    fig.tight_layout(rect=(0, 0.03, 1, 0.9))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def print_table(result: dict, log: Callable[[str], None] = print) -> None:
    """Human-readable summary of every row."""
    log(
        f"{'impl':8} {'heads':>5} {'phase':8} {'time ms':>9} {'peak MiB':>9} {'x pyg':>6} {'mem/pyg':>8} "
        f"{'GB/s':>6} {'bw frac':>7}"
    )
    for r in result["rows"]:
        log(
            f"{r['impl']:8} {r['heads']:5d} {r['phase']:8} {r['time_s'] * 1e3:9.1f} "
            f"{r['peak_mem_bytes'] / 2**20:9.1f} {r['speedup_vs_pyg']:6.2f} {r['mem_ratio_vs_pyg']:8.3f} "
            f"{r['achieved_GBps']:6.2f} {r['bw_fraction']:7.3f}"
        )


def markdown_table(result: dict) -> str:
    """The result rows as a GitHub-markdown table (time, memory, ratios to PyG, bandwidth)."""
    lines = [
        "| impl | heads | phase | time (ms) | peak mem (MiB) | speedup vs PyG | mem / PyG | GB/s (min bytes) "
        "| fraction of triad |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['impl']} | {r['heads']} | {r['phase']} | {r['time_s'] * 1e3:.1f} | "
            f"{r['peak_mem_bytes'] / 2**20:.1f} | {r['speedup_vs_pyg']:.2f} | {r['mem_ratio_vs_pyg']:.3f} | "
            f"{r['achieved_GBps']:.2f} | {r['bw_fraction']:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (``sarlab bench kernels``); returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="sarlab bench kernels",
        description="GAT layer benchmark: fused C++ kernel vs unfused torch vs PyG GATConv (vs DGL).",
    )
    parser.add_argument("--quick", action="store_true", help="tiny graph, one repetition (seconds)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write results as JSON")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("results"),
        metavar="DIR",
        help="directory for kernels.csv and kernels.png (default: results/)",
    )
    parser.add_argument("--nodes", type=int, default=None, help="override the node count")
    parser.add_argument("--degree", type=int, default=None, help="override the mean in-degree")
    parser.add_argument("--heads", type=int, nargs="+", default=None, help="override the head counts")
    parser.add_argument("--reps", type=int, default=None, help="override the repetitions")
    parser.add_argument("--seed", type=int, default=None, help="graph and weight seed")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch/OpenMP threads (default: torch's default; 1 with --quick, which is a smoke test and "
        "should not suffer from OpenMP spin-waiting on a busy machine)",
    )
    args = parser.parse_args(argv)
    base = QUICK if args.quick else FULL
    overrides = {
        k: v
        for k, v in {"nodes": args.nodes, "degree": args.degree, "reps": args.reps, "seed": args.seed}.items()
        if v is not None
    }
    if args.heads:
        overrides["heads"] = tuple(args.heads)
    cfg = BenchConfig(**{**asdict(base), **overrides})
    if cfg.nodes < 2 or cfg.degree < 1 or cfg.reps < 1 or not cfg.heads:
        parser.error("need nodes >= 2, degree >= 1, reps >= 1 and at least one head count")

    if args.threads is not None or args.quick:
        if args.threads is not None and args.threads < 1:
            parser.error("--threads must be >= 1")
        torch.set_num_threads(args.threads or 1)

    def log(line: str) -> None:
        print(line, flush=True)

    log(f"kernels backend: {_loader.resolve(None)}; torch threads: {torch.get_num_threads()}")
    result = run_bench(cfg, log)
    for note in result["notes"]:
        log(note)
    print_table(result, log)
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(result, args.out / "kernels.csv")
    plot(result, args.out / "kernels.png")
    log(f"wrote {args.out / 'kernels.csv'} and {args.out / 'kernels.png'}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
