"""Hosts' NICs shared by their workers, link profiles of a measured network, and the METIS pair-size law."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from test_simulator_fixtures import INF, hand_profile

from sarlab.simulator.hardware.profile import Link
from sarlab.simulator.network.linkprofile import for_network, parse_net, read_link_profile
from sarlab.simulator.studies.pairstudy import pair_matrices, pair_statistics
from sarlab.simulator.system.epoch import simulate_epoch
from sarlab.simulator.system.runspec import RunSpec
from sarlab.simulator.system.sweep import simulate_sweep
from sarlab.simulator.workload.model import ModelSpec
from sarlab.simulator.workload.pairlaw import draw_partition, load_families
from sarlab.simulator.workload.workload import PartitionStats, estimate_partition

GCN1 = ModelSpec("gcn", layers=1, hidden=4, batchnorm=False, dropout=0.0)


def _four_parts() -> PartitionStats:
    halo = np.full((4, 4), 5) - 5 * np.eye(4, dtype=np.int64)
    return PartitionStats(graph="a2a", num_nodes=40, num_edges=100, feature_dim=4, num_classes=2, train_nodes=0,
                          nodes_per_part=np.full(4, 10), edges_per_shard=halo + 10 * np.eye(4, dtype=np.int64),
                          halo_rows=halo)  # fmt: skip


def test_workers_of_a_host_share_its_nic():
    """4 workers, 2 per NIC, oneshot, compute free: each host's NIC sends its two workers' 4 messages to the
    other host one after another (4 occupancies), while the messages inside a host take the fast intra link."""
    inter = Link(latency_s=1e-3, bandwidth_Bps=1e5, gap_s=0.0)
    prof = replace(hand_profile(), inter_host=inter, intra_host=Link(1e-6, 1e9, 0.0))
    prof = replace(prof, ops={k: replace(v, rate=INF) for k, v in prof.ops.items()})
    occ = 5 * 2 * 4 / 1e5  # 5 rows of 2 classes, float32
    for per_nic, sends in ((2, 4), (1, 3)):  # a shared NIC sends 4 messages to the other host; a worker's own 3
        run = RunSpec(mode="oneshot", threads=1, workers_per_nic=per_nic, executor="events", trace=True)
        res = simulate_epoch(_four_parts(), GCN1, run, prof)
        forward = [m for m in res.transfers if m.key < 16]  # layer 0's fetch (keys of the "f" phase)
        crossing = [m.end for m in forward if m.src // per_nic != m.dst // per_nic]
        assert len(forward) == 12 and max(crossing) == pytest.approx(sends * occ, rel=1e-9)


def test_link_profiles_are_read_tolerantly(tmp_path):
    """bidirectional bandwidth first, then one-way, then 0.95 of the rate; latency less the base gap; what
    was assumed is said; a veth spec maps N / H workers to each NIC."""
    base = replace(hand_profile(gap=2e-5), intra_host=Link(3e-5, 1e9, 2e-5))
    full = {"schema": "sarlab-link-profile/1", "net": "veth:rate=200mbit,hosts=2", "rate_bps": 200_000_000,
            "bandwidth_Bps": 2.4e7, "bandwidth_bidir_Bps": 2.3e7, "latency_s": 1.2e-4, "method": "netprobe"}
    path = tmp_path / "link.json"
    path.write_text(json.dumps(full))
    lp = read_link_profile(path, base)
    assert lp.link == Link(latency_s=1.0e-4, bandwidth_Bps=2.3e7, gap_s=2e-5) and not lp.assumed
    path.write_text(json.dumps({"net": "veth:rate=100mbit", "latency_s": 1e-5}))
    lp2 = read_link_profile(path, base)
    assert lp2.link.bandwidth_Bps == pytest.approx(0.95 * 1e8 / 8) and lp2.link.latency_s == 0.0
    assert lp2.rate_bps == 100_000_000 and lp2.assumed
    assert parse_net("veth:rate=1gbit,hosts=4") == ("veth", 10**9, 4) and parse_net(None)[0] == "loopback"
    prof, per_nic = for_network(base, [lp2, lp], "veth:rate=200mbit,hosts=2", 8)
    assert prof.inter_host == lp.link and per_nic == 4
    assert for_network(base, [lp], "loopback", 8) == (base, None)
    with pytest.raises(ValueError, match="link profile"):
        for_network(base, [lp], "veth:rate=1gbit", 4)
    df, items = simulate_sweep("estimate:nodes=4000,edges=40000,features=8,classes=4", ["sar"], [GCN1], [4],
                               base, net="veth:rate=200mbit,hosts=2", links=[lp])  # fmt: skip
    assert items[0].run.workers_per_nic == 2 and set(df["net"]) == {"veth:rate=200mbit,hosts=2"}


def test_a_run_takes_the_link_profile_of_its_own_backend(tmp_path):
    """Two link profiles of one rate, measured over gloo (no ``backend`` field: older profiles) and over ccl: a
    profile pricing ccl takes ccl's link, gloo's takes gloo's, whatever the order given; ccl with only gloo's link
    of that rate takes it and warns, naming the command that measures ccl's."""
    base = replace(hand_profile(gap=2e-5), intra_host=Link(3e-5, 1e9, 2e-5))
    links = []
    for name, bandwidth, backend in (("gloo", 2.3e7, None), ("ccl", 1.1e7, "ccl")):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"net": "veth:rate=200mbit", "rate_bps": 200_000_000, "latency_s": 1e-4,
                                    "bandwidth_bidir_Bps": bandwidth, **({"backend": backend} if backend else {})}))
        links.append(read_link_profile(path, base))
    assert [lp.backend for lp in links] == ["gloo", "ccl"]
    ccl = replace(base, meta={**base.meta, "backend": "ccl"})
    for given in (links, links[::-1]):
        assert for_network(base, given, "veth:rate=200mbit", 4)[0].inter_host.bandwidth_Bps == 2.3e7
        assert for_network(ccl, given, "veth:rate=200mbit", 4)[0].inter_host.bandwidth_Bps == 1.1e7
    with pytest.warns(UserWarning, match=r"no ccl link profile .*netbench --net veth:rate=200mbit --backend ccl"):
        prof, _ = for_network(ccl, links[:1], "veth:rate=200mbit", 4)
    assert prof.inter_host.bandwidth_Bps == 2.3e7


