"""The calibration's call timer: how many runs it times, under its time budget and without one. No test reads a
timing: each counts the calls, with a budget that every run exceeds (0 s) or none can (10^9 s)."""

from __future__ import annotations

import torch

from sarlab.real.calibration import harness


def _counter():
    calls = []

    def fn() -> None:
        calls.append(1)

    return fn, calls


def test_calls_stop_at_the_fewest_runs_once_the_budget_is_spent():
    fn, calls = _counter()
    harness.time_call(fn, 5, budget_s=0.0)
    assert len(calls) == 1 + harness.LEAST_RUNS  # the warm-up, then the fewest timed runs


def test_every_run_is_timed_while_the_budget_lasts():
    fn, calls = _counter()
    harness.time_call(fn, 5, budget_s=1e9)
    assert len(calls) == 1 + 5
    fn, calls = _counter()
    harness.time_call(fn, 5, warmup=2, wall=True, budget_s=1e9)
    assert len(calls) == 2 + 5


def test_a_call_asking_fewer_runs_than_the_fewest_gets_them_all():
    fn, calls = _counter()
    harness.time_call(fn, 2, budget_s=0.0)
    assert len(calls) == 1 + 2


def test_the_module_budget_is_the_default(monkeypatch):
    monkeypatch.setattr(harness, "REPEAT_BUDGET_S", 0.0)
    fn, calls = _counter()
    threads = torch.get_num_threads()
    try:
        harness.set_threads(1)
        harness.time_call(fn, 5)
    finally:
        torch.set_num_threads(threads)
    assert len(calls) == 1 + harness.LEAST_RUNS
