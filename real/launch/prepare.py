"""What a run needs before any worker starts: the graph a spec names, loaded, and a partition directory for it,
with progress lines on stderr. The API (:mod:`sarlab.real.api`) and the commands share it.
"""
from __future__ import annotations

import os
import sys
import tempfile

from sarlab.data.graphs import Graph, load_graph
from sarlab.data.partition import check_output_dir, is_partition_dir, partition, report


def progress(msg: str) -> None:
    """One line of progress on stderr (stdout stays for results)."""
    print(msg, file=sys.stderr, flush=True)


def load_source(spec: str) -> Graph:
    """Load the graph a spec names, saying so."""
    progress(f"loading graph {spec}")
    return load_graph(spec)


def prepare_partition(spec: str, workers: int, method: str, seed: int,
                      out_dir: str | None, force: bool = False) -> tuple[str, str | None]:
    """A partition directory for ``spec``: itself if it is one, else a new one (temporary unless
    ``out_dir``). Returns (directory, temporary directory to delete afterwards or None)."""
    if is_partition_dir(spec):
        return spec, None
    if os.path.isdir(spec):
        raise SystemExit(f"error: {spec!r} is a directory without manifest.json; not a partition directory")
    if out_dir is not None:
        check_output_dir(out_dir, force)
    graph = load_source(spec)
    tmp = None
    if out_dir is None:
        tmp = tempfile.mkdtemp(prefix=f"sarlab-parts-{os.getpid()}-")  # swept once this pid is gone
        out_dir = os.path.join(tmp, "parts")
    manifest = partition(graph, workers, out_dir, method=method, seed=seed, source=spec, progress=progress,
                         force=force)
    progress(report(manifest))
    return out_dir, tmp
