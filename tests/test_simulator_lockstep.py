"""The lockstep executor (all workers as arrays) against the per-worker event executor, and its speed."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pytest

from sarlab.simulator.hardware.profile import icelake_hdr200
from sarlab.simulator.system.epoch import simulate_epoch
from sarlab.simulator.system.runspec import RunSpec
from sarlab.simulator.workload.model import ModelSpec, parse_model
from sarlab.simulator.workload.workload import GRAPH_PRESETS, estimate_partition


@pytest.mark.parametrize("model", ["gcn", "sage-max", "sage-pool", "gat", "gat-fused"])
def test_lockstep_equals_the_event_executor(model):
    """Every mode and prefetch depth, on a partition with unequal parts and pairs (the METIS law at 12 parts,
    drawn) over a slow link with message costs and jitter: the same epoch, compute, wait, bytes and peak."""
    spec = parse_model(model, ModelSpec(layers=2, hidden=32, heads=2))
    st = estimate_partition(30000, 1_200_000, 12, 32, 8, edge_cut=0.3, law="metis")
    prof = icelake_hdr200().with_link_bandwidth(0.01)
    assert prof.round_jitter_s > 0 and prof.p2p_op_s > 0
    for mode in ("sar", "sa", "oneshot"):
        for prefetch in (0, 1, 2):
            a = simulate_epoch(st, spec, RunSpec(mode=mode, prefetch=prefetch, executor="events"), prof)
            b = simulate_epoch(st, spec, RunSpec(mode=mode, prefetch=prefetch, executor="lockstep"), prof)
            for field in ("epoch_time_s", "compute_s", "comm_wait_s", "bytes_sent", "bytes_recv",
                          "peak_above_baseline_bytes", "end_bytes"):  # fmt: skip
                assert getattr(b, field) == pytest.approx(getattr(a, field), rel=1e-9, abs=1e-12), (mode, field)
            assert a.messages == b.messages


def test_executor_choice():
    """auto: lockstep without shared cores and with one worker per NIC; the events executor for shared cores,
    traces and the simpy network; asking for lockstep where it does not apply is an error."""
    st = estimate_partition(4000, 40000, 4, 16, 4, edge_cut=0.3)
    spec = ModelSpec("gcn", layers=2, hidden=16)
    prof = icelake_hdr200()
    fast = simulate_epoch(st, spec, RunSpec(), prof)
    traced = simulate_epoch(st, spec, RunSpec(trace=True), prof)
    assert not fast.intervals and traced.intervals and traced.transfers
    assert fast.epoch_time_s == pytest.approx(traced.epoch_time_s, rel=1e-9)
    with pytest.raises(ValueError, match="lockstep"):
        simulate_epoch(st, spec, RunSpec(executor="lockstep", workers_per_host=2, workers_per_nic=2), prof)


def test_1024_workers_three_layers_in_seconds():
    """Scale: 1,024 workers, 3 layers (6.3M messages) complete with finite times; every pair of the drawn
    partition carries a message each way per layer. The CPU time is printed, not asserted (a loaded machine
    must not fail the suite): about 1.6 s on the 2-core VM, see results/cluster_claims/simulator_claims.md."""
    spec = ModelSpec("gcn", layers=3, hidden=256)
    for workers in (128, 1024):
        st = GRAPH_PRESETS["ogbn-products"].estimate(workers, edge_cut=0.1)
        t0 = time.process_time()
        res = simulate_epoch(st, spec, RunSpec(mode="sar"), icelake_hdr200())
        cpu = time.process_time() - t0
        print(f"\n{workers} workers x 3 layers: {res.messages:,} messages in {cpu:.2f} s CPU")
        assert res.messages == 2 * workers * (workers - 1) * 3
        assert np.isfinite(res.epoch_time_s).all()


def test_jitter_costs_a_ring_round_more_than_its_mean():
    """A worker's round waits for its two partners' posts as well as its own, so a mean jitter ``mu`` costs a
    round more than ``mu`` (the later of a few draws), but not the maximum over all N workers (a ring couples a
    worker to its round's partners only, not to a barrier): about 1.5 mu per round at 4 and at 64 workers."""
    spec = ModelSpec("gcn", layers=2, hidden=64)
    base = replace(icelake_hdr200(), round_jitter_s=0.0)
    cost = {}
    for n in (4, 64):
        st = estimate_partition(n * 20000, n * 400000, n, 32, 8, edge_cut=0.2)
        t0 = simulate_epoch(st, spec, RunSpec(), base).epoch_time_s.max()
        t1 = simulate_epoch(st, spec, RunSpec(), replace(base, round_jitter_s=1e-4)).epoch_time_s.max()
        cost[n] = (t1 - t0) / (2 * 2 * (n - 1))  # per round (2 layers x fetch + return)
    for n in (4, 64):
        assert 1.0e-4 < cost[n] < 3.0e-4, cost
