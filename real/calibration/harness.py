"""Machine and process helpers of the calibration: timing a call, thread counts, quiet spells, subprocesses.

A shared machine distorts timings: other tenants time-slice the cores and share caches and memory
bandwidth. Single-thread calls are therefore timed in the calling thread's CPU time (:func:`time_call`),
and every calibration step runs as a :func:`quiet_step`, which waits for an idle spell, measures how much
CPU the rest of the machine used during the step and repeats a disturbed step. Benchmarks that need a
fresh interpreter or several processes run ``python -m sarlab.simulator.calibration.<module>`` (:func:`module_command`).
"""

from __future__ import annotations

import os
import socket
import statistics
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sarlab.common.machine import usable_cores
from sarlab.common.paths import package_parent

if TYPE_CHECKING:  # annotations only: a forked rank that imports this module does not load the simulator
    from sarlab.simulator.calibration.calibration import Calibration, Findings

#: the directory that holds the ``sarlab`` package (a checkout, or site-packages)
ROOT = package_parent()  # the directory holding the sarlab package
#: a step during which other processes used more than this share of the cores is measured again
DISTURBED_SHARE = 0.15
#: wall seconds of timed runs after which :func:`time_call` stops early (its runs of one call, warm-up excluded)
REPEAT_BUDGET_S = 0.6
#: the fewest timed runs :func:`time_call` keeps, median (one thread, CPU time) or best (wall time) alike: a best of
#: fewer runs is biased slow (results/host_model/budget/repeats/README.md)
LEAST_RUNS = 3


def time_call(fn: Callable[[], Any], repeats: int, warmup: int = 1, wall: bool = False,
              budget_s: float | None = None) -> float:
    """Median time of ``fn()`` over at most ``repeats`` runs after ``warmup`` runs.

    With one intra-op thread (how every op family is timed) the time is the calling thread's CPU time,
    kernel time included (page faults): on a shared machine other tenants that time-slice the core stretch
    the wall clock but not the op's own cost. With more threads it is the wall time (the best of the runs,
    which other tenants can only lengthen); ``wall=True``: the best wall time however many threads (a speed-up
    over threads compares like with like: both timings stretched alike by other tenants).

    The timed runs stop early once they took ``budget_s`` wall seconds (default :data:`REPEAT_BUDGET_S`) and at
    least :data:`LEAST_RUNS` of them ran (``repeats`` where it asks fewer): a call of half a second is timed 3 times,
    not 5, and the short calls, whose timings scatter most, keep every run.
    """
    single = torch.get_num_threads() == 1 and not wall
    clock = time.thread_time if single else time.perf_counter
    budget = REPEAT_BUDGET_S if budget_s is None else budget_s
    least = min(repeats, LEAST_RUNS)
    for _ in range(warmup):
        fn()
    times: list[float] = []
    spent = 0.0
    for _ in range(repeats):
        start, t0 = time.perf_counter(), clock()
        fn()
        times.append(clock() - t0)
        spent += time.perf_counter() - start
        if len(times) >= least and spent >= budget:
            break
    return statistics.median(times) if single else min(times)


#: profiler events of a single worker's aggregation (:class:`sarlab.core.aggregate.ShardAggregate`): the forward
#: and its autograd backward
AGGREGATION_EVENTS = ("ShardAggregate", "ShardAggregateBackward")


def aggregation_seconds(step: Callable[[], Any]) -> float:
    """The engine's own aggregation time while ``step()`` runs (one epoch of a calibration's engine run): the self CPU
    time of :data:`AGGREGATION_EVENTS` under ``torch.profiler`` (CPU activity only); 0.0 where no such event ran.

    It gives the sparse families' factors (:func:`sarlab.simulator.calibration.fitting.aggregation_factors`): fitted
    by least squares from whole epochs, the aggregation shared one factor with the elementwise work (collinear on GCN
    and SAGE runs), which the counting allocator speeds up, and came out at 0.35-0.7 of what torch.profiler measured
    in the same epochs, narrow rows the least (results/host_model/width). Self time holds the shard kernels and the
    Python around them, not the torch ops they call (the state's zero fill, the mean's division: priced as elementwise
    work)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    return sum(ev.self_cpu_time_total for ev in prof.key_averages() if ev.key in AGGREGATION_EVENTS) / 1e6


def set_threads(n: int) -> None:
    """Intra-op threads of torch in this process (at least one)."""
    torch.set_num_threads(max(1, n))


def busy_and_own() -> tuple[float, float] | None:
    """(CPU seconds the whole machine has been busy, CPU seconds of this process and its waited-for
    children); None where /proc/stat is missing."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    busy = (sum(fields) - fields[3] - fields[4]) / tick  # all but idle and iowait
    t = os.times()
    return busy, t.user + t.system + t.children_user + t.children_system


