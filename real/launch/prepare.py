"""What a run needs before any worker starts: the graph a spec names, loaded, and a partition directory for it.

A spec string's partition is cached under ``partitions/`` in sarlab's cache directory
(:func:`sarlab.common.paths.cache_dir`), keyed by the spec, the number of parts, the method, the seed and the
partition format version (and, for a spec naming a file, the file's size and modification time), so a second run
on the same spec loads it instead of partitioning again. It is written into a staging directory beside its place
and renamed into it when complete; on reuse its manifest and every file are checked against their sha256, and a
cache entry that fails the check is partitioned again. ``cache=False`` (``--no-cache``) bypasses the cache.
Progress goes to the ``sarlab.real.launch.prepare`` logger at INFO. The API (:mod:`sarlab.real.api`) and the
commands share this module.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable

from sarlab.common.paths import cache_dir
from sarlab.data.graphs import Graph, load_graph
from sarlab.data.partition import (
    FORMAT_VERSION,
    PartitionError,
    check_output_dir,
    is_partition_dir,
    load_manifest,
    partition,
    report,
    verify_files,
)

log = logging.getLogger(__name__)
CACHE_FOLDER = "partitions"
_STAGING = ".staging-"


def progress(msg: str) -> None:
    """One line of progress: the ``sarlab`` log at INFO (stderr under the command line; stdout stays for results)."""
    log.info(msg)


def load_source(spec: str, say: Callable[[str], None] = progress) -> Graph:
    """Load the graph a spec names, saying so (to ``say``)."""
    say(f"loading graph {spec}")
    return load_graph(spec)


def cache_key(spec: str, parts: int, method: str, seed: int) -> str:
    """The cache entry's name: a hash of (spec, parts, method, seed, format version, the file a spec names).

    .. math:: \\mathrm{key} = \\mathrm{sha256}(\\mathrm{json}(\\mathrm{spec}, P, \\mathrm{method}, \\mathrm{seed},
        \\mathrm{version}, \\mathrm{stat}))[:16]
    """
    facts: list = [spec, int(parts), method, int(seed), FORMAT_VERSION]
    for piece in spec.split(":")[1:]:  # npz:PATH, ogb:NAME:ROOT, ...: a path's size and time join the key
        path = piece.split(",")[0]
        if path and os.path.exists(path):
            stat = os.stat(path)
            facts.append([os.path.abspath(path), stat.st_size, stat.st_mtime_ns])
    return hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:16]


def _trusted(directory: str, spec: str, parts: int, method: str, seed: int) -> bool:
    """Whether a cache entry is a whole, unedited partition of ``spec`` into ``parts`` (sha256 of every file)."""
    if not is_partition_dir(directory):
        return False
    try:
        manifest = load_manifest(directory)
        if (manifest["num_parts"], manifest.get("source"), manifest.get("method"), manifest.get("seed")) != \
                (parts, spec, method, seed):
            return False
        verify_files(directory, manifest)
    except (PartitionError, OSError, KeyError, ValueError) as err:
        log.warning("the cached partition in %s failed its check (%s); partitioning again", directory, err)
        return False
    return True


def _sweep_staging(root: str) -> None:
    """Remove staging directories whose process is gone (a crash while partitioning leaves one)."""
    for name in os.listdir(root):
        if not name.startswith(_STAGING):
            continue
        try:
            pid = int(name[len(_STAGING):].split("-")[0])
            os.kill(pid, 0)
        except (ValueError, ProcessLookupError):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        except PermissionError:  # another user's live process
            pass


def cached_partition(spec: str, workers: int, method: str, seed: int, say: Callable[[str], None] = progress) -> str:
    """The cached partition of ``spec`` into ``workers`` parts, made (staged, then renamed into place) if missing
    or untrusted; returns its directory."""
    root = str(cache_dir(CACHE_FOLDER))
    os.makedirs(root, exist_ok=True)
    _sweep_staging(root)
    final = os.path.join(root, cache_key(spec, workers, method, seed))
    if _trusted(final, spec, workers, method, seed):
        say(f"reused the cached partition of {spec} ({workers} parts, {method}, seed {seed}) in {final} "
            "(cache=False / --no-cache partitions again)")
        return final
    graph = load_source(spec, say)
    staging = tempfile.mkdtemp(prefix=f"{_STAGING}{os.getpid()}-", dir=root)  # the old entry, if any, too
    try:
        manifest = partition(graph, workers, os.path.join(staging, "parts"), method=method, seed=seed, source=spec,
                             progress=say)
        say(report(manifest))
        if os.path.isdir(final):  # an untrusted entry (or one a concurrent run just finished): set it aside
            if _trusted(final, spec, workers, method, seed):
                return final
            os.replace(final, os.path.join(staging, "old"))
        try:
            os.rename(os.path.join(staging, "parts"), final)
        except OSError:  # a concurrent run renamed its own first: use that one
            if not _trusted(final, spec, workers, method, seed):
                raise
        say(f"cached the partition in {final}")
        return final
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def prepare_partition(spec: str, workers: int, method: str, seed: int,
                      out_dir: str | None, force: bool = False, cache: bool = True,
                      say: Callable[[str], None] = progress) -> tuple[str, str | None]:
    """A partition directory for ``spec``: itself if it is one, else the cached one (``cache``, no ``out_dir``),
    else a new one (temporary unless ``out_dir``). Returns (directory, temporary directory to delete afterwards or
    None).

    Args:
        spec: a graph spec string or a partition directory.
        workers, method, seed: the number of parts and how they are assigned.
        out_dir: write the partition here (never cached).
        force: replace a sarlab partition in ``out_dir``.
        cache: reuse (and fill) the partition cache; False partitions into a temporary directory.
        say: where progress lines go (default: this module's logger at INFO).
    """
    if is_partition_dir(spec):
        return spec, None
    if os.path.isdir(spec):
        raise PartitionError(f"{spec!r} is a directory without manifest.json; not a partition directory")
    if out_dir is None and cache:
        return cached_partition(spec, workers, method, seed, say), None
    if out_dir is not None:
        check_output_dir(out_dir, force)
    graph = load_source(spec, say)
    tmp = None
    if out_dir is None:
        tmp = tempfile.mkdtemp(prefix=f"sarlab-parts-{os.getpid()}-")  # swept once this pid is gone
        out_dir = os.path.join(tmp, "parts")
    manifest = partition(graph, workers, out_dir, method=method, seed=seed, source=spec, progress=say,
                         force=force)
    say(report(manifest))
    return out_dir, tmp