def test_shaping_cpu_of_a_link_profile_joins_the_cpu_per_byte(tmp_path):
    """The emulated path's CPU per byte (``shaping_cpu_s_per_byte``, :mod:`sarlab.real.calibration.shapebench`) is
    added to the base profile's CPU per point-to-point byte on a veth network, 2 + 3 = 5 us per byte here (loopback
    keeps 2): the epoch is the one of a base profile with 5 us per byte, and slower than without shaping where the
    workers share the cores."""
    base = replace(hand_profile(), cores_per_host=2, p2p_cpu_s_per_byte=2e-6)
    path = tmp_path / "link.json"
    path.write_text(json.dumps({"net": "veth:rate=200mbit", "bandwidth_bidir_Bps": 2.3e7, "latency_s": 1e-4,
                                "shaping_cpu_s_per_byte": 3e-6}))  # fmt: skip
    lp = read_link_profile(path, base)
    prof, per_nic = for_network(base, [lp], "veth:rate=200mbit", 4)
    assert lp.shaping_cpu_s_per_byte == 3e-6 and prof.p2p_cpu_s_per_byte == pytest.approx(5e-6)
    assert for_network(base, [lp], "loopback", 4)[0].p2p_cpu_s_per_byte == 2e-6
    st = estimate_partition(4000, 40000, 4, 16, 4, edge_cut=0.3)
    spec = ModelSpec("gcn", layers=2, hidden=16, batchnorm=False, dropout=0.0)
    run = RunSpec(mode="sar", threads=1, workers_per_nic=per_nic)
    shaped = simulate_epoch(st, spec, run, prof).epoch_time_s
    same = replace(base, inter_host=lp.link, p2p_cpu_s_per_byte=5e-6)
    assert shaped == pytest.approx(simulate_epoch(st, spec, run, same).epoch_time_s, rel=1e-12)
    assert shaped.max() > simulate_epoch(st, spec, run, replace(same, p2p_cpu_s_per_byte=2e-6)).epoch_time_s.max()
    # a crowded host's own per-byte cost (Profile.crowded_cpu) pays the shaping too; per message it does not
    crowded = replace(base, crowded_cpu={"p2p_cpu_s_per_byte": 7e-6, "p2p_msg_cpu_s": 1e-5})
    on_veth = for_network(crowded, [lp], "veth:rate=200mbit", 4)[0]
    assert on_veth.crowded_cpu == {"p2p_cpu_s_per_byte": pytest.approx(1e-5), "p2p_msg_cpu_s": 1e-5}


