"""GraphSAGE over a sharded graph."""
from __future__ import annotations

import torch
from torch import nn

from sarlab.core.aggregators import Aggregation

AGGRS = ("mean", "max", "pool")


class SAGEConv(nn.Module):
    r"""GraphSAGE layer, as PyG's ``SAGEConv`` (``pool`` = PyG's ``project=True, aggr='max'``).

    .. math::
        \mathbf{x}'_i = \mathbf{W}_1 \cdot \operatorname{agg}_{j \in \mathcal{N}(i)} \phi(\mathbf{x}_j)
        + \mathbf{W}_2 \mathbf{x}_i

    with :math:`\phi` the identity (``mean``, ``max``) or :math:`\operatorname{ReLU}(\mathbf{W}_p x + b_p)`
    (``pool``, computed by the owner before rows are sent). ``mean`` is SAR case 1 (no re-fetch in the
    backward pass); ``max`` and ``pool`` re-fetch and rematerialize (case 2) through the kernels' running
    max (the engine config's ``kernels`` picks their backend).

    Args:
        in_channels: input feature size.
        out_channels: output feature size.
        aggr: ``mean``, ``max`` or ``pool``.
    """

    def __init__(self, in_channels: int, out_channels: int, aggr: str = "mean"):
        super().__init__()
        if aggr not in AGGRS:
            raise ValueError(f"unknown SAGE aggregator {aggr!r}: choose one of {', '.join(AGGRS)}")
        self.aggr = aggr
        self.reduce = "mean" if aggr == "mean" else "max"
        # parameters are allocated here and initialised in reset_parameters (skip_init draws no random numbers)
        self.lin = nn.utils.skip_init(nn.Linear, in_channels, in_channels, bias=True) if aggr == "pool" else None
        self.lin_l = nn.utils.skip_init(nn.Linear, in_channels, out_channels, bias=True)
        self.lin_r = nn.utils.skip_init(nn.Linear, in_channels, out_channels, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Initialise the weights as ``nn.Linear`` does (Kaiming-uniform), pool projection first."""
        if self.lin is not None:
            self.lin.reset_parameters()
        self.lin_l.reset_parameters()
        self.lin_r.reset_parameters()

    def forward(self, graph, x: torch.Tensor) -> torch.Tensor:
        src = torch.relu(self.lin(x)) if self.lin is not None else x
        aggregation = Aggregation(self.reduce, backend=graph.config.kernels)
        return self.lin_l(graph.aggregate(aggregation, src)) + self.lin_r(graph.dst(x))
