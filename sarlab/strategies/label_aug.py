"""Label augmentation with masked label prediction (Shi et al. 2021, UniMP; Wang et al. 2021, "bag of tricks").

Every epoch a random share ``rate`` of the training nodes gets its label as an input (one-hot columns appended
to the features, zeros for every other node) and the loss is taken on the other training nodes; at inference
every training node's label is an input. Which nodes show their label is a hash of (seed, epoch, original node
id), as dropout's masks are, so it does not depend on the number of workers or the partitioning.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from sarlab.data.validate_data import check_real
from sarlab.nn.functional import uniform_by_id
from sarlab.strategies.hooks import Strategy

#: third part of the hash key of the label mask (dropout's keys hold a layer index there, far below this)
LABEL_STREAM = 1 << 20


def label_input_mask(orig_ids: torch.Tensor, train_mask: torch.Tensor, rate: float, seed: int,
                     epoch: int) -> torch.Tensor:
    """The training nodes whose label is an input in training epoch ``epoch``: ``u(seed, epoch, id) < rate``."""
    return train_mask & (uniform_by_id(orig_ids, 1, (seed, epoch, LABEL_STREAM))[:, 0] < rate)


def with_label_inputs(x: torch.Tensor, labels: torch.Tensor, num_classes: int, shown: torch.Tensor) -> torch.Tensor:
    """``[x, onehot(label) if shown else 0]``: ``[rows, F + C]`` in ``x``'s dtype."""
    onehot = torch.zeros(x.shape[0], num_classes, dtype=x.dtype)
    rows = torch.nonzero(shown).view(-1)
    onehot[rows, labels[rows]] = 1.0
    return torch.cat([x, onehot], 1)


@dataclass(frozen=True)
class LabelAugConfig:
    """Label augmentation's settings (``TrainConfig.label_aug``, ``--label-aug RATE``).

    Args:
        rate: the share of the training nodes whose label is an input each epoch, in ``[0, 1)`` (0: off).
    """

    rate: float = 0.0

    def __post_init__(self):
        check_real("label augmentation rate", self.rate, 0.0, below=1.0)


class LabelAugmentation(Strategy):
    """The trainer's hooks: one input column per class, this epoch's shown labels in training (every training
    label in evaluation), the loss on the training nodes whose label is hidden."""

    name = "label_aug"
    config_type = LabelAugConfig

    @classmethod
    def configure(cls, train_cfg, engine_cfg=None, given: tuple = ()) -> LabelAugConfig | None:
        config = LabelAugConfig(train_cfg.label_aug)
        return config if config.rate else None

    @classmethod
    def columns(cls, config: LabelAugConfig | None) -> dict:
        return {"label_aug": config.rate if config is not None else 0.0}

    def input_width(self, width: int, num_classes: int) -> int:
        return width + num_classes

    def _shown(self, run, epoch: int) -> torch.Tensor:
        return label_input_mask(run.graph.orig_ids, run.masks["train"], self.config.rate, run.model.cfg.seed, epoch)

    def inputs(self, run, x: torch.Tensor, epoch: int, training: bool) -> torch.Tensor:
        shown = self._shown(run, epoch) if training else run.masks["train"]
        return with_label_inputs(x, run.y, run.part.num_classes, shown)

    def loss_mask(self, run, mask: torch.Tensor, epoch: int) -> torch.Tensor:
        return mask & ~self._shown(run, epoch)
