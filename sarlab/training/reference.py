"""Single-process full-graph reference built from PyG layers (an independent implementation).

Given a :class:`~sarlab.nn.model.GNN`, builds the same architecture from ``torch_geometric.nn`` convs
and ``torch.nn.BatchNorm1d`` with copied weights, runs it on the whole graph, and returns outputs, the
loss and parameter gradients under the sarlab parameter names.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from sarlab.data.graphs import Graph
from sarlab.nn.functional import dropout_by_id
from sarlab.nn.model import GNN


def _pyg_conv(conv: nn.Module, model: str, fast_rgcn: bool = False):
    import torch_geometric.nn as pyg

    if model == "rgcn":
        kind = pyg.FastRGCNConv if fast_rgcn else pyg.RGCNConv
        ref = kind(conv.in_channels, conv.out_channels, conv.num_relations, num_bases=conv.num_bases,
                   bias=conv.bias is not None)
        return ref, {name: name for name, _ in conv.named_parameters()}
    if model == "gcn":
        ref = pyg.GCNConv(conv.lin.in_features, conv.lin.out_features)
        mapping = {"lin.weight": "lin.weight", "bias": "bias"}
    elif model == "sage":
        project = conv.lin is not None
        ref = pyg.SAGEConv(conv.lin_l.in_features, conv.lin_l.out_features,
                           aggr="mean" if conv.aggr == "mean" else "max", project=project)
        mapping = {"lin_l.weight": "lin_l.weight", "lin_l.bias": "lin_l.bias", "lin_r.weight": "lin_r.weight"}
        if project:
            mapping.update({"lin.weight": "lin.weight", "lin.bias": "lin.bias"})
    else:
        ref = pyg.GATConv(conv.in_channels, conv.out_channels, heads=conv.heads, concat=conv.concat,
                          negative_slope=conv.negative_slope, add_self_loops=conv.add_self_loops,
                          bias=conv.bias is not None, residual=conv.residual)
        mapping = conv.pyg_parameter_map()
    return ref, mapping


class ReferenceModel(nn.Module):
    """PyG twin of a sarlab :class:`GNN` (same weights, same dropout masks, full-graph BatchNorm).

    R-GCN layers become PyG's ``RGCNConv`` (``fast_rgcn``: ``FastRGCNConv``, which computes per-edge messages
    ``W_r x_j`` instead of aggregating first); their forward takes the relation of every edge.
    """

    def __init__(self, model: GNN, dtype: torch.dtype = torch.float32, fast_rgcn: bool = False):
        super().__init__()
        self.cfg = model.cfg
        self.convs = nn.ModuleList()
        self.mappings = []
        for conv in model.convs:
            ref, mapping = _pyg_conv(conv, model.cfg.model, fast_rgcn)
            ref = ref.to(dtype)
            ours = dict(conv.named_parameters())
            theirs = dict(ref.named_parameters())
            with torch.no_grad():
                for mine, other in mapping.items():
                    theirs[other].copy_(ours[mine].detach().reshape(theirs[other].shape))
            self.convs.append(ref)
            self.mappings.append(mapping)
        self.norms = None
        if model.norms is not None:
            self.norms = nn.ModuleList()
            for norm in model.norms:
                bn = nn.BatchNorm1d(norm.weight.numel(), eps=norm.eps, momentum=norm.momentum).to(dtype)
                with torch.no_grad():
                    bn.weight.copy_(norm.weight)
                    bn.bias.copy_(norm.bias)
                self.norms.append(bn)

    def forward(self, x, edge_index, epoch: int = 0, edge_type: torch.Tensor | None = None):
        ids = torch.arange(x.shape[0])
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index) if edge_type is None else conv(x, edge_index, edge_type)
            if i < len(self.convs) - 1:
                if self.norms is not None:
                    x = self.norms[i](x)
                x = torch.relu(x)
                x = dropout_by_id(x, self.cfg.dropout, ids, (self.cfg.seed, epoch, i), self.training)
        return x

    def gradients_by_sarlab_name(self) -> dict:
        """Parameter gradients keyed by the twin sarlab parameter name."""
        out = {}
        for i, (conv, mapping) in enumerate(zip(self.convs, self.mappings)):
            theirs = dict(conv.named_parameters())
            for mine, other in mapping.items():
                out[f"convs.{i}.{mine}"] = theirs[other].grad
        if self.norms is not None:
            for i, bn in enumerate(self.norms):
                out[f"norms.{i}.weight"] = bn.weight.grad
                out[f"norms.{i}.bias"] = bn.bias.grad
        return out


def reference_step(model: GNN, graph: Graph, dtype: torch.dtype = torch.float32, epoch: int = 0,
                   inputs: torch.Tensor | None = None, loss_mask: np.ndarray | None = None,
                   fast_rgcn: bool = False) -> dict:
    """One training forward/backward of the PyG twin on the whole graph.

    Returns ``logits`` (original node order), ``loss`` (sum of cross-entropy over the loss nodes divided by
    their count) and ``grads`` keyed by sarlab parameter names.

    Args:
        inputs: node inputs (default: the graph's features), e.g. features with label inputs appended.
        loss_mask: the nodes the loss is taken on (default: the train split).
        fast_rgcn: R-GCN layers as PyG's ``FastRGCNConv`` instead of ``RGCNConv``.
    """
    ref = ReferenceModel(model, dtype, fast_rgcn)
    ref.train()
    x = torch.from_numpy(graph.features).to(dtype) if inputs is None else inputs.to(dtype)
    edge_index = torch.from_numpy(np.stack([graph.src, graph.dst])).long()
    edge_type = torch.from_numpy(graph.edge_type).long() if model.cfg.model == "rgcn" and graph.typed else None
    if model.cfg.model == "rgcn" and edge_type is None:
        edge_type = torch.zeros(graph.num_edges, dtype=torch.long)  # an untyped graph is one relation
    logits = ref(x, edge_index, epoch, edge_type)
    train = torch.from_numpy(graph.train_mask if loss_mask is None else loss_mask)
    labels = torch.from_numpy(graph.labels)
    loss = torch.nn.functional.cross_entropy(logits[train], labels[train], reduction="sum") / int(train.sum())
    loss.backward()
    return {"logits": logits.detach(), "loss": float(loss.detach()), "grads": ref.gradients_by_sarlab_name()}
