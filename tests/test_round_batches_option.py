"""``round_batches`` as users set it: SamplingConfig validation, ``sarlab train --round-batches``, and the worker
passing it to the trainer (the records' ``rounds`` against the round count worked out by hand)."""
from __future__ import annotations

import math

import pytest

import sarlab
from sarlab.core.config import SamplingConfig
from sarlab.data.graphs import synthetic_graph
from sarlab.data.validate_data import InputError
from sarlab.nn.model import ModelConfig
from sarlab.real.commands.options import sampling_config
from sarlab.real.commands.train_cmd import build_parser
from sarlab.training.trainer import TrainConfig


def test_round_batches_is_validated_and_defaults_to_the_epoch():
    assert SamplingConfig().round_batches == 0
    assert SamplingConfig(round_batches=3).round_batches == 3
    for bad in (-1, 1.5, True):
        with pytest.raises(InputError, match="round"):
            SamplingConfig(round_batches=bad)


def test_the_flag_reaches_the_config():
    args = build_parser().parse_args(["--graph", "x", "--mode", "sampling", "--fanouts", "5,5", "--round-batches",
                                      "4"])
    assert sampling_config(args) == SamplingConfig(fanouts=(5, 5), round_batches=4)
    plain = build_parser().parse_args(["--graph", "x", "--mode", "sampling", "--fanouts", "5,5"])
    assert sampling_config(plain).round_batches == 0


@pytest.mark.timeout(300)
def test_the_worker_samples_in_rounds_of_the_given_size():
    graph = synthetic_graph(nodes=1200, degree=6, features=8, classes=3, seed=0)
    train_nodes = int(graph.train_mask.sum())
    batch, per_round = 64, 2
    steps = math.ceil(train_nodes / batch)  # one worker: every training node is its own
    for round_batches, rounds in ((per_round, math.ceil(steps / per_round)), (0, 1)):
        res = sarlab.run(graph, workers=1, model=ModelConfig(layers=2, hidden=8),
                       train=TrainConfig(epochs=1, eval_every=0),
                       sampling=SamplingConfig(fanouts=(3, 3), batch_size=batch, round_batches=round_batches),
                       run_timeout_s=240)
        rec = res.records.iloc[0]
        assert (rec["steps"], rec["rounds"], rec["round_batches"]) == (steps, rounds, round_batches)
