"""Label augmentation with masked label prediction (Shi et al. 2021, UniMP; Wang et al. 2021, "bag of tricks").

Every epoch a random share ``rate`` of the training nodes gets its label as an input (one-hot columns appended
to the features, zeros for every other node) and the loss is taken on the other training nodes; at inference
every training node's label is an input. Which nodes show their label is a hash of (seed, epoch, original node
id), as dropout's masks are, so it does not depend on the number of workers or the partitioning.
"""
from __future__ import annotations

import torch

from sarlab.nn.functional import uniform_by_id

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
