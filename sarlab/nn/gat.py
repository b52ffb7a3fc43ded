"""Graph attention (Velickovic et al.) over a sharded graph, with fused or unfused attention."""
from __future__ import annotations

import torch
from torch import nn

from sarlab import kernels
from sarlab.core.aggregators import cached_transpose, shard_transpose
from sarlab.core.shards import Shard
from sarlab.kernels import torch_backend


def _leaky(x: torch.Tensor, slope: float) -> torch.Tensor:
    return torch.nn.functional.leaky_relu(x, slope)


# The unfused per-shard path (``sar`` without fused kernels) materialises per-edge tensors; it does so for at
# most this many edges at a time, as SAR does for shards, so its transient memory does not grow with a shard.
UNFUSED_CHUNK_EDGES = 1 << 15


class AttentionAggregation:
    r"""Softmax attention streamed over shards with an online (running-max) softmax.

    Rows exchanged between workers are ``[z_j (H*C), s^{src}_j (H)]``; destination inputs are
    ``[z_i, s^{src}_i, s^{dst}_i]``. Per destination ``i`` and head ``h`` the state is the running max
    ``m``, the denominator ``l = sum exp(e_ij - m)`` and ``acc = sum exp(e_ij - m) z_j``; when the max
    grows both are rescaled by ``exp(m_old - m_new)``; ``out = acc / l`` after the last shard.

    ``fused``: the C++ kernels stream edges without storing per-edge tensors, forward and backward.
    Unfused: plain torch; in ``sa`` and ``oneshot`` (and on one worker) it builds and keeps the autograd
    graph (E x H logits and E x H x C messages per layer), as a plain PyG-style implementation does. In
    ``sar`` it streams each shard in chunks of at most :data:`UNFUSED_CHUNK_EDGES` edges through
    ``sarlab.kernels.torch_backend`` (per-edge weights ``[H,E]``, weighted sums as sparse products), recomputing
    the attention weights in the backward pass.
    """

    linear = False

    def __init__(self, heads: int, channels: int, negative_slope: float, self_loops: bool, fused: bool,
                 backend: str | None):
        self.heads, self.channels, self.slope = heads, channels, negative_slope
        self.self_loops, self.fused, self.backend = self_loops, fused, backend
        self.keeps_graph = not fused

    # --- layout -----------------------------------------------------------------------------
    def _src(self, rows: torch.Tensor):
        hc = self.heads * self.channels
        return rows[:, :hc].reshape(-1, self.heads, self.channels), rows[:, hc:hc + self.heads]

    def _dst(self, dst_x: torch.Tensor):
        z, s_src = self._src(dst_x)
        return z, s_src, dst_x[:, -self.heads:]

    # --- forward ------------------------------------------------------------------------------
    def init(self, num_dst: int, src_x, dst_x, params, shard: Shard) -> list:
        if not self.self_loops:
            return list(kernels.empty_state(num_dst, self.heads, self.channels, dst_x))
        z, s_src, s_dst = self._dst(dst_x)
        e = _leaky(s_dst + s_src, self.slope)
        m = e.detach().clone()
        self_weight = torch.exp(e - m)  # 1, but differentiable when the graph is kept
        return [m, self_weight, self_weight.unsqueeze(-1) * z]

    def accumulate(self, state: list, shard: Shard, rows, dst_x, params) -> list:
        if shard.num_edges == 0:
            return state
        z_src, s_src = self._src(rows)
        s_dst = dst_x[:, -self.heads:]
        if torch.is_grad_enabled() and (rows.requires_grad or dst_x.requires_grad):
            return self._accumulate_autograd(state, shard, z_src, s_src, s_dst)
        m, l, acc = (t.contiguous() for t in state)
        if self.fused:
            return list(kernels.gat_forward_shard(shard.rowptr, shard.src, s_dst, s_src, z_src, self.slope,
                                                  (m, l, acc), backend=self.backend, inplace=True))
        # streamed in chunks of edges, in place into the state
        return list(torch_backend.gat_forward_shard(shard.rowptr, shard.src, s_dst, s_src, z_src, self.slope, m, l, acc,
                                                    max_edges=UNFUSED_CHUNK_EDGES, row=shard.dst))

    def _accumulate_autograd(self, state, shard, z_src, s_src, s_dst) -> list:
        m_old, l_old, acc_old = state
        e = _leaky(s_dst[shard.dst] + s_src[shard.src], self.slope)  # [E, H]
        edge_rows = shard.dst.view(-1, 1).expand_as(e)
        shard_max = torch.full_like(m_old, -torch.inf).scatter_reduce(0, edge_rows, e.detach(), "amax")
        m_new = torch.maximum(m_old, shard_max)
        scale = torch.where(torch.isinf(m_old), torch.zeros_like(m_old), torch.exp(m_old - m_new))
        weight = torch.exp(e - m_new[shard.dst])
        l_new = l_old * scale + torch.zeros_like(l_old).index_add(0, shard.dst, weight)
        msg = weight.unsqueeze(-1) * z_src[shard.src]  # [E, H, C]
        acc_new = acc_old * scale.unsqueeze(-1) + torch.zeros_like(acc_old).index_add(0, shard.dst, msg)
        return [m_new, l_new, acc_new]

    def finalize(self, graph, state: list, dst_x, params):
        m, l, acc = state
        return kernels.gat_finalize(m, l, acc), (m.detach(), l.detach())

    # --- backward -----------------------------------------------------------------------------
    def shard_vjp(self, graph, saved, out, shard: Shard, rows, dst_x, params, grad_out):
        m, l = saved
        z_src, s_src = self._src(rows)
        s_dst = dst_x[:, -self.heads:]
        g_dst = torch.zeros_like(dst_x)
        if shard.num_edges == 0:
            return torch.zeros_like(rows), g_dst, ()
        delta = (grad_out * out).sum(-1)
        if not self.fused:  # chunks of edges adding into the row gradients' column slices in place
            grad_rows = torch.zeros_like(rows)
            hc = self.heads * self.channels
            torch_backend.gat_backward_shard(
                shard.rowptr, shard.src, s_dst, s_src, z_src, self.slope, m, l, grad_out, delta,
                out=(g_dst[:, -self.heads:], grad_rows[:, hc:], grad_rows[:, :hc].view(-1, self.heads, self.channels)),
                max_edges=UNFUSED_CHUNK_EDGES, row=shard.dst, transpose=cached_transpose(shard, "torch"))
            return grad_rows, g_dst, ()
        transpose = shard_transpose(shard, self.backend)
        s_dst, s_src, grad_out = (t.contiguous() for t in (s_dst, s_src, grad_out))
        # the C++ kernels read z's rows in place (a column slice of the exchanged rows)
        g_s_dst, g_s_src, g_z = kernels.gat_backward_shard(
            shard.rowptr, shard.src, s_dst, s_src, z_src, self.slope, m, l, grad_out, delta, backend=self.backend,
            transpose=transpose)
        g_dst[:, -self.heads:] = g_s_dst
        return torch.cat([g_z.reshape(g_z.shape[0], -1), g_s_src], 1), g_dst, ()

    def self_vjp(self, graph, saved, out, dst_x, grad_out):
        """Gradient of the self-loop terms (part of ``init``) wrt the destination inputs."""
        if not self.self_loops:
            return None
        m, l = saved
        z, s_src, s_dst = self._dst(dst_x)
        pre = s_dst + s_src
        alpha = torch.exp(_leaky(pre, self.slope) - m) / torch.where(l > 0, l, torch.ones_like(l))
        delta = (grad_out * out).sum(-1)
        d_e = alpha * ((grad_out * z).sum(-1) - delta) * torch.where(pre > 0, torch.ones_like(pre),
                                                                     torch.full_like(pre, self.slope))
        g_z = alpha.unsqueeze(-1) * grad_out
        return torch.cat([g_z.reshape(g_z.shape[0], -1), d_e, d_e], 1)