def others_share(seconds: float) -> float | None:
    """The share of the usable cores that processes other than this one (and its waited-for children) used over the
    next ``seconds``; None where /proc/stat is missing."""
    a = busy_and_own()
    if a is None:
        return None
    time.sleep(seconds)
    b = busy_and_own()
    assert b is not None
    return max((b[0] - a[0]) - (b[1] - a[1]), 0.0) / (seconds * max(usable_cores(), 1))


def wait_idle(max_s: float, share: float = 0.1, quiet_for_s: float = 6.0) -> bool:
    """Wait (up to ``max_s``) until other processes have used at most ``share`` of the cores for
    ``quiet_for_s`` seconds in a row. True when that happened."""
    deadline = time.monotonic() + max_s
    calm = 0.0
    while time.monotonic() < deadline:
        others = others_share(2.0)
        if others is None:
            return True
        calm = calm + 2.0 if others <= share else 0.0
        if calm >= quiet_for_s:
            return True
    return False


def quiet_step(cal: Calibration, found: Findings, name: str, fn: Callable[[], Any]) -> Any:
    """Run a timing step while the machine is otherwise idle, as far as that can be had.

    During each try this measures the CPU time the rest of the machine used (busy time from /proc/stat less this
    process's own). A try during which others used more than :data:`DISTURBED_SHARE` of the cores is repeated
    (``cal.quiet_tries`` in all) after waiting for an idle spell (:func:`wait_idle`, up to ``cal.quiet_wait_s``;
    the first try does not wait: on a quiet machine a step costs its own time only, where waiting for a quiet
    spell first cost every step at least 6 s), and the least disturbed result is kept; the disturbance is recorded
    in ``found.raw["disturbance"]``.
    """
    best: tuple[float, Any] | None = None
    cores = max(usable_cores(), 1)
    tries = max(cal.quiet_tries, 1)
    for attempt in range(tries):
        if attempt:
            wait_idle(0.0 if cal.quick else cal.quiet_wait_s)
        a, t0 = busy_and_own(), time.perf_counter()
        result = fn()
        b, wall = busy_and_own(), time.perf_counter() - t0
        others = 0.0 if a is None or b is None else max((b[0] - a[0]) - (b[1] - a[1]), 0.0) / (wall * cores)
        if best is None or others < best[0]:
            best = (others, result)
        if others <= DISTURBED_SHARE:
            break
        again = "measuring it again" if attempt + 1 < tries else "keeping it (no tries left)"
        cal.log(f"    other processes used {others:.0%} of the cores during {name}: {again}")
    assert best is not None
    found.raw.setdefault("disturbance", {})[name] = round(best[0], 3)
    if best[0] > DISTURBED_SHARE:
        found.notes.append(f"{name}: measured while other processes used {best[0]:.0%} of the cores")
    return best[1]


def module_command(module: str, *args: str) -> list[str]:
    """The command line that runs ``python -m sarlab.real.calibration.<module> ARGS`` with this interpreter."""
    return [sys.executable, "-m", f"{__package__}.{module}", *args]


def module_env(**extra: str) -> dict[str, str]:
    """This process's environment with the repository root first on ``PYTHONPATH`` (and ``extra`` set), so
    that a subprocess imports the same ``sarlab`` from pytest, notebooks and scripts."""
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return dict(os.environ, PYTHONPATH=path, **extra)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for a gloo rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def jsonable(obj: Any) -> Any:
    """``obj`` with numpy scalars turned into Python numbers and tuples into lists (for the profile JSON)."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    return obj
