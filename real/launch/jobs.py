"""What a worker is asked to do: a frozen description shipped to every rank."""
from __future__ import annotations

import os
from dataclasses import dataclass

from sarlab.core.config import EngineConfig, SamplingConfig
from sarlab.core.memory import METHODS as MEMORY_METHODS
from sarlab.data.validate_data import InputError, check_int, check_real
from sarlab.nn.model import ModelConfig
from sarlab.training.trainer import TrainConfig

JOB_KINDS = ("train", "verify")
FAULT_KINDS = ("raise", "sigkill", "hang", "cut")


@dataclass(frozen=True)
class Fault:
    """Deliberate failure for testing fault handling: ``kind`` on ``rank`` at the start of ``epoch`` (counted from 1,
    as progress counts: ``1:1:raise`` fails rank 1 before its first epoch). It fires once: a run that torchrun
    restarts (``TORCHELASTIC_RESTART_COUNT`` > 0) does not repeat it.

    Kinds: ``raise`` (an exception), ``sigkill`` (the process dies), ``hang`` (it stops answering), ``cut`` (its
    host's network link goes down; needs an emulated network).
    """

    rank: int
    epoch: int
    kind: str = "raise"

    @classmethod
    def parse(cls, text: str) -> Fault:
        try:
            rank, epoch, kind = text.split(":")
            fault = cls(int(rank), int(epoch), kind)
        except ValueError:
            raise InputError(f"fault must be RANK:EPOCH:KIND (e.g. 1:2:cut), got {text!r}") from None
        if fault.rank < 0 or fault.epoch < 1:
            raise InputError(f"fault rank must be >= 0 and epoch >= 1 (epochs count from 1, as progress does), got "
                             f"{text!r}")
        if fault.kind not in FAULT_KINDS:
            raise InputError(f"fault kind must be one of {', '.join(FAULT_KINDS)}, got {fault.kind!r}")
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
        quiet: rank 0 logs no per-epoch progress (the epoch lines are INFO records).
        label: free text copied into every metric record.
        variants: for ``verify``: several (model, engine, dtype) to check in one process group.
        memray_dir: if set, every rank records its allocations with memray into ``rank{r}.bin`` there
            (from after set-up to the end of training).
        net: the network the ranks talk over, as a spec (set by the launcher; ``env`` under torchrun); copied
            into every metric record's ``net`` column.
        memory: peak-memory method of the workers, ``live`` (counting allocator with a bounded block cache:
            fast) or ``rss`` (VmHWM with every large tensor on fresh pages: exact, slower); see
            :mod:`sarlab.core.memory`. Recorded in every record's ``mem_method`` column.
        sampling: train on sampled mini-batches (``--mode sampling``, :mod:`sarlab.training.minibatch`) instead of
        full-batch
            ``engine.mode``; the exact engine then only evaluates.
        model_factory: a user's model function packed by :func:`sarlab.real.launch.custom_model.pack` (cloudpickle);
        every rank
            builds its model from it with ``model.seed`` instead of the built-in ``model`` (not with sampling or
            MFG).
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
    net: str = "loopback"
    checkpoint_dir: str | None = None
    checkpoint_every: int = 0
    resume_dir: str | None = None
    save_model: str | None = None
    predict: str | None = None
    force: bool = False
    memory: str = "live"
    sampling: SamplingConfig | None = None
    model_factory: bytes | None = None

    def __post_init__(self):
        check_real("timeout", self.timeout_s, 0.0, inclusive=False)
        check_int("threads", self.threads, 0)
        check_int("checkpoint_every (0: at the end only)", self.checkpoint_every, 0)
        if self.memory not in MEMORY_METHODS:
            raise ValueError(f"memory method must be one of {', '.join(MEMORY_METHODS)}, got {self.memory!r}")
        if self.model_factory is not None and (self.sampling is not None or self.train.mfg):
            raise InputError("a custom model (model_fn) trains full-batch without MFG pruning: drop sampling / mfg")

    def all_variants(self) -> tuple:
        """``(ModelConfig, EngineConfig, dtype)`` triples a verify job runs (default: the job's own)."""
        return self.variants or ((self.model, self.engine, self.train.dtype),)


def _expect(name: str, value, types: tuple, what: str) -> None:
    if not isinstance(value, types) or (bool not in types and isinstance(value, bool) and int in types):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__} {value!r}")


def check_run_args(args: dict) -> None:
    """The keyword arguments of :func:`sarlab.run`, checked before anything starts: a ``TypeError`` or ``ValueError``
    naming the argument (an :class:`~sarlab.data.validate_data.InputError` is a ``ValueError``).

    Args:
        args: ``{name: value}`` of the arguments given (the ones absent keep their defaults).
    """
    def optional(name: str, types: tuple, what: str) -> None:
        if args.get(name) is not None:
            _expect(name, args[name], types, what)

    optional("workers", (int,), "an int (local worker processes)")
    optional("epochs", (int,), "an int")
    for name in ("partition_dir", "checkpoint_dir", "resume_dir", "save_model", "predict_path"):
        optional(name, (str, os.PathLike), "a path (str)")
    for name in ("predict", "force", "quiet", "cache"):
        optional(name, (bool,), "True or False")
    for name in ("method", "backend", "memory", "label"):
        optional(name, (str,), "a str")
    optional("train", (TrainConfig,), "a TrainConfig")
    optional("engine", (EngineConfig,), "an EngineConfig")
    optional("sampling", (SamplingConfig,), "a SamplingConfig or None")
    optional("fault", (Fault,), "a Fault (Fault.parse('RANK:EPOCH:KIND')) or None")
    for name in ("on_partition", "model_fn"):
        if args.get(name) is not None and not callable(args[name]):
            raise TypeError(f"{name} must be callable, got {type(args[name]).__name__}")
    for name, minimum in (("workers", 1), ("epochs", 1), ("threads", 0), ("checkpoint_every", 0), ("port", 0)):
        if args.get(name) is not None:
            check_int(name, args[name], minimum)
    if args.get("port") is not None and args["port"] > 65535:
        raise InputError(f"port must be 0..65535 (0: any free port), got {args['port']!r}")
    if args.get("run_timeout_s") is not None:  # timeout_s: the launcher's preflight and Job say "timeout must be"
        check_real("run_timeout_s", args["run_timeout_s"], 0.0, inclusive=False)
    if args.get("method") is not None and args["method"] not in ("metis", "random"):
        raise InputError(f"method must be 'metis' or 'random', got {args['method']!r}")
    if args.get("memory") is not None and args["memory"] not in MEMORY_METHODS:
        raise InputError(f"memory must be one of {', '.join(MEMORY_METHODS)}, got {args['memory']!r}")
