r"""Correct & Smooth (Huang et al. 2021) on the engine's sharded graph: propagations without a backward pass.

With :math:`S = D^{-1/2} A D^{-1/2}` (``D``: in-degrees, no self-loops) and base predictions ``Z`` (softmax of
a model's logits), as PyG's ``CorrectAndSmooth``:

* correct: :math:`E^{(0)} = Y - Z` on training nodes, 0 elsewhere;
  :math:`E^{(k+1)} = \alpha_1 S E^{(k)} + (1 - \alpha_1) E^{(0)}`, then either (fixed scale) training rows reset
  to :math:`E^{(0)}` after every step and :math:`\hat Z = Z + \gamma E^{(L_1)}`, or (autoscale) every step
  clamped to [-1, 1] and row ``i`` scaled by :math:`\sigma / \lVert E^{(L_1)}_i \rVert_1`, :math:`\sigma` the mean
  L1 norm of the training errors (scales above 1000 or infinite become 1);
* smooth: :math:`G^{(0)} = \hat Z` with training rows set to their one-hot labels;
  :math:`G^{(k+1)} = \alpha_2 S G^{(k)} + (1 - \alpha_2) G^{(0)}`, clamped to [0, 1] after every step.

Every product with ``S`` is one forward aggregation of the configured mode (``sar``: ring rounds), so it runs on
any number of workers and gives the same numbers. Everything is computed in float64.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from sarlab.common.records import CS_COLUMNS
from sarlab.core.aggregators import Aggregation
from sarlab.data.validate_data import InputError, check_int, check_real
from sarlab.strategies.hooks import Strategy

_SUM = Aggregation("sum")


@dataclass(frozen=True)
class CSConfig:
    """C&S hyperparameters; the defaults are the C&S authors' for ogbn-products with a plain (linear / GNN) base
    model (CUAI/CorrectAndSmooth, ``run_experiments.py``, ``products`` ``plain_dict``: ``alpha1 = 1.0``,
    ``alpha2 = 0.9``, fixed ``scale = 20``, 50 propagations each, symmetric normalisation ``DAD``).

    Args:
        correction_layers, correction_alpha: :math:`L_1`, :math:`\\alpha_1`.
        smoothing_layers, smoothing_alpha: :math:`L_2`, :math:`\\alpha_2`.
        autoscale: scale the corrections automatically (else by ``scale``).
        scale: :math:`\\gamma` for fixed scaling.
    """

    correction_layers: int = 50
    correction_alpha: float = 1.0
    smoothing_layers: int = 50
    smoothing_alpha: float = 0.9
    autoscale: bool = False
    scale: float = 20.0

    def __post_init__(self):
        check_int("C&S correction layers", self.correction_layers, 0)
        check_int("C&S smoothing layers", self.smoothing_layers, 0)
        for name, alpha in (("correction", self.correction_alpha), ("smoothing", self.smoothing_alpha)):
            if not 0.0 <= alpha <= 1.0:
                raise InputError(f"C&S {name} alpha must be in [0, 1], got {alpha}")
        check_real("C&S scale", self.scale, 0.0)


#: the C&S authors' settings for a plain base model (CUAI/CorrectAndSmooth ``run_experiments.py``): ogbn-products
#: (fixed scale) and ogbn-arxiv (autoscale; the authors correct with ``A D^-1`` there, here with ``S`` as PyG does)
PRESETS = {"products": CSConfig(),
           "arxiv": CSConfig(correction_alpha=0.87, smoothing_alpha=0.81, autoscale=True)}


def propagate(graph, y0: torch.Tensor, alpha: float, steps: int,
              post_step: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    r""":math:`Y^{(k+1)} = \text{post}(\alpha S Y^{(k)} + (1 - \alpha) Y^{(0)})`, ``steps`` times, over the
    worker's rows (``S`` as in the module docstring)."""
    degree = graph.in_degree.to(y0.dtype)
    dinv = torch.where(degree > 0, degree.clamp(min=1).rsqrt(), torch.zeros_like(degree)).unsqueeze(1)
    out, rest = y0, (1.0 - alpha) * y0
    for _ in range(steps):
        out = post_step(graph.aggregate(_SUM, out * dinv) * dinv * alpha + rest)
    return out


