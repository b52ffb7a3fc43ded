"""Size checks before allocation: the memory a command will need, from the simulator's memory model, against the
memory this process may use (its own cgroup's limit, then ``MemAvailable``); refused with one line and the estimate
unless forced.

* per worker: ``B + M`` with ``B`` = :data:`WORKER_BASE_BYTES` (interpreter, torch, kernels: measured) and ``M``
  the simulator's prediction of the worker's baseline (features, shards, parameters) plus its peak above it
  (:func:`sarlab.simulator.strategies.predictor.predict`, the same model ``sarlab simulate`` reports). Above
  :data:`SIMULATED_PARTS` workers the simulator prices :data:`SIMULATED_PARTS` parts of a graph scaled to the
  same nodes and edges per worker (its event model grows as the square of the parts; one part's memory does not).
* the process that loads and partitions the graph: ``B + 3 G`` with ``G = N (4F + 11) + 16 E`` bytes (features,
  labels, masks, two int64 edge arrays; sorting copies them); a partition directory needs none of it.
* a run needs ``max(loading, W x worker)`` (the graph is freed before the workers start). Where a quick guess
  (:func:`rough_worker_bytes`) fits twice over, the simulator is not asked (it costs an import of 2 s).

The sizes come from the spec before anything is loaded: synthetic parameters, the shipped Planetoid graphs, a
partition's manifest, the array headers of an ``npz:`` file (:func:`sarlab.data.graphs.npz_sizes`) and the node,
edge and feature counts of an ``ogb:`` folder.
"""
from __future__ import annotations

import gzip
import inspect
import logging
import os
import re
from collections.abc import Callable

from sarlab.data import staging
from sarlab.data.graph_data import parse_params
from sarlab.data.graphs import Graph, npz_sizes, synthetic_graph
from sarlab.data.partition import is_partition_dir, load_manifest
from sarlab.data.validate_data import InputError
from sarlab.nn.model import ModelConfig
from sarlab.real.launch import lifecycle
from sarlab.training.trainer import TrainConfig

_log = logging.getLogger(__name__)

#: resident bytes of a worker beside what the simulator models: interpreter, torch, PyG, the kernels, gloo's
#: buffers (VmHWM of a worker on a 1,000-node graph, whose data the simulator puts at 8 MiB, was 329 MiB here;
#: results/safety/size_estimate.md)
WORKER_BASE_BYTES = 320 * 2**20
#: environment variable: the bytes the size check takes as available (default: the cgroup's limit, MemAvailable)
AVAILABLE_ENV = "SARLAB_MEMORY_AVAILABLE"
#: the most parts the simulator is asked to price (see the module docstring)
SIMULATED_PARTS = 8
#: sizes of the shipped Planetoid graphs (``planetoid:NAME``)
PLANETOID = {"cora": {"nodes": 2708, "edges": 10556, "features": 1433, "classes": 7},
             "citeseer": {"nodes": 3327, "edges": 9104, "features": 3703, "classes": 6}}


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def cgroup_limit(proc_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> int | None:
    """Bytes this process's memory cgroup (v2, or v1's memory controller) and its ancestors still allow: the
    smallest ``limit - usage`` along the path that ``/proc/self/cgroup`` names (None: no limit found)."""
    text = _read(proc_cgroup) or ""
    candidates = []
    for line in text.splitlines():
        hier, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hier == "0" and controllers == "":
            candidates.append((os.path.join(root, "unified") if os.path.isdir(os.path.join(root, "unified"))
                               and not os.path.exists(os.path.join(root, "cgroup.controllers")) else root,
                               path, "memory.max", "memory.current"))
        elif "memory" in controllers.split(","):
            candidates.append((os.path.join(root, "memory"), path, "memory.limit_in_bytes", "memory.usage_in_bytes"))
    found = []
    for mount, path, limit_name, usage_name in candidates:
        folder = os.path.normpath(os.path.join(mount, path.lstrip("/")))
        while folder.startswith(mount):
            limit, usage = _read(os.path.join(folder, limit_name)), _read(os.path.join(folder, usage_name))
            if limit and limit.isdigit() and int(limit) < 2**60:
                found.append(max(0, int(limit) - int(usage or 0)))
            if folder == mount:
                break
            folder = os.path.dirname(folder)
    return min(found) if found else None


def available_bytes() -> int | None:
    """Memory this process may still use: its cgroup's room (:func:`cgroup_limit`), capped by ``MemAvailable`` of
    /proc/meminfo; ``$SARLAB_MEMORY_AVAILABLE`` replaces both. None when unknown."""
    if os.environ.get(AVAILABLE_ENV):
        try:
            return int(float(os.environ[AVAILABLE_ENV]))
        except ValueError:
            raise InputError(f"${AVAILABLE_ENV} must be a number of bytes, got {os.environ[AVAILABLE_ENV]!r}") \
                from None
    found = [b for b in (cgroup_limit(),) if b is not None]
    meminfo = re.search(r"^MemAvailable:\s+(\d+)", _read("/proc/meminfo") or "", re.M)
    if meminfo:
        found.append(int(meminfo.group(1)) * 1024)
    return min(found) if found else None


def _ogb_sizes(name: str, root: str) -> dict | None:
    """Nodes, edges and features of an OGB folder from its small count files and the first feature row."""
    raw = os.path.join(root, name.partition("+")[0].replace("-", "_"), "raw")
    try:
        with gzip.open(os.path.join(raw, "num-node-list.csv.gz"), "rt") as f:
            nodes = int(f.readline().split(",")[0])
        with gzip.open(os.path.join(raw, "num-edge-list.csv.gz"), "rt") as f:
            edges = 2 * int(f.readline().split(",")[0])  # made undirected
        with gzip.open(os.path.join(raw, "node-feat.csv.gz"), "rt") as f:
            features = len(f.readline().split(","))
    except (OSError, ValueError, EOFError):
        return None
    return {"nodes": nodes, "edges": edges, "features": features, "classes": 64}


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
                "classes": m["num_classes"], "partitioned": True}
    kind, _, rest = graph.partition(":")
    if kind == "synthetic":
        defaults = {k: p.default for k, p in inspect.signature(synthetic_graph).parameters.items()}
        types = {k: type(v) for k, v in defaults.items()}
        p = {**defaults, **parse_params(rest, types, "synthetic graph spec")}
        return {"nodes": p["nodes"], "edges": int(p["nodes"] * p["degree"]), "features": p["features"],
                "classes": p["classes"]}
    if kind == "planetoid":
        return PLANETOID.get(rest.lower())
    if kind == "npz":
        return npz_sizes(rest)
    if kind == "ogb":
        name, _, root = rest.partition(":")
        return _ogb_sizes(name, root) if name and root else None
    return None


