"""sarlab.real.calibration.roundbench's global rounds (the SAR library's round: one exchange with every peer) on
loopback ranks, and the simulator's round model of its patterns (sarlab.simulator.system.roundmodel) against
hand-computed pass times."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from test_simulator_fixtures import hand_profile

from sarlab.real.calibration.roundbench import fit_shared_efficiency, measure, summarize
from sarlab.simulator.hardware.profile import Link
from sarlab.simulator.system.roundmodel import model_pass, pass_bytes

NBYTES = 400  # 100 fp32 elements per message


@pytest.mark.parametrize("world", [2, 3])
def test_global_rounds_on_loopback_move_the_bytes_by_hand(world):
    """W ranks on 127.0.0.1, one repeat of ``ring:0``, ``global`` and ``global-a2a``. By hand a rank sends per pass
    W - 1 messages of 400 B (``ring:0``), and in a global pass also a 4-byte tensor to each of the W - 2 peers that
    are not the round's destination, in every round: W = 2: 400 B both; W = 3: 800 B and 2 x (400 + 4) = 808 B.
    Each rank checks that every buffer it received holds its sender's rank (a wrong routing fails the child)."""
    hand = {2: {"ring:0": 400, "global": 400, "global-a2a": 400},
            3: {"ring:0": 800, "global": 808, "global-a2a": 808}}[world]
    raw = measure("loopback", world, list(hand), NBYTES, repeats=1, spin_s=0.0, timeout_s=120.0)
    samples = raw["samples"]
    assert sorted((s["pattern"], s["rank"]) for s in samples) == sorted((p, r) for p in hand for r in range(world))
    for s in samples:
        assert s["bytes_sent"] == hand[s["pattern"]], s
        assert len(s["waits_s"]) == world - 1  # one wait per round: every round is waited before the next
    table = summarize(samples, world, NBYTES, 0.0)
    for pattern, row in table.items():
        assert row["bytes_sent_per_rank"] == hand[pattern]
        assert row["round_s"] == pytest.approx(row["pass_s"] / (world - 1))
        assert row["pass_s"] > 0 and row["ideal_s"] == 0.0


def test_a_failing_rank_fails_with_its_traceback():
    """A pattern the ranks refuse (the parent's check bypassed): the run fails at once with the rank's stderr."""
    with pytest.raises(RuntimeError, match=r"roundbench process \d exited with 2") as err:
        measure("loopback", 2, ["bogus"], NBYTES, repeats=1, spin_s=0.0, timeout_s=60.0)
    assert "write ring:D, oneshot, global or global-a2a" in str(err.value)


def test_pass_bytes_by_hand():
    """1 MB messages at W = 8: 7 rounds of 1,000,000 B, the global round also 6 x 4 B per round; 10 rounds with
    --rounds 10; a message of 6 bytes is one fp32 element short of 8, 4 B."""
    assert pass_bytes("ring:0", 8, 1_000_000) == 7_000_000
    assert pass_bytes("global", 8, 1_000_000) == 7_000_168
    assert pass_bytes("global-a2a", 8, 1_000_000, rounds=10) == 10_000_240
    assert pass_bytes("oneshot", 8, 1_000_000, rounds=10) == 7_000_000
    assert pass_bytes("ring:1", 2, 6) == 4


def test_model_rounds_by_hand():
    """The model on a link of L = 1 ms, B = 1 MB/s, g = 0.2 ms, with call c = 30 us, o = 10 us per op posted, w = 5 us
    per op waited. A ring:0 round of b = 0.1 MB: posted c + 2 o = 50 us, on the channels g + b/B = 100.2 ms,
    delivered L later, then 2 w: 101.26 ms; W = 4: 3 rounds. A global round posts 2 (W - 1) = 6 ops (90 us) and waits
    6 (30 us): 101.32 ms. With b = 4 B at W = 8 the global round's sync, (W - 2) g + L = 2.2 ms after the last
    join, outlasts the message (g + b/B + L = 1.204 ms): c + 14 o + 2.2 ms + 14 w = 2.44 ms, 7 rounds; the pairwise
    round stays 0.05 + 1.204 + 0.01 = 1.264 ms."""
    profile = replace(hand_profile(latency=1e-3, bandwidth=1e6, gap=2e-4), p2p_call_s=30e-6, p2p_op_s=10e-6,
                      p2p_wait_s=5e-6)
    link = profile.inter_host
    assert model_pass("ring:0", 4, 100_000, link, profile) == pytest.approx(3 * 101.26e-3, rel=1e-9)
    assert model_pass("global", 4, 100_000, link, profile) == pytest.approx(3 * 101.32e-3, rel=1e-9)
    assert model_pass("global-a2a", 4, 100_000, link, profile) == pytest.approx(3 * 101.32e-3, rel=1e-9)
    assert model_pass("global", 8, 4, link, profile) == pytest.approx(7 * 2.44e-3, rel=1e-9)
    assert model_pass("ring:0", 8, 4, link, profile) == pytest.approx(7 * 1.264e-3, rel=1e-9)
    # W = 2: no other peer, the global round is the pairwise one (its sync, L after the join, ends first)
    assert model_pass("global", 2, 100_000, link, profile) == pytest.approx(101.26e-3, rel=1e-9)


def test_model_overlaps_prefetched_rounds_by_hand():
    """ring:1 at W = 3 with b = 0.1 MB, L = 1 ms, no software cost, g = 0: both rounds are posted at 0, but a rank's
    two sends share its send channel, so round 2's message follows round 1's (0.1 s each) and arrives at
    0.2 s + L = 0.201 s (ring:0 posts round 2 on round 1's arrival: 2 x 0.101 = 0.202 s). With 10 ms of spin per
    round after its wait, ring:1 ends at max(0.201, 0.101 + 0.01) + 0.01 = 0.211 s."""
    link = Link(latency_s=1e-3, bandwidth_Bps=1e6, gap_s=0.0)
    profile = hand_profile(latency=1e-3, bandwidth=1e6, gap=0.0)
    assert model_pass("ring:0", 3, 100_000, link, profile) == pytest.approx(0.202, rel=1e-9)
    assert model_pass("ring:1", 3, 100_000, link, profile) == pytest.approx(0.201, rel=1e-9)
    assert model_pass("ring:1", 3, 100_000, link, profile, spin_s=0.01) == pytest.approx(0.211, rel=1e-9)


def test_shared_efficiency_fit_leaves_the_global_rounds_out():
    """``global`` and ``ring:0`` have one bulk flow per link end: the fit uses ring:1 only (eta 0.5 as in
    test_simulator_sharing's hand fit); without a concurrent pattern it is NaN."""
    table = {"ring:0": {"pass_s": 0.7}, "global": {"pass_s": 5.0}, "ring:1": {"pass_s": 1.3}}
    assert fit_shared_efficiency(table, 8, 1_000_000, 1e7) == pytest.approx(0.5)
    assert math.isnan(fit_shared_efficiency({"global": {"pass_s": 0.7}}, 8, 1_000_000, 1e7))
