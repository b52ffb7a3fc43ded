"""How long a calibration should take, and what a busy machine does to that.

Expected seconds per step on a quiet machine (``sarlab calibrate`` logs them with each step's progress line), from
the structure of each step (thread counts, window lengths, groups launched) and per-unit costs measured on the 2-core
EPYC VM; and, on a machine whose load average says other processes use the cores, an early warning with the load
and how long the retries of disturbed steps (:func:`sarlab.real.calibration.harness.quiet_step`) may take.
"""

from __future__ import annotations

import os

from sarlab.real.calibration.harness import others_share
from sarlab.real.calibration.hostbench import colocation_threads, share_seconds
from sarlab.real.calibration.opbench import speedup_rounds, thread_counts
from sarlab.simulator.calibration.calibration import Calibration

#: seconds of the steps whose length does not depend on the cores (quick, full), on a quiet 2-core EPYC VM. Every
#: process these steps start but the first-use probe's parent is forked from the zygote (``zygote``: its one
#: import of the engine), so the steps cost their own work: ``memory`` the allocator and, in a full calibration, the
#: first-use probe (one fresh interpreter under rss whose 6 forks measure the families, ~8 s on one core or two,
#: results/host_model/budget/first_use_fork; then the live one forked);
#: ``network`` netbench, commbench (quick: 2 and 3 ranks once; full: 2, 4 and 8 ranks, one round of 14 repeats) and
#: progressbench (``C``, ``2C`` and ``4C`` ranks over the same rank-rounds, so each count's length grows with its
#: rounds' ``P / C`` share of the cores: about the same for each), whose ranks import nothing the zygote has not
#: (3-4 and 20-25 s measured on 2026-11-28, against 14 and 33 s when each imported the simulator, results/host_model/
#: budget/cuts2); ``engine`` one pass of single-worker epochs
#: (quick: 6 tiny runs; full: 2 rss runs at 24,000 nodes, 6 live GCN and SAGE runs up to 70,000 and 2 GAT runs:
#: 46 s measured on 2026-11-28, 56-63 s with the sizes before, results/host_model/families and budget/trims)
FIXED_S = {"zygote": (4.0, 4.0), "memory": (0.5, 9.0), "network": (4.0, 21.0), "engine": (7.0, 46.0)}
#: one op family's shapes on one thread (quick, full), and one thread count of its slowest shape per round (none
#: on one core): the op families took 46 s on one core and 75 s on both in sitting s5 of results/host_model/families
#: (timed runs stopping after 0.6 s, ``harness.REPEAT_BUDGET_S``); the GAT autograd form takes the most (~12 s of
#: the one-thread part, ~11 s of the thread speed-ups on two cores)
OP_BASE_S, OP_PER_COUNT_S = (0.3, 6.6), (0.05, 0.7)
#: a load average above this share of the cores means other processes compete for them
BUSY_SHARE = 0.5
#: seconds over which a calibration samples the share of the cores other processes use when it starts
NOW_SAMPLE_S = 1.0
#: op families and the other timed steps (memory, network, engine, one share group per thread count)
OP_FAMILIES = 7
#: how much more than ``expected x load / cores`` a busy machine took: ``--quick`` ran 10.5 min pinned to one core
#: at a load of 23.6 (estimate 14 min) and 16.7 min on both cores at 21.3 (estimate 6.4 min) on the 2-core EPYC VM
#: (issue 39): the steps that start interpreters (message costs, progress spread, engine epochs) slow down most
BUSY_FACTOR = 3.0


def _pick(cal: Calibration, pair: tuple[float, float]) -> float:
    return pair[0] if cal.quick else pair[1]


def op_seconds(cal: Calibration, cores: int) -> float:
    """Expected seconds of one op family: its shapes on one thread, then the timed thread counts (one thread and each
    of :func:`~sarlab.real.calibration.opbench.thread_counts`) of each of its
    :func:`~sarlab.real.calibration.opbench.speedup_rounds` (none on one core)."""
    counts = len(thread_counts(cores)) if cores > 1 else 0
    return _pick(cal, OP_BASE_S) + speedup_rounds(cal, cores) * counts * _pick(cal, OP_PER_COUNT_S)


def step_seconds(cal: Calibration, step: str, cores: int = 2) -> float:
    """Expected seconds of ``step``: ``zygote``, ``memory``, ``network``, ``engine`` or ``share`` (every
    co-location group)."""
    if step == "share":
        return 0.0 if cal.quick or cores <= 1 else len(colocation_threads(cores)) * share_seconds(cal)
    seconds = _pick(cal, FIXED_S[step])
    if step == "network" and not cal.network or step == "engine" and not cal.engine:
        return 0.0
    if step == "zygote" and not (cal.network or cal.engine or (not cal.quick and cores > 1)):
        return 0.0
    return seconds


def expected_seconds(cal: Calibration, cores: int) -> float:
    """Expected seconds of the whole calibration on a quiet machine of ``cores`` cores."""
    return (OP_FAMILIES * op_seconds(cal, cores)
            + sum(step_seconds(cal, s, cores) for s in ("zygote", "memory", "network", "engine", "share")))


def busy_warning(cal: Calibration, cores: int, load: float | None = None, now: float | None = None) -> list[str]:
    """Lines for the log at the start of a calibration: its expected length, and, where the 1-minute load average
    (``os.getloadavg``, or ``load``) exceeds :data:`BUSY_SHARE` of the cores, that the machine is busy, with the
    load and the longest the retries and waits for a quiet spell may take.

    The load average trails by a minute: right after a job ends it still reads high. So before warning, the share of
    the cores other processes use now is sampled over :data:`NOW_SAMPLE_S` (``now``:
    :func:`sarlab.real.calibration.harness.others_share`; sampled when neither ``load`` nor ``now`` is given); at or
    below :data:`BUSY_SHARE` the log says the load has just ended instead of warning."""
    expected = expected_seconds(cal, cores)
    lines = [f"[calibrate] {'quick' if cal.quick else 'full'} calibration on {cores} core(s): expected "
             f"~{expected / 60:.1f} min on a quiet machine"]
    sample = load is None and now is None
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:
            return lines
    if load <= BUSY_SHARE * cores:
        return lines
    if sample:
        now = others_share(NOW_SAMPLE_S)
    if now is not None and now <= BUSY_SHARE:
        lines.append(f"[calibrate] load average {load:.1f} on {cores} core(s), but other processes use {now:.0%} "
                     "of them now: a job that has just ended (the load average trails by a minute)")
        return lines
    steps = OP_FAMILIES + 4
    tries = max(cal.quiet_tries, 1)
    waits = 0.0 if cal.quick else steps * (tries - 1) * cal.quiet_wait_s  # a retry waits for a quiet spell first
    likely = tries * expected * max(1.0, load / cores)
    worst = BUSY_FACTOR * likely + waits
    lines.append(
        f"[calibrate] BUSY MACHINE: load average {load:.1f} on {cores} core(s)"
        + (f", other processes using {now:.0%} of them now" if now is not None else "")
        + ": other processes compete for the "
        f"cores, so timings are slower and noisier. Each disturbed step is measured up to {tries} time(s)"
        + (f", each retry after waiting up to {cal.quiet_wait_s:.0f} s for a quiet spell" if waits else "")
        + f": this may take ~{likely / 60:.0f} to ~{worst / 60:.0f} min instead of ~{expected / 60:.1f}, and the "
        "profile may be "
        "flagged implausible. Calibrate on a quiet machine (or pinned, idle cores) for numbers to rely on.")
    return lines
