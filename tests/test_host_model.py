"""Invariants of the host model (sarlab.simulator.hardware.host) on synthetic profiles of 2, 16 and 64 cores.

P ranks of C/P threads price compute like P = 1's work divided among them, each at the speed-up measured at C/P
threads, never serialised on the host; loopback copies run in parallel across pairs until memory bandwidth binds;
a host crowded beyond its cores slows down as the profile's co-location efficiency says. The references are
closed-form (the speed-up tables and efficiencies written into the synthetic profiles), not the simulator's pricing.
"""

from __future__ import annotations

import pytest
import simpy

from sarlab.simulator.hardware.host import CROWDED, FIT, colocation_eff, regime, spread_sigma
from sarlab.simulator.hardware.profile import Link, OpCost, Profile
from sarlab.simulator.network.network import SharedCores
from sarlab.simulator.system.epoch import simulate_epoch
from sarlab.simulator.system.runspec import RunSpec, resolve_placement
from sarlab.simulator.workload.model import ModelSpec
from sarlab.simulator.workload.workload import estimate_partition

FAMILIES = ("gemm", "spmm", "max_aggr", "gat_unfused", "elementwise")


def speedups(cores: int, eff: float, cap: float | None = None) -> tuple[tuple[float, float], ...]:
    """A measured-looking speed-up table at 1, 2, 4, ... cores: ``1 + (T-1) eff``, capped at ``cap``."""
    table, t = [], 1
    while t <= cores:
        s = 1.0 + (t - 1) * eff
        table.append((float(t), min(s, cap) if cap else s))
        t *= 2
    return tuple(table)


def synthetic(cores: int, colocated: float | None = None, share: float | None = None) -> Profile:
    """A profile of ``cores`` cores without per-call overheads: compute-bound GEMM (thread efficiency 0.9) and
    memory-bound families whose speed-up saturates at ``cores / 2``; ``colocated``: every family's measured
    co-location efficiency at every thread count (``None``: not measured, derived from the speed-ups)."""
    ops = {}
    for name in FAMILIES:
        cap = None if name == "gemm" else max(1.0, cores / 2)
        table = speedups(cores, 0.9 if name == "gemm" else 0.8, cap)
        coloc = tuple((t, colocated) for t, _ in table) if colocated is not None else ()
        ops[name] = OpCost(rate=1e9, overhead_s=0.0, bwd_ratio=1.0, parallel_eff=0.8, share_eff=share,
                           speedups=table, colocation=coloc)
    link = Link(latency_s=1e-6, bandwidth_Bps=1e12)
    return Profile(name=f"synthetic-{cores}", ops=ops, inter_host=link, intra_host=link, cores_per_host=cores,
                   p2p_call_s=0.0)


def compute_s(profile: Profile, workers: int, threads: float, model: str = "gcn") -> float:
    """The slowest rank's predicted compute seconds of one ``sar`` epoch on a graph with (almost) no cut."""
    stats = estimate_partition(200_000, 4_000_000, workers, 64, 16, edge_cut=1e-4 if workers > 1 else None)
    spec = ModelSpec(model=model, layers=2, hidden=64)
    run = RunSpec(mode="sar", threads=threads)
    return float(simulate_epoch(stats, spec, run, profile).compute_s.max())


@pytest.mark.parametrize("cores, ranks", [(2, 2), (16, 2), (16, 8), (64, 4), (64, 16)])
def test_ranks_of_c_over_p_threads_are_not_serialised(cores, ranks):
    """Derived co-location (not measured): P ranks of C/P threads together run like one rank of C threads, within
    the halo and per-rank overheads; far from P times the work of one rank of C/P threads."""
    prof = synthetic(cores)
    threads = cores // ranks
    assert regime(ranks, threads, cores) == FIT
    one = compute_s(prof, 1, cores)
    many = compute_s(prof, ranks, threads)
    per_rank_alone = compute_s(prof, 1, threads) / ranks  # the rank's share of the work, alone on its cores
    assert many == pytest.approx(one, rel=0.15)
    assert many < 0.9 * ranks * per_rank_alone  # serialised would be ranks x per_rank_alone


@pytest.mark.parametrize("cores, ranks", [(2, 2), (16, 4), (64, 8)])
def test_measured_independent_ranks_price_the_work_divided_at_their_thread_speedup(cores, ranks):
    """Co-location measured at 1 (no shared bandwidth): each rank takes its share of the work at the speed-up
    measured at C/P threads: compute(P ranks) = compute(1 rank of C/P threads) / P."""
    prof = synthetic(cores, colocated=1.0)
    threads = cores // ranks
    expected = compute_s(prof, 1, threads) / ranks
    assert compute_s(prof, ranks, threads) == pytest.approx(expected, rel=0.05)


