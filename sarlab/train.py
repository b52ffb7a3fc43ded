"""The full-batch training loop: global loss normalisation, gradient all-reduce, Adam, metrics."""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch

from . import memory
from .nn.model import GNN, ModelConfig
from .partition import Partition

DTYPES = {"float32": torch.float32, "float64": torch.float64}

RECORD_COLUMNS = ("mode", "model", "workers", "rank", "epoch", "epoch_time_s", "compute_s", "comm_wait_s",
                  "bytes_sent", "bytes_recv", "peak_mem_bytes", "baseline_mem_bytes", "loss", "train_acc",
                  "val_acc", "test_acc")


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings.

    Args:
        epochs: number of full-batch epochs.
        lr: Adam learning rate.
        weight_decay: Adam weight decay.
        dtype: ``float32`` or ``float64`` for parameters and activations.
        eval_every: evaluate (eval mode, no dropout) every this many epochs; 0 never.
    """

    epochs: int = 10
    lr: float = 0.01
    weight_decay: float = 0.0
    dtype: str = "float32"
    eval_every: int = 1

    def __post_init__(self):
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}: choose float32 or float64")
        if self.epochs < 0:
            raise ValueError("epochs must be >= 0")


class Trainer:
    """One worker's training state: model, optimizer, its rows of features and labels."""

    def __init__(self, graph, part: Partition, model_cfg: ModelConfig, train_cfg: TrainConfig):
        self.graph, self.part, self.train_cfg = graph, part, train_cfg
        dtype = DTYPES[train_cfg.dtype]
        a = part.arrays
        self.x = torch.from_numpy(a["features"]).to(dtype)
        self.y = torch.from_numpy(a["labels"]).long()
        self.masks = {k: torch.from_numpy(a[f"{k}_mask"]).bool() for k in ("train", "val", "test")}
        self.model = GNN(model_cfg, part.feature_dim, part.num_classes).to(dtype)
        self.params = [p for p in self.model.parameters()]
        self.opt = torch.optim.Adam(self.params, lr=train_cfg.lr, weight_decay=train_cfg.weight_decay)
        counts = torch.tensor([float(m.sum()) for m in self.masks.values()], dtype=torch.float64)
        self.global_counts = graph.all_reduce(counts)

    def forward_backward(self, epoch: int):
        """Training forward and backward; returns (logits, loss summed over workers, reduced grads)."""
        self.model.train()
        logits = self.model(self.graph, self.x, epoch)
        train = self.masks["train"]
        n_train = max(float(self.global_counts[0]), 1.0)
        loss = torch.nn.functional.cross_entropy(logits[train], self.y[train], reduction="sum") / n_train
        grads = torch.autograd.grad(loss, self.params, allow_unused=True)
        grads = [torch.zeros_like(p) if g is None else g for p, g in zip(self.params, grads)]
        flat = torch.cat([g.reshape(-1) for g in grads])
        self.graph.all_reduce(flat)
        reduced, offset = [], 0
        for p in self.params:
            reduced.append(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        total_loss = self.graph.all_reduce(loss.detach().to(torch.float64).reshape(1))
        return logits, float(total_loss[0]), reduced

    def accuracy(self, logits: torch.Tensor) -> tuple[float, float, float]:
        pred = logits.argmax(1)
        correct = torch.tensor([float(((pred == self.y) & m).sum()) for m in self.masks.values()],
                               dtype=torch.float64)
        self.graph.all_reduce(correct)
        return tuple(float(c / max(float(n), 1.0)) for c, n in zip(correct, self.global_counts))

    def step(self, epoch: int, baseline: int) -> dict:
        """One epoch: train step (timed, peak memory measured), then optional evaluation."""
        comm = self.graph.comm
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
        if every and (epoch + 1) % every == 0:
            self.model.eval()
            with torch.no_grad():
                _, val_acc, test_acc = self.accuracy(self.model(self.graph, self.x, epoch))
        cfg = self.model.cfg
        return {
            "mode": self.graph.config.mode, "model": cfg.model, "workers": self.graph.world,
            "rank": self.graph.rank, "epoch": epoch, "epoch_time_s": epoch_time,
            "compute_s": epoch_time - stats[0], "comm_wait_s": stats[0], "bytes_sent": stats[1],
            "bytes_recv": stats[2], "peak_mem_bytes": peak, "baseline_mem_bytes": baseline, "loss": loss,
            "train_acc": train_acc, "val_acc": val_acc, "test_acc": test_acc,
        }

    def config_columns(self) -> dict:
        cfg = self.model.cfg
        out = {k: v for k, v in asdict(cfg).items() if k != "seed"}
        out.update(prefetch=self.graph.config.prefetch, fused=self.graph.config.fused,
                   dtype=self.train_cfg.dtype, threads=torch.get_num_threads(),
                   num_nodes=self.graph.num_nodes_global, feature_dim=self.part.feature_dim,
                   num_classes=self.part.num_classes)
        return out
