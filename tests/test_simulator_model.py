"""Tests of the SimPy epoch model: units, hand-computed timelines, the network and memory models,
monotonicity, the paper's qualitative results and speed. Expected values are derived by hand in the tests."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import simpy
from test_simulator_fixtures import INF, hand_profile, run1, two_parts, write_manifest

from sarlab.nn import gat
from sarlab.simulator.calibration.fitting import fit_cache
from sarlab.simulator.hardware.profile import Link, OpCost, Profile, icelake_hdr200, load_profile, save_profile
from sarlab.simulator.network.collectives import allreduce_seconds
from sarlab.simulator.network.network import SharedCores
from sarlab.simulator.system.costs import CostModel
from sarlab.simulator.system.epoch import predicted_peak, simulate_epoch
from sarlab.simulator.system.pricing import EpochPricing
from sarlab.simulator.system.runspec import RunSpec, resolve_placement
from sarlab.simulator.workload.layer_memory import layer_memory, shard_bwd_transient_bytes, shard_transient_bytes
from sarlab.simulator.workload.layers import activation_bytes, layer_plans
from sarlab.simulator.workload.model import ModelSpec, parse_model
from sarlab.simulator.workload.ops import UNFUSED_CHUNK_EDGES, Op
from sarlab.simulator.workload.workload import (
    GRAPH_PRESETS,
    PartitionStats,
    estimate_partition,
    expected_distinct_sources,
    load_manifest,
)


def test_cost_model_units():
    cost = OpCost(rate=2e9, overhead_s=1e-5, bwd_ratio=3.0, parallel_eff=0.5, row_rate=1e8)
    prof = replace(hand_profile(), ops={**hand_profile().ops, "gemm": cost})
    one = CostModel(prof, threads=1)
    # 2e9 FLOP at 2e9 FLOP/s = 1 s, plus 2 calls of 10 us, plus 1e7 row units at 1e8/s
    assert one.op_seconds(Op("gemm", 2e9, calls=2, rows=1e7)) == pytest.approx(1.0 + 2e-5 + 0.1)
    assert one.op_seconds(Op("gemm", 2e9, backward=True)) == pytest.approx(3.0 * (1.0 + 1e-5))
    # 5 threads at efficiency 0.5: speed-up 1 + 4 * 0.5 = 3 on the rate terms, not on the overhead
    assert CostModel(prof, threads=5).op_seconds(Op("gemm", 6e9)) == pytest.approx(1.0 + 1e-5)
    assert CostModel(prof, threads=1, dtype="float64").op_seconds(Op("gemm", 2e9)) == pytest.approx(2 * (1 + 1e-5))
    link = Link(latency_s=3e-6, bandwidth_Bps=1e9, gap_s=2e-6)
    assert link.time(1e6) == pytest.approx(5e-6 + 1e-3)
    assert link.occupancy(1e6) == pytest.approx(2e-6 + 1e-3)
    # 4 workers: ring = 6 alpha + 1.5 b/B, doubling = 2 (alpha + b/B)
    assert allreduce_seconds(link, 1e6, 4) == pytest.approx(min(6 * 5e-6 + 1.5e-3, 2 * (5e-6 + 1e-3)))
    assert allreduce_seconds(link, 8, 4) == pytest.approx(2 * (5e-6 + 8e-9))
    assert allreduce_seconds(link, 1e6, 1) == 0.0


def test_profile_json_round_trip(tmp_path):
    prof = icelake_hdr200()
    path = save_profile(prof, tmp_path / "p.json")
    back = load_profile(path)
    assert back.ops == prof.ops and back.inter_host == prof.inter_host and back.cores_per_host == 72
    assert load_profile("icelake-hdr200").name == "icelake-hdr200"
    with pytest.raises(FileNotFoundError):
        load_profile(tmp_path / "missing.json")


def test_layer_widths_and_params():
    gat = layer_plans(ModelSpec("gat", layers=2, hidden=64, heads=4), feature_dim=10, num_classes=3)
    assert [(p.heads, p.channels, p.out_dim, p.width) for p in gat] == [(4, 16, 64, 68), (1, 3, 3, 4)]
    assert gat[0].params == 10 * 64 + 3 * 64 + 2 * 64  # lin, att_src, att_dst, bias; BatchNorm affine
    sage = layer_plans(ModelSpec("sage", layers=2, hidden=32, aggr="mean"), feature_dim=10, num_classes=3)
    assert not sage[0].records and sage[1].records and sage[0].width == 10 and sage[1].width == 32
    assert sage[0].params == 2 * 10 * 32 + 32 + 2 * 32


def test_manifest_and_estimates(tmp_path):
    stats = two_parts()
    write_manifest(tmp_path / "part", stats)
    back = load_manifest(tmp_path / "part")
    assert back.num_parts == 2 and back.halo_rows.tolist() == [[0, 20], [30, 0]]
    assert back.edge_cut_fraction() == pytest.approx(90 / 590)
    # expected distinct sources: n_q (1 - (1 - c/(n_p n_q))^n_p)
    assert expected_distinct_sources(50, 100, 60) == pytest.approx(60 * (1 - (1 - 50 / 6000) ** 100))
    assert expected_distinct_sources(0, 100, 60) == 0.0
    assert expected_distinct_sources(1e9, 100, 60) == pytest.approx(60.0)
    est = estimate_partition(1000, 20000, 4, 16, 5, edge_cut=0.2)
    assert est.edges_per_shard.sum() == pytest.approx(20000, abs=4)
    assert est.edge_cut_fraction() == pytest.approx(0.2, abs=1e-3)
    c = 0.2 * 20000 / 12  # cut edges per ordered pair
    assert est.halo_rows[0, 1] == round(250 * (1 - (1 - c / 250**2) ** 250))
    prod = GRAPH_PRESETS["ogbn-products"]
    assert (prod.num_nodes, prod.num_edges, prod.feature_dim, prod.num_classes) == (
        2449029,
        123718280,
        100,
        47,
    )
    paper = GRAPH_PRESETS["ogbn-papers100M"]
    assert (paper.num_nodes, paper.num_edges, paper.feature_dim, paper.num_classes) == (
        111059956,
        1615685872,
        128,
        172,
    )


def _message(bytes_: float, prof: Profile) -> float:
    link = prof.intra_host
    return link.gap_s + bytes_ / link.bandwidth_Bps + link.latency_s


def _tail(t_ready: list[float], params: int, prof: Profile) -> float:
    """Gradient all-reduce (params float32) then the 8-byte loss all-reduce, from the last arrival."""
    link = prof.intra_host
    grad = min(
        2 * link.alpha_s + params * 4 / link.bandwidth_Bps,
        1 * (link.alpha_s + params * 4 / link.bandwidth_Bps),
    )
    loss = min(2 * link.alpha_s + 8 / link.bandwidth_Bps, link.alpha_s + 8 / link.bandwidth_Bps)
    return max(t_ready) + grad + loss


def test_linear_aggregation_in_place_by_hand():
    """GCN/SAGE-mean add every shard into one zero-filled state in place: each shard's row work covers only
    the destination rows its edges hit (n (1 - e^{-E/n})), and the state's zero fill (2.3 element-bytes per
    byte, n x w) is paid once per layer, with the local shard (ring modes) or the one shard (oneshot);
    max and GAT shards allocate their own outputs and pay no fill."""
    ops = dict(hand_profile().ops)
    ops["spmm"] = OpCost(rate=1e6, overhead_s=0.0, bwd_ratio=2.0, parallel_eff=1.0, row_rate=1e5)
    ops["elementwise"] = OpCost(rate=1e7, overhead_s=0.0, bwd_ratio=1.0, parallel_eff=1.0)
    prof, st = replace(hand_profile(), ops=ops), two_parts()
    n, E, C = [100, 60], [[300, 50], [40, 200]], 4
    hit = [[n[p] * -math.expm1(-E[p][q] / n[p]) for q in (0, 1)] for p in (0, 1)]
    shard = [[E[p][q] * C / 1e6 + hit[p][q] * C / 1e5 for q in (0, 1)] for p in (0, 1)]
    fill = [2.3 * n[p] * C * 4 / 1e7 for p in (0, 1)]
    model = ModelSpec("gcn", layers=1, hidden=4, batchnorm=False, dropout=0.0)
    for mode in ("sar", "oneshot"):
        res = run1(st, model, mode, prof, trace=True)
        for p in (0, 1):
            agg = [iv for iv in res.intervals[p] if iv.kind == "compute" and iv.what[1:2] == ("agg",)]
            got = sorted(iv.end - iv.start for iv in agg)
            if mode == "sar":  # local shard + fill, then the remote shard
                want = sorted([fill[p] + shard[p][p], shard[p][1 - p]])
            else:  # one call over own + halo rows: E_p0 + E_p1 edges into the n_p rows
                e = E[p][0] + E[p][1]
                want = [fill[p] + e * C / 1e6 + n[p] * -math.expm1(-e / n[p]) * C / 1e5]
            assert got == pytest.approx(want, rel=1e-12), (mode, p)
    plans = {m: layer_plans(ModelSpec(m, layers=1, hidden=4, aggr="max" if m == "sage" else "mean"), 8, 4)[0]
             for m in ("gcn", "sage", "gat")}
    assert [op.work for op in plans["gcn"].agg_init(100.0)] == [pytest.approx(2.3 * 100 * 4 * 4)]
    assert plans["sage"].agg_init(100.0) == [] and plans["gat"].agg_init(100.0) == []


@pytest.mark.parametrize("latency", [1e-3, 1e-5])  # messages slower / faster than the local shard
@pytest.mark.parametrize("mode", ["sar", "sa", "oneshot"])
def test_hand_timeline_gcn(mode, latency):
    """GCN, 1 layer, 2 workers: GEMM, local shard, one exchange, remote shard; backward returns gradients."""
    prof, st = hand_profile(latency=latency), two_parts()
    n, E, H, F, C = [100, 60], [[300, 50], [40, 200]], [[0, 20], [30, 0]], 8, 4
    gemm = [2 * n[p] * F * C / 1e9 for p in (0, 1)]
    spmm = [[E[p][q] * C / 1e6 for q in (0, 1)] for p in (0, 1)]
    fwd_bytes = [[H[p][q] * C * 4 for q in (0, 1)] for p in (0, 1)]  # [p][q]: rows of q that p receives
    deliver = max(_message(fwd_bytes[0][1], prof), _message(fwd_bytes[1][0], prof))
    if mode == "oneshot":
        post = max(gemm)  # the exchange goes out right after the GEMM
        fwd_end = [post + deliver + (spmm[p][0] + spmm[p][1]) for p in (0, 1)]
        grad_post = [fwd_end[p] + 2 * (spmm[p][0] + spmm[p][1]) for p in (0, 1)]
        ready = [max(grad_post) + deliver] * 2
    else:  # sar/sa: the fetch is posted after the GEMM and overlaps the local shard
        post = max(gemm)
        fwd_end = [max(post + deliver, gemm[p] + spmm[p][p]) + spmm[p][1 - p] for p in (0, 1)]
        # case 1 backward: the remote gradient A^T g is computed and sent first, the local shard overlaps it
        grad_post = [fwd_end[p] + 2 * spmm[p][1 - p] for p in (0, 1)]
        grads_in = max(grad_post) + deliver  # the gradient messages have the mirrored sizes
        ready = [max(grads_in, grad_post[p] + 2 * spmm[p][p]) for p in (0, 1)]
    end = _tail([ready[p] + gemm[p] for p in (0, 1)], F * C + C, prof)
    model = ModelSpec("gcn", layers=1, hidden=4, batchnorm=False, dropout=0.0)
    res = run1(st, model, mode, prof)
    assert res.epoch_time_s == pytest.approx([end, end], rel=1e-12)
    compute = [2 * gemm[p] + 3 * (spmm[p][0] + spmm[p][1]) for p in (0, 1)]
    assert res.compute_s == pytest.approx(compute, rel=1e-12)
    assert res.comm_wait_s == pytest.approx([end - c for c in compute], rel=1e-12)
    # bytes: the two exchanges plus the all-reduces (2 (N-1)/N of the buffer each way)
    sent0 = fwd_bytes[1][0] + fwd_bytes[0][1] + (F * C + C) * 4 + 8
    assert res.bytes_sent[0] == pytest.approx(sent0)


@pytest.mark.parametrize("latency", [1e-3, 1e-5])  # messages slower / faster than the local shard
@pytest.mark.parametrize("mode", ["sar", "sa", "oneshot"])
def test_hand_timeline_gat(mode, latency):
    """GAT (case 2), 1 layer, 2 workers: sar re-fetches in backward (its backward kernel recomputes the
    attention, priced by the family's backward ratio); sa/oneshot keep the rows."""
    prof, st = hand_profile(latency=latency), two_parts()
    n, E, H, F, C, rho = [100, 60], [[300, 50], [40, 200]], [[0, 20], [30, 0]], 8, 4, 2.5
    gemm = [2 * n[p] * F * C / 1e9 for p in (0, 1)]
    att = [[E[p][q] * C / 2e5 for q in (0, 1)] for p in (0, 1)]  # one head of C channels
    row_bytes = [[H[p][q] * (C + 1) * 4 for q in (0, 1)] for p in (0, 1)]  # rows [z, s_src]
    deliver = max(_message(row_bytes[0][1], prof), _message(row_bytes[1][0], prof))
    if mode == "oneshot":
        post = max(gemm)
        fwd_end = [post + deliver + att[p][0] + att[p][1] for p in (0, 1)]
        grad_post = [fwd_end[p] + rho * (att[p][0] + att[p][1]) for p in (0, 1)]
    else:  # the fetch is posted after the GEMM and overlaps the local shard
        post = max(gemm)
        fwd_end = [max(post + deliver, gemm[p] + att[p][p]) + att[p][1 - p] for p in (0, 1)]
        if mode == "sa":
            grad_post = [fwd_end[p] + rho * (att[p][p] + att[p][1 - p]) for p in (0, 1)]
        else:  # sar: the re-fetch is posted first and overlaps the local shard's backward (which recomputes)
            refetch = max(fwd_end)
            grad_post = [max(refetch + deliver, fwd_end[p] + rho * att[p][p]) + rho * att[p][1 - p] for p in (0, 1)]
    grads_in = max(grad_post) + deliver
    end = _tail([grads_in + gemm[p] for p in (0, 1)], F * C + 3 * C, prof)
    model = ModelSpec("gat", layers=1, hidden=4, heads=1, batchnorm=False, dropout=0.0)
    res = run1(st, model, mode, prof)
    assert res.epoch_time_s == pytest.approx([end, end], rel=1e-12)


def test_contention_on_shared_receiver():
    """oneshot with 3 workers, only workers 1 and 2 send to worker 0: the second message queues on
    worker 0's receive channel (cut-through: it starts when the first one has fully arrived)."""
    st = PartitionStats(
        graph="star",
        num_nodes=30,
        num_edges=40,
        feature_dim=4,
        num_classes=2,
        train_nodes=0,
        nodes_per_part=np.array([10, 10, 10]),
        edges_per_shard=np.array([[10, 5, 5], [0, 10, 0], [0, 0, 10]]),
        halo_rows=np.array([[0, 5, 5], [0, 0, 0], [0, 0, 0]]),
    )
    prof = hand_profile(latency=1e-3, bandwidth=1e5, gap=0.0)
    # make compute free so every message is posted at t = 0
    prof = replace(prof, ops={k: replace(v, rate=INF) for k, v in prof.ops.items()})
    model = ModelSpec("gcn", layers=1, hidden=4, batchnorm=False, dropout=0.0)
    res = simulate_epoch(st, model, RunSpec(mode="oneshot", threads=1, trace=True), prof)
    fwd = sorted((m.start, m.end) for m in res.transfers if m.dst == 0)  # the forward halo rows
    occupancy = 5 * 2 * 4 / 1e5  # 5 rows of 2 classes, float32
    assert fwd[0] == pytest.approx((0.0, occupancy))
    assert fwd[1][1] == pytest.approx(2 * occupancy)  # queued behind the first on recv[0]
    halo_wait = [iv for iv in res.intervals[0] if iv.what == (0, "halo", 0)]
    assert halo_wait[0].end == pytest.approx(2 * occupancy + 1e-3)  # + latency


@pytest.mark.parametrize("model", ["gcn", "sage-max", "gat"])
def test_reservation_network_matches_simpy_resources(model):
    """The queue network and the literal simpy.Resource network agree exactly for the ring modes; for
    oneshot's all-to-all the queues serve each channel in posting (round) order, which on a balanced
    all-to-all gives every receiver one message per round, while the resources serve messages in the order
    their second end was posted, which can leave a channel idle: never faster than the queues."""
    spec = parse_model(model, ModelSpec(layers=2, hidden=32, heads=2))
    st = estimate_partition(20000, 400000, 8, 32, 8, edge_cut=0.3)
    prof = replace(icelake_hdr200().with_link_bandwidth(0.01), round_jitter_s=0.0)
    for mode in ("sar", "sa", "oneshot"):
        fast = simulate_epoch(st, spec, RunSpec(mode=mode, executor="events"), prof)
        ref = simulate_epoch(st, spec, RunSpec(mode=mode, network="simpy"), prof)
        if mode == "oneshot":
            assert fast.epoch_time_s.max() <= ref.epoch_time_s.max() * (1 + 1e-12)
        else:
            assert fast.epoch_time_s.max() == pytest.approx(ref.epoch_time_s.max(), rel=1e-9)
        assert fast.peak_above_baseline_bytes == pytest.approx(ref.peak_above_baseline_bytes)


@pytest.mark.parametrize("model", ["gcn", "sage", "sage-max", "sage-pool", "gat", "gat-fused"])
def test_memory_books_balance(model):
    """Every byte allocated during the epoch is freed by its end (a self-check of the lifetimes)."""
    st = estimate_partition(5000, 60000, 4, 16, 5, edge_cut=0.3)
    spec = parse_model(model, ModelSpec(layers=3, hidden=32, heads=2))
    for mode in ("sar", "sa", "oneshot"):
        res = simulate_epoch(st, spec, RunSpec(mode=mode, prefetch=2), hand_profile())
        assert res.end_bytes == pytest.approx(res.start_bytes, abs=1e-3)
        assert np.all(res.peak_above_baseline_bytes > res.start_bytes)


def test_shared_cores_slow_oversubscribed_workers():
    """4 workers on a 2-core host share it: compute of co-located workers queues for the 2 core slots."""
    prof = replace(hand_profile(), cores_per_host=2)
    st = estimate_partition(4000, 40000, 4, 16, 4, edge_cut=0.3)
    spec = ModelSpec("gcn", layers=2, hidden=16, batchnorm=False, dropout=0.0)
    shared = simulate_epoch(st, spec, RunSpec(mode="sar", threads=1), prof)
    alone = simulate_epoch(st, spec, RunSpec(mode="sar", threads=1, shared_cores=False), prof)
    assert shared.placement.core_slots == 2 and alone.placement.core_slots is None
    assert shared.epoch_time_s.max() > alone.epoch_time_s.max()


def test_processor_sharing_by_hand():
    """SharedCores: ops share the host's slots; each extra co-located op costs (1 - eta) of a slot."""

    def finish_times(slots, eta, jobs):
        env = simpy.Environment()
        cores = SharedCores(env, slots)
        done = {}

        def job(name, start, seconds):
            yield env.timeout(start)
            yield cores.run(seconds, eta)
            done[name] = env.now

        for name, start, seconds in jobs:
            env.process(job(name, start, seconds))
        env.run()
        return done

    # two 1 s ops on 2 slots that interfere (eta 0.5): each runs at 1.5 / 2 of its solo speed
    assert finish_times(2, 0.5, [("a", 0, 1.0), ("b", 0, 1.0)]) == pytest.approx({"a": 4 / 3, "b": 4 / 3})
    # three ops on 2 slots without interference: each gets 2/3 of a core
    assert finish_times(2, 1.0, [("a", 0, 1.0), ("b", 0, 1.0), ("c", 0, 1.0)]) == pytest.approx(
        {"a": 1.5, "b": 1.5, "c": 1.5}
    )
    # one slot, time-sliced: a runs alone for 0.5 s, then a and b at half speed until a ends at 1.5,
    # then b alone (0.5 s done, 0.5 s left) until 2.0
    assert finish_times(1, 1.0, [("a", 0, 1.0), ("b", 0.5, 1.0)]) == pytest.approx({"a": 1.5, "b": 2.0})


@pytest.mark.parametrize("model", ["gcn", "sage-max", "gat", "gat-fused"])
def test_one_worker_runs_one_shard_whatever_the_mode(model):
    """With one worker the engine takes the single-shard path in every mode: same time, same memory, no
    exchange and no extended row copy."""
    st = estimate_partition(3000, 30000, 1, 16, 4)
    spec = parse_model(model, ModelSpec(layers=2, hidden=32, heads=2))
    runs = {m: simulate_epoch(st, spec, RunSpec(mode=m), hand_profile()) for m in ("sar", "sa", "oneshot")}
    for m in ("sa", "oneshot"):
        assert runs[m].epoch_time_s == pytest.approx(runs["sar"].epoch_time_s, rel=1e-12)
        assert runs[m].peak_above_baseline_bytes == pytest.approx(runs["sar"].peak_above_baseline_bytes)
    assert runs["sar"].bytes_sent[0] == 0 and runs["sar"].messages == 0


def test_loopback_copies_take_shared_cores():
    """Where workers share a host's cores, the CPU time of moving their bytes competes with compute; on
    hosts of their own it does not."""
    st = estimate_partition(4000, 40000, 4, 16, 4, edge_cut=0.3)
    spec = ModelSpec("gcn", layers=2, hidden=16, batchnorm=False, dropout=0.0)
    base = replace(hand_profile(), cores_per_host=2)
    copying = replace(base, p2p_cpu_s_per_byte=1e-6)
    run = RunSpec(mode="sar", threads=1)
    assert simulate_epoch(st, spec, run, copying).epoch_time_s.max() > simulate_epoch(
        st, spec, run, base
    ).epoch_time_s.max()
    alone = RunSpec(mode="sar", threads=1, workers_per_host=1)
    assert simulate_epoch(st, spec, alone, copying).epoch_time_s == pytest.approx(
        simulate_epoch(st, spec, alone, base).epoch_time_s, rel=1e-12
    )


def test_linear_aggregation_peak_by_hand():
    """GCN, 1 layer, 1 worker: the peak is the backward's ``A^T g`` moment, every tensor named. Held: Adam's two
    moments (``2 |theta| b``), the shard's cached transpose (column pointers ``8 (n + 1)``, destinations in
    source order and the permutation ``16 E``), the conv output, the logits' gradient, the aggregation output
    kept for backward, its gradient and the fresh ``A^T g``: five ``n x f_o`` float32 tensors. The C++ SpMM
    allocates nothing else, so the measured torch.sparse temporaries of older profiles do not count."""
    st = estimate_partition(1000, 10000, 1, 8, 4)
    spec = ModelSpec("gcn", layers=1, hidden=4, batchnorm=False, dropout=0.0)
    n, fo, edges, params = 1000, 4, int(st.edges_per_shard[0, 0]), 8 * 4 + 4
    expected = 2 * params * 4 + 8 * (n + 1) + 16 * edges + 5 * n * fo * 4
    assert simulate_epoch(st, spec, RunSpec(), hand_profile()).peak_above_baseline_bytes[0] == pytest.approx(expected)
    mkl = {"spmm_fwd_out": 0.02, "spmm_fwd_edge": 3.7, "spmm_bwd_out": 1.0, "spmm_bwd_edge": 3.8}
    old = simulate_epoch(st, spec, RunSpec(), replace(hand_profile(), transient_bytes=mkl))
    assert old.peak_above_baseline_bytes[0] == pytest.approx(expected)


@pytest.mark.parametrize(
    ("model", "mode", "expected"),
    [
        # 1-layer GCN (36 parameters): Adam 288 B; per shard 8 (N_s + 1) + 16 E: (808 + 4800) + (168 + 800),
        # (488 + 3200) + (248 + 640)
        ("gcn", "sar", [288 + 5608 + 968, 288 + 3688 + 888]),
        # 1-layer SAGE-pool (140 parameters): Adam 1120 B; the CSC per shard 8 (N_s + 1) + 8 E
        ("sage-pool", "sar", [1120 + 808 + 2400 + 168 + 400, 1120 + 488 + 1600 + 248 + 320]),
        # 1-layer SAGE-max (68 parameters) aggregates the raw features: no aggregation backward, no CSC built
        ("sage-max", "sar", [544, 544]),
        # oneshot GCN: the merged shard (16 E + 8 (n + 1)) and its transpose over n + halo source rows
        ("gcn", "oneshot", [288 + (16 * 350 + 8 * 101) + (8 * 121 + 16 * 350), 288 + (16 * 240 + 8 * 61)
                            + (8 * 91 + 16 * 240)]),
    ],
)
def test_cached_transposes_by_hand(model, mode, expected):
    """What a steady-state epoch starts with above the baseline, on the hand partition (first-use bytes 0)."""
    spec = parse_model(model, ModelSpec(layers=1, hidden=4, batchnorm=False, dropout=0.0))
    res = simulate_epoch(two_parts(), spec, RunSpec(mode=mode), hand_profile())
    assert res.start_bytes == pytest.approx(expected)


def test_max_aggregation_ledger_by_hand():
    """SAGE max on the C++ running max: no per-edge temporaries; the state is the running max (b) and its int32
    count (4 B) per element; with an autograd record the Function keeps the state and the output (b) until its
    backward (booked together, freed with the output); layer 0 (raw features, no record) frees its state at
    finalize. The backward's only temporary is the local shard's row gradient (``n x w``)."""
    spec = ModelSpec("sage", layers=2, hidden=16, aggr="max", batchnorm=False, dropout=0.0)
    first, second = layer_plans(spec, 8, 4)
    m0, m1 = layer_memory(first, 100), layer_memory(second, 100)
    assert (m0.agg_state, m0.agg_out, m0.new_out) == (100 * 8 * 8, 100 * 8 * 4, True)
    assert (m1.agg_state, m1.agg_out, m1.new_out) == (100 * 16 * 12, 100 * 16 * 12, False)
    for plan in (first, second):
        assert shard_transient_bytes(plan, 300, 100, 100) == 0
        assert shard_bwd_transient_bytes(plan, 300, 100, 100) == 0
    placement = resolve_placement(hand_profile(), 2, RunSpec())
    pricing = EpochPricing(two_parts(), spec, RunSpec(), hand_profile(), placement)
    table = np.asarray(pricing.layers[1].shard_bwd_transient)
    assert table == pytest.approx(np.array([[100 * 16 * 4, 0], [0, 60 * 16 * 4]]))


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        # Adam 544 B + n w (4 + 4 + 1 + 4 + 4): the running max, its int32 count, the bool mask, the zeros and the
        # output, w = 8 raw features, n = 100 and 60
        ("sar", [544 + 100 * 8 * 17, 544 + 60 * 8 * 17]),
        # oneshot also holds its merged shard (16 E + 8 (n + 1), E = 350 and 240) and the extended [own; halo]
        # matrix, (n + halo) w b, through its aggregation
        ("oneshot", [544 + 16 * 350 + 8 * 101 + 120 * 8 * 4 + 100 * 8 * 17,
                     544 + 16 * 240 + 8 * 61 + 90 * 8 * 4 + 60 * 8 * 17]),
    ],
)
def test_max_finalize_temporaries_by_hand(mode, expected):
    """SAGE-max's ``finalize`` (``torch.where(count > 0, best, zeros_like(best))``) holds its bool mask and zeros
    beside the state and the output: on a 1-layer SAGE-max (layer 0, no autograd record, the state freed after
    finalize) that moment is the epoch's peak."""
    spec = ModelSpec("sage", layers=1, hidden=4, aggr="max", batchnorm=False, dropout=0.0)
    res = simulate_epoch(two_parts(), spec, RunSpec(mode=mode), hand_profile())
    assert res.peak_above_baseline_bytes == pytest.approx(expected)


