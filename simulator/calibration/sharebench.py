"""How much co-located single-thread processes slow each other down (run as ``python -m
sarlab.simulator.calibration.sharebench``).

Each op family's representative op (shapes whose working set exceeds a core's private cache) is run in a
loop for ``--seconds`` inside a time window that starts at ``--start-at`` (a ``time.time()`` value, so that
several processes launched together run the same family at the same time); the process prints one JSON
line: calls per CPU second of the process per family (so a third process time-slicing the cores does not
count, only the interference of the co-running copies). :func:`sarlab.simulator.calibration.hostbench.bench_share` runs
it alone and as ``C`` concurrent copies; the ratio of the rates gives each family's ``share_eff``.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from collections.abc import Callable

import torch

from sarlab.core.memory import tune_malloc
from sarlab.simulator.calibration.opbench import random_csr

GAP_S = 0.4  # between two families' windows: the last call of a window may run past its end


def build_ops(quick: bool = False) -> dict[str, Callable[[], object]]:
    """One representative op per family (one thread), keyed like :data:`sarlab.simulator.hardware.profile.OP_UNITS`."""
    torch.set_num_threads(1)
    tune_malloc(threshold=1 << 17)  # the engine's malloc settings: large outputs are fresh pages
    gen = torch.Generator().manual_seed(0)
    scale = 4 if quick else 1
    ops: dict[str, Callable[[], object]] = {}
    a, w = torch.randn(8000 // scale, 256), torch.randn(256, 256)
    ops["gemm"] = lambda: a @ w
    n, deg, f = 100_000 // scale, 8, 64
    rowptr, col = random_csr(n, n, deg, gen)
    x, state = torch.randn(n, f), torch.zeros(n, f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mat = torch.sparse_csr_tensor(rowptr, col, torch.ones(col.numel()), size=(n, n))
    ops["spmm"] = lambda: state.addmm_(mat, x)
    dst = torch.repeat_interleave(torch.arange(n), deg)

    def max_aggr() -> object:
        msg = x[col]
        return torch.full_like(state, -torch.inf).scatter_reduce(0, dst.view(-1, 1).expand_as(msg), msg, "amax")

    ops["max_aggr"] = max_aggr
    heads, ch = 4, 32
    ng = n // 4
    g_rowptr, g_col = random_csr(ng, ng, deg, gen)
    g_dst = torch.repeat_interleave(torch.arange(ng), deg)
    z, s_src, s_dst = torch.randn(ng, heads, ch), torch.randn(ng, heads), torch.randn(ng, heads)

    def gat_autograd() -> object:
        e = torch.nn.functional.leaky_relu(s_dst[g_dst] + s_src[g_col], 0.2)
        p = torch.exp(e - e.max())
        return torch.zeros(ng, heads, ch).index_add(0, g_dst, p.unsqueeze(-1) * z[g_col])

    ops["gat_autograd"] = gat_autograd
    try:  # imported here, not at module import: loading kernels may build its C++ extension
        from sarlab import kernels

        ops["gat_unfused"] = lambda: kernels.gat_forward_shard(g_rowptr, g_col, s_dst, s_src, z, 0.2, backend="torch")
        if kernels.backend() == "cpp":
            ops["gat_fused"] = lambda: kernels.gat_forward_shard(g_rowptr, g_col, s_dst, s_src, z, 0.2, backend="cpp")
    except Exception:  # noqa: BLE001 - without the kernels package the torch formulation stands in
        ops["gat_unfused"] = gat_autograd
    u, v = torch.randn(4_000_000 // scale), torch.randn(4_000_000 // scale)
    ops["elementwise"] = lambda: u + v
    return ops


def run(start_at: float, seconds: float, quick: bool) -> dict[str, float]:
    """Calls per second of every family, family ``i`` in the window ``start_at + i (seconds + GAP_S)``."""
    ops = build_ops(quick)
    rates: dict[str, float] = {}
    for i, (name, fn) in enumerate(ops.items()):
        begin = start_at + i * (seconds + GAP_S)
        delay = begin - time.time()
        if delay > 0:
            time.sleep(delay)
        fn()  # first call: page faults, lazy initialisation
        count, t0, cpu0 = 0, time.perf_counter(), time.thread_time()
        end = t0 + max(begin + seconds - time.time(), 0.05)
        while True:
            fn()
            count += 1
            if time.perf_counter() >= end:
                break
        rates[name] = count / max(time.thread_time() - cpu0, 1e-9)  # per CPU second: other tenants do not count
    return rates


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--start-at", type=float, required=True, help="time.time() at which the first window opens")
    p.add_argument("--seconds", type=float, default=1.5, help="window per family")
    p.add_argument("--quick", action="store_true", help="smaller shapes")
    a = p.parse_args()
    print(json.dumps(run(a.start_at, a.seconds, a.quick)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
