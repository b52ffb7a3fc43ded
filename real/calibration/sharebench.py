"""How much co-located processes (single-thread, or ranks of ``--threads`` threads) slow each other down (run as
``python -m sarlab.real.calibration.sharebench``).

Each op family's representative op (shapes whose working set exceeds a core's private cache) runs in ``--pairs``
pairs of adjacent windows. The processes agree on one schedule before the first window (:func:`agree_schedule`,
through files in the ``--sync`` folder): each warms every op up, the others say they are ready, and the ``--lead``
then fixes the schedule and writes it for them, so no process waits on a fixed lead-in that a slow start could
overrun. A family's window holds about :data:`WINDOW_CALLS` of its calls as the lead timed them while warming up,
between :data:`MIN_WINDOW_S` and ``--seconds`` (:func:`window_seconds`): a fast family needs no window as long as
the slowest's. The lead runs in every window; the others run only in each pair's co-located window and sleep in
its solo window, so the lead's rate alone and beside them is measured seconds apart, and a shared machine's drift
over minutes cancels in each pair's ratio. The order alternates from pair to pair (solo first, then co-located
first). A process never starts a call that its running mean says would end after its window, and the lead counts
calls from 50 ms into a window, so a window holds only its own processes' work. Each process prints one JSON line:
per family, its calls per CPU second of the process in each solo and each co-located window (``null`` where it did
not run); per CPU second, so that a third process time-slicing the cores does not count, only the interference of
the co-running copies. :func:`sarlab.real.calibration.hostbench.bench_share` turns the lead's pairs into each
family's ``share_eff``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from sarlab.core.memory import tune_malloc
from sarlab.real.calibration.ranks import random_csr

#: seconds between two families' windows: room for a last call that outlasts its family's running mean
GAP_S = 0.2
#: calls of its op (at the lead's warm-up time) a family's window holds, and the shortest window (seconds)
WINDOW_CALLS, MIN_WINDOW_S = 8, 0.15
#: a fast op's warm-up times calls (2 to 5) until they add up to this (seconds): the fastest of them sets its
#: window, robust to one slow call (a single timed call read 2-3x too long on the 2-core VM)
TIMED_WARMUP_S = 0.15
#: seconds from the lead's schedule to its first window (the others poll for it every POLL_S), and the longest a
#: process waits for the others to be ready or for the schedule
START_DELAY_S, POLL_S, SYNC_TIMEOUT_S = 0.05, 0.005, 120.0


def build_ops(quick: bool = False, threads: int = 1) -> dict[str, Callable[[], object]]:
    """One representative op per family (on ``threads`` threads), keyed like
    :data:`sarlab.simulator.hardware.profile.OP_UNITS`."""
    torch.set_num_threads(max(1, threads))
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
    heads, ch = 4, 32
    ng = n // 4  # the gathering families' graph: a call must fit a window (max over all n rows took longer)
    g_rowptr, g_col = random_csr(ng, ng, deg, gen)
    g_dst = torch.repeat_interleave(torch.arange(ng), deg)
    g_x = torch.randn(ng, f)
    g_state = torch.full((ng, f), -torch.inf)

    def max_aggr() -> object:
        msg = g_x[g_col]
        return g_state.clone().scatter_reduce_(0, g_dst.view(-1, 1).expand_as(msg), msg, "amax")

    ops["max_aggr"] = max_aggr
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


SETTLE_S = 0.05  # the lead counts from this far into a window: a partner's last call ends by the window's end


def window_order(pair: int) -> tuple[str, str]:
    """Which window of ``pair`` comes first: solo then co-located for even pairs, the reverse for odd ones."""
    return ("solo", "shared") if pair % 2 == 0 else ("shared", "solo")


def _window(fn: Callable[[], object], begin: float, end: float, mean_s: float,
            wall: bool = False) -> tuple[float | None, float]:
    """Calls of ``fn`` between the wall times ``begin`` and ``end``, none started that would end after ``end`` by
    the running mean call time ``mean_s``: (calls per CPU second of the calling thread, or per wall second with
    ``wall`` (multi-thread ranks: their pool threads' CPU is not the caller's); None if none fitted; the updated
    mean)."""
    delay = begin - time.time()
    if delay > 0:
        time.sleep(delay)
    count, cpu = 0, 0.0
    while time.time() + mean_s <= end:
        c0, t0 = time.thread_time(), time.perf_counter()
        fn()
        cpu += (time.perf_counter() - t0) if wall else (time.thread_time() - c0)
        mean_s = 0.8 * mean_s + 0.2 * (time.perf_counter() - t0)
        count += 1
    return (count / max(cpu, 1e-9) if count else None), mean_s


def window_seconds(call_s: float, longest: float) -> float:
    """A family's window: :data:`WINDOW_CALLS` calls of ``call_s`` after the lead's :data:`SETTLE_S`, within
    [:data:`MIN_WINDOW_S`, ``longest``]."""
    return min(longest, max(MIN_WINDOW_S, SETTLE_S + WINDOW_CALLS * call_s))


def schedule(call_s: dict[str, float], start_at: float, longest: float, pairs: int) -> dict[str, list[float]]:
    """Per family, in order: its first window's opening (``time.time()``) and its window length
    (:func:`window_seconds`); a family's ``2 pairs`` windows are adjacent, :data:`GAP_S` lies between families."""
    plan, begin = {}, start_at
    for name, seconds in call_s.items():
        window = window_seconds(seconds, longest)
        plan[name] = [begin, window]
        begin += 2 * pairs * window + GAP_S
    return plan