def test_oneshot_output_dies_with_its_aggregation_backward():
    """``ShardAggregate`` keeps its output only until its own backward returns (before the halo gradients go
    home): in oneshot the output is booked with the aggregation's kept bytes, a GCN state (the output itself) as
    a temporary of the aggregation until then; the ring modes keep ``agg_out``. 2-layer GCN on the hand partition:
    layer 0's output is n x 4 floats (hidden 4)."""
    spec = ModelSpec("gcn", layers=2, hidden=4, batchnorm=False, dropout=0.0)
    ring = EpochPricing(two_parts(), spec, RunSpec(), hand_profile(), resolve_placement(hand_profile(), 2, RunSpec()))
    run = RunSpec(mode="oneshot")
    one = EpochPricing(two_parts(), spec, run, hand_profile(), resolve_placement(hand_profile(), 2, run))
    out = np.array([100, 60]) * 4 * 4
    assert [ring.layers[0].mem[p].agg_out for p in (0, 1)] == list(out)
    assert [one.layers[0].mem[p].agg_out for p in (0, 1)] == [0, 0]
    assert [one.layers[0].mem[p].agg_state for p in (0, 1)] == [0, 0]
    assert one.layers[0].one_kept == pytest.approx(out) and one.layers[0].one_transient == pytest.approx(out)


