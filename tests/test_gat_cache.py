"""The fused GAT kernels' in-cache and out-of-cache rates: recovered from edge times built with known rates and cache,
refused where the shapes cannot tell them apart, and put into the family's cost by the calibration step. No timing:
the step's timer is replaced by the model itself."""

from __future__ import annotations

import math

import pytest
import torch

import sarlab.real.calibration.gatbench as gatbench
from sarlab.simulator.calibration.calibration import Calibration, Findings
from sarlab.simulator.calibration.fitting import FREE_RATE, fit_gather_rates
from sarlab.simulator.hardware.profile import OpCost
from sarlab.simulator.workload.layers import layer_plans
from sarlab.simulator.workload.model import ModelSpec

RATE, MEM_RATE, LLC = 2.4e9, 6.8e8, 10e6


def _edge_s(work: float, gathered: float) -> float:
    hit = min(1.0, LLC / gathered)
    return work * (hit / RATE + (1.0 - hit) / MEM_RATE)


def test_fit_gather_rates_recovers_the_rates_edge_times_were_built_with():
    rows = (5_000, 20_000, 80_000)
    work = [n * 8 * 128.0 for n in rows]
    gathered = [n * 132 * 4.0 for n in rows]
    found = fit_gather_rates([_edge_s(w, g) for w, g in zip(work, gathered, strict=True)], work, gathered, LLC)
    assert found == pytest.approx((RATE, MEM_RATE), rel=1e-6)


def test_fit_gather_rates_leaves_out_shapes_with_no_time_left_and_takes_free_in_cache_work():
    """In-cache work that costs nothing beside the other terms: the smallest shape has nothing left (left out), the
    in-cache rate is the free one, the out-of-cache rate is still found."""
    rows = (5_000, 20_000, 80_000)
    work = [n * 8 * 128.0 for n in rows]
    gathered = [n * 132 * 4.0 for n in rows]
    edge_s = [w * (1.0 - min(1.0, LLC / g)) / MEM_RATE for w, g in zip(work, gathered, strict=True)]
    edge_s[0] = -1e-6  # the other terms over-explain it
    assert fit_gather_rates(edge_s, work, gathered, LLC) == (FREE_RATE, pytest.approx(MEM_RATE, rel=1e-6))


def test_fit_gather_rates_refuses_shapes_that_cannot_tell_the_rates_apart():
    work, small = [1e6, 2e6], [1e5, 2e5]  # every shape inside the cache
    assert fit_gather_rates([w / RATE for w in work], work, small, LLC) is None
    big = [1e9, 2e9]  # every shape far beyond it
    assert fit_gather_rates([_edge_s(w, g) for w, g in zip(work, big, strict=True)], work, big, LLC) is None
    assert fit_gather_rates([1e-3, 1e-3], work, [5e6, 4e7], 0.0) is None  # no cache measured


def test_the_fused_step_takes_both_rates_from_its_sweep(monkeypatch):
    """The sweep's times, made by the model with known rates and the SpMM step's cache, give the family's cost those
    rates; ``--quick`` and a calibration without a cache keep the cost as it was."""
    cost = OpCost(rate=1.3e9, overhead_s=1e-4, bwd_ratio=2.0, parallel_eff=1.0, row_rate=3e8)
    heads, ch, deg = gatbench.CACHE_SWEEP
    timed = []

    def model_time(fn, repeats, **_):  # forward and backward each take half of the modelled total
        n = gatbench.CACHE_ROWS[len(timed) // 2]
        timed.append(n)
        edge = _edge_s(n * deg * heads * ch, n * (heads * ch + heads) * 4.0)
        rows_s = n * (1 - math.exp(-deg)) * heads * ch / cost.row_rate
        return 0.5 * (edge + cost.overhead_s + rows_s) * (1.0 + cost.bwd_ratio)

    monkeypatch.setattr(gatbench, "time_call", model_time)
    found = Findings(raw={"llc_bytes": LLC, "gat_fused": {}})
    got = gatbench._with_cache(Calibration(log=lambda _l: None), found, torch.Generator().manual_seed(0), cost)
    assert (got.rate, got.mem_rate) == pytest.approx((RATE, MEM_RATE), rel=1e-6)
    assert (got.overhead_s, got.row_rate, got.bwd_ratio) == (cost.overhead_s, cost.row_rate, cost.bwd_ratio)
    assert "beyond it" in found.notes[-1]
    quick = gatbench._with_cache(Calibration(quick=True), Findings(raw={"llc_bytes": LLC}), torch.Generator(), cost)
    assert quick is cost
    assert gatbench._with_cache(Calibration(), Findings(raw={"gat_fused": {}}), torch.Generator(), cost) is cost


def test_a_gat_shard_is_priced_on_the_rows_its_kernels_gather():
    """The cache model's gathered bytes of a GAT shard are the exchanged rows the attention reads (the engine's row
    layout, ``gatbench.gat_inputs``: ``z`` and the source-score column), as the cache sweep counts them."""
    plan = layer_plans(ModelSpec(model="gat", layers=2, hidden=128, heads=4, fused=True), 64, 16)[0]
    _, rows, _ = gatbench.gat_inputs(100, 2, 4, 32, torch.Generator().manual_seed(0))
    (op,) = plan.shard_fwd(200, 100, 100)
    assert op.gather_bytes == 100 * rows.shape[1] * rows.element_size()
    sage = layer_plans(ModelSpec(model="sage", layers=2, hidden=128), 64, 16)[0]
    assert sage.shard_fwd(200, 100, 100)[0].gather_bytes == 100 * 64 * 4  # the input rows themselves