def _wait_for(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + SYNC_TIMEOUT_S
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"sharebench: {what} not there after {SYNC_TIMEOUT_S:g} s")
        time.sleep(POLL_S)


def agree_schedule(sync: Path, lead: bool, processes: int, call_s: dict[str, float], longest: float,
                   pairs: int) -> dict[str, list[float]]:
    """The schedule every process of the group follows (:func:`schedule`), agreed through files in ``sync``:
    every other process, warmed up, writes ``ready.PID`` and waits for ``schedule.json``; the lead waits for
    ``processes - 1`` of them, then writes it (its own call times, the first window :data:`START_DELAY_S` ahead)."""
    plan_file = sync / "schedule.json"
    if not lead:
        (sync / f"ready.{os.getpid()}").touch()
        _wait_for(plan_file.exists, "the lead's schedule")
        return json.loads(plan_file.read_text())
    _wait_for(lambda: len(list(sync.glob("ready.*"))) >= processes - 1, f"{processes - 1} ready processes")
    plan = schedule(call_s, time.time() + START_DELAY_S, longest, pairs)
    draft = sync / "schedule.draft"
    draft.write_text(json.dumps(plan))
    os.replace(draft, plan_file)  # whole, never half written
    return plan


def run(sync: Path, processes: int, seconds: float, pairs: int, lead: bool, quick: bool,
        threads: int = 1) -> dict[str, object]:
    """Per family (``rates``), calls per CPU second in each of its ``pairs`` solo and co-located windows (None
    where this process did not run: a partner's solo windows), on the schedule :func:`agree_schedule` sets once
    every op is warmed up (three calls or more) in every process: windows of at most ``seconds``. ``warmup_s``: this
    process's seconds from its start to ready; ``late_s``: how far past the first window's opening it got the
    schedule (a late process misses the start of the first windows); ``window_s``: each family's window."""
    began = time.perf_counter()
    ops = build_ops(quick, threads)
    mean_s, call_s = {}, {}
    for name, fn in ops.items():
        fn()  # first call: page faults, lazy initialisation
        times: list[float] = []
        while len(times) < 2 or sum(times) < TIMED_WARMUP_S and len(times) < 5:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        mean_s[name], call_s[name] = times[-1], min(times)
    warmup_s = time.perf_counter() - began
    plan = agree_schedule(sync, lead, processes, call_s, seconds, pairs)
    late_s = max(0.0, time.time() - min(begin for begin, _ in plan.values()))
    out: dict[str, dict[str, list]] = {}
    for name, fn in ops.items():
        family_begin, window = plan[name]
        rates: dict[str, list] = {"solo": [], "shared": []}
        for pair in range(pairs):
            for k, kind in enumerate(window_order(pair)):
                begin = family_begin + (2 * pair + k) * window
                if lead or kind == "shared":
                    rate, mean_s[name] = _window(fn, begin + (SETTLE_S if lead else 0.0), begin + window,
                                                 mean_s[name], wall=threads > 1)
                else:
                    rate = None
                rates[kind].append(rate)
        out[name] = rates
    return {"rates": out, "late_s": late_s, "warmup_s": warmup_s,
            "window_s": {name: window for name, (_, window) in plan.items()}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sync", required=True, help="an empty folder the group's processes agree their schedule in")
    p.add_argument("--processes", type=int, required=True, help="processes in the group, the lead included")
    p.add_argument("--seconds", type=float, default=0.4, help="the longest window (a family's: WINDOW_CALLS calls)")
    p.add_argument("--pairs", type=int, default=8, help="solo / co-located window pairs per family")
    p.add_argument("--lead", action="store_true", help="run in every window (the others: co-located windows only)")
    p.add_argument("--quick", action="store_true", help="smaller shapes")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads of each process (default 1)")
    a = p.parse_args()
    result = run(Path(a.sync), a.processes, a.seconds, a.pairs, a.lead, a.quick, a.threads)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
