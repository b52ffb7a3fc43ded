"""Relational graph convolution (Schlichtkrull et al.) over a sharded typed graph: SAR case 2."""
from __future__ import annotations

import math

import torch
from torch import nn

from sarlab.core.shards import Shard, relation_shards


class RelationalAggregation:
    r"""``out_i = sum_r (1 / |N_r(i)|) sum_{j in N_r(i)} x_j W_r``, streamed over shards, one relation at a time.

    The relation weights ``W_r`` (``params[0]``, ``[R, F_in, F_out]``) act inside the aggregation, so a shard's
    share of their gradient, :math:`\sum_i (A_{q,r} X_q)_i^\top g_i / |N_r(i)|`, needs the shard's source rows:
    SAR *case 2* (``sar`` re-fetches them in the backward pass, ``sa`` keeps them, ``oneshot`` keeps the halo).
    Per shard and relation the aggregation runs first (a sparse product over the relation's edges into the
    destination rows it reaches), then the dense ``@ W_r``, as PyG's ``RGCNConv`` orders it.

    Args:
        inv_degree: ``[destinations, R]``, ``1 / |N_r(i)|`` (0 where node ``i`` has no in-edge of relation ``r``).
    """

    linear = False
    needs_output = False  # the backward reads the source rows and the weights, never the output
    vjp_into = True  # shard_vjp adds the rows' gradient into a given tensor (the local shard's: into grad_src)

    def __init__(self, inv_degree: torch.Tensor):
        self.inv_degree = inv_degree
        self.num_relations = int(inv_degree.shape[1])

    def _scaled(self, rel, values: torch.Tensor) -> torch.Tensor:
        return values * self.inv_degree[rel.dst_rows, rel.relation].unsqueeze(1)

    def init(self, num_dst: int, src_x: torch.Tensor, dst_x, params, shard: Shard) -> list:
        return [torch.zeros(num_dst, params[0].shape[2], dtype=src_x.dtype)]

    def accumulate(self, state: list, shard: Shard, rows: torch.Tensor, dst_x, params) -> list:
        weight, out = params[0], state[0]
        for rel in relation_shards(shard, self.num_relations):
            gathered = self._scaled(rel, rel.shard.spmm(rows))  # [rows the relation reaches, F_in]
            out.index_add_(0, rel.dst_rows, gathered @ weight[rel.relation])
        return state

    def finalize(self, graph, state: list, dst_x, params) -> tuple[torch.Tensor, tuple]:
        return state[0], ()

    def shard_vjp(self, graph, saved: tuple, out: torch.Tensor, shard: Shard, rows: torch.Tensor, dst_x,
                  params: tuple, grad_out: torch.Tensor, grad_rows: torch.Tensor | None = None):
        """This shard's gradients: rows ``sum_r A_{q,r}^T (g / deg_r) W_r^T`` (added into ``grad_rows`` when given);
        ``W_r``: ``(A_{q,r} X_q / deg_r)^T g`` (the rows are needed for the latter: case 2)."""
        weight = params[0]
        grad_weight = torch.zeros_like(weight)
        if grad_rows is None:
            grad_rows = torch.zeros(rows.shape, dtype=grad_out.dtype)
        for rel in relation_shards(shard, self.num_relations):
            grad = self._scaled(rel, grad_out[rel.dst_rows])  # [rows the relation reaches, F_out]
            grad_weight[rel.relation].addmm_(rel.shard.spmm(rows).T, grad)  # rematerialised A_{q,r} X_q
            rel.shard.spmm(grad @ weight[rel.relation].T, transpose=True, out=grad_rows)
        return grad_rows, None, (grad_weight,)


#: edges per block of the per-edge path when no autograd graph is kept (bounds its per-edge temporaries)
EDGE_CHUNK = 1 << 15


def _edge_blocks(num_edges: int, whole: bool) -> list[tuple[int, int]]:
    if whole or num_edges <= EDGE_CHUNK:
        return [(0, num_edges)]
    return [(first, min(first + EDGE_CHUNK, num_edges)) for first in range(0, num_edges, EDGE_CHUNK)]


