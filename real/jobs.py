"""What a worker is asked to do: a frozen description shipped to every rank."""
from __future__ import annotations

from dataclasses import dataclass

from sarlab.config import EngineConfig
from sarlab.nn.model import ModelConfig
from sarlab.train import TrainConfig

JOB_KINDS = ("train", "verify")
FAULT_KINDS = ("raise", "sigkill", "hang")


@dataclass(frozen=True)
class Fault:
    """Deliberate failure for testing fault handling: ``kind`` on ``rank`` at the start of ``epoch``."""

    rank: int
    epoch: int
    kind: str = "raise"

    @classmethod
    def parse(cls, text: str) -> Fault:
        try:
            rank, epoch, kind = text.split(":")
            fault = cls(int(rank), int(epoch), kind)
        except ValueError as err:
            raise ValueError(f"fault must be RANK:EPOCH:KIND, got {text!r}") from err
        if fault.kind not in FAULT_KINDS:
            raise ValueError(f"fault kind must be one of {', '.join(FAULT_KINDS)}, got {fault.kind!r}")
        return fault


@dataclass(frozen=True)
class Job:
    """Everything a rank needs: the partition, model, optimisation and engine settings.

    Args:
        kind: ``train`` (epochs, metric records) or ``verify`` (one forward/backward, outputs and grads).
        partition_dir: partition directory (its part count must equal the world size).
        model: model architecture.
        train: optimisation settings.
        engine: aggregation mode and prefetch.
        backend: torch.distributed backend.
        timeout_s: bound on any collective or point-to-point wait, and on rendezvous.
        threads: intra-op threads per worker (0: cores // workers).
        fault: optional injected failure (tests).
        quiet: rank 0 prints no per-epoch progress.
        label: free text copied into every metric record.
        variants: for ``verify``: several (model, engine, dtype) to check in one process group.
        memray_dir: if set, every rank records its allocations with memray into ``rank{r}.bin`` there
            (from after set-up to the end of training).
    """

    kind: str
    partition_dir: str
    model: ModelConfig
    train: TrainConfig
    engine: EngineConfig
    backend: str = "gloo"
    timeout_s: float = 60.0
    threads: int = 0
    fault: Fault | None = None
    quiet: bool = False
    label: str = ""
    variants: tuple = ()
    memray_dir: str | None = None

    def all_variants(self) -> tuple:
        """``(ModelConfig, EngineConfig, dtype)`` triples a verify job runs (default: the job's own)."""
        return self.variants or ((self.model, self.engine, self.train.dtype),)
