"""GAT's priced ops and per-shard temporaries, by hand from what the engine runs, and the compute-scale warning.

The op lists follow what :mod:`sarlab.real.calibration.gatbench` times (``AttentionAggregation.accumulate`` /
``shard_vjp``, the whole of them) and what the engine runs outside those calls (``finalize``;
``SequentialAggregate.backward``'s zeroed gradients). The temporaries are inventories of the tensors
``kernels/torch_backend.py`` and the fused path hold at their peak, written out tensor by tensor.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from test_simulator_fixtures import hand_profile

from sarlab.simulator.hardware.provenance import plausibility_warnings
from sarlab.simulator.workload.layer_memory import shard_bwd_transient_bytes, shard_transient_bytes
from sarlab.simulator.workload.layers import LayerPlan, layer_plans
from sarlab.simulator.workload.model import ModelSpec
from sarlab.simulator.workload.ops import UNFUSED_CHUNK_EDGES, Op

# one shard: 6 edges into n = 4 rows from 4 source rows; layer 0 of a 2-head GAT of 8 hidden channels (C = 4)
E, N, NS, H, C, B = 6, 4, 4, 2, 4, 4
HC, W = H * C, H * C + H  # aggregated width; exchanged row width [z, s_src]


def _plan(fused: bool, autograd: bool = False) -> LayerPlan:
    spec = ModelSpec("gat", layers=2, hidden=H * C, heads=H, fused=fused, batchnorm=False)
    plan = layer_plans(spec, feature_dim=5, num_classes=3)[0]
    assert (plan.heads, plan.channels, plan.width, plan.bytes_per_element) == (H, C, W, B)
    return replace(plan, autograd=autograd)


@pytest.mark.parametrize("fused", [False, True])
def test_gat_shard_is_one_op_of_its_family(fused):
    """gatbench times the whole accumulate / shard_vjp: a shard is one op, no copies or adds beside it."""
    plan = _plan(fused)
    rows = N * (1 - math.exp(-E / N)) if fused else N  # the fused kernels skip rows without an edge
    # the gathered source rows are the exchanged rows, z and the score column (W), as the cache sweep counts them;
    # each edge is visited once per head (its score, softmax and weight)
    fwd = Op("gat_fused" if fused else "gat_unfused", E * HC, rows=rows * HC, gather_bytes=NS * W * B, edges=E * H)
    assert plan.shard_fwd(E, N, NS) == [fwd]
    bwd = plan.shard_bwd(E, N, NS)
    assert len(bwd) == 1
    assert bwd[0].family == fwd.family and bwd[0].backward
    assert bwd[0].work == fwd.work and bwd[0].gather_bytes == fwd.gather_bytes
    assert bwd[0].rows == pytest.approx(rows * HC + NS * W)


@pytest.mark.parametrize("fused", [False, True])
def test_gat_glue_outside_the_timed_calls(fused):
    """finalize (acc / l over n x HC, two calls) and the ring backward's setup: the zeroed source gradient
    (``n w``, one pass) and the zero-filled destination-input gradient ``n (w + H)`` (2.3 passes); delta is inside
    shard_vjp, so not here."""
    plan = _plan(fused)
    assert plan.finalize(N) == [Op("elementwise", 3.0 * N * HC * B, calls=2)]
    assert plan.agg_bwd_setup(N) == [Op("elementwise", 1.0 * N * W * B), Op("elementwise", 2.3 * N * (W + H) * B)]


def test_gat_under_autograd_prices_nothing_beside_its_family():
    """Under autograd gatbench's timed forward includes finalize, and autograd.grad allocates its gradients."""
    plan = _plan(fused=False, autograd=True)
    assert plan.family == "gat_autograd"
    assert plan.finalize(N) == [] and plan.agg_bwd_setup(N) == []
    assert [op.family for op in plan.shard_fwd(E, N, NS) + plan.shard_bwd(E, N, NS)] == ["gat_autograd"] * 2


def test_fused_transients_by_hand():
    """Fused (C++): the forward copies s_dst and s_src (z is read in place); the backward's VJP holds its zeroed
    destination gradient, delta, the two score copies and the kernel's g_z, g_s_src, g_s_dst."""
    plan = _plan(fused=True)
    fwd = [N * H, NS * H]  # s_dst, s_src copies
    assert shard_transient_bytes(plan, E, N, NS) == pytest.approx(sum(fwd) * B)
    bwd = [N * (W + H), N * H, N * H, NS * H, NS * HC, NS * H, N * H]  # g_dst, delta, copies, g_z, g_s_src, g_s_dst
    assert shard_bwd_transient_bytes(plan, E, N, NS) == pytest.approx(sum(bwd) * B)


