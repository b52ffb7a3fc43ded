"""Concurrent flows on a shaped link (sarlab.simulator.network.sharing): the bandwidth share of a message sharing a busy
link end, its booking in both networks and the lockstep executor, the link-profile field (read, and used by sweeps) and
roundbench's fit."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
import simpy
from test_simulator_fixtures import INF, hand_profile

from sarlab.real.calibration.roundbench import fit_shared_efficiency
from sarlab.simulator.hardware.profile import Link
from sarlab.simulator.network.linkprofile import read_link_profile
from sarlab.simulator.network.network import Network, ResourceNetwork
from sarlab.simulator.network.sharing import SharedLink, shared_occupancy, with_sharing
from sarlab.simulator.system.epoch import simulate_epoch
from sarlab.simulator.system.runspec import RunSpec
from sarlab.simulator.system.sweep import simulate_sweep
from sarlab.simulator.workload.model import ModelSpec
from sarlab.simulator.workload.workload import estimate_partition

LINK = SharedLink(latency_s=1e-3, bandwidth_Bps=1e6, gap_s=0.0, shared_efficiency=0.8)


@pytest.mark.parametrize("network", [Network, ResourceNetwork])
def test_a_message_sharing_a_busy_link_end_moves_slower_by_hand(network):
    """Worker 0 sends 1 MB to 1 and 1 MB to 2 at t = 0 (both ends posted): the first takes 1 s of its channels and
    arrives at 1.001 s; the second finds 0's send channel busy, so it moves at 0.8 of the bandwidth, 1 / 0.8 =
    1.25 s after the first, 1.0 .. 2.25 s, arriving at 2.251 s. Worker 1 then sends 1 MB to 2 at t = 3 s, every
    channel free: 1 s, arriving at 4.001 s. A plain link books the second at 1.0 .. 2.0 s."""
    for link, second in ((LINK, 2.251), (Link(1e-3, 1e6, 0.0), 2.001)):
        env = simpy.Environment()
        net = network(env, 3, link, Link(1e-6, 1e9, 0.0), workers_per_nic=1)
        a = [net.post("a", 0, 1, 1e6, by) for by in (0, 1)][-1]
        b = [net.post("b", 0, 2, 1e6, by) for by in (0, 2)][-1]
        env.run(until=3.0)
        c = [net.post("c", 1, 2, 1e6, by, 3.0) for by in (1, 2)][-1]
        env.run()
        assert (a.deliver_at, b.deliver_at, c.deliver_at) == pytest.approx((1.001, second, 4.001), abs=1e-12)
    assert shared_occupancy(LINK, 2e6, True) == pytest.approx(2.5) and shared_occupancy(LINK, 2e6, False) == 2.0


@pytest.mark.parametrize(("mode", "prefetch"), [("sar", 0), ("sar", 1), ("oneshot", 1)])
def test_executors_agree_on_a_shared_link(mode, prefetch):
    """One worker per NIC, cores not shared: the lockstep and the event executor give the same epoch on a shared
    link, slower than on the plain link (prefetched rounds, the all-to-all and the backward's gradient returns,
    two in flight even at prefetch 0, share link ends)."""
    st = estimate_partition(4000, 40000, 4, 16, 4, edge_cut=0.3)
    spec = ModelSpec("gcn", layers=2, hidden=16, batchnorm=False, dropout=0.0)
    prof = replace(hand_profile(), inter_host=LINK, workers_per_host=1)
    prof = replace(prof, ops={k: replace(v, rate=INF) for k, v in prof.ops.items()})
    runs = [RunSpec(mode=mode, prefetch=prefetch, threads=1, executor=ex) for ex in ("lockstep", "events")]
    results = [simulate_epoch(st, spec, run, prof).epoch_time_s for run in runs]
    assert results[0] == pytest.approx(results[1], rel=1e-12)
    plain = replace(prof, inter_host=Link(LINK.latency_s, LINK.bandwidth_Bps, LINK.gap_s))
    base = simulate_epoch(st, spec, RunSpec(mode=mode, prefetch=prefetch, threads=1), plain).epoch_time_s
    assert np.all(results[0] > base)


def test_ring_without_concurrency_pays_nothing():
    """Compute free, a 1-layer SAGE-mean (it aggregates the raw features: no backward exchange), ``sar`` prefetch 0:
    every round's two messages find their channels free, so the epoch is the plain link's."""
    st = estimate_partition(4000, 40000, 4, 16, 4, edge_cut=0.3)
    spec = ModelSpec("sage", layers=1, hidden=16, batchnorm=False, dropout=0.0)
    prof = replace(hand_profile(), inter_host=LINK, workers_per_host=1)
    prof = replace(prof, ops={k: replace(v, rate=INF) for k, v in prof.ops.items()})
    plain = replace(prof, inter_host=Link(LINK.latency_s, LINK.bandwidth_Bps, LINK.gap_s))
    run = RunSpec(mode="sar", prefetch=0, threads=1)
    assert simulate_epoch(st, spec, run, prof).epoch_time_s == pytest.approx(
        simulate_epoch(st, spec, run, plain).epoch_time_s, rel=1e-12)


def test_link_profiles_carry_the_shared_efficiency(tmp_path):
    """``shared_efficiency`` of the file read makes the link a SharedLink; absent, the link profile is unchanged."""
    base = hand_profile()
    path = tmp_path / "link.json"
    path.write_text(json.dumps({"net": "veth:rate=150mbit", "bandwidth_bidir_Bps": 1.78e7, "latency_s": 1e-4,
                                "shared_efficiency": 0.57}))  # fmt: skip
    read = read_link_profile(path, base)  # the reader builds the SharedLink itself: with_sharing has nothing to do
    assert read.shared_efficiency == 0.57 and with_sharing(read) is read
    lp = with_sharing(read)
    assert isinstance(lp.link, SharedLink) and lp.link.shared_efficiency == 0.57 and lp.link.bandwidth_Bps == 1.78e7
    other = tmp_path / "plain.json"
    other.write_text(json.dumps({"net": "veth:rate=150mbit", "bandwidth_bidir_Bps": 1.78e7, "latency_s": 1e-4}))
    plain = read_link_profile(other, base)
    assert with_sharing(plain) is plain and plain.shared_efficiency == 1.0 and not isinstance(plain.link, SharedLink)
    # a link profile built by hand with the field but a plain link: with_sharing puts the field on the link
    by_hand = with_sharing(replace(plain, shared_efficiency=0.5))
    assert isinstance(by_hand.link, SharedLink) and by_hand.link.shared_efficiency == 0.5
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="shared_efficiency"):
            SharedLink(1e-3, 1e6, 0.0, shared_efficiency=bad)


def test_simulate_sweeps_on_veth_apply_the_link_files_shared_efficiency(tmp_path):
    """``sarlab simulate --net veth:... --link FILE`` (:func:`sarlab.simulator.system.sweep.simulate_sweep`) prices the
    inter-host link with the file's ``shared_efficiency``: its oneshot epoch (compute free, one worker per host) is the
    one of a profile whose inter-host link is the hand-built SharedLink (latency 1e-3 s less the base gap, the file's
    bandwidth, eta 0.5), and longer than with the same file without the field."""
    base = replace(hand_profile(), workers_per_host=1)
    base = replace(base, ops={k: replace(v, rate=INF) for k, v in base.ops.items()})
    fields = {"net": "veth:rate=150mbit", "bandwidth_bidir_Bps": 1.78e7, "latency_s": 1e-3}
    shared, plain = tmp_path / "shared.json", tmp_path / "plain.json"
    shared.write_text(json.dumps({**fields, "shared_efficiency": 0.5}))
    plain.write_text(json.dumps(fields))
    spec = ModelSpec("gcn", layers=2, hidden=16, batchnorm=False, dropout=0.0)
    workload, net = "estimate:nodes=4000,edges=40000,features=16,classes=4", "veth:rate=150mbit,hosts=4"

    def epoch(path) -> float:
        records, items = simulate_sweep(workload, ["oneshot"], [spec], [4], base, threads=1, edge_cut=0.3, net=net,
                                        links=[read_link_profile(path, base)])
        return float(items[0].result.epoch_time_s.max())

    gap = base.intra_host.gap_s
    by_hand = replace(base, inter_host=SharedLink(1e-3 - gap, 1.78e7, gap, shared_efficiency=0.5))
    st = estimate_partition(4000, 40000, 4, 16, 4, edge_cut=0.3)
    expected = simulate_epoch(st, spec, RunSpec(mode="oneshot", threads=1, workers_per_nic=1), by_hand)
    assert epoch(shared) == pytest.approx(float(expected.epoch_time_s.max()), rel=1e-9)
    assert epoch(shared) > epoch(plain)


def test_roundbench_fit_by_hand():
    """K = 7 messages per channel of T = 0.1 s: a concurrent pattern of 1.3 s has 1.2 s for 6 shared messages of
    0.1 s, eta = 0.6 / 1.2 = 0.5; one of 0.85 s eta = 0.6 / 0.75 = 0.8; the median of the two is 0.65; ``ring:0``
    (no concurrency) is not used; a pass at the ideal gives 1; 11 rounds in 2.1 s give 1.0 / 2.0 = 0.5."""
    table = {"ring:0": {"pass_s": 0.7}, "ring:1": {"pass_s": 1.3}, "oneshot": {"pass_s": 0.85}}
    assert fit_shared_efficiency(table, 8, 1_000_000, 1e7) == pytest.approx(0.65)
    assert math.isnan(fit_shared_efficiency({"ring:0": {"pass_s": 0.7}}, 8, 1_000_000, 1e7))
    assert fit_shared_efficiency({"oneshot": {"pass_s": 0.69}}, 8, 1_000_000, 1e7) == 1.0
    assert fit_shared_efficiency({"ring:1": {"pass_s": 2.1}}, 2, 1_000_000, 1e7, rounds=11) == pytest.approx(0.5)