class GATConv(nn.Module):
    r"""Multi-head graph attention, as PyG's ``GATConv``.

    .. math::
        \alpha_{ij} = \operatorname{softmax}_{j \in \mathcal{N}(i) \cup \{i\}}
            \operatorname{LeakyReLU}(\mathbf{a}_{dst}^\top \mathbf{W} x_i + \mathbf{a}_{src}^\top \mathbf{W} x_j),
        \qquad x'_i = \big\Vert_{h} \sum_j \alpha^h_{ij} \mathbf{W}^h x_j \;(+\, \mathbf{W}_{res} x_i) + b

    (heads concatenated, or averaged with ``concat=False``). The softmax runs incrementally across shards
    (running max, rescaled numerator and denominator); with ``fused`` attention (the engine config's
    ``fused``) no E x heads tensor is ever stored.

    Args:
        in_channels: input feature size.
        out_channels: features per head.
        heads: attention heads.
        concat: concatenate heads (else average them).
        negative_slope: LeakyReLU slope of the attention logits.
        add_self_loops: every node also attends to itself.
        bias: learnable output bias.
        residual: add a linear projection of the input.
    """

    def __init__(self, in_channels: int, out_channels: int, heads: int = 1, concat: bool = True,
                 negative_slope: float = 0.2, add_self_loops: bool = True, bias: bool = True,
                 residual: bool = False):
        super().__init__()
        self.in_channels, self.out_channels, self.heads, self.concat = in_channels, out_channels, heads, concat
        self.negative_slope, self.add_self_loops, self.residual = negative_slope, add_self_loops, residual
        total = heads * out_channels if concat else out_channels
        # allocated here, initialised in reset_parameters (skip_init draws no random numbers)
        self.lin = nn.utils.skip_init(nn.Linear, in_channels, heads * out_channels, bias=False)
        self.att_src = nn.Parameter(torch.empty(heads, out_channels))
        self.att_dst = nn.Parameter(torch.empty(heads, out_channels))
        self.res = nn.utils.skip_init(nn.Linear, in_channels, total, bias=False) if residual else None
        self.bias = nn.Parameter(torch.empty(total)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Kaiming-uniform projection (as ``nn.Linear``), Glorot-uniform attention vectors, then the residual
        projection, zero bias (in this order, so that a seed gives the same weights)."""
        self.lin.reset_parameters()
        nn.init.xavier_uniform_(self.att_src)
        nn.init.xavier_uniform_(self.att_dst)
        if self.res is not None:
            self.res.reset_parameters()
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def pyg_parameter_map(self) -> dict:
        """This layer's parameter names -> the names of the same tensors in PyG's ``GATConv``."""
        names = {"lin.weight": "lin.weight", "att_src": "att_src", "att_dst": "att_dst"}
        if self.res is not None:
            names["res.weight"] = "res.weight"
        if self.bias is not None:
            names["bias"] = "bias"
        return names

    def forward(self, graph, x: torch.Tensor) -> torch.Tensor:
        n, heads, channels = x.shape[0], self.heads, self.out_channels
        z = self.lin(x).view(n, heads, channels)
        s_src = (z * self.att_src).sum(-1)
        s_dst = (z * self.att_dst).sum(-1)
        rows = torch.cat([z.reshape(n, heads * channels), s_src], 1)
        dst_x = graph.dst(torch.cat([rows, s_dst], 1))
        config = graph.config
        attention = AttentionAggregation(heads, channels, self.negative_slope, self.add_self_loops, config.fused,
                                         None if config.kernels == "auto" else config.kernels)
        out = graph.aggregate(attention, rows, dst_x)
        out = out.reshape(out.shape[0], heads * channels) if self.concat else out.mean(1)
        if self.res is not None:
            out = out + self.res(graph.dst(x))
        return out if self.bias is None else out + self.bias
