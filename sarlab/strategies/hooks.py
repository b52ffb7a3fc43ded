"""The hook protocol of a training strategy: the points where the full-batch trainer lets a strategy in.

A strategy is a :class:`Strategy` subclass with a frozen config dataclass beside it (``config_type``), listed in
:data:`sarlab.strategies.registry.STRATEGIES`. The trainer (:class:`sarlab.training.trainer.Trainer`) builds
one instance per strategy a run switches on and calls, in registry order:

* :meth:`Strategy.check`: refuse a combination (with the model, with another strategy) before anything is built;
* :meth:`Strategy.input_width`: the model's input width (label augmentation appends one column per class);
* :meth:`Strategy.setup`: once, after the model, the optimiser and the global split counts exist (every worker
  at the same time, so it may exchange messages);
* :meth:`Strategy.inputs`: the model's input rows of a training or evaluation forward;
* :meth:`Strategy.loss_mask`: the nodes the training loss is taken on (a strategy that changes it returns a new
  tensor; the trainer then counts the loss nodes over all workers, else it uses the training split's count);
* :meth:`Strategy.train_view`: the graph a training forward runs on, and which rows go in and come out
  (:class:`TrainView`);
* :meth:`Strategy.wants_eval` and :meth:`Strategy.after_training`: an evaluation forward this epoch, and after
  the last epoch what to compute from its logits, returned as record fields (NaN in the other epochs' records);
* :meth:`Strategy.columns`: the configuration columns of every record (called for every registered strategy,
  with ``None`` when it is off, so the records of every run carry the same columns).

The ``run`` handed to the hooks is the trainer; a hook may read its ``graph`` (the worker's
:class:`~sarlab.core.shards.ShardedGraph`), ``part``, ``x``, ``y``, ``masks`` (``train``/``val``/``test`` bool
tensors over the worker's rows), ``model`` (its ``cfg.seed`` keys per-node draws), ``global_counts`` (the
splits' sizes over all workers, float64), ``train_cfg`` and :meth:`accuracy`. Every default is a no-op, so a
strategy overrides only the points it needs.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, NamedTuple

import torch


class TrainView(NamedTuple):
    """What one training forward runs on: the model sees ``graph`` and ``x[input_rows]`` and its output row ``k``
    is the worker's local node ``output_rows[k]`` (``None``: every row, in order)."""

    graph: Any
    input_rows: torch.Tensor | None = None
    output_rows: torch.Tensor | None = None


class Strategy:
    """A training strategy's hooks (see the module docstring); every default leaves training as it is.

    Args:
        config: this strategy's ``config_type`` instance for the run.
    """

    #: the registry's key, also what the other strategies' :meth:`check` see it as
    name: ClassVar[str] = ""
    #: the frozen dataclass that configures it (an instance of it in ``TrainConfig.strategies`` switches it on)
    config_type: ClassVar[type | None] = None
    #: per-epoch record fields :meth:`after_training` fills (NaN in every other record, and when off)
    record_fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: Any):
        self.config = config

    @classmethod
    def configure(cls, train_cfg: Any, engine_cfg: Any = None, given: tuple = ()) -> Any | None:
        """This strategy's config for a run, or ``None`` when the run does not use it: the entry of
        ``train_cfg.strategies`` (or of ``given``, configs handed to the trainer itself) that is a ``config_type``.
        The built-in strategies read their own ``TrainConfig`` / ``EngineConfig`` fields instead. ``engine_cfg`` is
        ``None`` where only the optimisation settings are known (when a ``TrainConfig`` is checked)."""
        if cls.config_type is None:
            return None
        entries = (*getattr(train_cfg, "strategies", ()), *given)
        return next((c for c in entries if isinstance(c, cls.config_type)), None)

    @classmethod
    def columns(cls, config: Any | None) -> dict:
        """The configuration columns this strategy adds to every record (``config`` ``None``: off)."""
        return {}

    def check(self, model_cfg: Any, active: Mapping[str, Strategy]) -> None:
        """Raise :class:`~sarlab.data.validate_data.InputError` if this strategy cannot run with the model
        ``model_cfg`` or with the other strategies switched on (``active``, by name, itself included)."""

    def input_width(self, width: int, num_classes: int) -> int:
        """The model's input width given the width ``width`` before this strategy."""
        return width

    def setup(self, run: Any) -> None:
        """Build per-run state once the trainer has its model (every worker calls it at the same time)."""

    def inputs(self, run: Any, x: torch.Tensor, epoch: int, training: bool) -> torch.Tensor:
        """The model's input rows of a training (``training``) or evaluation forward of ``epoch``."""
        return x

    def loss_mask(self, run: Any, mask: torch.Tensor, epoch: int) -> torch.Tensor:
        """The training nodes of ``epoch`` the loss is taken on; ``mask`` itself when unchanged."""
        return mask

    def train_view(self, run: Any, view: TrainView, epoch: int, last: bool) -> TrainView:
        """The graph and rows of the training forward of ``epoch`` (``last``: the run's final epoch)."""
        return view

    def wants_eval(self, epoch: int, last: bool) -> bool:
        """Whether ``epoch`` needs an evaluation forward whatever ``eval_every`` says."""
        return False

    def after_training(self, run: Any, eval_logits: torch.Tensor | None) -> dict:
        """After the last epoch: record fields for its record (``eval_logits``: its evaluation outputs, or
        ``None`` when no evaluation ran; see :meth:`wants_eval`)."""
        return {}
