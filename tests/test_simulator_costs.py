"""Costs that grow with N, by hand-computed timelines on tiny cases: the software cost of posting and waiting for
messages, the per-round jitter, a ring round that ends with its slowest pair, and the measured-cost fit.
Expected values are derived by hand here; both executors (events, lockstep) must give them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from test_simulator_fixtures import INF, hand_profile, run1, two_parts

from sarlab.simulator.calibration.fitting import fit_message_costs
from sarlab.simulator.hardware.profile import Profile
from sarlab.simulator.network.collectives import allreduce_seconds
from sarlab.simulator.system.jitter import jitter_delays
from sarlab.simulator.workload.model import ModelSpec
from sarlab.simulator.workload.workload import PartitionStats

EXECUTORS = ["events", "lockstep"]
GCN1 = ModelSpec("gcn", layers=1, hidden=4, batchnorm=False, dropout=0.0)


def _message(nbytes: float, prof: Profile) -> float:
    link = prof.intra_host
    return link.gap_s + nbytes / link.bandwidth_Bps + link.latency_s


def _tail(ready: list[float], params: int, prof: Profile, workers: int = 2) -> float:
    """The gradient all-reduce (float32 parameters) and the 8-byte loss all-reduce after the last rank."""
    link = prof.intra_host
    return max(ready) + allreduce_seconds(link, params * 4, workers) + allreduce_seconds(link, 8, workers)


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("mode", ["sar", "oneshot"])
def test_message_software_costs_by_hand(mode, executor):
    """An exchange call costs c + o per op it posts (a ring round: isend + irecv; oneshot with one peer: the
    same two), paid before its messages leave; its waits cost w per op, paid after they arrive. GCN, 1 layer,
    2 workers (the timeline of test_hand_timeline_gcn with those terms)."""
    c, o, w = 3e-4, 1e-4, 5e-5
    prof = replace(hand_profile(latency=1e-3), p2p_call_s=c, p2p_op_s=o, p2p_wait_s=w)
    st = two_parts()
    n, E, H, F, C = [100, 60], [[300, 50], [40, 200]], [[0, 20], [30, 0]], 8, 4
    gemm = [2 * n[p] * F * C / 1e9 for p in (0, 1)]
    spmm = [[E[p][q] * C / 1e6 for q in (0, 1)] for p in (0, 1)]
    deliver = max(_message(H[0][1] * C * 4, prof), _message(H[1][0] * C * 4, prof))
    call = c + 2 * o  # one exchange call with its two ops
    if mode == "oneshot":
        fwd_end = [max(gemm) + call + deliver + 2 * w + spmm[p][0] + spmm[p][1] for p in (0, 1)]
        grad_post = [fwd_end[p] + 2 * (spmm[p][0] + spmm[p][1]) for p in (0, 1)]
        ready = [max(grad_post) + call + deliver + 2 * w] * 2
    else:  # the fetch overlaps the local shard; the remote gradient is sent before the local one is computed
        fwd_end = [max(max(gemm) + call + deliver, gemm[p] + call + spmm[p][p]) + 2 * w + spmm[p][1 - p]
                   for p in (0, 1)]  # fmt: skip
        grad_post = [fwd_end[p] + 2 * spmm[p][1 - p] for p in (0, 1)]
        grads_in = max(grad_post) + call + deliver
        ready = [max(grads_in, grad_post[p] + call + 2 * spmm[p][p]) + 2 * w for p in (0, 1)]
    end = _tail([ready[p] + gemm[p] for p in (0, 1)], F * C + C, prof)
    res = run1(st, GCN1, mode, prof, executor=executor)
    assert res.epoch_time_s == pytest.approx([end, end], rel=1e-12)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_round_jitter_delays_each_exchange_call_by_its_draw(executor):
    """Each exchange call waits its own exponential draw before it posts (booked as compute): sar with one
    layer on 2 workers makes two calls per worker (the fetch, the gradient return), so its compute grows by
    the draws k = 0, 1 of its rank, and the draws repeat for a seed."""
    mu = 2e-4
    st, prof = two_parts(), hand_profile()
    base = run1(st, GCN1, "sar", prof, executor=executor)
    res = run1(st, GCN1, "sar", replace(prof, round_jitter_s=mu), executor=executor)
    draws = [sum(float(jitter_delays(mu, 0, p, k)) for k in (0, 1)) for p in (0, 1)]
    assert res.compute_s - base.compute_s == pytest.approx(draws, rel=1e-9)
    assert res.epoch_time_s.max() > base.epoch_time_s.max()
    again = run1(st, GCN1, "sar", replace(prof, round_jitter_s=mu), executor=executor)
    assert again.epoch_time_s == pytest.approx(res.epoch_time_s, rel=0)
    other = run1(st, GCN1, "sar", replace(prof, round_jitter_s=mu), executor=executor, seed=1)
    assert not np.allclose(other.compute_s, res.compute_s)


def test_jitter_draws_are_exponential():
    """The counter-based draws have the exponential's mean and median (fixed seed: deterministic)."""
    d = jitter_delays(3.0, 7, np.zeros(100_000, dtype=np.int64), np.arange(100_000))
    assert d.mean() == pytest.approx(3.0, rel=0.02)
    assert np.median(d) == pytest.approx(3.0 * np.log(2.0), rel=0.02)
    assert float(jitter_delays(3.0, 7, np.array(0), np.array(5))) == pytest.approx(d[5], rel=0)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_ring_round_ends_with_its_slowest_pair(executor):
    """3 workers, compute free, only round 1 carries rows: 0 -> 1 (20 rows), 1 -> 2 (30), 2 -> 0 (10). A worker's
    round ends when both its pairs (its send, its receive) have arrived, so workers 1 and 2 wait for the 30-row
    message; the gradient returns go out at those times (each pair starts when both ends have posted), and the
    epoch ends with the slowest: 30 + 30 rows later."""
    st = PartitionStats(graph="ring", num_nodes=300, num_edges=360, feature_dim=4, num_classes=2, train_nodes=0,
                        nodes_per_part=np.array([100, 100, 100]),
                        edges_per_shard=np.array([[100, 0, 10], [20, 100, 0], [0, 30, 100]]),
                        halo_rows=np.array([[0, 0, 10], [20, 0, 0], [0, 30, 0]]))  # fmt: skip
    prof = hand_profile(latency=1e-3, bandwidth=1e5, gap=0.0)
    prof = replace(prof, ops={k: replace(v, rate=INF) for k, v in prof.ops.items()})
    x = 2 * 4 / 1e5  # one row of 2 classes, float32, at 1e5 B/s
    L = 1e-3
    fwd = [max(20 * x, 10 * x) + L, max(30 * x, 20 * x) + L, max(10 * x, 30 * x) + L]  # [20, 30, 30] rows
    # returns: p -> p-1 with the rows p received from p-1, posted when both ends' forward ended
    d02 = max(fwd[0], fwd[2]) + 10 * x + L
    d10 = max(fwd[1], fwd[0]) + 20 * x + L
    d21 = max(fwd[2], fwd[1]) + 30 * x + L
    ready = [max(d02, d10), max(d10, d21), max(d21, d02)]
    assert max(ready) == pytest.approx(60 * x + 2 * L)
    end = _tail(ready, 4 * 2 + 2, prof, workers=3)
    for prefetch in (0, 1):
        res = run1(st, GCN1, "sar", prof, executor=executor, prefetch=prefetch)
        assert res.epoch_time_s == pytest.approx([end] * 3, rel=1e-12)
        assert res.comm_wait_s == pytest.approx([end] * 3, rel=1e-12)  # nothing but waiting