@torch.no_grad()
def correct_and_smooth(graph, probs: torch.Tensor, labels: torch.Tensor, train_mask: torch.Tensor,
                       num_train_global: int, cfg: CSConfig = CSConfig()) -> torch.Tensor:
    """C&S of this worker's rows of the base predictions ``probs`` (``[rows, C]``, rows summing to 1); float64.

    Args:
        graph: the worker's whole :class:`~sarlab.core.shards.ShardedGraph` (every worker calls this together).
        probs: base predictions (softmax of the logits).
        labels: int ``[rows]``, read on training rows.
        train_mask: bool ``[rows]``, the nodes whose labels C&S uses.
        num_train_global: training nodes over all workers (autoscale's mean).
        cfg: hyperparameters.
    """
    z = probs.to(torch.float64)
    train = torch.nonzero(train_mask).view(-1)
    truth = torch.zeros_like(z)
    truth[train, labels[train]] = 1.0
    error = torch.zeros_like(z)
    error[train] = truth[train] - z[train]
    if cfg.autoscale:
        smoothed = propagate(graph, error, cfg.correction_alpha, cfg.correction_layers, lambda e: e.clamp_(-1.0, 1.0))
        sigma = graph.all_reduce(error[train].abs().sum().reshape(1)) / max(num_train_global, 1)
        scale = sigma / smoothed.abs().sum(1, keepdim=True)
        scale[scale.isinf() | (scale > 1000)] = 1.0
        corrected = z + scale * smoothed
    else:
        def reset(e: torch.Tensor) -> torch.Tensor:
            e[train] = error[train]
            return e

        corrected = z + cfg.scale * propagate(graph, error, cfg.correction_alpha, cfg.correction_layers, reset)
    start = corrected.clone()
    start[train] = truth[train]
    return propagate(graph, start, cfg.smoothing_alpha, cfg.smoothing_layers, lambda g: g.clamp_(0.0, 1.0))


@dataclass(frozen=True)
class CorrectSmoothConfig:
    """Correct & Smooth as a training strategy (``TrainConfig.correct_smooth``, ``--correct-smooth PRESET``).

    Args:
        preset: the name of the hyperparameters in :data:`PRESETS` (``products``, ``arxiv``).
        params: other hyperparameters than the preset's (the trainer's ``cs_config``); the records still name
            ``preset``.
    """

    preset: str = "products"
    params: CSConfig | None = None

    def __post_init__(self):
        if self.preset not in PRESETS:
            raise InputError(f"unknown Correct & Smooth preset {self.preset!r}: choose {', '.join(PRESETS)}")

    @property
    def hyperparameters(self) -> CSConfig:
        return self.params if self.params is not None else PRESETS[self.preset]


class CorrectAndSmooth(Strategy):
    """The trainer's hooks: the last epoch evaluates, and C&S of the softmax of its evaluation logits gives the
    train, validation and test accuracies in its record (``cs_train_acc``, ``cs_val_acc``, ``cs_test_acc``)."""

    name = "correct_smooth"
    config_type = CorrectSmoothConfig
    record_fields = CS_COLUMNS

    @classmethod
    def configure(cls, train_cfg, engine_cfg=None, given: tuple = ()) -> CorrectSmoothConfig | None:
        """From ``train_cfg.correct_smooth`` (empty: off), with the hyperparameters of a :class:`CSConfig` in
        ``given`` (the trainer's ``cs_config``) if there is one."""
        if not train_cfg.correct_smooth:
            return None
        return CorrectSmoothConfig(train_cfg.correct_smooth, next((c for c in given if isinstance(c, CSConfig)), None))

    @classmethod
    def columns(cls, config: CorrectSmoothConfig | None) -> dict:
        return {"correct_smooth": config.preset if config is not None else ""}

    def wants_eval(self, epoch: int, last: bool) -> bool:
        return last

    def after_training(self, run, eval_logits: torch.Tensor | None) -> dict:
        out = correct_and_smooth(run.graph, torch.softmax(eval_logits.to(torch.float64), 1), run.y, run.masks["train"],
                                 int(run.global_counts[0]), self.config.hyperparameters)
        return dict(zip(self.record_fields, run.accuracy(out)))