@pytest.mark.parametrize("cores", [2, 16, 64])
def test_thread_speedup_is_read_at_the_measured_counts(cores):
    """s(T) is the measured table at T (not 1 + (T-1) eta from one efficiency)."""
    prof = synthetic(cores)
    for t, s in prof.op("spmm").speedups:
        assert prof.op("spmm").speedup(t) == pytest.approx(s)
    assert prof.op("spmm").speedup(cores) == pytest.approx(max(1.0, cores / 2))


@pytest.mark.parametrize("cores", [2, 16, 64])
def test_derived_colocation_shares_bandwidth_only_where_it_binds(cores):
    """eta_T = (s(PT)/s(T) - 1)/(P - 1): 1 while P T is below the bandwidth cap, smaller beyond it; measured
    values take precedence; single-thread ranks use the measured share_eff."""
    linear_to_half = OpCost(rate=1e9, parallel_eff=1.0, share_eff=0.8, speedups=speedups(cores, 1.0, cores / 2))
    assert colocation_eff(linear_to_half, 2, max(1, cores // 8)) == pytest.approx(1.0 if cores >= 8 else 0.8)
    if cores >= 4:
        assert colocation_eff(linear_to_half, 2, cores // 2) == pytest.approx(0.0)  # 2 x C/2 threads: capped
        assert colocation_eff(linear_to_half, 4, cores // 4) == pytest.approx(1 / 3)  # C threads reach C/2
    assert colocation_eff(linear_to_half, 2, 1) == pytest.approx(0.8)  # the measured single-thread share_eff
    assert colocation_eff(synthetic(cores, colocated=0.7).op("spmm"), 2, 2) == pytest.approx(0.7)
    assert colocation_eff(linear_to_half, 1, cores) == 1.0


@pytest.mark.parametrize("cores, pairs", [(2, 1), (16, 8), (64, 32), (16, 16)])
def test_loopback_copies_run_in_parallel_until_bandwidth_binds(cores, pairs):
    """2 x pairs copy jobs of c seconds on C cores (the elementwise co-location efficiency eta): they all end at
    c k / (1 + (min(k, C) - 1) eta) for k jobs: in parallel (c) with eta = 1 and k <= C, slower only by the
    bandwidth they share, and time-sliced once they outnumber the cores."""
    c = 0.01
    for eta in (1.0, 0.5):
        env = simpy.Environment()
        pool = SharedCores(env, cores)
        k = 2 * pairs
        done = [pool.run(c, eta) for _ in range(k)]
        env.run()
        assert all(e.processed for e in done)
        assert env.now == pytest.approx(c * k / (1 + (min(k, cores) - 1) * eta))
        if eta == 1.0 and k <= cores:
            assert env.now == pytest.approx(c)  # parallel across pairs


def test_loopback_copies_are_charged_to_the_ranks_cores():
    """A host whose ranks share cores prices each byte's copy CPU on them, at the elementwise co-location
    efficiency of its ranks (the host model), and the bytes' CPU makes the epoch longer."""
    prof = synthetic(16)
    heavy = Profile.from_json({**prof.to_json(), "p2p_cpu_s_per_byte": 1e-8})
    stats = estimate_partition(50_000, 1_000_000, 4, 64, 16)
    spec, run = ModelSpec(model="gcn", layers=2, hidden=64), RunSpec(mode="sar", threads=4)
    light_t = float(simulate_epoch(stats, spec, run, prof).epoch_time_s.max())
    heavy_t = float(simulate_epoch(stats, spec, run, heavy).epoch_time_s.max())
    assert heavy_t > light_t
    assert resolve_placement(heavy, 4, run).core_slots == 4


@pytest.mark.parametrize("share", [1.0, 0.6])
def test_crowded_host_slows_down_as_its_colocation_says(share):
    """P = 4 single-thread ranks on 2 cores: 2 compute at once, each rank's compute stretched by
    P / (1 + (S-1) share_eff) over its solo time (S = 2 slots)."""
    prof = synthetic(2, share=share)
    assert regime(4, 1, 2) == CROWDED and resolve_placement(prof, 4, RunSpec(threads=1)).core_slots == 2
    solo = compute_s(prof, 1, 1) / 4  # a rank's share of the work, alone
    crowded = compute_s(prof, 4, 1)
    assert crowded == pytest.approx(solo * 4 / (1 + share), rel=0.1)


def test_spread_only_where_ranks_fill_or_crowd_the_cores():
    """The progress spread (measured with single-thread ranks on these cores) is read at P T thread-equivalents:
    none for one rank or ranks with spare cores."""
    table = {16: 0.1, 32: 0.3, 64: 0.2}
    assert spread_sigma(table, 1, 16, 16) == 0.0
    assert spread_sigma(table, 4, 2, 16) == 0.0  # 8 of 16 cores busy
    assert spread_sigma(table, 8, 2, 16) == pytest.approx(0.1)
    assert spread_sigma(table, 24, 1, 16) == pytest.approx(0.2)
    assert spread_sigma(table, 4, 32, 16) == pytest.approx(0.2)
