"""Outputs of ``sarlab bench kernels``: the result table as text, ``<prefix>.csv`` and the figure ``<prefix>.png``.

Nothing here measures: the functions read the dict :func:`sarlab.real.bench.kernel_bench.run_kernel_bench` returns.
"""
from __future__ import annotations

import csv
import io
import os

from sarlab.common.figures import plot_fig2
from sarlab.common.machine import usable_cores
from sarlab.common.tables import measured_banner
from sarlab.real.launch import outputs

CSV_COLUMNS = ("impl", "backend", "heads", "phase", "time_s", "peak_mem_bytes", "speedup_vs_pyg", "mem_ratio_vs_pyg",
               "min_bytes", "achieved_GBps", "bw_fraction", "nodes", "edges", "channels_per_head", "dtype", "reps",
               "mem_reps", "threads")


def figure_banner(result: dict) -> str:
    """The 'measured on' banner of the figure of a result."""
    load = result.get("loadavg_1min_start_end", [float("nan")] * 2)
    return measured_banner(result["cpu"], usable_cores(), result["date"],
                           f"{result['threads']} torch threads, 1-min load {load[0]:.1f} -> {load[1]:.1f}")


def figure_title(result: dict) -> str:
    """What the figure of a result shows: graph, layer, implementations."""
    cfg, rows = result["config"], result["rows"]
    dgl = ", dgl = DGL GATConv" if any(r["impl"] == "dgl" for r in rows) else "; DGL not installed"
    return (f"One GAT layer, {cfg['nodes']:,} nodes, {result['edges']:,} edges (synthetic, power-law in-degree, "
            f"mean {cfg['degree']}), in = out = {cfg['channels']} x heads features, float32, no self-loops; medians "
            f"of {cfg['reps']} repetitions. fused / unfused = sarlab.nn.GATConv, the layer the engine trains, with "
            f"the C++ kernels ({rows[0]['backend']}) / in torch; pyg = torch_geometric GATConv{dgl}")


def write_outputs(result: dict, out_dir: str, prefix: str = "kernels") -> list[str]:
    """Write ``<out_dir>/<prefix>.csv`` (one row per implementation x heads x phase, :data:`CSV_COLUMNS`) and
    ``<prefix>.png`` (forward time, backward time and peak memory against heads); return their paths."""
    os.makedirs(out_dir, exist_ok=True)
    csv_path, png_path = os.path.join(out_dir, f"{prefix}.csv"), os.path.join(out_dir, f"{prefix}.png")
    handle = io.StringIO(newline="")
    writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS, extrasaction="ignore")
    writer.writeheader()
    for row in result["rows"]:
        writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})
    outputs.write_bytes(csv_path, handle.getvalue())  # atomically, as every output
    with outputs.staged_file(png_path) as png:
        plot_fig2(result["rows"], png, figure_banner(result), figure_title(result))
    return [csv_path, png_path]


def format_table(result: dict) -> str:
    """The result rows as a fixed-width text table (time, memory, ratios to PyG, bandwidth)."""
    lines = [f"{'impl':8} {'heads':>5} {'phase':8} {'time ms':>9} {'peak MiB':>9} {'x pyg':>6} {'mem/pyg':>8} "
             f"{'GB/s':>6} {'bw frac':>7}"]
    lines += [f"{r['impl']:8} {r['heads']:5d} {r['phase']:8} {r['time_s'] * 1e3:9.1f} "
              f"{r['peak_mem_bytes'] / 2**20:9.1f} {r['speedup_vs_pyg']:6.2f} {r['mem_ratio_vs_pyg']:8.3f} "
              f"{r['achieved_GBps']:6.2f} {r['bw_fraction']:7.3f}" for r in result["rows"]]
    return "\n".join(lines)
