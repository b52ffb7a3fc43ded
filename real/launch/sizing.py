"""Size checks before allocation: the memory a run will need, estimated from the graph's sizes and the model, against
the memory this machine (or its cgroup) has available; refused with one line and the estimate unless forced.

The estimate is deliberately simple (an upper-range guess, not the simulator's exact model):

* launcher: the whole graph while it is partitioned, ``3 G`` with ``G = N (4F + 11) + 16 E`` bytes
  (features, labels, masks, two int64 edge arrays; sorting copies them);
* per worker: ``B + 2 G / W + A + P`` with ``B`` = 300 MiB (interpreter, torch, kernels), its shard and the halo
  rows it receives (``2 G / W``), activations ``A = 6 L (N / W) H h d`` (``L`` layers, width ``H`` (times ``h``
  GAT heads), ``d`` bytes per number: inputs, outputs, gradients and saved tensors of each layer) and parameters
  with their gradients and Adam's two moments ``P = 4 * 2 (F H + (L - 1) H^2 h + H C) d``.
"""
from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Callable

from sarlab.data.graph_data import parse_params
from sarlab.data.graphs import Graph, synthetic_graph
from sarlab.data.partition import is_partition_dir, load_manifest
from sarlab.data.validate_data import InputError
from sarlab.nn.model import ModelConfig
from sarlab.training.trainer import TrainConfig

_log = logging.getLogger(__name__)

WORKER_BASE_BYTES = 300 * 2**20
#: environment variable: the bytes the size check takes as available (default: /proc/meminfo and the cgroup limit)
AVAILABLE_ENV = "SARLAB_MEMORY_AVAILABLE"


def available_bytes() -> int | None:
    """Memory available to this run: ``MemAvailable`` of /proc/meminfo, capped by the cgroup's limit minus its
    usage (cgroup v2 or v1); ``$SARLAB_MEMORY_AVAILABLE`` replaces both. None when unknown."""
    if os.environ.get(AVAILABLE_ENV):
        try:
            return int(float(os.environ[AVAILABLE_ENV]))
        except ValueError:
            raise InputError(f"${AVAILABLE_ENV} must be a number of bytes, got {os.environ[AVAILABLE_ENV]!r}") \
                from None
    found = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            with open(limit_file) as f:
                limit = f.read().strip()
            with open(usage_file) as f:
                usage = int(f.read().strip())
        except (OSError, ValueError):
            continue
        if limit.isdigit() and int(limit) < 2**60:
            found.append(max(0, int(limit) - usage))
        break
    return min(found) if found else None


def graph_sizes(graph) -> dict | None:
    """``nodes``, ``edges``, ``features``, ``classes`` of a graph spec, partition directory or Graph, read without
    loading the graph (None when they cannot be told cheaply: the loader then checks as it goes)."""
    if isinstance(graph, Graph):
        return {"nodes": graph.num_nodes, "edges": graph.num_edges, "features": graph.feature_dim,
                "classes": graph.num_classes}
    if not isinstance(graph, str):
        return None
    if is_partition_dir(graph):
        m = load_manifest(graph)
        return {"nodes": m["num_nodes"], "edges": m["num_edges"], "features": m["feature_dim"],
                "classes": m["num_classes"]}
    kind, _, rest = graph.partition(":")
    if kind == "synthetic":
        defaults = {k: p.default for k, p in inspect.signature(synthetic_graph).parameters.items()}
        types = {k: type(v) for k, v in defaults.items()}
        p = {**defaults, **parse_params(rest, types, "synthetic graph spec")}
        return {"nodes": p["nodes"], "edges": int(p["nodes"] * p["degree"]), "features": p["features"],
                "classes": p["classes"]}
    if kind == "planetoid":
        return {"cora": {"nodes": 2708, "edges": 10556, "features": 1433, "classes": 7},
                "citeseer": {"nodes": 3327, "edges": 9104, "features": 3703, "classes": 6}}.get(rest.lower())
    return None


def estimate(sizes: dict, world: int, model: ModelConfig, train: TrainConfig) -> dict:
    """Bytes the run needs: ``launcher``, ``worker`` (each) and ``total`` (see the module docstring)."""
    n, e, f, c = (max(0, int(sizes[k])) for k in ("nodes", "edges", "features", "classes"))
    d = 8 if train.dtype == "float64" else 4
    graph = n * (4 * f + 11) + 16 * e
    h = model.heads if model.model == "gat" else 1
    width, layers = max(1, model.hidden), max(1, model.layers)
    acts = 6 * layers * -(-n // world) * width * h * d
    params = 4 * 2 * (f * width + (layers - 1) * width * width * h + width * c) * d
    worker = WORKER_BASE_BYTES + 2 * graph // world + acts + params
    launcher = 3 * graph if not isinstance(sizes.get("partitioned"), bool) else 0
    return {"launcher": launcher, "worker": worker, "total": launcher + world * worker}


def _gib(b: float) -> str:
    return f"{b / 2**30:.1f} GiB"


def check_run_size(graph, world: int, model: ModelConfig, train: TrainConfig, force: bool = False,
                   log: Callable[[str], None] = _log.info) -> dict | None:
    """Refuse (``force``: warn) a run whose estimated memory exceeds what is available; returns the estimate.

    Also warns when ``world`` exceeds this machine's cores (the workers then time-share them)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if world > cores:
        log(f"warning: {world} workers on {cores} core(s): the workers share the cores, each runs slower")
    sizes = graph_sizes(graph)
    if sizes is None:
        return None
    if isinstance(graph, str) and is_partition_dir(graph):
        sizes = {**sizes, "partitioned": True}
    est = estimate(sizes, world, model, train)
    avail = available_bytes()
    if avail is None or est["total"] <= avail:
        return est
    text = (f"this run needs about {_gib(est['total'])} of memory ({world} worker(s) x {_gib(est['worker'])}"
            + (f" + {_gib(est['launcher'])} to partition the graph" if est["launcher"] else "")
            + f"; {sizes['nodes']} nodes, {sizes['features']} features, hidden {model.hidden}), but "
            f"{_gib(avail)} is available")
    if force:
        log(f"warning: {text}; going on (--force)")
        return est
    raise InputError(f"{text}: use a smaller graph, model or fewer workers, or pass --force to try anyway")
