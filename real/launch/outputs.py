"""Where a run's results go: every output path checked before any compute, every file written atomically, the
checkpoint directory locked for the run's lifetime, and the records of a finished run never lost to an output error.

A run's workers write the model and predictions into the run's private directory; :func:`deliver` then moves them to
the user's paths (a unique temporary name beside the target, fsync, rename). If that fails, the file and the records
are kept in a fallback directory that the error names.
"""
from __future__ import annotations

import contextlib
import fnmatch
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable

from sarlab.common.paths import cache_root
from sarlab.data import staging
from sarlab.data.validate_data import InputError
from sarlab.real.launch.jobs import Fault
from sarlab.training import checkpoint
from sarlab.training.checkpoint import atomic_write

_log = logging.getLogger(__name__)

#: output kind -> the suffixes it may carry
SUFFIXES = {"json": (".json",), "model": (".pt",), "predictions": (".pt", ".npz")}
OPTION = {"json": "--json", "model": "--save-model", "predictions": "--predict", "checkpoint": "--checkpoint"}


class OutputError(InputError):
    """An output path cannot be written (checked before any compute), or a write at the end failed."""


def _probe_dir(directory: str, what: str) -> None:
    try:
        staging.probe_writable(directory, what)
    except InputError as err:
        raise OutputError(str(err)) from None


def check_output_file(path: str, kind: str, force: bool = False) -> None:
    """Before any compute: ``path`` (option of ``kind``) is one a file system can hold
    (:func:`sarlab.data.staging.check_path`), has a known suffix, is not a directory, may be replaced (a JSON file
    only with ``force``; sarlab's own files: see :func:`sarlab.training.checkpoint.check_target`) and its folder is
    writable."""
    what = OPTION[kind]
    if kind == "json":
        check_file(path, what, force, suffixes=SUFFIXES[kind])
        return
    _checked_path(path, what)
    if not path.endswith(SUFFIXES[kind]):
        raise OutputError(f"{what} {path!r}: the file must end in {' or '.join(SUFFIXES[kind])}")
    if os.path.isdir(path):
        raise OutputError(f"{what} {path!r} is a directory; give a file path")
    checkpoint.check_target(path, kind, force)
    _probe_dir(os.path.dirname(os.path.abspath(path)), f"{what} {path!r}")


def _checked_path(path, what: str) -> str:
    if not isinstance(path, str | os.PathLike) or not os.fspath(path):
        raise OutputError(f"{what} needs a path, got {path!r}")
    try:
        return staging.check_path(path, what)
    except InputError as err:
        raise OutputError(str(err)) from None


#: the cache's list of the files sarlab wrote (one JSON line each: real path, device, inode, size, mtime)
LEDGER = "outputs-written.jsonl"
#: a ledger over this many bytes is rewritten with only the entries whose files are still as sarlab wrote them
LEDGER_LIMIT = 1 << 18


def _identity(path: str) -> list[int]:
    st = os.stat(path)
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]


def _ledger_entries(ledger: str) -> list[dict]:
    try:
        with open(ledger) as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    entries = []
    for line in lines:
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue
    return entries


def record_written(path) -> None:
    """Note in the cache's :data:`LEDGER` that sarlab wrote ``path`` as it is now (a later run may replace it without
    ``--force`` while it stays so: :func:`sarlab_wrote`). Best effort: a cache that cannot be written is logged."""
    ledger = os.path.join(cache_root(), LEDGER)
    try:
        full = os.path.realpath(os.fspath(path))
        line = json.dumps({"path": full, "id": _identity(full)}) + "\n"
        os.makedirs(os.path.dirname(ledger), exist_ok=True)
        fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())  # one short append: whole even with other processes appending
        finally:
            os.close(fd)
        if os.path.getsize(ledger) > LEDGER_LIMIT:
            kept = [e for e in _ledger_entries(ledger) if _still(e)]
            text = "".join(json.dumps(e) + "\n" for e in {e["path"]: e for e in kept}.values())
            atomic_write(ledger, lambda f: f.write(text.encode()))
    except (OSError, TypeError, KeyError) as err:
        _log.debug("could not note %s in %s: %s", path, ledger, err)


