"""Training state on disk: checkpoints to resume from, final model weights, per-node predictions.

Every file is written to a temporary name in its directory, flushed to disk and renamed over its target, so
a crash leaves the previous file whole, never a half-written one. Every file loads with
``torch.load(weights_only=True)`` (tensors, numbers, strings, lists and dicts; nothing is unpickled).

What a checkpoint holds does not depend on the partition: parameters, BatchNorm statistics and Adam's state
are replicated on every rank, and the only randomness of the built-in models, dropout, is a hash of
(seed, epoch, layer, original node id, feature). So rank 0 writes, every rank reads the same file, and a run
resumes on any number of workers. The global torch RNG state is saved and restored too, for models that draw
from it (the built-in ones do not: their initialisation uses a forked RNG seeded by ``ModelConfig.seed``).

Args common to the writers: ``force`` allows replacing an existing file of the same kind (never anything
else; see :func:`check_target`).
"""
from __future__ import annotations

import errno
import fcntl
import os
import socket
import tempfile
from dataclasses import asdict, is_dataclass

import numpy as np
import torch

from sarlab.data.partition import file_sha256
from sarlab.data.staging import sweep_stale
from sarlab.data.validate_data import InputError
from sarlab.nn.model import GNN, ModelConfig

CHECKPOINT_FILE = "checkpoint.pt"
#: sha256 of the checkpoint (``sha256sum`` format); during a write it lists the old and the new digest
SUMS_FILE = ".checkpoint-sha256"
LOCK_FILE = ".checkpoint-lock"
#: the name prefix of a checkpoint write's temporary files (``.checkpoint-*.tmp``, swept by the next lock owner)
TMP_PREFIX = ".checkpoint-"
FORMAT_VERSION = 1
KINDS = {"checkpoint": "sarlab-checkpoint", "model": "sarlab-model", "predictions": "sarlab-predictions"}
#: manifest fields that identify a graph whatever its partition
GRAPH_FACTS = ("graph", "num_nodes", "num_edges", "feature_dim", "num_classes", "train_nodes")


class CheckpointError(InputError):
    """A checkpoint, model or prediction file is missing, foreign, or does not fit the run."""


def graph_facts(manifest: dict) -> dict:
    """The partition-independent facts of a partition's manifest that a checkpoint must agree with."""
    return {k: manifest[k] for k in GRAPH_FACTS if k in manifest}


def fingerprint(model_cfg, dtype: str, facts: dict) -> dict:
    """What a resumed run must share with the run that wrote the checkpoint: the model's architecture and
    seed, the dtype, and the graph (see :func:`graph_facts`)."""
    model = asdict(model_cfg) if is_dataclass(model_cfg) else {"model": type(model_cfg).__qualname__}
    return {"model": model, "dtype": dtype, "graph": dict(facts)}


def _differences(saved: dict, current: dict, prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(saved) | set(current)):
        a, b = saved.get(key), current.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: checkpoint {a!r}, this run {b!r}")
    return out


def _file_kind(path: str) -> str | None:
    """``checkpoint``/``model``/``predictions`` for a file sarlab wrote, else None."""
    try:
        if path.endswith(".npz"):
            with np.load(path, allow_pickle=False) as z:
                tag = str(z["format"]) if "format" in z.files else None
        else:
            obj = torch.load(path, map_location="cpu", weights_only=True)
            tag = obj.get("format") if isinstance(obj, dict) else None
    except Exception:  # unreadable, not a zip/pickle, or holding objects weights_only refuses: not ours
        return None
    return next((kind for kind, value in KINDS.items() if value == tag), None)


def check_target(path: str, kind: str, force: bool = False) -> None:
    """Refuse to write ``path`` unless it is new, or a sarlab file of the same ``kind`` and ``force`` is given.

    A directory, a link, or a file sarlab did not write is refused even with ``force``.
    """
    if os.path.islink(path) or os.path.isdir(path):
        raise CheckpointError(f"{path!r} is a {'link' if os.path.islink(path) else 'directory'}; give a file path")
    if not os.path.exists(path):
        return
    found = _file_kind(path)
    if found != kind:
        what = f"a sarlab {found} file" if found else "not a file sarlab wrote"
        raise CheckpointError(f"{path!r} exists and is {what}; refusing to overwrite it with a {kind}: choose "
                              "another path")
    if not force:
        raise CheckpointError(f"{path!r} already holds a sarlab {kind}; pass --force (force=True) to replace it")


