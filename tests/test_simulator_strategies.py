"""The simulator's sampling, staleness and cost models against independent references: a brute-force Monte Carlo
sampler in numpy (single batches and rounds of batches), hand-computed message, round, staleness and billing
cases."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from sarlab.simulator.hardware.profile import PRESETS, Link
from sarlab.simulator.strategies.cost_model import (
    DEFAULT_RESOURCES,
    billed_seconds,
    load_resources,
    resource_profile,
    run_cost,
    value,
)
from sarlab.simulator.strategies.predictor import STRATEGIES, predict
from sarlab.simulator.strategies.sampling_fit import fit_sampler_costs
from sarlab.simulator.strategies.sampling_model import (
    SamplerCosts,
    SamplingSpec,
    round_batches_of,
    round_messages,
    simulate_sampling_epoch,
)
from sarlab.simulator.strategies.staleness_model import (
    exchange_seconds,
    halo_bytes,
    simulate_stale_epoch,
    stale_epoch_time,
)
from sarlab.simulator.system.epoch import simulate_epoch
from sarlab.simulator.system.runspec import RunSpec
from sarlab.simulator.workload.model import ModelSpec
from sarlab.simulator.workload.sampled_sizes import DegreeDistribution, SampledSizes, chain_of_part, sampled_sizes
from sarlab.simulator.workload.workload import PartitionStats


def configuration_graph(n: int, rng: np.random.Generator, blocks: int = 1, inside: float = 1.0):
    """A symmetric configuration-model graph with power-law degrees (self-loops dropped, both directions stored);
    with ``blocks`` > 1 a stub pairs inside its block (node id range) with probability ``inside``. Returns
    (in-neighbour lists, block of every node)."""
    deg = np.maximum(1, np.minimum(rng.poisson(6 * (1 + rng.pareto(1.5, n))), n // 4))
    stubs = np.repeat(np.arange(n), deg)
    block = np.arange(n) * blocks // n
    rng.shuffle(stubs)
    inner = rng.random(stubs.size // 2) < inside
    pairs = []
    if blocks == 1:
        pairs.append(stubs[: stubs.size // 2 * 2].reshape(-1, 2))
    else:
        half = stubs.size // 2
        left, right = stubs[:half], stubs[half: 2 * half]
        mixed = np.stack([left[~inner], right[~inner]], 1)
        pairs.append(mixed)
        own = np.concatenate([left[inner], right[inner]])
        for b in range(blocks):
            mine = own[block[own] == b]
            rng.shuffle(mine)
            pairs.append(mine[: mine.size // 2 * 2].reshape(-1, 2))
    edges = np.concatenate(pairs)
    edges = edges[edges[:, 0] != edges[:, 1]]
    src, dst = np.concatenate([edges[:, 0], edges[:, 1]]), np.concatenate([edges[:, 1], edges[:, 0]])
    order = np.argsort(dst, kind="stable")
    ptr = np.concatenate([[0], np.cumsum(np.bincount(dst, minlength=n))])
    return [src[order][ptr[v]:ptr[v + 1]] for v in range(n)], block


def monte_carlo(nbrs, seeds_from: np.ndarray, batch: int, fanouts, trials: int, rng, owner=None, me=0):
    """Average level sizes, sampled edges and local fraction of ``S_0`` of ``trials`` brute-force samples."""
    layers = len(fanouts)
    rows, edges, local = np.zeros(layers + 1), np.zeros(layers), 0.0
    for _ in range(trials):
        level = list(rng.choice(seeds_from, size=batch, replace=False))
        rows[layers] += len(level)
        for hop, k in enumerate(fanouts):
            seen, new = set(level), []
            for v in level:
                cand = nbrs[v]
                pick = cand if k == -1 or len(cand) <= k else rng.choice(cand, size=k, replace=False)
                edges[layers - 1 - hop] += len(pick)
                for u in pick:
                    if u not in seen:
                        seen.add(u)
                        new.append(u)
            level = level + new
            rows[layers - 1 - hop] += len(level)
        if owner is not None:
            local += np.mean(owner[np.asarray(level)] == me)
    return rows / trials, edges / trials, local / trials


def _random_graph(seed: int, n: int = 3000):
    """A configuration-model graph's neighbour lists, its degree distribution and the generator that drew it."""
    rng = np.random.default_rng(seed)
    nbrs, _ = configuration_graph(n, rng)
    return nbrs, DegreeDistribution.from_degrees(np.array([len(x) for x in nbrs])), rng


