"""The full-batch training loop: global loss normalisation, gradient all-reduce, Adam, metrics.

The training strategies (stale halos, MFG pruning, label augmentation, Correct & Smooth, and any other in
:data:`sarlab.strategies.registry.STRATEGIES`) come in through their hooks (:mod:`sarlab.strategies.hooks`): the
trainer builds the switched-on ones from its settings in one place and calls them at fixed points of an epoch.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import torch

from sarlab.common.records import METRIC_COLUMNS
from sarlab.core import memory
from sarlab.data.partition import Partition
from sarlab.data.validate_data import InputError, check_int, check_real
from sarlab.nn.model import GNN, ModelConfig
from sarlab.strategies import registry
from sarlab.strategies.hooks import Strategy, TrainView
from sarlab.version import version_string

LR_SCHEDULES = ("constant", "cosine")

DTYPES = {"float32": torch.float32, "float64": torch.float64}

#: what every worker measures per (rank, epoch) (the metric columns of sarlab.common.records, the one list of them)
RECORD_COLUMNS = METRIC_COLUMNS


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings.

    Args:
        epochs: number of full-batch epochs (>= 1; with a resumed run: the total, counting those done).
        lr: Adam learning rate (> 0).
        weight_decay: Adam weight decay (>= 0).
        dtype: ``float32`` or ``float64`` for parameters and activations.
        eval_every: evaluate (eval mode, no dropout) every this many epochs; 0 never.
        lr_schedule: ``constant``, or ``cosine``: epoch ``e`` of ``E`` uses ``lr * (1 + cos(pi e / E)) / 2``.
        mfg: prune every layer to the rows that reach a training node (:mod:`sarlab.strategies.mfg`); the loss and its
            gradients are unchanged; not with BatchNorm.
        label_aug: label augmentation (:mod:`sarlab.strategies.label_aug`): each epoch this share of the training nodes
            has its label as an input and the loss is taken on the others (0: off).
        correct_smooth: after the last epoch, Correct & Smooth on the eval outputs
            (:mod:`sarlab.strategies.correct_smooth`) with these preset hyperparameters (``products``, ``arxiv``;
            empty: off); its accuracies go into the last epoch's record (``cs_train_acc``, ``cs_val_acc``,
            ``cs_test_acc``).
        strategies: the configs of further training strategies (each an instance of a registered strategy's
            ``config_type``, :mod:`sarlab.strategies.registry`); the built-in ones are switched on by the fields
            above (and stale halos by ``EngineConfig.staleness``).
    """

    epochs: int = 10
    lr: float = 0.01
    weight_decay: float = 0.0
    dtype: str = "float32"
    eval_every: int = 1
    lr_schedule: str = "constant"
    mfg: bool = False
    label_aug: float = 0.0
    correct_smooth: str = ""
    strategies: tuple = ()

    def __post_init__(self):
        if self.dtype not in DTYPES:
            raise InputError(f"unknown dtype {self.dtype!r}: choose float32 or float64")
        check_int("epochs", self.epochs, 1)
        check_real("learning rate", self.lr, 0.0, inclusive=False)
        check_real("weight decay", self.weight_decay, 0.0)
        check_int("eval_every (0: never)", self.eval_every, 0)
        if self.lr_schedule not in LR_SCHEDULES:
            raise InputError(f"unknown learning-rate schedule {self.lr_schedule!r}: choose {', '.join(LR_SCHEDULES)}")
        object.__setattr__(self, "strategies", tuple(self.strategies))
        registry.configure(self)  # each strategy's config checks its own settings

    def lr_at(self, epoch: int) -> float:
        """The learning rate of epoch ``epoch`` (0-based) under :attr:`lr_schedule`."""
        if self.lr_schedule == "cosine":
            return self.lr * 0.5 * (1.0 + math.cos(math.pi * epoch / self.epochs))
        return self.lr