def check_checkpoint_dir(directory: str, force: bool = False, resume_from: str | None = None) -> None:
    """Before a run: ``directory`` may receive checkpoints.

    Allowed: a new or empty directory; one holding only a checkpoint when it is the one being resumed from
    (a run that continues its own checkpoints) or with ``force``. Refused: a file, a link, a directory with
    anything else in it.
    """
    if os.path.islink(directory) or (os.path.exists(directory) and not os.path.isdir(directory)):
        raise CheckpointError(f"checkpoint directory {directory!r} is a file or a link; choose a directory path")
    if not os.path.isdir(directory):
        return
    entries = [e for e in os.listdir(directory) if not e.startswith(".checkpoint-")]
    foreign = [e for e in entries if e != CHECKPOINT_FILE]
    if foreign:
        raise CheckpointError(f"checkpoint directory {directory!r} holds files sarlab did not write "
                              f"({', '.join(sorted(foreign)[:5])}); choose a new or empty directory")
    if not entries:
        return
    own = os.path.join(directory, CHECKPOINT_FILE)
    if _file_kind(own) != "checkpoint":
        raise CheckpointError(f"{own} is not a sarlab checkpoint; refusing to overwrite it")
    continuing = resume_from is not None and os.path.isdir(resume_from) and os.path.samefile(resume_from, directory)
    if not (continuing or force):
        raise CheckpointError(f"checkpoint directory {directory!r} already holds a checkpoint; resume from it "
                              "(--resume auto, or --resume with the same directory), pass --force to overwrite it, "
                              "or choose another")


