r"""What PyG layers do to ``edge_index`` before ``propagate``, done on the sharded graph; and what is refused.

* ``GCNConv`` (``normalize=True``): ``gcn_norm`` with global degrees.

  .. math::
      \mathbf{x}'_i = \hat d_i^{-1/2} \Big(\sum_{j \to i} \hat d_j^{-1/2} \mathbf{h}_j
      + f\, \hat d_i^{-1/2} \mathbf{h}_i\Big), \qquad \hat d_i = \text{in-degree}(i) + f

  with the self-loop weight ``f`` = 1 (2 with ``improved``, 0 without ``add_self_loops``); each owner scales its
  rows by :math:`\hat d_j^{-1/2}` before they are sent, so the shards sum copied rows (case 1).
* ``GATConv``: ``edge_updater`` returns the per-node logits unchanged (:class:`AttentionLogits`) and
  ``propagate`` runs the engine's online softmax over all in-edges (:class:`~sarlab.nn.gat.AttentionAggregation`:
  running max and denominator across blocks, the self-loop in the initial state), exact in every mode.
* ``RGCNConv``: its forward is replaced for the run (it masks ``edge_index`` by relation):
  :math:`\sum_r \operatorname{mean}_{j \in N_r(i)} \mathbf{x}_j \mathbf{W}_r + \mathbf{x}_i \mathbf{W}_{root} + b`
  with the engine's relational aggregation (case 2) and PyG's parameters.
* Every other layer: the generic :func:`~sarlab.nn.pyg_propagate.sharded_propagate`.

Refused, one line each (:func:`check_layer`, or at the call): ``decomposed_layers > 1``, explain mode, propagate
hooks, an aggregator other than sum/mean/max or an overridden ``aggregate``, a message that reads ``index``/``ptr``
(a per-node reduction over in-edges, other than GAT's rule), per-edge tensors (``edge_weight``, ``edge_attr``),
GAT's attention dropout in training (a per-edge mask that the rematerialised backward could not redraw),
``return_attention_weights``, R-GCN's block decomposition or non-mean aggregation.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from sarlab.data.validate_data import InputError
from sarlab.nn.gat import AttentionAggregation
from sarlab.nn.pyg_edges import ShardedEdges
from sarlab.nn.pyg_propagate import check_propagate, sharded_propagate
from sarlab.nn.rgcn import RelationalAggregation, inverse_relation_degree

#: PyG's per-layer hook tables; a hook would expect PyG's per-edge tensors
_HOOK_TABLES = ("_propagate_forward_pre_hooks", "_propagate_forward_hooks", "_message_forward_pre_hooks",
                "_message_forward_hooks", "_aggregate_forward_pre_hooks", "_aggregate_forward_hooks",
                "_edge_update_forward_pre_hooks", "_edge_update_forward_hooks")


class AttentionLogits:
    """GATConv's per-node attention logits (source, destination), standing in for its per-edge softmax."""

    __slots__ = ("source", "target")

    def __init__(self, source: torch.Tensor, target: torch.Tensor):
        self.source, self.target = source, target


def _is_sharded(edge_index) -> bool:
    return isinstance(edge_index, ShardedEdges)


def _kind(layer) -> str:
    """Which rule the layer takes: ``gcn``, ``gat``, ``rgcn`` or ``generic``."""
    from torch_geometric.nn import conv

    if isinstance(layer, conv.GCNConv) and type(layer).message is conv.GCNConv.message and layer.normalize:
        return "gcn"
    if isinstance(layer, conv.GATConv) and type(layer).message is conv.GATConv.message \
            and type(layer).edge_update is conv.GATConv.edge_update:
        return "gat"
    if isinstance(layer, conv.RGCNConv) and type(layer).forward is conv.RGCNConv.forward:
        return "rgcn"
    return "generic"


def check_layer(label: str, layer) -> None:
    """:class:`InputError` (one line, naming ``label``) when ``layer`` cannot run exactly on a sharded graph."""
    if layer.decomposed_layers != 1:
        raise InputError(f"{label}: decomposed_layers={layer.decomposed_layers}; sarlab already streams in blocks "
                         "(set decomposed_layers=1)")
    if layer.explain:
        raise InputError(f"{label}: explain mode needs per-edge masks over the whole edge_index; not on shards")
    for table in _HOOK_TABLES:
        if getattr(layer, table, None):
            raise InputError(f"{label}: has {table[1:]} registered; hooks see PyG's per-edge tensors, which a "
                             "worker does not build")
    kind = _kind(layer)
    if kind == "rgcn":
        if layer.num_blocks is not None:
            raise InputError(f"{label}: RGCNConv with num_blocks (block-diagonal decomposition) has no sharded rule")
        if layer.aggr != "mean":
            raise InputError(f"{label}: RGCNConv with aggr={layer.aggr!r}; sarlab's relational rule is the mean")
        return
    if kind == "gat" and layer.lin_edge is not None:
        raise InputError(f"{label}: GATConv with edge_dim (edge features): a worker has no per-edge tensor")
    check_propagate(label, layer, None)