def test_cache_model_by_hand_and_its_fit():
    """Gathers from a matrix of G bytes hit the last-level cache L with probability min(1, L/G); the rest
    run at mem_rate. The calibration's fit recovers L and mem_rate from such timings."""
    spmm = OpCost(rate=2e9, overhead_s=0.0, bwd_ratio=1.0, parallel_eff=1.0, mem_rate=5e8)
    prof = replace(hand_profile(), ops={**hand_profile().ops, "spmm": spmm}, llc_bytes=100e6)
    cm = CostModel(prof, threads=1)
    assert cm.op_seconds(Op("spmm", 1e9, gather_bytes=50e6)) == pytest.approx(0.5)  # all hits
    # G = 400 MB: a quarter hits
    assert cm.op_seconds(Op("spmm", 1e9, gather_bytes=400e6)) == pytest.approx(0.25 * 0.5 + 0.75 * 2.0)
    assert CostModel(replace(prof, llc_bytes=0.0), threads=1).op_seconds(
        Op("spmm", 1e9, gather_bytes=400e6)
    ) == pytest.approx(0.5)
    gathered = [16e6, 64e6, 256e6, 1024e6]
    work = [1e8, 4e8, 16e8, 64e8]
    secs = [float(cm.op_seconds(Op("spmm", w_, gather_bytes=g))) for w_, g in zip(work, gathered)]
    llc, mem_rate = fit_cache(work, secs, gathered, 2e9)
    assert llc == pytest.approx(100e6, rel=0.1) and mem_rate == pytest.approx(5e8, rel=0.05)
    assert fit_cache(work, [w_ / 2e9 for w_ in work], gathered, 2e9) == (0.0, 2e9)


