"""BatchNorm over all nodes of a distributed graph, with exact global statistics."""
from __future__ import annotations

import torch
from torch import nn


def global_moments(graph, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Mean and biased variance of every column over all workers' rows: two passes, fp64 sums."""
    with torch.no_grad():
        stats = torch.cat([x.sum(0, dtype=torch.float64), torch.tensor([x.shape[0]], dtype=torch.float64)])
        graph.all_reduce(stats)
        count = float(stats[-1])
        mean = stats[:-1] / count
        centered = x.to(torch.float64) - mean
        var = graph.all_reduce((centered * centered).sum(0)) / count
    return mean, var, count


class _NormalizeGlobal(torch.autograd.Function):
    """``y = (x - mean) * invstd * weight + bias`` whose backward all-reduces the two gradient sums."""

    @staticmethod
    def forward(ctx, graph, x, weight, bias, mean, invstd, count: float):
        xhat = ((x.to(torch.float64) - mean) * invstd).to(x.dtype)
        ctx.graph, ctx.count = graph, count
        ctx.save_for_backward(xhat, invstd.to(x.dtype), weight)
        return xhat * weight + bias

    @staticmethod
    def backward(ctx, grad_out):
        xhat, invstd, weight = ctx.saved_tensors
        width = xhat.shape[1]
        local = torch.cat([grad_out.sum(0, dtype=torch.float64), (grad_out * xhat).sum(0, dtype=torch.float64)])
        grad_bias, grad_weight = local[:width].to(xhat.dtype), local[width:].to(xhat.dtype)
        total = ctx.graph.all_reduce(local.clone()) / ctx.count
        mean_g, mean_gx = total[:width].to(xhat.dtype), total[width:].to(xhat.dtype)
        grad_x = (grad_out - mean_g - xhat * mean_gx) * (invstd * weight)
        return None, grad_x, grad_weight, grad_bias, None, None, None


class DistBatchNorm(nn.Module):
    r"""BatchNorm over the nodes of the whole graph, as ``torch.nn.BatchNorm1d`` on the full graph.

    .. math::
        y = \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} \gamma + \beta, \qquad
        \mu = \frac{1}{N}\sum_i x_i,\ \sigma^2 = \frac{1}{N}\sum_i (x_i - \mu)^2

    with sums over every node of every worker (two all-reduces forward, one backward, fp64 sums).
    Parameter gradients are this worker's partial sums; the trainer's gradient all-reduce completes
    them. Running statistics (unbiased variance, as torch keeps) are used in eval mode.

    Args:
        channels: feature size.
        eps: added to the variance.
        momentum: running-statistics update rate.
    """

    def __init__(self, channels: int, eps: float = 1e-5, momentum: float = 0.1):
        super().__init__()
        self.eps, self.momentum = eps, momentum
        self.weight = nn.Parameter(torch.empty(channels))
        self.bias = nn.Parameter(torch.empty(channels))
        self.register_buffer("running_mean", torch.empty(channels))
        self.register_buffer("running_var", torch.empty(channels))
        self.reset_parameters()

    def reset_running_stats(self) -> None:
        """Running mean 0 and running variance 1, as ``torch.nn.BatchNorm1d``."""
        self.running_mean.zero_()
        self.running_var.fill_(1.0)

    def reset_parameters(self) -> None:
        """Scale 1, shift 0 and fresh running statistics, as ``torch.nn.BatchNorm1d``."""
        self.reset_running_stats()
        nn.init.ones_(self.weight)
        nn.init.zeros_(self.bias)

    def forward(self, graph, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return (x - self.running_mean) * (self.running_var + self.eps).rsqrt() * self.weight + self.bias
        mean, var, count = global_moments(graph, x)
        with torch.no_grad():
            unbiased = var * count / max(count - 1.0, 1.0)
            self.running_mean.mul_(1 - self.momentum).add_(self.momentum * mean.to(x.dtype))
            self.running_var.mul_(1 - self.momentum).add_(self.momentum * unbiased.to(x.dtype))
        return _NormalizeGlobal.apply(graph, x, self.weight, self.bias, mean, (var + self.eps).rsqrt(), count)
