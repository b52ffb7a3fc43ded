"""Uneven progress of time-shared workers (sarlab.simulator.system.spread): draws, processor-shared finishing times and
the fit by hand, the executors booking it, and a real progressbench run."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import simpy
from backends_common import require_ccl

from sarlab.real.calibration.progressbench import measure, summarize
from sarlab.simulator.hardware.profile import icelake_hdr200
from sarlab.simulator.system.clock import Worker, WorkerClocks
from sarlab.simulator.system.epoch import simulate_epoch
from sarlab.simulator.system.jitter import _GOLDEN, _RANK, _mix
from sarlab.simulator.system.memory import MemoryTracker
from sarlab.simulator.system.runspec import RunSpec
from sarlab.simulator.system.spread import (
    _SALT,
    F_MIN,
    barrier_loss,
    fit_sigma,
    shared_finish,
    sigma_for,
    spread_factors,
)
from sarlab.simulator.workload.model import ModelSpec
from sarlab.simulator.workload.workload import estimate_partition


def _documented_factor(sigma: float, seed: int, rank: int, k: int) -> float:
    """The module docstring's formula written out for one draw (Box-Muller of two salted hash uniforms)."""
    u = []
    for stream in (0, 1):
        key = (seed + 1) * int(_GOLDEN) + (rank + 1) * int(_RANK) + 2 * k + stream
        key = (key % 2**64) ^ int(_SALT)
        bits = int(_mix(np.array([key], dtype=np.uint64))[0]) >> 11
        u.append((bits + 0.5) * 2.0**-53)
    z = math.sqrt(-2.0 * math.log(u[0])) * math.cos(2.0 * math.pi * u[1])
    return max(F_MIN, 1.0 + sigma * z)


def test_factors_follow_the_documented_draw():
    ranks, counts = np.array([0, 1, 5, 3]), np.array([0, 7, 2, 100])
    got = spread_factors(0.3, 11, ranks, counts)
    want = [_documented_factor(0.3, 11, int(r), int(k)) for r, k in zip(ranks, counts)]
    assert got == pytest.approx(want, rel=1e-12)
    assert np.array_equal(spread_factors(0.0, 11, ranks, counts), np.ones(4))
    many = spread_factors(0.1, 0, np.zeros(40000, dtype=int), np.arange(40000))
    assert abs(many.mean() - 1.0) < 0.003 and abs(many.std() - 0.1) < 0.003  # 40k normal draws: ~5 sigma bounds
    assert spread_factors(5.0, 0, np.zeros(1000, dtype=int), np.arange(1000)).min() == F_MIN


def test_processor_shared_finishing_times_by_hand():
    # one slot, works 1 and 2: both at 1/2 until t = 2 (first done), then the second's last 1 alone: t = 3
    assert shared_finish([[2.0, 1.0]], 1)[0] == pytest.approx([2.0, 3.0])
    # two slots, works 1, 2, 3: three at 2/3 until the first is done at 1.5; two at full speed until 2.5; 3.5
    assert shared_finish([[3.0, 1.0, 2.0]], 2)[0] == pytest.approx([1.5, 2.5, 3.5])
    # as many slots as jobs: each finishes at its own work
    assert shared_finish([[0.5, 0.9]], 2)[0] == pytest.approx([0.5, 0.9])


def test_barrier_loss_and_its_inverse():
    assert barrier_loss(0.0, 4, 2) == pytest.approx(1.0)
    # jobs on their own cores: the loss is 1 + sigma E[max of P normals] (P = 2: 1/sqrt(pi)), up to sampling
    assert barrier_loss(0.05, 2, 2) == pytest.approx(1.0 + 0.05 / math.sqrt(math.pi), abs=0.004)
    for P, slots, sigma in ((2, 2, 0.08), (4, 2, 0.3), (8, 2, 0.17)):
        assert fit_sigma(barrier_loss(sigma, P, slots), P, slots) == pytest.approx(sigma, abs=1e-4)
    # on shared slots a finished job's share goes to the others: the loss is below the own-core value
    assert barrier_loss(0.3, 4, 2) < barrier_loss(0.3, 4, 4)
    assert fit_sigma(1.0, 4, 2) == 0.0 and fit_sigma(1.2, 1, 2) == 0.0


def test_sigma_for_interpolates_between_measured_counts():
    table = {2: 0.1, 4: 0.3, 8: 0.2}
    assert sigma_for(table, 1) == 0.0 and sigma_for({}, 8) == 0.0
    assert sigma_for(table, 2) == 0.1 and sigma_for(table, 3) == pytest.approx(0.2)
    assert sigma_for(table, 6) == pytest.approx(0.25) and sigma_for(table, 16) == 0.2


def test_clock_books_each_segment_times_its_factor():
    """Without shared cores: 1 s of compute, an exchange call, 2 s: compute = f(r, 0) + 2 f(r, 1) by hand."""
    env = simpy.Environment()
    clocks = WorkerClocks(env, None, 3, None, 3, False, {}, 0.0, 0.0, seed=4, spread=0.2)
    for rank in range(3):
        w = Worker(rank, MemoryTracker())
        list(clocks.compute(w, 1.0, ("a",)))
        clocks.jitter(w)
        clocks.tick(w, 2.0, ("b",))
        want = _documented_factor(0.2, 4, rank, 0) + 2.0 * _documented_factor(0.2, 4, rank, 1)
        assert w.compute_s == pytest.approx(want, rel=1e-12) and w.clock == pytest.approx(want, rel=1e-12)


def test_both_executors_book_the_same_spread():
    """12 workers on one host without shared cores, a spread for 12: the event and lockstep executors agree,
    the spread moves every rank's compute and adds waiting to the epoch."""
    st = estimate_partition(30000, 1_200_000, 12, 32, 8, edge_cut=0.3, law="metis")
    spec = ModelSpec("gcn", layers=2, hidden=32)
    prof = replace(icelake_hdr200(), progress_spread={2: 0.05, 12: 0.2})
    even = replace(prof, progress_spread={})
    for mode in ("sar", "oneshot"):
        run = dict(mode=mode, workers_per_host=0, shared_cores=False)
        a = simulate_epoch(st, spec, RunSpec(executor="events", **run), prof)
        b = simulate_epoch(st, spec, RunSpec(executor="lockstep", **run), prof)
        c = simulate_epoch(st, spec, RunSpec(executor="lockstep", **run), even)
        for field in ("epoch_time_s", "compute_s", "comm_wait_s"):
            assert getattr(b, field) == pytest.approx(getattr(a, field), rel=1e-9, abs=1e-12), (mode, field)
        assert not np.allclose(a.compute_s, c.compute_s)
        assert a.epoch_time_s.max() > c.epoch_time_s.max()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", ["gloo", "ccl"])
def test_progressbench_measures_a_spread(backend):
    """Two real ranks, small shards, joined over each backend (ccl: skipped where oneCCL is not installed): per rank
    one time per round, and a summary consistent with them."""
    if backend == "ccl":
        require_ccl()  # build once here, not in both ranks at once
    times = measure(2, calls=1, rounds=4, rows=2000, degree=8, width=32, backend=backend)
    assert len(times) == 2 and all(len(t) == 4 and min(t) > 0 for t in times)
    row = summarize(times)
    rounds = list(zip(*times))
    assert row["loss"] == pytest.approx(sum(max(r) for r in rounds) / sum(sum(r) / 2 for r in rounds))
    assert row["sigma"] >= 0 and row["round_s"] > 0