def test_unfused_gat_sar_chunks_bound_the_per_edge_memory():
    """The engine streams unfused GAT shards in chunks of UNFUSED_CHUNK_EDGES edges: beyond one chunk a
    shard's per-edge temporaries stop growing (a chunk then holds fewer destination rows as the degree rises,
    so sar's peak may even fall a little); sa keeps the autograd graph of every edge, so its peak grows with
    the edges."""
    def peak(local_edges, mode):
        st = PartitionStats(
            graph="two",
            num_nodes=20000,
            num_edges=2 * local_edges + 2000,
            feature_dim=8,
            num_classes=4,
            train_nodes=0,
            nodes_per_part=np.array([10000, 10000]),
            edges_per_shard=np.array([[local_edges, 1000], [1000, local_edges]]),
            halo_rows=np.array([[0, 500], [500, 0]]),
        )
        spec = ModelSpec("gat", layers=1, hidden=4, heads=1, batchnorm=False, dropout=0.0)
        return simulate_epoch(st, spec, RunSpec(mode=mode), hand_profile()).peak_above_baseline_bytes.max()

    big, bigger = 2 * UNFUSED_CHUNK_EDGES, 4 * UNFUSED_CHUNK_EDGES
    assert peak(bigger, "sar") <= peak(big, "sar")
    assert peak(UNFUSED_CHUNK_EDGES // 4, "sar") < peak(big, "sar")
    assert peak(bigger, "sa") > peak(big, "sa") + (bigger - big) * 2 * 4  # at least 2 floats per edge kept


def test_mirrored_engine_constants():
    """The simulator does not import the engine's runtime; constants it mirrors must match it."""
    assert UNFUSED_CHUNK_EDGES == gat.UNFUSED_CHUNK_EDGES


def test_compute_scale_multiplies_compute_only():
    """compute_scale stretches every compute op by exactly that factor; links and bytes are untouched."""
    st = estimate_partition(2000, 20000, 2, 8, 4)
    model = ModelSpec("sage", layers=2, hidden=8)
    base = hand_profile()
    scaled = replace(base, compute_scale=2.5)
    a = simulate_epoch(st, model, RunSpec(mode="sar"), base)
    b = simulate_epoch(st, model, RunSpec(mode="sar"), scaled)
    assert b.compute_s == pytest.approx(2.5 * a.compute_s)
    assert b.bytes_sent == pytest.approx(a.bytes_sent)
    assert b.peak_above_baseline_bytes == pytest.approx(a.peak_above_baseline_bytes)
    assert Profile.from_json(scaled.to_json()).compute_scale == 2.5


def test_compute_scale_curve_prices_each_shard_size():
    """Profile.scale_at interpolates the curve in log(bytes), constant beyond its ends; the epoch model
    prices a worker with the scale of its own activation size: 1 and 4 workers of one graph each cost what
    a constant profile at their own size says, and those two scales differ."""

    base = hand_profile()
    curve = replace(base, compute_scale_curve=((1e4, 1.0), (1e6, 4.0)))
    assert curve.scale_at(1e4) == pytest.approx(1.0) and curve.scale_at(1e6) == pytest.approx(4.0)
    assert curve.scale_at(1e5) == pytest.approx(2.0)  # halfway in log(bytes): the geometric midpoint
    assert curve.scale_at(10.0) == pytest.approx(1.0) and curve.scale_at(1e9) == pytest.approx(4.0)
    assert base.scale_at(1e6) == base.compute_scale and curve.with_scale(3.0).scale_at(1e6) == 3.0

    model = ModelSpec("gcn", layers=2, hidden=16)
    scales = []
    for parts in (1, 4):
        st = estimate_partition(4000, 40000, parts, 16, 4)
        nbytes = float(activation_bytes(layer_plans(model, 16, 4), st.nodes_per_part.mean()))
        assert nbytes == pytest.approx(4000 / parts * 16 * 4)
        scales.append(curve.scale_at(nbytes))
        got = simulate_epoch(st, model, RunSpec(mode="sar"), curve).epoch_time_s
        want = simulate_epoch(st, model, RunSpec(mode="sar"), curve.with_scale(scales[-1])).epoch_time_s
        np.testing.assert_allclose(got, want, rtol=1e-12)
    assert scales[0] > scales[1] > 1.0
    # and the JSON round trip keeps the curve
    assert Profile.from_json(curve.to_json()).compute_scale_curve == curve.compute_scale_curve


def test_compute_scale_keyed_by_predicted_peak():
    """A "peak"-keyed curve prices a configuration at the scale of the largest per-worker peak that the
    same epoch predicts with scale 1; the memory prediction is the same whatever the scale, and the
    result counts the events of both runs. Unknown keys are refused; old JSON means "activation"."""

    base = hand_profile()
    curve = replace(base, compute_scale_curve=((1e4, 1.0), (1e8, 8.0)), compute_scale_key="peak")
    model = ModelSpec("gat", layers=2, hidden=16, heads=2)
    for mode, parts in (("oneshot", 2), ("sa", 4), ("sar", 1)):
        st = estimate_partition(3000, 30000, parts, 16, 4)
        run = RunSpec(mode=mode)
        first = predicted_peak(st, model, run, curve)
        peak = float(first.peak_above_baseline_bytes.max())
        assert first.compute_scale == 1.0 and 1e4 < peak < 1e8  # inside the curve: the test sees the key
        got = simulate_epoch(st, model, run, curve)
        want = simulate_epoch(st, model, run, base.with_scale(curve.scale_at(peak)))
        assert got.scale_key_bytes == peak and got.compute_scale == pytest.approx(curve.scale_at(peak))
        np.testing.assert_allclose(got.epoch_time_s, want.epoch_time_s, rtol=1e-12)
        np.testing.assert_allclose(got.peak_above_baseline_bytes, first.peak_above_baseline_bytes, rtol=1e-12)
        assert got.events == first.events + want.events
        # the activation key gives another scale for the same curve
        act = simulate_epoch(st, model, run, replace(curve, compute_scale_key="activation"))
        assert act.scale_key_bytes == act.activation_bytes != peak
    assert Profile.from_json(curve.to_json()).compute_scale_key == "peak"
    legacy = curve.to_json()
    del legacy["compute_scale_key"]
    assert Profile.from_json(legacy).compute_scale_key == "activation"
    with pytest.raises(ValueError, match="compute_scale_key"):
        replace(base, compute_scale_key="nodes")
