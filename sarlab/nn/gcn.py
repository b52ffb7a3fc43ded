"""Graph convolution (Kipf & Welling) over a sharded graph."""
from __future__ import annotations

import torch
from torch import nn

from sarlab.core.aggregators import Aggregation

_SUM = Aggregation("sum")


class GCNConv(nn.Module):
    r"""GCN layer with self-loops and symmetric normalisation, as PyG's ``GCNConv``.

    .. math::
        \mathbf{x}'_i = \sum_{j \in \mathcal{N}(i) \cup \{i\}} \frac{1}{\sqrt{\hat d_j \hat d_i}}
        \mathbf{W} \mathbf{x}_j + \mathbf{b}, \qquad \hat d_i = 1 + \text{in-degree}(i)

    Rows are scaled by :math:`\hat d^{-1/2}` by their owner before they are sent, so the aggregation is a
    plain sum of copied rows (SAR case 1: no re-fetch in backward).

    Args:
        in_channels: input feature size.
        out_channels: output feature size.
        bias: add a learnable bias.
    """

    def __init__(self, in_channels: int, out_channels: int, bias: bool = True):
        super().__init__()
        # allocated here, initialised in reset_parameters (skip_init draws no random numbers)
        self.lin = nn.utils.skip_init(nn.Linear, in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Kaiming-uniform weight (as ``nn.Linear``), zero bias."""
        self.lin.reset_parameters()
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, graph, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        h = h * (graph.src_in_degree + 1).to(h.dtype).rsqrt().unsqueeze(1)
        out = (graph.aggregate(_SUM, h) + graph.dst(h)) * (graph.in_degree + 1).to(h.dtype).rsqrt().unsqueeze(1)
        return out if self.bias is None else out + self.bias
