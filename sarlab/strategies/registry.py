"""The training strategies the full-batch trainer knows, by name, and how a run's settings switch them on.

A new strategy is one module beside the others (its :class:`~sarlab.strategies.hooks.Strategy` subclass and
its config dataclass) and one entry in :data:`STRATEGIES`; the trainer calls every switched-on strategy's hooks
in this order and never names one. The table is written here only (no registration at run time: every worker
process sees the same strategies).
"""
from __future__ import annotations

import math
from typing import Any

from sarlab.data.validate_data import InputError
from sarlab.strategies.correct_smooth import CorrectAndSmooth
from sarlab.strategies.hooks import Strategy
from sarlab.strategies.label_aug import LabelAugmentation
from sarlab.strategies.mfg import MFGPruning
from sarlab.strategies.stale import Staleness

#: every strategy by name, in the order the trainer calls their hooks (and their checks run)
STRATEGIES: dict[str, type[Strategy]] = {
    "stale": Staleness,
    "mfg": MFGPruning,
    "label_aug": LabelAugmentation,
    "correct_smooth": CorrectAndSmooth,
}


def configure(train_cfg: Any, engine_cfg: Any = None, given: tuple = ()) -> dict[str, Any]:
    """The config of every strategy a run switches on, by name in registry order (see
    :meth:`Strategy.configure <sarlab.strategies.hooks.Strategy.configure>`); an entry of ``train_cfg.strategies``
    that no registered strategy takes is an error."""
    configs = {}
    for name, cls in STRATEGIES.items():
        config = cls.configure(train_cfg, engine_cfg, given)
        if config is not None:
            configs[name] = config
    taken = {id(c) for c in configs.values()}
    for entry in getattr(train_cfg, "strategies", ()):
        if id(entry) not in taken:
            raise InputError(f"TrainConfig.strategies holds a {type(entry).__name__} that no strategy takes (one per "
                             "strategy): its Strategy class belongs in sarlab.strategies.registry.STRATEGIES "
                             f"({', '.join(STRATEGIES)}); the built-in ones are switched on by their own settings "
                             "(TrainConfig mfg, label_aug, correct_smooth; EngineConfig staleness)")
    return configs


def build(train_cfg: Any, engine_cfg: Any, model_cfg: Any, given: tuple = ()) -> dict[str, Strategy]:
    """The hooks of every strategy a run switches on, by name in registry order, after each has checked the
    combination (with the model, with the other strategies)."""
    active = {name: STRATEGIES[name](config) for name, config in configure(train_cfg, engine_cfg, given).items()}
    for strategy in active.values():
        strategy.check(model_cfg, active)
    return active


def columns(active: dict[str, Strategy]) -> dict:
    """The configuration columns of every registered strategy (its off values where ``active`` lacks it)."""
    out = {}
    for name, cls in STRATEGIES.items():
        out.update(cls.columns(active[name].config if name in active else None))
    return out


def record_defaults() -> dict:
    """The per-epoch record fields of every registered strategy, NaN (what a record holds where none fills them)."""
    return {field: math.nan for cls in STRATEGIES.values() for field in cls.record_fields}


def input_width(train_cfg: Any, feature_dim: int, num_classes: int, engine_cfg: Any = None) -> int:
    """The model's input width for a run: ``feature_dim`` widened by every switched-on strategy (label
    augmentation: ``+ num_classes``)."""
    active = {name: STRATEGIES[name](config) for name, config in configure(train_cfg, engine_cfg).items()}
    return widen(active, feature_dim, num_classes)


def widen(active: dict[str, Strategy], feature_dim: int, num_classes: int) -> int:
    """``feature_dim`` widened by each of the switched-on strategies ``active``, in their order."""
    width = feature_dim
    for strategy in active.values():
        width = strategy.input_width(width, num_classes)
    return width
