"""GAT's dense ``pre`` work in the simulator (``GATConv.forward`` up to the aggregation, and its autograd backward).

Two references, neither taken from the code under test: byte counts added up by hand op by op (elements per row,
listed below), and the aten ops the engine's own ``GATConv`` runs, counted with ``torch.profiler`` on a stub graph.
"""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from sarlab.nn.gat import GATConv
from sarlab.simulator.workload.layers import LayerPlan, layer_plans
from sarlab.simulator.workload.model import ModelSpec
from sarlab.simulator.workload.ops import Op

B = 4
N_ROWS, F_IN, H, C, CLASSES = 10, 5, 2, 3, 4
HC = H * C
# forward, per row: z * a_src and z * a_dst (read z, write HC; a is [H, C]); the two channel sums (read HC at a
# quarter of a written pass, write H); cat [z, s_src] (read and write HC + H); cat [rows, s_dst] (HC + 2H)
PRE_FWD_ELEMS = [2 * HC, 2 * HC, HC / 4 + H, HC / 4 + H, 2 * (HC + H), 2 * (HC + 2 * H)]
# backward, passes of HC per row: four broadcast products (2.5 each), a's two row sums (1/4 each), two adds (3 each)
PRE_BWD_PASSES = [2.5, 2.5, 2.5, 2.5, 0.25, 0.25, 3.0, 3.0]
ELEMENTWISE_ATEN = ("aten::mul", "aten::sum", "aten::cat", "aten::add")


def _plans() -> list[LayerPlan]:
    spec = ModelSpec("gat", layers=2, hidden=HC, heads=H, fused=True, batchnorm=False, dropout=0.0)
    plans = layer_plans(spec, feature_dim=F_IN, num_classes=CLASSES)
    assert [(p.heads, p.channels, p.in_dim) for p in plans] == [(H, C, F_IN), (1, CLASSES, HC)]
    return plans


def test_pre_fwd_is_the_hand_count():
    plan = _plans()[0]
    assert sum(PRE_FWD_ELEMS) == pytest.approx(8.5 * HC + 8 * H)  # added up on paper: 67 elements a row
    assert plan.pre_fwd(N_ROWS) == [
        Op("gemm", pytest.approx(2.0 * N_ROWS * F_IN * HC)),
        Op("elementwise", pytest.approx(N_ROWS * sum(PRE_FWD_ELEMS) * B), calls=len(PRE_FWD_ELEMS)),
    ]


@pytest.mark.parametrize("layer,grads", [(0, 1), (1, 2)])
def test_pre_bwd_is_the_hand_count(layer, grads):
    """Layer 0 needs no input gradient (``dW`` only); layer 1 also ``dx``."""
    plan = _plans()[layer]
    hc, f_in = plan.heads * plan.channels, plan.in_dim
    assert plan.pre_bwd(N_ROWS) == [
        Op("elementwise", pytest.approx(N_ROWS * sum(PRE_BWD_PASSES) * hc * B), calls=len(PRE_BWD_PASSES),
           backward=True),
        Op("gemm", pytest.approx(grads * 2.0 * N_ROWS * f_in * hc), calls=grads),
    ]


class _StubGraph:
    """Just enough of ``ShardedGraph`` for ``GATConv.forward``: every row is local, the aggregation keeps its
    inputs and returns zeros (so that only the layer's own dense ops run)."""

    def __init__(self) -> None:
        self.config = SimpleNamespace(fused=True, kernels="auto")
        self.inputs: tuple[torch.Tensor, torch.Tensor] | None = None

    def dst(self, t: torch.Tensor) -> torch.Tensor:
        return t

    def aggregate(self, attention, rows: torch.Tensor, dst_x: torch.Tensor) -> torch.Tensor:
        self.inputs = rows, dst_x
        return torch.zeros(rows.shape[0], attention.heads, attention.channels)


def _aten_counts(prof) -> Counter:
    return Counter({e.key: e.count for e in prof.key_averages() if e.key in ELEMENTWISE_ATEN + ("aten::mm",)})


@pytest.mark.parametrize("layer", [0, 1])
def test_priced_calls_are_the_engine_ops(layer):
    """The aten calls of ``GATConv.forward`` (with its bias add, priced in ``post_fwd``) and of autograd's backward
    from the aggregation's two inputs are the calls the simulator prices."""
    plan = _plans()[layer]
    torch.manual_seed(0)
    conv = GATConv(plan.in_dim, plan.channels, heads=plan.heads)
    x = torch.randn(N_ROWS, plan.in_dim, requires_grad=plan.needs_input_grad)
    graph = _StubGraph()
    with profile(activities=[ProfilerActivity.CPU]) as fwd:
        conv(graph, x)
    rows, dst_x = graph.inputs
    with profile(activities=[ProfilerActivity.CPU]) as bwd:
        torch.autograd.backward([rows, dst_x], [torch.randn_like(rows), torch.randn_like(dst_x)])
    forward, backward = _aten_counts(fwd), _aten_counts(bwd)
    assert forward == Counter({"aten::mul": 2, "aten::sum": 2, "aten::cat": 2, "aten::add": 1, "aten::mm": 1})
    priced_fwd = plan.pre_fwd(N_ROWS) + plan.post_fwd(N_ROWS)
    assert sum(o.calls for o in priced_fwd if o.family == "elementwise") == sum(
        forward[k] for k in ELEMENTWISE_ATEN)
    assert sum(o.calls for o in priced_fwd if o.family == "gemm") == forward["aten::mm"]
    priced_bwd = plan.pre_bwd(N_ROWS)
    assert sum(o.calls for o in priced_bwd if o.family == "elementwise") == sum(
        backward[k] for k in ELEMENTWISE_ATEN) == 8
    assert sum(o.calls for o in priced_bwd if o.family == "gemm") == backward["aten::mm"] == 1 + layer