class Trainer:
    """One worker's training state: model, optimizer, its rows of features and labels, its strategies' hooks.

    Args:
        graph: the worker's :class:`~sarlab.core.shards.ShardedGraph`.
        part: its partition (features, labels, splits).
        model_cfg, train_cfg: the model and the optimisation (with the strategies it switches on).
        cs_config: Correct & Smooth's hyperparameters (default: the preset ``train_cfg.correct_smooth`` names).
    """

    def __init__(self, graph, part: Partition, model_cfg: ModelConfig, train_cfg: TrainConfig,
                 cs_config=None):
        self.graph, self.part, self.train_cfg = graph, part, train_cfg
        given = () if cs_config is None else (cs_config,)
        #: the switched-on strategies' hooks by name, in the order they are called
        self.strategies: dict[str, Strategy] = registry.build(train_cfg, graph.config, model_cfg, given)
        dtype = DTYPES[train_cfg.dtype]
        a = part.arrays
        self.x = torch.from_numpy(a["features"]).to(dtype)
        self.y = torch.from_numpy(a["labels"]).long()
        self.masks = {k: torch.from_numpy(a[f"{k}_mask"]).bool() for k in ("train", "val", "test")}
        self.in_dim = registry.widen(self.strategies, part.feature_dim, part.num_classes)
        self.model = GNN(model_cfg, self.in_dim, part.num_classes, num_relations=part.num_relations).to(dtype)
        self.params = [p for p in self.model.parameters()]
        self.opt = torch.optim.Adam(self.params, lr=train_cfg.lr, weight_decay=train_cfg.weight_decay)
        counts = torch.tensor([float(m.sum()) for m in self.masks.values()], dtype=torch.float64)
        self.global_counts = graph.all_reduce(counts)
        for strategy in self.strategies.values():
            strategy.setup(self)

    @property
    def stale(self):
        """The stale-halo caches (:class:`~sarlab.strategies.stale.StaleHalos`), or None without staleness."""
        strategy = self.strategies.get("stale")
        return None if strategy is None else strategy.halos

    def inputs(self, epoch: int, training: bool) -> torch.Tensor:
        """The model's input rows: the features, as the strategies transform them (label augmentation appends the
        label columns: in training the labels of this epoch's shown nodes, in evaluation those of every training
        node)."""
        x = self.x
        for strategy in self.strategies.values():
            x = strategy.inputs(self, x, epoch, training)
        return x

    def loss_mask(self, epoch: int) -> torch.Tensor:
        """The nodes the training loss of ``epoch`` is taken on: the training nodes the strategies keep (label
        augmentation: those whose label is not an input)."""
        mask = self.masks["train"]
        for strategy in self.strategies.values():
            mask = strategy.loss_mask(self, mask, epoch)
        return mask

    def train_view(self, epoch: int) -> TrainView:
        """What the training forward of ``epoch`` runs on: the whole graph, or the strategies' view (stale halos,
        MFG's pruned graph)."""
        view, last = TrainView(self.graph), epoch == self.train_cfg.epochs - 1
        for strategy in self.strategies.values():
            view = strategy.train_view(self, view, epoch, last)
        return view

    def forward_backward(self, epoch: int):
        """Training forward and backward; returns (logits, loss summed over workers, reduced grads).

        The loss is the cross-entropy summed over the loss nodes of all workers divided by their global count.
        Where the training view computes only some rows (MFG) the other rows of the returned logits are 0.
        """
        self.model.train()
        x = self.inputs(epoch, training=True)
        mask = self.loss_mask(epoch)
        if mask is not self.masks["train"]:
            n_loss = float(self.graph.all_reduce(mask.sum().to(torch.float64).reshape(1))[0])
        else:
            n_loss = float(self.global_counts[0])
        view = self.train_view(epoch)
        rows = view.output_rows
        logits = self.model(view.graph, x if view.input_rows is None else x[view.input_rows], epoch)
        mask_out, y_out = (mask, self.y) if rows is None else (mask[rows], self.y[rows])
        loss = torch.nn.functional.cross_entropy(logits[mask_out], y_out[mask_out], reduction="sum") / max(n_loss, 1.0)
        grads = torch.autograd.grad(loss, self.params, allow_unused=True)
        grads = [torch.zeros_like(p) if g is None else g for p, g in zip(self.params, grads)]
        flat = torch.cat([g.reshape(-1) for g in grads])
        self.graph.all_reduce(flat)
        reduced, offset = [], 0
        for p in self.params:
            reduced.append(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        total_loss = self.graph.all_reduce(loss.detach().to(torch.float64).reshape(1))
        if rows is not None:
            full = torch.zeros(self.graph.num_nodes, logits.shape[1], dtype=logits.dtype)
            full[rows] = logits.detach()
            logits = full
        return logits, float(total_loss[0]), reduced

    def eval_logits(self, epoch: int) -> torch.Tensor:
        """Eval-mode logits of this worker's rows (whole graph, every training label an input)."""
        self.model.eval()
        with torch.no_grad():
            return self.model(self.graph, self.inputs(epoch, training=False), epoch)

    def accuracy(self, logits: torch.Tensor) -> tuple[float, float, float]:
        """Train, validation and test accuracy over all workers (NaN for an empty split)."""
        pred = logits.argmax(1)
        correct = torch.tensor([float(((pred == self.y) & m).sum()) for m in self.masks.values()],
                               dtype=torch.float64)
        self.graph.all_reduce(correct)
        return tuple(float(c / n) if n else float("nan") for c, n in zip(correct, self.global_counts))

    def state_dict(self) -> dict:
        """Model parameters and buffers, and Adam's state keyed by parameter name.

        The same on every rank whatever the partition (parameters are replicated, gradients and BatchNorm
        statistics all-reduced), so one rank's copy resumes a run on any number of workers. Adam's
        hyperparameters are not part of it: they come from the :class:`TrainConfig` of the run that loads it.
        """
        names = [n for n, _ in self.model.named_parameters()]
        opt = self.opt.state_dict()["state"]
        return {"model": {k: v.detach().clone() for k, v in self.model.state_dict().items()},
                "optimizer": {names[i]: {k: v.clone() if torch.is_tensor(v) else v for k, v in st.items()}
                              for i, st in opt.items()}}

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` exported (the learning rate stays this trainer's own)."""
        self.model.load_state_dict(state["model"])
        names = [n for n, _ in self.model.named_parameters()]
        unknown = sorted(set(state["optimizer"]) - set(names))
        if unknown:
            raise InputError(f"optimizer state for parameters this model does not have: {unknown[:5]}")
        current = self.opt.state_dict()
        current["state"] = {i: state["optimizer"][n] for i, n in enumerate(names) if n in state["optimizer"]}
        self.opt.load_state_dict(current)

    def predict(self, epoch: int = 0, embeddings: bool = False) -> torch.Tensor:
        """Eval-mode outputs of every node of the whole graph, row ``i`` = original node ``i``, on every rank.

        Rows are scattered into a zero ``[num_nodes_global, width]`` tensor by original id and summed over
        workers, which is exact (each row has one non-zero contributor).

        Args:
            epoch: passed to the model (the built-in models use it only for dropout, off in eval mode).
            embeddings: instead of the logits, the input of the last layer (the last hidden representation).
        """
        captured = []
        hook = None
        if embeddings:
            convs = getattr(self.model, "convs", None)
            if not convs:
                raise InputError("embeddings need a model whose last layer is model.convs[-1]")
            hook = convs[-1].register_forward_pre_hook(lambda module, args: captured.append(args[1]))
        try:
            out = self.eval_logits(epoch)
        finally:
            if hook is not None:
                hook.remove()
        local = captured[-1] if embeddings else out
        full = torch.zeros(self.graph.num_nodes_global, local.shape[1], dtype=local.dtype)
        full[self.graph.orig_ids] = local
        return self.graph.all_reduce(full)

    def step(self, epoch: int, baseline: int) -> dict:
        """One epoch: train step (timed, peak memory measured), then optional evaluation; after the last epoch the
        strategies' record fields (C&S: ``cs_*_acc``; NaN in the other epochs' records)."""
        comm = self.graph.comm
        for group in self.opt.param_groups:
            group["lr"] = self.train_cfg.lr_at(epoch)
        comm.stats.reset()
        memory.reset_peak()
        t0 = time.perf_counter()
        logits, loss, grads = self.forward_backward(epoch)
        for p, g in zip(self.params, grads):
            p.grad = g
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        epoch_time = time.perf_counter() - t0
        peak = memory.peak_bytes()
        stats = (comm.stats.wait_s, comm.stats.bytes_sent, comm.stats.bytes_recv)
        train_acc = self.accuracy(logits.detach())[0]
        del logits
        val_acc = test_acc = float("nan")
        every = self.train_cfg.eval_every
        last = epoch == self.train_cfg.epochs - 1
        eval_logits = None
        if (every and (epoch + 1) % every == 0) or any(s.wants_eval(epoch, last) for s in self.strategies.values()):
            eval_logits = self.eval_logits(epoch)
            _, val_acc, test_acc = self.accuracy(eval_logits)
        fields = registry.record_defaults()
        if last:
            for strategy in self.strategies.values():
                fields.update(strategy.after_training(self, eval_logits))
        cfg = self.model.cfg
        return {
            "mode": self.graph.config.mode, "model": cfg.model, "workers": self.graph.world,
            "rank": self.graph.rank, "epoch": epoch, "epoch_time_s": epoch_time,
            "compute_s": epoch_time - stats[0], "comm_wait_s": stats[0], "bytes_sent": stats[1],
            "bytes_recv": stats[2], "peak_mem_bytes": peak, "baseline_mem_bytes": baseline, "loss": loss,
            "train_acc": train_acc, "val_acc": val_acc, "test_acc": test_acc, **fields,
            "lr": self.train_cfg.lr_at(epoch),
        }

    def config_columns(self) -> dict:
        """The configuration columns of this worker's records (the model's, the engine's, the strategies')."""
        cfg = self.model.cfg
        out = {k: v for k, v in asdict(cfg).items() if k != "seed"}
        out.update(prefetch=self.graph.config.prefetch, fused=self.graph.config.fused,
                   dtype=self.train_cfg.dtype, threads=torch.get_num_threads(),
                   num_nodes=self.graph.num_nodes_global, feature_dim=self.part.feature_dim,
                   num_classes=self.part.num_classes, num_relations=self.part.num_relations,
                   lr_schedule=self.train_cfg.lr_schedule, **registry.columns(self.strategies),
                   sarlab_version=version_string())  # which sarlab (and git commit, from a checkout) measured it
        return out