def worker_bytes(sizes: dict, world: int, model: ModelConfig, train: TrainConfig, mode: str = "sar",
                 fused: bool = True) -> int:
    """One worker's peak resident bytes: :data:`WORKER_BASE_BYTES` plus the simulator's baseline and peak."""
    from sarlab.simulator.hardware.provenance import resolve_profile
    from sarlab.simulator.strategies.predictor import predict
    from sarlab.simulator.workload.model import ModelSpec
    from sarlab.simulator.workload.workload import estimate_partition

    n, e, f, c = (max(1, int(sizes[k])) for k in ("nodes", "edges", "features", "classes"))
    parts = min(world, SIMULATED_PARTS, n)
    scale = parts / world  # the same nodes and edges per worker on fewer parts
    n_sim, e_sim = max(parts, round(n * scale)), max(0, round(e * scale))
    spec = ModelSpec(model=model.model, layers=model.layers, hidden=model.hidden,
                     heads=model.heads if model.model == "gat" else 1, aggr=model.aggr, fused=fused,
                     batchnorm=model.batchnorm, dropout=model.dropout, dtype=train.dtype)
    stats = estimate_partition(n_sim, e_sim, parts, f, c, train_nodes=n_sim // 2)
    profile, _ = resolve_profile(None)
    predicted = predict(mode if mode in ("sar", "sa", "oneshot") else "sar", stats, spec, profile)
    return int(WORKER_BASE_BYTES + predicted.memory_per_worker_bytes)


def loading_bytes(sizes: dict) -> int:
    """Peak bytes of the process that loads and partitions the graph (0 for a partition directory)."""
    if sizes.get("partitioned"):
        return 0
    n, e, f = (max(0, int(sizes[k])) for k in ("nodes", "edges", "features"))
    return WORKER_BASE_BYTES + 3 * (n * (4 * f + 11) + 16 * e)


def rough_worker_bytes(sizes: dict, world: int, model: ModelConfig, train: TrainConfig) -> int:
    """A quick guess of one worker's peak, to skip the simulator where a run fits twice over (within 10 % of the
    simulator's on small models, above it on wide ones): its share of the graph twice, ``6 L`` activations of
    ``(N / W) x H h`` and four copies (weights, gradients, Adam's two moments) of two weights per layer,
    ``F x H``, ``(L - 2)`` of ``H x H h`` and ``H x C``."""
    n, e, f, c = (max(1, int(sizes[k])) for k in ("nodes", "edges", "features", "classes"))
    d, h = (8 if train.dtype == "float64" else 4), (model.heads if model.model == "gat" else 1)
    width, layers = max(1, model.hidden) * h, max(1, model.layers)
    acts = 6 * layers * -(-n // world) * width * d
    params = 4 * 2 * (f * width + max(0, layers - 2) * width * width + width * c) * d
    return WORKER_BASE_BYTES + 2 * (n * (4 * f + 11) + 16 * e) // world + acts + params


def estimate(sizes: dict, world: int, model: ModelConfig, train: TrainConfig, mode: str = "sar",
             fused: bool = True) -> dict:
    """Bytes a run needs: ``launcher`` (loading and partitioning), ``worker`` (each) and ``total`` (their peak
    together; see the module docstring)."""
    launcher = loading_bytes(sizes)
    worker = worker_bytes(sizes, world, model, train, mode, fused)
    return {"launcher": launcher, "worker": worker, "total": max(launcher, world * worker)}


def _gib(b: float) -> str:
    return f"{b / 2**30:.1f} GiB"


def _refuse_or_warn(text: str, avail: int, force: bool, log: Callable[[str], None]) -> None:
    text = f"{text}, but {_gib(avail)} is available to this process (its memory cgroup and MemAvailable)"
    if force:
        log(f"warning: {text}; going on (--force)")
        lifecycle.survive_oom(f"{text}; --force went on")  # the command line: a kill by the OOM killer is said
        return
    raise InputError(f"{text}: use a smaller graph, model or fewer workers, or pass --force to try anyway")


def check_run_size(graph, world: int, model: ModelConfig, train: TrainConfig, force: bool = False,
                   log: Callable[[str], None] = _log.info, mode: str = "sar", fused: bool = True) -> dict | None:
    """Refuse (``force``: warn) a run whose estimated memory exceeds what is available; returns the estimate.

    Also warns when ``world`` exceeds this machine's cores (the workers then time-share them)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if world > cores:
        log(f"warning: {world} workers on {cores} core(s): the workers share the cores, each runs slower")
    sizes = graph_sizes(graph)
    if sizes is None:
        return None
    avail = available_bytes()
    rough = max(loading_bytes(sizes), world * rough_worker_bytes(sizes, world, model, train))
    if avail is None or 2 * rough <= avail:  # fits twice over: no need for the simulator's finer estimate
        return {"launcher": loading_bytes(sizes), "worker": rough_worker_bytes(sizes, world, model, train),
                "total": rough, "rough": True}
    est = estimate(sizes, world, model, train, mode, fused)
    if est["total"] <= avail:
        return est
    _refuse_or_warn(f"this run needs about {_gib(est['total'])} of memory ({world} worker(s) x {_gib(est['worker'])}"
                    + (f"; {_gib(est['launcher'])} to load and partition the graph" if est["launcher"] else "")
                    + f"; {sizes['nodes']} nodes, {sizes['features']} features, hidden {model.hidden}, simulator's "
                    "memory model)", avail, force, log)
    return est


def check_partition_size(graph, parts: int, force: bool = False, log: Callable[[str], None] = _log.info,
                         out_dir: str | None = None) -> int | None:
    """Refuse (``force``: warn) partitioning a graph whose loading needs more memory than is available, and (always)
    one whose parts would not fit the free space under ``out_dir``; returns the memory estimate in bytes (None when
    the sizes cannot be told before loading)."""
    sizes = graph_sizes(graph)
    if sizes is None or sizes.get("partitioned"):
        return None
    need, avail = loading_bytes(sizes), available_bytes()
    if avail is not None and need > avail:
        _refuse_or_warn(f"partitioning {graph} into {parts} parts needs about {_gib(need)} of memory "
                        f"({sizes['nodes']} nodes, {sizes['edges']} edges, {sizes['features']} features)",
                        avail, force, log)
    if out_dir is not None:  # features, labels, masks, ids and int64 in-edges (halo lists are counted after loading)
        n, e, f = (max(0, int(sizes[k])) for k in ("nodes", "edges", "features"))
        staging.check_free(os.path.dirname(os.path.abspath(out_dir)), n * (4 * f + 19) + 16 * e, f"--out {out_dir!r}")
    return need
