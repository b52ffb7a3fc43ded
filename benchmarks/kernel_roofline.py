"""The fused GAT kernels against rooflines measured on this machine (``python -m benchmarks.kernel_roofline``).

Reads a :mod:`benchmarks.kernel_speed` run (``DIR/kernel_speed.csv``) and, on the same graph and inputs (same
seed, rows, edges, channels, threads), measures in a fresh process per head count ``H``:

* ``sgemm``: GFLOP/s of a ``2048 x 2048 @ 2048 x 2048`` float32 matrix product (``2 n^3`` FLOP) - the compute roof;
* ``gather``: GB/s of ``z.view(N, H C)[col]`` (``index_select`` of every edge's source row, in the shard's edge
  order, into a preallocated buffer): ``2 E H C b`` bytes (read and write) - the memory roof for rows read in that
  order;
* ``spmm``: milliseconds of this tree's C++ SpMM (:func:`kernels.spmm_csr`) of the same CSR with width ``H C``:
  ``out_i = sum_{j -> i} z_j``, the aggregation GAT's forward must at least do, without the attention.

Then, against the CPU time of this tree's kernels in the speed run (median over its processes):
``fwd / spmm`` (how far the fused forward is from a plain aggregation over the same gathers), ``bwd / 2 spmm``
(the backward gathers twice: ``z_j`` rows for the attention gradient and the output gradient rows over the
transposed shard), the FLOP rate the kernels reach counting only their dominant work (forward ``2 E H C``: the
weighted sum; backward ``4 E H C``: the weighted sum of output gradients and the ``g_i . z_j`` dot products) as a
fraction of ``sgemm``, and the gathered bytes per second (forward ``E H C b``, backward ``2 E H C b``) as a fraction
of ``gather``. Writes ``DIR/kernel_roofline.{csv,md}``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import asdict

import pandas as pd
import torch

from benchmarks import ab
from benchmarks.kernel_speed import SpeedConfig, make_graph
from sarlab import kernels
from sarlab.common.machine import load_1min

GEMM_N = 2048
_CHILD = "import sys; from benchmarks.kernel_roofline import child_main; child_main(sys.argv[1:])"


def _median_seconds(fn, repeats: int) -> float:
    """Median CPU seconds (``time.process_time``) of ``repeats`` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def measure_roofs(cfg: SpeedConfig, heads: int, repeats: int = 3) -> dict:
    """sgemm GFLOP/s, gather GB/s and SpMM seconds on ``cfg``'s graph at ``heads`` heads (this process)."""
    torch.set_num_threads(cfg.threads)
    dtype = getattr(torch, cfg.dtype)
    rowptr, col = make_graph(cfg.nodes, cfg.edges, cfg.seed, cfg.graph, cfg.shuffle_rows)
    gen = torch.Generator().manual_seed(cfg.seed + heads)
    z = torch.randn(cfg.nodes, heads * cfg.channels, generator=gen, dtype=dtype)
    a, b = (torch.randn(GEMM_N, GEMM_N, generator=gen, dtype=dtype) for _ in range(2))
    width, size = heads * cfg.channels, z.element_size()
    gemm_s = _median_seconds(lambda: torch.mm(a, b), repeats)
    gathered = torch.empty((cfg.edges, width), dtype=dtype)  # written in place: no page faults in the timing
    gather_s = _median_seconds(lambda: torch.index_select(z, 0, col, out=gathered), repeats)
    spmm_s = _median_seconds(lambda: kernels.spmm_csr(rowptr, col, z, backend="cpp"), repeats)
    return {"heads": heads, "sgemm_gflops": 2 * GEMM_N ** 3 / gemm_s / 1e9,
            "gather_GBps": 2 * cfg.edges * width * size / gather_s / 1e9, "spmm_ms": spmm_s * 1e3}


def child_main(argv: list[str]) -> None:
    """The child process: ``CONFIG_JSON HEADS``; prints one JSON line of :func:`measure_roofs`."""
    config, heads = argv
    values = json.loads(config)
    cfg = SpeedConfig(**{**values, "heads": tuple(values["heads"])})
    print(json.dumps(measure_roofs(cfg, int(heads))), flush=True)