def _still(entry: dict) -> bool:
    try:
        return _identity(entry["path"]) == entry["id"]
    except (OSError, KeyError, TypeError):
        return False


def sarlab_wrote(path) -> bool:
    """Whether sarlab wrote ``path`` (:func:`record_written`) and nobody changed it since (same device, inode, size
    and modification time)."""
    try:
        full = os.path.realpath(os.fspath(path))
        identity = _identity(full)
    except OSError:
        return False
    ledger = os.path.join(cache_root(), LEDGER)
    return any(e.get("path") == full and e.get("id") == identity for e in _ledger_entries(ledger))


def is_own(path) -> bool:
    """An existing output file a command may replace without ``--force``: one in sarlab's cache (:func:`in_cache`)
    or one sarlab wrote and nobody changed since (:func:`sarlab_wrote`)."""
    return in_cache(path) or sarlab_wrote(path)


def in_cache(path) -> bool:
    """Whether ``path`` lies in sarlab's cache (:func:`sarlab.common.paths.cache_dir`), where the default outputs of
    ``calibrate``, ``simulate --validate``, ``bench`` and ``reproduce`` land: the command that writes such a file may
    replace it without ``--force``."""
    root = os.path.realpath(cache_root())
    return os.path.realpath(os.path.abspath(os.fspath(path))).startswith(root + os.sep)


def check_file(path, what: str, force: bool = False, *, own: bool | None = None, suffixes: tuple[str, ...] = (),
               nbytes: int = 0) -> str:
    """Before any compute: one output file of a command; returns it absolute.

    Refused (:class:`OutputError`, one line naming ``what`` and the path): a path no file system can hold (a name
    over 255 bytes, a path over 4095, a loop of links: :func:`sarlab.data.staging.check_path`), a suffix not in
    ``suffixes``, a directory or a link, an existing file without ``force`` unless ``own``, a folder that cannot be
    written, less free space than ``nbytes``.

    Args:
        path: the output file. what: the option it came from (``--out``), for the message.
        force: replace an existing file (``--force``, ``force=True``).
        own: the file is sarlab's own (one a manifest lists); None: :func:`is_own` (in the cache, or written by
            sarlab and unchanged since).
        suffixes: the endings it may have (none: any). nbytes: bytes that will be written, where known.
    """
    full = _checked_path(path, what)
    path = os.fspath(path)
    if suffixes and not path.endswith(tuple(suffixes)):
        raise OutputError(f"{what} {path!r}: the file must end in {' or '.join(suffixes)}")
    if os.path.isdir(path):
        raise OutputError(f"{what} {path!r} is a directory; give a file path")
    if os.path.islink(path):
        raise OutputError(f"{what} {path!r} is a link; give a file path")
    if os.path.exists(path) and not force and not (is_own(path) if own is None else own):
        raise OutputError(f"{what} {path!r} already exists and this run did not write it; pass --force "
                          "(force=True) to replace it, or choose another path")
    _probe_dir(os.path.dirname(full), f"{what} {path!r}")
    if nbytes > 0:
        check_free_space([(full, nbytes, what)])
    return full


def check_dir(path, what: str, force: bool = False, *, writes: tuple[str, ...] = (), own: bool | None = None) -> str:
    """Before any compute: a command's output directory (new or existing); returns it absolute.

    Refused as :func:`check_file` refuses a file (a file or a link where the directory must be, a folder that cannot
    be written), and, without ``force`` unless ``own`` (None: the directory is in the cache), a directory that
    already holds a file the command would write and sarlab did not (:func:`sarlab_wrote`): ``writes`` are
    :mod:`fnmatch` patterns of those names, relative to the directory (``rank*.bin``, ``sar/*``).
    """
    full = _checked_path(path, what)
    path = os.fspath(path)
    if os.path.islink(path) and not os.path.isdir(path):
        raise OutputError(f"{what} {path!r} is a link to nothing; give a directory path")
    if os.path.exists(path) and not os.path.isdir(path):
        raise OutputError(f"{what} {path!r} is a file; give a directory path")
    _probe_dir(full, f"{what} {path!r}")
    if writes and os.path.isdir(full) and not force and not (in_cache(full) if own is None else own):
        found = sorted(f for f in existing_matches(full, writes) if not sarlab_wrote(os.path.join(full, f)))
        if found:
            raise OutputError(f"{what} {path!r} already holds {', '.join(found[:3])}"
                              f"{f' and {len(found) - 3} more' if len(found) > 3 else ''}, which this command "
                              "would replace and did not write; pass --force (force=True) to replace them, or "
                              "choose another directory")
    return full