def test_unfused_forward_transient_one_chunk_by_hand():
    """One chunk (all n rows): the shard's [z, 1] rows and score copies, then at the sparse product the int64
    edge rows, pre-activations, weights, the weights in expanded order, the CSR's int64 order and int32
    columns, the [n, H, C+1] sums twice (buffer and copy), the new max and rescaling factors."""
    plan = _plan(fused=False)
    shard = (NS * H * (C + 1) + NS * H + N * H) * B
    product = 8 * E + 3 * E * H * B + 8 * E * H + 4 * E * H + 2 * N * H * (C + 1) * B + 2 * N * H * B
    build = 8 * E + 2 * E * H * B + 4 * 8 * E * H + 16 * N + 2 * N * H * B  # four int64 [E H] index tensors
    assert product > build  # at 6 edges over 4 rows the product peaks
    assert shard_transient_bytes(plan, E, N, NS) == pytest.approx(shard + product)
    assert shard + product == 944  # the same count, added up on paper


def test_unfused_forward_transient_many_chunks_by_hand():
    """A shard of 3 full chunks (1 head of 16 channels, 3,000 rows: 1,000 per chunk): the chunk's CSR build
    peaks, beside the previous chunk's sums, which the loop keeps until it reassigns them."""
    spec = ModelSpec("gat", layers=2, hidden=16, heads=1, batchnorm=False)
    plan = replace(layer_plans(spec, feature_dim=5, num_classes=3)[0], autograd=False)
    e_c, n, heads, ch = UNFUSED_CHUNK_EDGES, 3000, 1, 16
    r = n // 3
    shard = (n * heads * (ch + 1) + n * heads + n * heads) * B
    previous = r * heads * (ch + 1) * B
    build = 8 * e_c + 2 * e_c * heads * B + 32 * e_c * heads + 16 * r + 2 * r * heads * B
    product = 8 * e_c + 3 * e_c * heads * B + 12 * e_c * heads + 2 * r * heads * (ch + 1) * B + 2 * r * heads * B
    assert build > product
    assert shard_transient_bytes(plan, 3 * e_c, n, n) == pytest.approx(shard + previous + build)


def test_unfused_backward_transient_by_hand():
    """Backward (one chunk per side): the VJP's zeroed destination gradient, delta, the score copies, the
    [z, 1] and [g, delta] rows; at the source side's second product the int64 local rows, pre-activations,
    alpha, alpha lrelu', the values in expanded order, the CSR (int64 order, int32 columns), the destination
    side's last sums and the new sums twice."""
    plan = _plan(fused=False)
    shard = (N * (W + H) + N * H + N * H + NS * H + NS * H * (C + 1) + N * H * (C + 1)) * B
    r = max(N, NS)
    product = 8 * E + 4 * E * H * B + 12 * E * H + r * H * (C + 1) * B + 2 * r * H * (C + 1) * B
    assert shard_bwd_transient_bytes(plan, E, N, NS) == pytest.approx(shard + product)
    assert shard + product == 1472


def test_unfused_transients_stop_growing_past_one_chunk():
    """Past one chunk the per-edge temporaries are one chunk's: more edges over the same rows never add bytes."""
    plan = _plan(fused=False)
    sizes = [shard_transient_bytes(plan, k * UNFUSED_CHUNK_EDGES, 20000, 20000) for k in (2, 4, 8)]
    assert sizes[0] >= sizes[1] >= sizes[2]
    bwd = [shard_bwd_transient_bytes(plan, k * UNFUSED_CHUNK_EDGES, 20000, 20000) for k in (2, 4, 8)]
    assert bwd[0] >= bwd[1] >= bwd[2]


@pytest.mark.parametrize(("scale", "curve", "flagged"), [
    (1.0, (), False),
    (0.5, (), False),
    (2.0, (), False),
    (0.46, (), True),  # campaign 9's
    (2.5, (), True),
    (1.0, ((1e8, 0.9), (2e9, 2.2)), True),  # a curve end outside the range
    (1.0, ((1e8, 0.6), (2e9, 1.9)), False),
])
def test_compute_scale_outside_range_warns(scale, curve, flagged):
    """``sarlab simulate`` warns on a profile whose compute scale (or a point of its curve) lies outside
    [0.5, 2], as ``sarlab calibrate`` flags it."""
    profile = replace(hand_profile(), compute_scale=scale, compute_scale_curve=curve)
    lines = plausibility_warnings(profile)
    assert len(lines) == int(flagged)
    if flagged:
        worst = max([scale] + [v for _, v in curve], key=lambda v: abs(math.log(v)))
        assert f"compute_scale {worst:.3f}" in lines[0] and "[0.5, 2]" in lines[0]