def test_sampled_sizes_match_a_brute_force_sampler():
    n = 3000
    nbrs, deg, rng = _random_graph(0, n)
    for fanouts, batch in (((10, 5), 64), ((5, 5, 3), 32), ((-1, 4), 16)):
        rows, edges, _ = monte_carlo(nbrs, np.arange(n), batch, fanouts, 60, rng)
        model = sampled_sizes(deg, batch, fanouts)
        np.testing.assert_allclose(model.rows, rows, rtol=0.05, err_msg=f"fanouts {fanouts}")
        np.testing.assert_allclose(model.edges, edges, rtol=0.05, err_msg=f"fanouts {fanouts}")


def test_remote_fraction_follows_the_partition_chain():
    rng = np.random.default_rng(1)
    n = 4000
    nbrs, block = configuration_graph(n, rng, blocks=2, inside=0.8)
    dst = np.repeat(np.arange(n), [len(x) for x in nbrs])
    src = np.concatenate(nbrs)
    e = np.zeros((2, 2), dtype=np.int64)
    np.add.at(e, (block[dst], block[src]), 1)
    stats = PartitionStats("mc", n, int(e.sum()), 8, 4, n, np.array([n // 2, n // 2]), e,
                           np.array([[0, 1], [1, 0]]))
    a, b = chain_of_part(stats, 0)
    assert a == pytest.approx(e[0, 0] / e[0].sum()) and b == pytest.approx(e[1, 0] / e[1].sum())
    deg = DegreeDistribution.from_degrees(np.array([len(x) for x in nbrs]))
    fanouts, batch = (8, 4), 48
    _, _, local = monte_carlo(nbrs, np.flatnonzero(block == 0), batch, fanouts, 60, rng, block, 0)
    model = sampled_sizes(deg, batch, fanouts, a, b, 0.5)
    assert model.local[0] == pytest.approx(local, abs=0.04)
    assert model.remote_inputs == pytest.approx(model.rows[0] * (1 - model.local[0]))


class KeyedSamples:
    """Every node's sample drawn once per hop and kept (the engine keys a node's sample by epoch and layer)."""

    def __init__(self, nbrs, fanouts, rng):
        self.nbrs, self.fanouts, self.rng = nbrs, fanouts, rng
        self.drawn = [{} for _ in fanouts]

    def __call__(self, hop: int, v: int):
        if v not in self.drawn[hop]:
            cand, k = self.nbrs[v], self.fanouts[hop]
            self.drawn[hop][v] = cand if k == -1 or len(cand) <= k else self.rng.choice(cand, size=k, replace=False)
        return self.drawn[hop][v]


def monte_carlo_round(nbrs, batch: int, batches: int, fanouts, trials: int, rng):
    """Average input rows and sampled edges of a round of ``batches`` batches, every node sampled once per layer,
    by brute force: the round's union of its batches' input rows, their sum, and the edges sampled for the
    union's levels."""
    n, layers = len(nbrs), len(fanouts)
    union_rows = summed_rows = edges = 0.0
    for _ in range(trials):
        pick = KeyedSamples(nbrs, fanouts, rng)
        seeds = rng.choice(n, size=batch * batches, replace=False)
        inputs: set = set()
        for b in range(batches):
            level = set(seeds[b * batch:(b + 1) * batch].tolist())
            for hop in range(layers):
                level |= {int(u) for v in level for u in pick(hop, v)}
            inputs |= level
            summed_rows += len(level)
        union_rows += len(inputs)
        level = set(seeds.tolist())
        for hop in range(layers):  # the union's levels: what a round samples
            edges += sum(len(pick(hop, v)) for v in level)
            level |= {int(u) for v in level for u in pick(hop, v)}
        assert level == inputs  # a round's levels are its batches' levels united
    return union_rows / trials, summed_rows / trials, edges / trials


def test_round_union_matches_a_brute_force_sampler():
    n = 3000
    nbrs, deg, rng = _random_graph(3, n)
    for fanouts, batch, batches in (((10, 5), 48, 4), ((5, 3), 100, 6)):
        union, summed, edges = monte_carlo_round(nbrs, batch, batches, fanouts, 20, rng)
        model = sampled_sizes(deg, batch * batches, fanouts)
        one = sampled_sizes(deg, batch, fanouts)
        assert model.rows[0] == pytest.approx(union, rel=0.05), fanouts
        assert float(model.edges.sum()) == pytest.approx(edges, rel=0.05), fanouts
        assert batches * one.rows[0] == pytest.approx(summed, rel=0.05), fanouts
        assert union < 0.9 * summed  # the batches share rows: the round fetches fewer than the batches use


def test_sampler_fit_recovers_known_costs():
    truth = np.array([3e-3, 2e-3, 3e-6, 5e-6])  # per round, per batch, per edge, per row
    design = np.array([[1, 4, 2e5, 6e4], [2, 4, 3e5, 9e4], [4, 4, 5e5, 1.6e5], [1, 2, 1e5, 4e4], [3, 6, 6e5, 2e5]],
                      dtype=float)
    fit = fit_sampler_costs(design, design @ truth)
    np.testing.assert_allclose((fit.round_s, fit.batch_s, fit.edge_s, fit.row_s), truth, rtol=1e-6)
    assert fit.step_s == 0.0 and fit.sync_s == 0.0


def test_round_plan_messages_and_sampler_seconds_by_hand():
    assert round_batches_of(5, 0) == [5] and round_batches_of(5, 2) == [2, 2, 1] and round_batches_of(3, 7) == [3]
    sizes = SampledSizes(np.array([900.0, 300.0, 100.0]), np.array([1500.0, 1000.0]), np.array([0.6, 0.8, 1.0]))
    msg = round_messages(sizes, (10, 5), workers=3, own_nodes=100, row_bytes=400)
    # hop 2 (layer 0, k = 5) asks for the 60 remote rows of S_1: masks of ceil(100 / 8) = 13 bytes from 2 peers,
    # replies of 8 (3 + 5) bytes per node; the fetch's masks; 360 remote input rows of 400 + 8 bytes
    assert msg.blocking == pytest.approx([26.0, 64.0 * 60, 26.0])
    assert msg.fetch == pytest.approx(360 * 408.0)
    every = round_messages(sizes, (-1, -1), workers=3, own_nodes=100, row_bytes=400)
    assert every.blocking == pytest.approx([26.0, 24.0 * 60, 8.0 * 5.0 * 60, 26.0])  # 1500 edges / 300 rows
    assert round_messages(sizes, (10, 5), workers=1, own_nodes=100, row_bytes=400) == ([], 0.0)
    costs = SamplerCosts(round_s=1e-3, batch_s=2e-4, edge_s=1e-6, row_s=2e-6)
    assert costs.round_seconds(sizes) == pytest.approx(1e-3 + 2500e-6 + 1800e-6)
    assert costs.batch_seconds(sizes) == pytest.approx(2e-4 + 2500e-6 + 1800e-6)


def one_part_stats(train: int = 3000) -> PartitionStats:
    return PartitionStats("one", 4000, 40000, 16, 4, train, np.array([4000]), np.array([[40000]]),
                          np.array([[0]]))


def test_round_and_batch_terms_add_up_by_hand():
    """One worker, 3 steps: the sampler's per-round, per-batch and per-step seconds enter the epoch as counted."""
    stats, profile = one_part_stats(), PRESETS["reference-laptop"]()
    model = ModelSpec(model="sage", layers=2, hidden=16, batchnorm=False, dropout=0.0)
    deg = DegreeDistribution.from_degrees(np.full(4000, 10))
    zero = SamplerCosts(round_s=0.0, batch_s=0.0, edge_s=0.0, row_s=0.0, step_s=0.0,
                        compute_scale=profile.compute_scale)

    def epoch(costs, rounds):
        spec = SamplingSpec((5, 5), 1000, True, rounds)
        return simulate_sampling_epoch(stats, model, spec, profile, deg, np.array([3000.0]), sampler=costs)

    base = epoch(zero, 0)
    assert (base.steps, base.rounds) == (3, 1)
    assert epoch(zero, 1).rounds == 3
    r, b, t = 0.01, 0.002, 0.003
    assert epoch(dataclasses.replace(zero, round_s=r), 0).epoch_time_s - base.epoch_time_s == pytest.approx(r)
    three = epoch(zero, 1).epoch_time_s
    assert epoch(dataclasses.replace(zero, round_s=r), 1).epoch_time_s - three == pytest.approx(3 * r)
    assert epoch(dataclasses.replace(zero, batch_s=b), 0).epoch_time_s - base.epoch_time_s == pytest.approx(3 * b)
    assert epoch(dataclasses.replace(zero, step_s=t), 0).epoch_time_s - base.epoch_time_s == pytest.approx(3 * t)
    # a round of 3 batches samples fewer edges than 3 rounds of one: the union repeats no node
    assert base.round_edges[0] < epoch(zero, 1).round_edges[0]
    assert base.fetch_wait_s[0] == 0.0  # one worker fetches nothing remote


def test_fetch_wait_is_the_first_rounds_transfer_and_prefetch_hides_the_rest():
    stats, profile = two_part_stats(), PRESETS["reference-laptop"]()
    model = ModelSpec(model="sage", layers=2, hidden=16, batchnorm=False, dropout=0.0)
    costs = SamplerCosts(sync_s=0.0, compute_scale=profile.compute_scale)
    one = simulate_sampling_epoch(stats, model, SamplingSpec((5, 5), 100, True, 0), profile, sampler=costs)
    link, size = profile.intra_host, one.round_sizes[0]
    # one round: the fetch of its remote input rows (F = 8 floats and an 8-byte degree each), waited for in full
    wire = link.latency_s + link.gap_s + size.remote_inputs * (8 * 4 + 8) / link.bandwidth_Bps
    assert one.fetch_wait_s[0] == pytest.approx(wire)
    # rounds of one batch: the first round's transfer waits, the others hide behind a round's step on this fast link
    rounds = simulate_sampling_epoch(stats, model, SamplingSpec((5, 5), 100, True, 1), profile, sampler=costs)
    first = rounds.round_sizes[0]
    wire1 = link.latency_s + link.gap_s + first.remote_inputs * (8 * 4 + 8) / link.bandwidth_Bps
    assert rounds.rounds == 5 and rounds.fetch_wait_s[0] == pytest.approx(wire1)
    waited = simulate_sampling_epoch(stats, model, SamplingSpec((5, 5), 100, False, 1), profile, sampler=costs)
    assert waited.fetch_wait_s[0] == pytest.approx(5 * wire1)
    # every blocking call pays sync_s: per round a mask and a reply for hop 2 and the fetch's mask (3), per step
    # the gradient all-reduce (5), per epoch the two all-reduces of batch sizes and totals
    synced = simulate_sampling_epoch(stats, model, SamplingSpec((5, 5), 100, True, 0), profile,
                                     sampler=dataclasses.replace(costs, sync_s=1e-3))
    assert synced.epoch_time_s - one.epoch_time_s == pytest.approx((3 + 5 + 2) * 1e-3)


def two_part_stats() -> PartitionStats:
    return PartitionStats("hand", 2000, 20000, 8, 4, 1000, np.array([1000, 1000]),
                          np.array([[9000, 1000], [1000, 9000]]), np.array([[0, 100], [50, 0]]))


def test_stale_exchange_and_epoch_on_a_hand_computed_case():
    stats = two_part_stats()
    recv, send = halo_bytes(stats, [16, 4], 4)
    np.testing.assert_allclose(recv, [[6400, 1600], [3200, 800]])
    np.testing.assert_allclose(send, [[3200, 800], [6400, 1600]])
    link = Link(latency_s=1e-3, bandwidth_Bps=1e6, gap_s=1e-4)
    x = exchange_seconds(recv, send, link, 2)
    np.testing.assert_allclose(x, [0.0011 + 0.0064 + 0.0011 + 0.0016] * 2)
    assert stale_epoch_time(np.array([0.02, 0.005]), x, 0.001) == pytest.approx(0.021)  # compute-bound
    assert stale_epoch_time(np.array([0.004, 0.005]), x, 0.001) == pytest.approx(0.0102 + 0.001)  # link-bound


def test_stale_epoch_hides_the_exchange_and_pays_the_cache():
    stats = two_part_stats()
    model = ModelSpec(model="gcn", layers=2, hidden=16, batchnorm=False, dropout=0.0)
    profile = PRESETS["reference-laptop"]()
    one = predict("oneshot", stats, model, profile)
    for s in (1, 2):
        stale = simulate_stale_epoch(stats, model, s, profile)
        assert stale.epoch_time_s <= one.epoch_time_s * 1.0001
        # S + 1 queued exchanges per layer, each with its received and sent rows: in = [8000, 4000], out = [4000, 8000]
        np.testing.assert_allclose(stale.cache_bytes, (s + 1) * np.array([12000.0, 12000.0]))
        exact = simulate_epoch(stats, model, RunSpec(mode="oneshot"), profile)
        np.testing.assert_allclose(stale.peak_above_baseline_bytes - exact.peak_above_baseline_bytes,
                                   stale.cache_bytes)
    with pytest.raises(ValueError, match="staleness"):
        simulate_stale_epoch(stats, model, 0, profile)


def test_stale_exchange_takes_the_emulated_link():
    """On emulated hosts (one worker per NIC) the halo rows cross the inter-host link: a slow one bounds the epoch."""
    stats = two_part_stats()
    model = ModelSpec(model="gcn", layers=2, hidden=16, batchnorm=False, dropout=0.0)
    slow = Link(latency_s=1e-4, bandwidth_Bps=1e5, gap_s=1e-5)
    profile = dataclasses.replace(PRESETS["reference-laptop"](), inter_host=slow)
    stale = simulate_stale_epoch(stats, model, 1, profile, RunSpec(workers_per_nic=1))
    recv, send = halo_bytes(stats, [16, 4], 4)  # GCN exchanges W h: widths 16 (hidden) and 4 (classes)
    per_layer = 1e-4 + 1e-5 + np.maximum(recv, send) / 1e5
    np.testing.assert_allclose(stale.exchange_s, per_layer.sum(axis=1))
    assert stale.epoch_time_s >= float(stale.exchange_s.max())


def test_sampling_epoch_counts_steps_and_every_strategy_predicts():
    stats = two_part_stats()
    model = ModelSpec(model="sage", layers=2, hidden=16, batchnorm=False, dropout=0.0)
    profile = PRESETS["reference-laptop"]()
    epoch = simulate_sampling_epoch(stats, model, SamplingSpec((5, 5), 128), profile)
    assert epoch.steps == 4  # 500 training nodes per part in batches of 128
    assert epoch.epoch_time_s > 0 and np.all(epoch.compute_s <= epoch.epoch_time_s + 1e-12)
    with pytest.raises(ValueError, match="fan-outs"):
        simulate_sampling_epoch(stats, model, SamplingSpec((5,), 128), profile)
    for strategy in STRATEGIES:
        p = predict(strategy, stats, model, profile, sampling=SamplingSpec((5, 5), 128))
        assert p.epoch_time_s > 0 and p.memory_per_worker_bytes > 0


def test_billing_and_value_by_hand():
    cpu, lam = DEFAULT_RESOURCES["cpu"], DEFAULT_RESOURCES["serverless"]
    assert billed_seconds(cpu, 30.0) == 60.0 and billed_seconds(cpu, 60.2) == 61.0
    assert run_cost(cpu, 4, 3.0, 10, 2) == pytest.approx(4 * 0.68 * 60 / 3600)
    # 20 invocations per worker of 0.2625 s, each billed 0.3 s
    assert run_cost(lam, 2, 1.05, 5, 2) == pytest.approx(2 * (0.01125 * 6.0 / 3600 + 20 * 0.2e-6))
    assert value(2.0, 0.5) == pytest.approx(1.0) and value(0.0, 1.0) == 0.0


def test_prices_from_a_file(tmp_path):
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"cpu": {"price_per_hour": 0.5}, "big": {
        "kind": "cpu", "cores": 64, "speed": 1.0, "memory_gib": 128, "network_gbps": 25, "price_per_hour": 2.7}}))
    res = load_resources(path)
    assert res["cpu"].price_per_hour == 0.5 and res["cpu"].cores == 16 and res["big"].cores == 64
    path.write_text(json.dumps({"cpu": {"price": 1}}))
    with pytest.raises(ValueError, match="fields among"):
        load_resources(path)
    prof = resource_profile(PRESETS["reference-laptop"](), DEFAULT_RESOURCES["serverless"])
    assert prof.inter_host.bandwidth_Bps == pytest.approx(0.2e9 / 8) and prof.cores_per_host == 1
    assert prof.compute_scale == pytest.approx(PRESETS["reference-laptop"]().compute_scale / 0.11)


def test_simulate_cli_prices_sampling_and_stale(tmp_path, capsys):
    from sarlab.real.commands.simulate_cmd import simulate_main

    out = tmp_path / "sim.json"
    graph = "estimate:nodes=20000,edges=200000,features=16,classes=4,train=10000"
    assert simulate_main(["--graph", graph, "--workers", "2,4", "--modes", "sampling,stale", "--fanouts", "5,5",
                          "--batch-size", "500", "--profile", "reference-laptop", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["strategies"]
    assert [(r["mode"], r["workers"]) for r in rows] == [("sampling", 2), ("stale", 2), ("sampling", 4),
                                                         ("stale", 4)]
    assert rows[0]["detail"] == "fanouts 5,5, batch 500, 10 steps"  # 5000 training nodes per part
    assert "sampling" in capsys.readouterr().out