def _umask() -> int:
    """This process's umask, read without changing it (Linux: /proc/self/status), else 022."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return 0o022


def atomic_write(path: str, write, before_rename=None, prefix: str | None = None) -> None:
    """``write(binary file)`` into a uniquely named temporary file beside ``path``, fsync, rename over ``path``;
    the temporary file is removed on any failure (a full disk, an exception in ``write``). The one atomic writer
    of sarlab's outputs (checkpoints, models, predictions, JSON records).

    Args:
        path: the file to write. write: called with the open temporary file (``w+b``).
        before_rename: called with the temporary file's sha256 hex digest between the fsync and the rename.
        prefix: the temporary file's name prefix (default ``.<name>-``; checkpoints use ``.checkpoint-``); the
            pid follows it (``.<name>-<pid>-*.tmp``), so the next write sweeps what a killed one left.
    """
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    prefix = prefix or f".{os.path.basename(path)}-"
    sweep_stale(parent, prefix)
    fd, tmp = tempfile.mkstemp(prefix=f"{prefix}{os.getpid()}-", suffix=".tmp", dir=parent)
    try:
        with os.fdopen(fd, "w+b") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        if before_rename is not None:
            before_rename(file_sha256(tmp))
        os.chmod(tmp, 0o666 & ~_umask())  # as open() would make it (mkstemp makes 0600)
        os.replace(tmp, path)
    except BaseException as err:
        if os.path.exists(tmp):
            os.remove(tmp)
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            raise OSError(err.errno, f"{err.strerror}: writing {path} failed and the previous file, if any, is "
                                     "whole; free some space or choose another place") from None
        raise
    dir_fd = os.open(parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _write_sums(directory: str, digests: list[str]) -> None:
    text = "".join(f"{d}  {CHECKPOINT_FILE}\n" for d in dict.fromkeys(digests))
    atomic_write(os.path.join(directory, SUMS_FILE), lambda f: f.write(text.encode()), prefix=TMP_PREFIX)


def _read_sums(directory: str) -> list[str]:
    try:
        with open(os.path.join(directory, SUMS_FILE)) as f:
            return [line.split()[0] for line in f if line.strip()]
    except (OSError, IndexError, UnicodeDecodeError):
        return []


def verify_checkpoint(directory: str) -> None:
    """Refuse a checkpoint whose sha256 is not the one its writer recorded (a flipped bit, a truncated copy)."""
    path = os.path.join(directory, CHECKPOINT_FILE)
    sums = _read_sums(directory)
    if not sums:
        raise CheckpointError(f"{path} has no readable checksum ({SUMS_FILE} beside it is missing or damaged); "
                              "it cannot be verified: start afresh (--force) or restore the checkpoint directory")
    if file_sha256(path) not in sums:
        raise CheckpointError(f"checkpoint corrupt (sha256 mismatch): {path}; restore it from a copy, or start "
                              "afresh (--force)")


class DirectoryLock:
    """An exclusive ``flock`` on ``DIR/.checkpoint-lock`` for a run's lifetime (the kernel drops it when the
    process dies); the file names the holder's pid and host.

    Args:
        directory: checkpoint directory (created if missing; removed again on release if this lock created it
            and nothing else was written into it).
        log: where the note about removed stale temporaries goes.
    """

    def __init__(self, directory: str, log=None):
        self.directory, self.log, self.fd = directory, log, None
        self.created = False

    def acquire(self) -> DirectoryLock:
        if not os.path.isdir(self.directory):
            os.makedirs(self.directory)
            self.created = True
        path = os.path.join(self.directory, LOCK_FILE)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise CheckpointError(f"checkpoint directory {self.directory!r} is in use by another run ({holder}); "
                                  "wait for it to finish or choose another directory") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on host {socket.gethostname()}\n".encode(), 0)
        self.fd = fd
        stale = sorted(e for e in os.listdir(self.directory) if e.startswith(".checkpoint-") and e.endswith(".tmp"))
        for entry in stale:
            os.remove(os.path.join(self.directory, entry))
        if stale and self.log is not None:
            self.log(f"removed {len(stale)} temporary file(s) of an interrupted checkpoint write in "
                     f"{self.directory}: {', '.join(stale)}")
        return self

    def release(self) -> None:
        if self.fd is None:
            return
        if self.created and set(os.listdir(self.directory)) <= {LOCK_FILE}:
            os.remove(os.path.join(self.directory, LOCK_FILE))
            os.rmdir(self.directory)
        os.close(self.fd)  # closing drops the flock
        self.fd = None

    def __enter__(self) -> DirectoryLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def holds_checkpoint(directory: str | None) -> bool:
    """Whether ``directory`` holds a checkpoint file."""
    return bool(directory) and os.path.isfile(os.path.join(directory, CHECKPOINT_FILE))


def save_checkpoint(directory: str, trainer, epochs_done: int, facts: dict, history: list | None = None) -> str:
    """Write ``directory/checkpoint.pt`` atomically (call on rank 0 only); returns its path.

    Args:
        directory: checkpoint directory (see :func:`check_checkpoint_dir`, which the caller runs once before
            training; this replaces the previous checkpoint of the same run).
        trainer: a :class:`~sarlab.training.trainer.Trainer`.
        epochs_done: epochs completed; a resumed run starts at this epoch index.
        facts: :func:`graph_facts` of the partition trained on.
        history: optional metric records so far (plain numbers and strings), returned on resume.
    """
    path = os.path.join(directory, CHECKPOINT_FILE)
    payload = {"format": KINDS["checkpoint"], "version": FORMAT_VERSION, "epochs_done": int(epochs_done),
               "fingerprint": fingerprint(trainer.model.cfg, trainer.train_cfg.dtype, facts),
               "state": trainer.state_dict(), "torch_rng_state": torch.get_rng_state(),
               "history": list(history or [])}
    old = [file_sha256(path)] if os.path.isfile(path) else []

    def record(digest: str) -> None:  # both digests while the rename is pending: a crash leaves a valid pair
        _write_sums(directory, old + [digest])
        new.append(digest)

    new: list[str] = []
    atomic_write(path, lambda f: torch.save(payload, f), before_rename=record, prefix=TMP_PREFIX)
    _write_sums(directory, new)
    return path


def load_checkpoint(directory: str) -> dict:
    """Read ``directory/checkpoint.pt`` (every rank reads the same file); see :func:`restore`."""
    path = os.path.join(directory, CHECKPOINT_FILE) if os.path.isdir(directory) else directory
    if not os.path.isfile(path):
        raise CheckpointError(f"no checkpoint to resume from: {path} does not exist")
    verify_checkpoint(os.path.dirname(path))
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # a truncated or foreign file: say which, not torch's internals
        raise CheckpointError(f"{path} is not a readable sarlab checkpoint ({err.__class__.__name__}: "
                              f"{str(err).splitlines()[0] if str(err) else ''})") from err
    if not isinstance(payload, dict) or payload.get("format") != KINDS["checkpoint"]:
        raise CheckpointError(f"{path} is not a sarlab checkpoint")
    if payload.get("version") != FORMAT_VERSION:
        raise CheckpointError(f"{path}: checkpoint format {payload.get('version')!r}, this sarlab reads "
                              f"{FORMAT_VERSION}")
    return payload


def check_compatible(payload: dict, model_cfg, dtype: str, facts: dict, epochs: int | None = None) -> None:
    """Refuse to resume a checkpoint written for another model, dtype or graph (all differences named), or
    one that has already done ``epochs`` or more."""
    diffs = _differences(payload["fingerprint"], fingerprint(model_cfg, dtype, facts))
    if diffs:
        raise CheckpointError("cannot resume: the checkpoint was written for another run (" + "; ".join(diffs)
                              + "); resume with the same model settings and graph, or start afresh")
    if epochs is not None and payload["epochs_done"] >= epochs:
        raise CheckpointError(f"the checkpoint has already done {payload['epochs_done']} epochs; ask for more than "
                              f"that with --epochs (the total, counting the epochs done)")


def restore(trainer, payload: dict, facts: dict) -> int:
    """Load a checkpoint into ``trainer`` (every rank); returns the epoch index to continue from."""
    check_compatible(payload, trainer.model.cfg, trainer.train_cfg.dtype, facts)
    trainer.load_state_dict(payload["state"])
    torch.set_rng_state(payload["torch_rng_state"])
    return int(payload["epochs_done"])


def save_model(path: str, trainer, force: bool = False) -> None:
    """Write the final weights with the model's configuration (call on rank 0 only); see :func:`load_model`.

    ``in_dim`` is the model's input width (``trainer.in_dim``): the features, widened by the strategies (label
    augmentation: one column per class); ``num_relations`` the graph's relations (R-GCN's weights are per relation).
    """
    check_target(path, "model", force)
    cfg = trainer.model.cfg
    payload = {"format": KINDS["model"], "version": FORMAT_VERSION,
               "model_config": asdict(cfg) if is_dataclass(cfg) else {}, "dtype": trainer.train_cfg.dtype,
               "feature_dim": int(trainer.part.feature_dim), "num_classes": int(trainer.part.num_classes),
               "in_dim": int(trainer.in_dim), "label_aug": float(trainer.train_cfg.label_aug),
               "num_relations": int(getattr(trainer.part, "num_relations", 1)),
               # a user's model (model_fn): where to import its factory from again, or None (see load_model)
               "model_fn": getattr(trainer.model, "sarlab_factory", None),
               "state": {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}}
    atomic_write(path, lambda f: torch.save(payload, f))


def load_model(path: str):
    """The :class:`~sarlab.nn.model.GNN` that :func:`save_model` wrote, with its weights, in eval mode (a model
    trained with label augmentation takes ``feature_dim + num_classes`` inputs: the features, then the one-hot
    training labels, zero elsewhere)."""
    if _file_kind(path) != "model":
        raise CheckpointError(f"{path!r} is not a sarlab model file (written by save_model / --save-model)")
    payload = torch.load(path, map_location="cpu", weights_only=True)
    name = str(payload["model_config"].get("model", ""))
    if name.startswith("custom:"):
        raise CheckpointError(f"{path!r} holds a user's model ({name}, trained with model_fn=): load it with "
                              "sarlab.load_model(path), which rebuilds it from its model_fn")
    model = GNN(ModelConfig(**payload["model_config"]), payload.get("in_dim", payload["feature_dim"]),
                payload["num_classes"], num_relations=payload.get("num_relations", 1))
    model = model.to(next(iter(payload["state"].values())).dtype)
    model.load_state_dict(payload["state"])
    return model.eval()


def write_predictions(path: str, outputs: torch.Tensor, what: str = "logits", force: bool = False) -> None:
    """Write per-node outputs (row ``i`` = original node ``i``, from :meth:`Trainer.predict`) atomically.

    ``.pt``: a dict with ``outputs`` (tensor), ``what`` and ``format``; ``.npz``: arrays ``outputs``, ``what``
    and ``format`` (``np.load(path)["outputs"]``).
    """
    if not path.endswith((".pt", ".npz")):
        raise CheckpointError(f"predictions file {path!r} must end in .pt (torch) or .npz (numpy)")
    check_target(path, "predictions", force)
    outputs = outputs.detach().cpu()
    if path.endswith(".pt"):
        payload = {"format": KINDS["predictions"], "version": FORMAT_VERSION, "what": what, "outputs": outputs}
        atomic_write(path, lambda f: torch.save(payload, f))
    else:
        atomic_write(path, lambda f: np.savez(f, outputs=outputs.numpy(), what=np.array(what),
                                               format=np.array(KINDS["predictions"])))