class EdgeRelationalAggregation(RelationalAggregation):
    r"""The same aggregation with one message :math:`x_j W_r / |N_r(i)|` per edge, the order of PyG's
    ``FastRGCNConv`` and of DGL's ``RelGraphConv`` (which the SAR paper's R-GCN patched), for comparison.

    Like GAT's unfused path (``keeps_graph``), ``sa``, ``oneshot`` and a single worker run it under plain autograd
    and keep per edge the gathered source row (``E x F_in`` per layer), as such an implementation does; ``sar``
    computes the messages of one shard and relation at a time in blocks of :data:`EDGE_CHUNK` edges, frees them,
    and rebuilds them in the backward pass.
    """

    keeps_graph = True

    def accumulate(self, state: list, shard: Shard, rows: torch.Tensor, dst_x, params) -> list:
        weight, out = params[0], state[0]
        building = torch.is_grad_enabled()
        for rel in relation_shards(shard, self.num_relations):
            for first, end in _edge_blocks(rel.shard.num_edges, building):
                dst_rows = rel.dst_rows[rel.shard.dst[first:end]]
                scale = self.inv_degree[dst_rows, rel.relation].unsqueeze(1)
                messages = (rows[rel.shard.src[first:end]] @ weight[rel.relation]) * scale  # [edges, F_out]
                out = out.index_add(0, dst_rows, messages) if building else out.index_add_(0, dst_rows, messages)
        return [out]

    def shard_vjp(self, graph, saved: tuple, out, shard: Shard, rows: torch.Tensor, dst_x, params: tuple,
                  grad_out: torch.Tensor, grad_rows: torch.Tensor | None = None):
        weight = params[0]
        grad_weight = torch.zeros_like(weight)
        if grad_rows is None:
            grad_rows = torch.zeros(rows.shape, dtype=grad_out.dtype)
        for rel in relation_shards(shard, self.num_relations):
            for first, end in _edge_blocks(rel.shard.num_edges, False):
                src, dst_rows = rel.shard.src[first:end], rel.dst_rows[rel.shard.dst[first:end]]
                grad = grad_out[dst_rows] * self.inv_degree[dst_rows, rel.relation].unsqueeze(1)  # per edge
                grad_weight[rel.relation].addmm_(rows[src].T, grad)
                grad_rows.index_add_(0, src, grad @ weight[rel.relation].T)
        return grad_rows, None, (grad_weight,)


def inverse_relation_degree(graph, dtype: torch.dtype) -> torch.Tensor:
    """``[destinations, R]``: ``1 / |N_r(i)|``, 0 where there is no in-edge of relation ``r``."""
    degree = graph.relation_degree().to(dtype)
    return torch.where(degree > 0, 1.0 / degree.clamp(min=1), torch.zeros_like(degree))


def _glorot(t: torch.Tensor) -> None:
    """Uniform in ``+-sqrt(6 / (fan_in + fan_out))`` over the last two dimensions (PyG's ``glorot``)."""
    bound = math.sqrt(6.0 / (t.shape[-2] + t.shape[-1]))
    with torch.no_grad():
        t.uniform_(-bound, bound)


class RGCNConv(nn.Module):
    r"""Relational GCN layer, as PyG's ``RGCNConv`` (mean aggregation per relation, root weight, bias).

    .. math::
        \mathbf{x}'_i = \mathbf{\Theta}_{\textrm{root}} \mathbf{x}_i + \sum_{r \in \mathcal{R}}
        \frac{1}{|\mathcal{N}_r(i)|} \sum_{j \in \mathcal{N}_r(i)} \mathbf{\Theta}_r \mathbf{x}_j + \mathbf{b}

    with per-relation weights :math:`\mathbf{\Theta}_r` (``weight``, ``[R, in, out]``), or with ``num_bases``
    the basis decomposition :math:`\mathbf{\Theta}_r = \sum_b a_{rb} \mathbf{V}_b` (``comp`` ``[R, B]``,
    ``weight`` ``[B, in, out]``). Parameter names and shapes are PyG's. The aggregation is SAR case 2 (see
    :class:`RelationalAggregation`): a peer's rows are fetched once per ring round and every relation is
    aggregated from them. The engine config's ``fused`` picks the order: aggregate, then ``@ W_r`` (default),
    or unfused one message per edge (:class:`EdgeRelationalAggregation`, as PyG's ``FastRGCNConv``).

    Args:
        in_channels: input feature size.
        out_channels: output feature size.
        num_relations: number of relations ``R``.
        num_bases: use the basis decomposition with this many bases (None: one weight per relation).
        bias: add a learnable bias.
    """

    def __init__(self, in_channels: int, out_channels: int, num_relations: int, num_bases: int | None = None,
                 bias: bool = True):
        super().__init__()
        if num_relations < 1 or (num_bases is not None and num_bases < 1):
            raise ValueError(f"R-GCN needs num_relations >= 1 and num_bases >= 1 (or None), got {num_relations} "
                             f"and {num_bases}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.num_relations, self.num_bases = num_relations, num_bases
        self.weight = nn.Parameter(torch.empty(num_bases or num_relations, in_channels, out_channels))
        self.comp = nn.Parameter(torch.empty(num_relations, num_bases)) if num_bases else None
        self.root = nn.Parameter(torch.empty(in_channels, out_channels))
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Glorot-uniform weights, bases' coefficients and root weight (in this order), zero bias, as PyG."""
        _glorot(self.weight)
        if self.comp is not None:
            _glorot(self.comp)
        _glorot(self.root)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def relation_weights(self) -> torch.Tensor:
        """``[R, in, out]``: the weight of every relation (combined from the bases with ``num_bases``)."""
        if self.comp is None:
            return self.weight
        return (self.comp @ self.weight.reshape(self.num_bases, -1)).reshape(self.num_relations, self.in_channels,
                                                                            self.out_channels)

    def forward(self, graph, x: torch.Tensor) -> torch.Tensor:
        if graph.num_relations != self.num_relations:
            raise ValueError(f"R-GCN layer built for {self.num_relations} relations, the graph has "
                             f"{graph.num_relations}")
        kind = RelationalAggregation if graph.config.fused else EdgeRelationalAggregation
        aggregation = kind(inverse_relation_degree(graph, x.dtype))
        out = graph.aggregate(aggregation, x, params=(self.relation_weights(),)) + graph.dst(x) @ self.root
        return out if self.bias is None else out + self.bias