def test_pair_statistics_by_hand():
    """Edges, halo rows and the cut of a 6-node graph in 2 parts, counted by hand."""
    src = np.array([0, 1, 2, 3, 4, 5, 0, 3])
    dst = np.array([1, 0, 3, 2, 5, 4, 3, 1])
    parts = np.array([0, 0, 0, 1, 1, 1])
    nodes, edges, halo = pair_matrices(src, dst, parts, 2)
    assert nodes.tolist() == [3, 3]
    # into part 0 from 1: 3->2 and 3->1; into part 1 from 0: 2->3 and 0->3
    assert edges.tolist() == [[2, 2], [2, 2]]
    assert halo.tolist() == [[0, 1], [2, 0]]  # part 0 needs row 3; part 1 needs rows 0 and 2
    stats = pair_statistics(nodes, edges, halo)
    assert stats["edge_cut"] == pytest.approx(0.5)


def test_metis_law_at_a_studied_part_count_is_the_study_scaled():
    """At P = 64 the drawn partition is the study's own, scaled: the cut given (or the study's), the study's
    spread of pair sizes and local edges; ring rounds pay for the largest pair of each round."""
    fam = [f for f in load_families() if f.degree < 20][0]
    s_nodes, s_edges, _ = fam.matrices[64]
    n, E = 10_000_000, 150_000_000
    nodes, edges, halo, what = draw_partition(n, E, 64, edge_cut=0.3)
    assert nodes.sum() == n and abs(edges.sum() - E) <= 64 * 64
    st = PartitionStats("x", n, E, 8, 4, 0, nodes, edges, halo)
    assert st.edge_cut_fraction() == pytest.approx(0.3, abs=1e-5)
    off = ~np.eye(64, dtype=bool)
    c, s = edges[off].astype(float), s_edges[off].astype(float)
    assert c.max() / c.mean() == pytest.approx(s.max() / s.mean(), rel=1e-3)
    law = estimate_partition(n, E, 64, 8, 4, edge_cut=0.3, law="metis")
    uniform = estimate_partition(n, E, 64, 8, 4, edge_cut=0.3)
    ranks = np.arange(64)
    slowest = [np.mean([h[ranks, (ranks - r) % 64].max() / h[off].mean() for r in range(1, 64)])
               for h in (law.halo_rows, uniform.halo_rows)]
    assert slowest[1] == pytest.approx(1.0, abs=1e-3) and slowest[0] > 1.5
    assert "study partition" in what


def test_metis_law_draws_between_studied_counts():
    """At P = 48 (not studied) the partition is drawn: the cut as asked, repeatable by seed, pairs spread
    between the studied spreads at 32 and 64 parts."""
    n, E = 10_000_000, 150_000_000
    a = draw_partition(n, E, 48, edge_cut=0.3, seed=0)
    b = draw_partition(n, E, 48, edge_cut=0.3, seed=0)
    assert all(np.array_equal(x, y) for x, y in zip(a[:3], b[:3]))
    st = PartitionStats("x", n, E, 8, 4, 0, *a[:3])
    assert st.edge_cut_fraction() == pytest.approx(0.3, abs=1e-4)
    assert "drawn" in a[3]
    spread = {}
    fam = [f for f in load_families() if f.degree < 20][0]
    for P in (32, 64):
        _, e, _ = fam.matrices[P]
        off = ~np.eye(P, dtype=bool)
        spread[P] = np.log(np.maximum(e[off], 1)).std()
    off = ~np.eye(48, dtype=bool)
    drawn = np.log(np.maximum(a[1][off], 1)).std()
    assert 0.5 * min(spread.values()) < drawn < 2.0 * max(spread.values())