def run_child(cfg: SpeedConfig, heads: int) -> dict:
    """:func:`measure_roofs` in a fresh process of this tree (:func:`benchmarks.ab.run_json_child`)."""
    return ab.run_json_child(["-c", _CHILD, json.dumps(asdict(cfg)), str(heads)], ab.TREE_ROOT, cfg.threads,
                             cfg.timeout_s)


def against_roofs(speed: pd.DataFrame, roofs: pd.DataFrame, cfg: SpeedConfig) -> pd.DataFrame:
    """Per head count: this tree's kernel CPU ms (median over processes) against the measured roofs."""
    new = speed[speed.engine == "new"].groupby("heads")[["fwd_cpu_s", "bwd_cpu_s"]].median()
    size = torch.empty((), dtype=getattr(torch, cfg.dtype)).element_size()
    rows = []
    for r in roofs.itertuples():
        fwd_s, bwd_s = float(new.loc[r.heads, "fwd_cpu_s"]), float(new.loc[r.heads, "bwd_cpu_s"])
        ehc = cfg.edges * r.heads * cfg.channels
        rows.append({
            "heads": r.heads, "new_fwd_ms": round(fwd_s * 1e3, 1), "new_bwd_ms": round(bwd_s * 1e3, 1),
            "spmm_ms": round(r.spmm_ms, 1), "fwd_over_spmm": round(fwd_s * 1e3 / r.spmm_ms, 2),
            "bwd_over_2spmm": round(bwd_s * 1e3 / (2 * r.spmm_ms), 2),
            "fwd_gflops": round(2 * ehc / fwd_s / 1e9, 2), "bwd_gflops": round(4 * ehc / bwd_s / 1e9, 2),
            "sgemm_gflops": round(r.sgemm_gflops, 1),
            "fwd_of_sgemm": round(2 * ehc / fwd_s / 1e9 / r.sgemm_gflops, 3),
            "fwd_gather_GBps": round(ehc * size / fwd_s / 1e9, 2),
            "bwd_gather_GBps": round(2 * ehc * size / bwd_s / 1e9, 2),
            "gather_GBps": round(r.gather_GBps, 2),
        })
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.kernel_roofline", description=__doc__.splitlines()[0])
    p.add_argument("--speed", required=True, help="folder of a benchmarks.kernel_speed run (its kernel_speed.csv)")
    p.add_argument("--nodes", type=int, default=SpeedConfig.nodes)
    p.add_argument("--edges", type=int, default=SpeedConfig.edges)
    p.add_argument("--channels", type=int, default=SpeedConfig.channels)
    p.add_argument("--threads", type=int, default=SpeedConfig.threads)
    p.add_argument("--out", default=None, help="output folder (default: the --speed folder)")
    a = p.parse_args(argv)
    speed = pd.read_csv(os.path.join(a.speed, "kernel_speed.csv"))
    cfg = SpeedConfig(nodes=a.nodes, edges=a.edges, channels=a.channels, threads=a.threads,
                      heads=tuple(sorted(int(h) for h in speed.heads.unique())))
    load = load_1min()
    roofs = pd.DataFrame([run_child(cfg, heads) for heads in cfg.heads])
    table = against_roofs(speed, roofs, cfg)
    out = a.out or a.speed
    os.makedirs(out, exist_ok=True)
    table.to_csv(os.path.join(out, "kernel_roofline.csv"), index=False)
    machine = (f", {cfg.threads} thread(s); load {load:.1f} before the roof measurements. Graph "
               f"and inputs of the speed run in `{a.speed}` ({cfg.nodes} rows, {cfg.edges} edges, {cfg.channels} "
               "channels per head). Kernel times: this tree's median CPU ms from that run. Roofs measured now, "
               "CPU time of one process: `sgemm` (2048^3), `gather` (index_select of every edge's source row, read + "
               "write), `spmm` (the C++ SpMM of the same CSR at width H C). FLOP counted: forward 2 E H C, backward "
               "4 E H C (the dominant terms only); gathered bytes: forward E H C b, backward 2 E H C b.")
    ab.write_report(os.path.join(out, "kernel_roofline.md"), "Fused GAT kernels against measured rooflines", machine,
                    table)
    print(table.to_string(index=False))
    print(f"wrote {os.path.join(out, 'kernel_roofline.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