def instance_methods(label: str, layer) -> dict[str, Callable]:
    """The methods set on ``layer`` (the instance) for a run: each falls back to PyG's own for a real
    ``edge_index``."""
    cls = type(layer)
    kind = _kind(layer)

    def propagate(edge_index, size=None, **kwargs):
        if not _is_sharded(edge_index):
            return cls.propagate(layer, edge_index, size=size, **kwargs)
        if kind == "gcn":
            return _gcn_propagate(label, layer, edge_index.graph, size, **kwargs)
        if kind == "gat" and isinstance(kwargs.get("alpha"), AttentionLogits):
            return _gat_propagate(label, layer, edge_index.graph, size, **kwargs)
        return sharded_propagate(layer, label, edge_index, size, **kwargs)

    def edge_updater(edge_index, size=None, **kwargs):
        if not _is_sharded(edge_index):
            return cls.edge_updater(layer, edge_index, size=size, **kwargs)
        if kind != "gat":
            raise InputError(f"{label}: calls edge_updater (a per-edge computation over all in-edges, e.g. "
                             "attention); sarlab has a sharded rule for GATConv only")
        return _gat_logits(label, layer, size, **kwargs)

    methods = {"propagate": propagate, "edge_updater": edge_updater}
    if kind == "rgcn":
        def forward(x, edge_index, edge_type=None):
            if not _is_sharded(edge_index):
                return cls.forward(layer, x, edge_index, edge_type)
            return _rgcn_forward(label, layer, edge_index.graph, x)
        methods["forward"] = forward
    return methods


# --- GCN ----------------------------------------------------------------------------------------------------
def _gcn_propagate(label: str, layer, graph, size, x, edge_weight=None) -> torch.Tensor:
    from sarlab.core.aggregators import Aggregation

    if edge_weight is not None:
        raise InputError(f"{label}: GCNConv was given edge_weight; a worker has no per-edge tensor (drop it)")
    if size is not None:
        raise InputError(f"{label}: propagate was given size={size}; sarlab's sharded graph sets the sizes")
    fill = 0.0 if not layer.add_self_loops else (2.0 if layer.improved else 1.0)

    def inv_sqrt(degree: torch.Tensor) -> torch.Tensor:
        d = (degree.to(x.dtype) + fill).pow(-0.5)
        return d.masked_fill(torch.isinf(d), 0.0).unsqueeze(1)

    src_scale, dst_scale = inv_sqrt(graph.src_in_degree), inv_sqrt(graph.in_degree)
    rows = x * src_scale
    out = graph.aggregate(Aggregation("sum", backend=graph.config.kernels), rows)
    if fill:
        out = out + fill * graph.dst(rows)
    return out * dst_scale


# --- GAT ----------------------------------------------------------------------------------------------------
def _gat_logits(label: str, layer, size, alpha, edge_attr=None) -> AttentionLogits:
    if edge_attr is not None:
        raise InputError(f"{label}: GATConv was given edge_attr; a worker has no per-edge tensor")
    if size is not None:
        raise InputError(f"{label}: GATConv was given size={size}; sarlab's sharded graph sets the sizes")
    if layer.dropout > 0 and layer.training:
        raise InputError(f"{label}: GATConv(dropout={layer.dropout}) drops attention weights per edge, a mask that "
                         "sar's rematerialised backward cannot redraw; use dropout=0 (drop node features instead)")
    source, target = alpha
    if target is None:
        raise InputError(f"{label}: GATConv without destination features (x=(x_src, None)) has no sharded rule")
    return AttentionLogits(source, target)


def _gat_propagate(label: str, layer, graph, size, x, alpha: AttentionLogits) -> torch.Tensor:
    x_src, x_dst = x if isinstance(x, (tuple, list)) else (x, x)
    n, heads, channels = x_src.shape
    rows = torch.cat([x_src.reshape(n, heads * channels), alpha.source], 1)
    # the self-loop i -> i reads i's source-side rows, with i's destination logit
    dst_x = torch.cat([graph.dst(rows), alpha.target], 1)
    config = graph.config
    attention = AttentionAggregation(heads, channels, layer.negative_slope, layer.add_self_loops, config.fused,
                                     None if config.kernels == "auto" else config.kernels)
    return graph.aggregate(attention, rows, dst_x)


# --- R-GCN --------------------------------------------------------------------------------------------------
def _rgcn_forward(label: str, layer, graph, x) -> torch.Tensor:
    if not torch.is_tensor(x) or not x.is_floating_point():
        raise InputError(f"{label}: RGCNConv on a worker needs floating-point node features (not node indices or "
                         "a tuple)")
    if graph.num_relations != layer.num_relations:
        raise InputError(f"{label}: RGCNConv built for {layer.num_relations} relations, the graph has "
                         f"{graph.num_relations}")
    weight = layer.weight
    if layer.num_bases is not None:
        weight = (layer.comp @ weight.view(layer.num_bases, -1)).view(layer.num_relations, layer.in_channels_l,
                                                                      layer.out_channels)
    aggregation = RelationalAggregation(inverse_relation_degree(graph, x.dtype))
    out = graph.aggregate(aggregation, x, params=(weight,))
    if layer.root is not None:
        out = out + graph.dst(x) @ layer.root
    return out if layer.bias is None else out + layer.bias