@pytest.mark.parametrize("executor", EXECUTORS)
def test_oneshot_all_to_all_takes_one_message_per_round_at_each_receiver(executor):
    """4 workers, compute free, every pair 5 rows: each worker's 3 sends leave back to back and every receiver
    takes one message per round (a permutation per round), so the halo exchange ends 3 occupancies and one
    latency after the posts, with the exchange call's ops (c + 6 o) before and its waits (6 w) after."""
    c, o, w = 1e-4, 2e-5, 1e-5
    halo = np.full((4, 4), 5) - 5 * np.eye(4, dtype=np.int64)
    st = PartitionStats(graph="a2a", num_nodes=40, num_edges=100, feature_dim=4, num_classes=2, train_nodes=0,
                        nodes_per_part=np.full(4, 10), edges_per_shard=halo + 10 * np.eye(4, dtype=np.int64),
                        halo_rows=halo)  # fmt: skip
    prof = replace(hand_profile(latency=1e-3, bandwidth=1e5, gap=1e-4), p2p_call_s=c, p2p_op_s=o, p2p_wait_s=w)
    prof = replace(prof, ops={k: replace(v, rate=INF) for k, v in prof.ops.items()})
    occ = 1e-4 + 5 * 2 * 4 / 1e5
    phase = c + 6 * o + 3 * occ + 1e-3 + 6 * w  # forward halo, then the same for the gradients
    end = _tail([2 * phase] * 4, 4 * 2 + 2, prof, workers=4)
    res = run1(st, GCN1, "oneshot", prof, executor=executor)
    assert res.epoch_time_s == pytest.approx([end] * 4, rel=1e-12)


def test_fit_message_costs_by_hand():
    """post(k) = c + o k and wait(k) = w k fitted exactly from noiseless commbench-like medians; the incast
    ratio is T_k / (k T_1)."""
    c, o, w, b = 30e-6, 15e-6, 4e-6, 10e-6

    def medians(k: int) -> dict:
        return {"post_s": c + o * k, "wait_s": w * k, "cpu_s": c + o * k + w * k + b * k, "wall_s": 1.0, "ops": k}

    runs = [{"world": world, "sizes": [256], "incast_wall_s": {"1": 1e-3, "2": 1.5e-3},
             "medians": {"ring:256": medians(2), "alltoall:256": medians(2 * world - 2)}}
            for world in (2, 4, 8)]  # fmt: skip
    fit = fit_message_costs(runs)
    assert fit["p2p_call_s"] == pytest.approx(c, rel=1e-6)
    assert fit["p2p_op_s"] == pytest.approx(o, rel=1e-6)
    assert fit["p2p_wait_s"] == pytest.approx(w, rel=1e-6)
    assert fit["p2p_msg_cpu_s"] == pytest.approx(b, rel=1e-6)
    assert fit["incast_ratio_2"] == pytest.approx(0.75)