def existing_matches(directory: str, patterns: tuple[str, ...]) -> list[str]:
    """The files under ``directory`` (names relative to it, one level of sub-folders) matching ``patterns``."""
    names = []
    for entry in os.listdir(directory):
        full = os.path.join(directory, entry)
        if os.path.isdir(full) and not os.path.islink(full):
            names += [f"{entry}/{sub}" for sub in os.listdir(full)]
        else:
            names.append(entry)
    return [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]


def write_bytes(path, data: bytes | str) -> None:
    """``data`` into ``path`` atomically (:func:`sarlab.training.checkpoint.atomic_write`), noted as sarlab's
    (:func:`record_written`)."""
    blob = data.encode() if isinstance(data, str) else data
    atomic_write(os.fspath(path), lambda f: f.write(blob))
    record_written(path)


def write_csv(path, frame) -> None:
    """A DataFrame as CSV (no index) into ``path`` atomically."""
    write_bytes(path, frame.to_csv(index=False))


@contextlib.contextmanager
def staged_file(path):
    """``with staged_file(target) as tmp: draw(tmp)``: a writer that takes a path (a figure's ``savefig``) writes
    ``tmp`` (same name, in a private ``sarlab-out-<pid>-*`` folder), which is then copied over ``target``
    atomically; on any failure ``target`` is left as it was."""
    folder = staging.staging_dir(tempfile.gettempdir(), "sarlab-out-")  # swept once this process is gone
    try:
        tmp = os.path.join(folder, os.path.basename(os.fspath(path)))
        yield tmp
        _copy_atomic(tmp, os.fspath(path))
        record_written(path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def check_free_space(needs: list[tuple[str | None, int, str]], margin: float = 1.1) -> None:
    """Before any compute: refuse when a file system has less free space than the outputs that will land on it.

    Args:
        needs: ``(path, bytes, option)`` per output whose size is known (a checkpoint directory or a file path;
            None or 0 bytes: skipped); outputs on one file system are summed.
        margin: headroom over the estimate (a file is written beside its old version, then renamed over it).
    """
    per_device: dict[int, list] = {}
    for path, nbytes, what in needs:
        if not path or nbytes <= 0:
            continue
        folder = path if what == OPTION["checkpoint"] else os.path.dirname(os.path.abspath(path))
        base = staging.nearest_existing(folder)
        entry = per_device.setdefault(os.stat(base).st_dev, [base, 0, []])
        entry[1] += nbytes
        entry[2].append(what)
    for base, total, whats in per_device.values():
        free = shutil.disk_usage(base).free
        if free < total * margin:
            raise OutputError(f"{', '.join(whats)}: about {total / 2**20:.1f} MiB will be written under {base!r} "
                              f"but only {free / 2**20:.1f} MiB are free; free some space or choose another place")


def check_fault(fault: Fault | None, epochs: int, start: int = 0, log: Callable[[str], None] | None = None) -> None:
    """A fault must fall inside the run: its epoch (counted from 1, as progress is) at most ``epochs``; one at an
    epoch a resumed run skips is noted (it will not fire)."""
    if fault is None:
        return
    if fault.epoch > epochs:
        raise InputError(f"fault at epoch {fault.epoch}, but the run has {epochs} epoch(s) (counted from 1): it "
                         f"would never fire; use an epoch in 1..{epochs}")
    if fault.epoch <= start and log is not None:
        log(f"note: the fault at epoch {fault.epoch} will not fire: the run resumes after epoch {start}")


class OutputPlan:
    """The outputs of one run, checked; holds the checkpoint directory's lock until :meth:`close`.

    Args:
        checkpoint_dir: ``--checkpoint`` directory, or None.
        resume: ``--resume``: None, ``auto`` or a directory. With ``checkpoint_dir`` holding a checkpoint and no
            ``force``, None means ``auto``: the run continues it (what an elastic restart needs).
        json_path, save_model, predict_path: output files, or None.
        force: replace sarlab's own files (and start afresh over a checkpoint).
        lock: take the directory lock (under torchrun only rank 0 does).
    """

    def __init__(self, checkpoint_dir: str | None = None, resume: str | None = None, json_path: str | None = None,
                 save_model: str | None = None, predict_path: str | None = None, force: bool = False,
                 lock: bool = True, log: Callable[[str], None] = _log.info):
        self.lock = None
        if resume == "auto" and not checkpoint_dir:
            raise InputError("--resume auto continues the checkpoint of --checkpoint DIR: give --checkpoint")
        for path, kind in ((json_path, "json"), (save_model, "model"), (predict_path, "predictions")):
            if path is not None:
                check_output_file(path, kind, force)
        self.resume_dir = None if resume == "auto" else resume
        if checkpoint_dir:
            try:
                staging.check_path(checkpoint_dir, "--checkpoint")
            except InputError as err:
                raise OutputError(str(err)) from None
            if os.path.islink(checkpoint_dir) or (os.path.exists(checkpoint_dir) and not os.path.isdir(checkpoint_dir)):
                raise OutputError(f"checkpoint directory {checkpoint_dir!r} is a file or a link; choose a directory "
                                  "path")
            _probe_dir(checkpoint_dir, f"--checkpoint {checkpoint_dir!r}")
            if lock:
                self.lock = checkpoint.DirectoryLock(checkpoint_dir, log).acquire()
            try:
                auto = resume == "auto" or (resume is None and not force)
                if auto and checkpoint.holds_checkpoint(checkpoint_dir):
                    self.resume_dir = checkpoint_dir
                checkpoint.check_checkpoint_dir(checkpoint_dir, force=force, resume_from=self.resume_dir)
            except BaseException:
                self.close()
                raise

    def close(self) -> None:
        """Release the checkpoint directory's lock."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None


def _copy_atomic(src: str, dst: str) -> None:
    with open(src, "rb") as inp:
        atomic_write(dst, lambda out: shutil.copyfileobj(inp, out, 1 << 20))


def write_json_atomic(path: str, payload) -> None:
    """Write ``payload`` as JSON to ``path``: a unique temporary name beside it, fsync, rename; removed on failure."""
    write_bytes(path, json.dumps(payload, indent=1, default=str))


def fallback_dir() -> str:
    """A new directory for results an output error would otherwise lose (``$TMPDIR/sarlab-saved-PID-TIME-*``)."""
    return tempfile.mkdtemp(prefix=f"sarlab-saved-{os.getpid()}-{int(time.time())}-")


def save_records_fallback(records, err: BaseException, what: str) -> OutputError:
    """Keep ``records`` in a fallback file; the error to raise names it (and why ``what`` failed)."""
    text = f"{err.__class__.__name__}: {err}" if not isinstance(err, OSError) else f"{err.strerror or err}"
    try:
        path = os.path.join(fallback_dir(), "records.json")
        write_json_atomic(path, records)
    except OSError as err2:
        return OutputError(f"could not write {what} ({text}), nor the fallback records ({err2.strerror or err2})")
    return OutputError(f"could not write {what} ({text}); the run finished and its records are in {path}")


def deliver(files: list[tuple[str, str, str]], records) -> None:
    """Move each ``(src, dst, option)`` file of a finished run into place atomically. On a failure the files not
    delivered and the records stay in a fallback directory, which the raised :class:`OutputError` names."""
    failed, error = [], None
    for src, dst, option in files:
        if not os.path.exists(src):
            continue
        try:
            _copy_atomic(src, dst)
        except OSError as err:
            failed.append((src, dst, option))
            error = error or err
    if not failed:
        return
    keep = fallback_dir()
    kept = []
    for src, dst, option in failed:
        target = os.path.join(keep, os.path.basename(dst))
        shutil.copyfile(src, target)
        kept.append(f"{option} -> {target}")
    write_json_atomic(os.path.join(keep, "records.json"), records)
    raise OutputError(f"could not write {', '.join(f'{o} {d!r}' for _, d, o in failed)} ({error.strerror or error}); "
                      f"the run finished: {'; '.join(kept)}; records -> {os.path.join(keep, 'records.json')}")
