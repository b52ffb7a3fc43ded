"""The Python API: train on N local workers, or as this rank under torchrun, with the configs the CLI builds.

:func:`run` is what ``sarlab train`` does, callable from a script, a notebook cell or a torchrun process; it
returns the metric records as a DataFrame with the trained weights. :func:`gradients` is one training
forward/backward (what ``sarlab verify`` checks): the loss, the parameter gradients and every node's logits,
for comparing a distributed model with a single-process reference. Both take a built-in model
(:class:`~sarlab.nn.model.ModelConfig` or its name) or the user's own (``model_fn``, see
:mod:`sarlab.real.launch.custom_model`).

Locally, the workers are the launcher's processes (:func:`sarlab.real.launch.launcher.launch`): a script needs no
``if __name__ == "__main__"`` guard and a model defined in ``__main__`` or a notebook reaches them by value.
Under torchrun (``RANK``, ``WORLD_SIZE`` and ``MASTER_ADDR`` set) the call runs this rank in-process, on a
partition directory with ``WORLD_SIZE`` parts, and returns every rank's records; the weights and predictions
come back on rank 0 (they are the same on every rank) and are None elsewhere.
"""
from __future__ import annotations

import dataclasses
import inspect
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import nn

from sarlab.common.log import progress_sink, shown
from sarlab.common.machine import under_torchrun
from sarlab.core.config import EngineConfig, SamplingConfig
from sarlab.data.convert import to_graph
from sarlab.data.graphs import Graph, load_graph
from sarlab.data.partition import is_partition_dir, load_manifest, partition, report
from sarlab.data.validate_data import InputError, check_int
from sarlab.nn import pyg
from sarlab.nn.model import GNN, ModelConfig
from sarlab.real.launch import custom_model, outputs, sizing
from sarlab.real.launch.jobs import Fault, Job, check_run_args
from sarlab.real.launch.launcher import launch, preflight
from sarlab.real.launch.netspec import NetSpec
from sarlab.real.launch.prepare import prepare_partition, progress
from sarlab.real.launch.worker import run_from_env
from sarlab.strategies.registry import input_width
from sarlab.training import checkpoint
from sarlab.training.trainer import DTYPES, TrainConfig

_log = logging.getLogger(__name__)


@dataclass
class RunResult:
    """What :func:`run` returns.

    Args:
        records: one row per (rank, epoch), the columns of :data:`sarlab.common.records.RECORD_COLUMNS` and more.
        state: the trained model's ``state_dict`` (rank 0's; every rank holds the same).
        model: a fresh model (built-in or ``model_fn``'s) with ``state`` loaded, in eval mode.
        predictions: with ``predict=True``, every node's eval-mode logits, row ``i`` = original node ``i``.
    """

    records: pd.DataFrame
    state: dict | None
    model: nn.Module | None
    predictions: torch.Tensor | None = None


@dataclass
class GradientResult:
    """What :func:`gradients` returns (one training forward/backward at the initial weights, dropout on).

    Args:
        loss: the global loss (cross-entropy summed over every worker's training nodes / their count).
        grads: gradient of ``loss`` per parameter name (all-reduced: the whole graph's).
        logits: every node's training-mode logits, row ``i`` = original node ``i``.
        init: the initial ``state_dict`` the gradients were taken at.
        bytes_sent: bytes each rank sent.
    """

    loss: float
    grads: dict
    logits: torch.Tensor
    init: dict
    bytes_sent: list


def _model_config(model: ModelConfig | str) -> ModelConfig:
    if isinstance(model, ModelConfig):
        return model
    if isinstance(model, str):
        return ModelConfig(model=model)
    raise InputError(f"model must be a ModelConfig or a model name, got {type(model).__name__}")


def _world(workers: int | None) -> int:
    """The number of ranks: ``workers`` (default 2), or under torchrun its world size (``workers`` must agree)."""
    if under_torchrun():
        world = int(os.environ["WORLD_SIZE"])
        if workers not in (None, world):
            raise InputError(f"workers={workers}, but torchrun started {world} processes: drop workers or match it")
        return world
    workers = 2 if workers is None else workers
    check_int("workers", workers, 1)
    return workers


def _partition(graph: str | Graph | object, world: int, method: str, seed: int, partition_dir: str | None,
               force: bool, log, cache: bool = True) -> tuple[str, str | None]:
    """A partition directory of ``graph`` (a spec, a partition directory, a :class:`Graph`, a PyG ``Data`` or a
    networkx graph) into ``world`` parts; returns (directory, temporary directory to delete afterwards or None)."""
    if under_torchrun() and not (isinstance(graph, str) and is_partition_dir(graph)):
        raise InputError("under torchrun every rank must load the same partition: give a partition directory with "
                         "WORLD_SIZE parts (from `sarlab partition`), not a graph spec or a Graph")
    if not isinstance(graph, str):
        graph = to_graph(graph)  # a PyG Data keeps its masks (sarlab.data.convert.from_pyg)
    if isinstance(graph, Graph):
        tmp = None
        out_dir = partition_dir
        if out_dir is None:
            tmp = tempfile.mkdtemp(prefix=f"sarlab-parts-{os.getpid()}-")  # swept once this pid is gone
            out_dir = os.path.join(tmp, "parts")
        log(report(partition(graph, world, out_dir, method=method, seed=seed, source=graph.name, progress=log,
                             force=force)))
        return out_dir, tmp
    if os.path.isdir(graph) and not is_partition_dir(graph):
        raise InputError(f"{graph!r} is a directory without manifest.json; not a partition directory")
    pdir, tmp = prepare_partition(graph, world, method, seed, partition_dir, force, cache=cache, say=log)
    parts = load_manifest(pdir)["num_parts"]
    if under_torchrun() and parts != world:  # (a local launch says so with the launcher's own message)
        raise InputError(f"the partition {pdir!r} has {parts} parts but torchrun started {world} processes")
    return pdir, tmp


def _check_model_fn(model_fn: Callable, manifest: dict, cfg: ModelConfig, train: TrainConfig):
    """Build the user's model once here (clear errors before any worker starts); returns its ``cfg``."""
    in_dim = input_width(train, manifest["feature_dim"], manifest["num_classes"])
    module = custom_model.build(model_fn, in_dim, manifest["num_classes"], cfg.seed, train.dtype)
    if pyg.is_pyg_model(module):
        pyg.attach(module).remove()  # a layer that cannot run exactly on shards is refused here, in one line
    return custom_model.config_of(module, cfg.seed)


def _execute(job: Job, world: int, port: int, net: NetSpec, run_timeout_s: float | None, log) -> list:
    """Run ``job``: launched on ``world`` local processes, or as this torchrun rank; the launcher's result."""
    if under_torchrun():
        if net.emulated:
            raise InputError("an emulated network is built by a local launch; under torchrun the ranks use the "
                             "network torchrun was given (use net='loopback')")
        gathered = run_from_env(job, None)
        return [rec for recs in gathered for rec in recs] if job.kind == "train" else gathered
    return launch(job, world, port=port, net=net, log=log, run_timeout_s=run_timeout_s)


def _output_sizes(manifest: dict, cfg: ModelConfig, train: TrainConfig, model_fn: Callable | None,
                  checkpoint_dir: str | None, save_model: str | None, predict_path: str | None) -> list:
    """``(path, bytes, option)`` of the outputs whose size is known before training: predictions (nodes x
    classes), and for a built-in model its weights (``--save-model``) and weights plus Adam's two moments
    (``--checkpoint``)."""
    item = torch.empty((), dtype=DTYPES[train.dtype]).element_size()
    needs = [(predict_path, manifest["num_nodes"] * manifest["num_classes"] * item, "--predict")]
    if model_fn is None:
        in_dim = input_width(train, manifest["feature_dim"], manifest["num_classes"])
        model = GNN(cfg, in_dim, manifest["num_classes"], num_relations=manifest.get("num_relations", 1))
        weights = sum(p.numel() for p in model.parameters()) * item
        needs += [(save_model, weights, "--save-model"), (checkpoint_dir, 3 * weights, "--checkpoint")]
    return needs


def run(graph: str | Graph | object, *, workers: int | None = None, model: ModelConfig | str = "sage",
        model_fn: Callable | None = None, train: TrainConfig | None = None, epochs: int | None = None,
        engine: EngineConfig | None = None, sampling: SamplingConfig | None = None, net: str | NetSpec = "loopback",
        predict: bool = False,
        method: str = "metis", partition_dir: str | None = None, force: bool = False, backend: str = "gloo",
        timeout_s: float = 60.0, run_timeout_s: float | None = None, threads: int = 0, port: int = 0,
        memory: str = "live", label: str = "", quiet: bool = True, fault: Fault | None = None,
        checkpoint_dir: str | None = None, checkpoint_every: int = 0, resume_dir: str | None = None,
        save_model: str | None = None, predict_path: str | None = None,
        on_partition: Callable[[str], None] | None = None,
        log: Callable[[str], None] | logging.Logger | None = None, cache: bool = True) -> RunResult:
    """Train a model on ``graph`` across ``workers`` processes; the Python form of ``sarlab train``.

    Args:
        graph: graph spec (``planetoid:cora``, ``npz:PATH``, ``synthetic:...``, ``ogb:...``), partition directory,
            a :class:`~sarlab.data.graphs.Graph`, a PyG ``Data`` (its masks kept, see
            :func:`~sarlab.data.convert.from_pyg`) or a networkx graph (:func:`~sarlab.data.convert.from_networkx`);
            partitioned into ``workers`` parts with ``method`` and ``model.seed``.
        workers: local worker processes (default 2; under torchrun: its world size).
        model: built-in architecture (or just its name); with ``model_fn`` only its ``seed`` is used.
        model_fn: the user's model (see :mod:`sarlab.real.launch.custom_model`); built on every rank with
        ``model.seed``. train, engine, sampling: optimisation, aggregation mode, mini-batch sampling (None: full-batch).
        epochs: shorthand for ``train.epochs`` (overrides it).
        net: ``loopback`` or an emulated network spec (``veth:rate=...``, needs root).
        predict: return every node's final eval-mode logits.
        partition_dir: keep the partition here (default: a temporary directory, deleted afterwards).
        force: replace an existing sarlab partition / model / predictions file of the same kind.
        backend, timeout_s, threads, port, memory: as ``sarlab train``'s ``--backend --timeout --threads --port
            --memory``; ``run_timeout_s`` bounds the whole run.
        label, fault: free text in every record; an injected failure (tests).
        quiet: no progress lines (per epoch, partitioning, kernels), only warnings; False shows them (the epoch
            lines on stdout as ``sarlab train`` shows them, the others on stderr; a caller's logging at WARNING
            hides them all, in the worker processes too).
        checkpoint_dir, checkpoint_every, resume_dir, save_model, predict_path: as ``--checkpoint
            --checkpoint-every --resume --save-model --predict`` (files written by rank 0).
        on_partition: called with the partition directory before any worker starts (the CLI checks dimensions).
        log: a callable or a :class:`logging.Logger` that receives this call's progress lines (default: the
            ``sarlab.real.api`` logger at INFO).
        cache: reuse the cached partition of a spec string (see :mod:`sarlab.real.launch.prepare`); False
            partitions again.
    """
    with shown(quiet):
        return _run(graph, workers=workers, model=model, model_fn=model_fn, train=train, epochs=epochs, engine=engine,
                    sampling=sampling, net=net, predict=predict, method=method, partition_dir=partition_dir,
                    force=force, backend=backend, timeout_s=timeout_s, run_timeout_s=run_timeout_s, threads=threads,
                    port=port, memory=memory, label=label, quiet=quiet, fault=fault, checkpoint_dir=checkpoint_dir,
                    checkpoint_every=checkpoint_every, resume_dir=resume_dir, save_model=save_model,
                    predict_path=predict_path, on_partition=on_partition, log=progress_sink(log, _log), cache=cache)


def _run(graph, *, workers, model, model_fn, train, epochs, engine, sampling, net, predict, method, partition_dir,
         force, backend, timeout_s, run_timeout_s, threads, port, memory, label, quiet, fault, checkpoint_dir,
         checkpoint_every, resume_dir, save_model, predict_path, on_partition, log, cache) -> RunResult:
    """:func:`run` with ``log`` a callable."""
    check_run_args(dict(locals()))  # TypeError/ValueError naming the argument, before anything starts
    cfg = _model_config(model)
    train = train or TrainConfig()
    if epochs is not None:
        train = dataclasses.replace(train, epochs=epochs)
    engine = engine or EngineConfig()
    net = NetSpec.parse(net)
    world = _world(workers)
    blob = custom_model.pack(model_fn) if model_fn is not None else None
    if not under_torchrun():
        preflight(world, net, fault, timeout_s)  # before anything is partitioned or built
    outputs.check_fault(fault, train.epochs)
    sizing.check_run_size(graph, world, cfg, train, force, log)  # before anything is loaded or allocated
    plan = outputs.OutputPlan(checkpoint_dir, resume_dir, None, save_model, predict_path, force,
                              lock=os.environ.get("RANK", "0") == "0", log=log)  # checked, locked: see outputs
    resume_dir, tmp = plan.resume_dir, None
    outdir = tempfile.mkdtemp(prefix=f"sarlab-run-{os.getpid()}-out-")  # swept like a run directory
    try:
        pdir, tmp = _partition(graph, world, method, cfg.seed, partition_dir, force, log, cache)
        manifest = load_manifest(pdir)
        if on_partition is not None:
            on_partition(pdir)
        fingerprint_cfg = _check_model_fn(model_fn, manifest, cfg, train) if model_fn is not None else cfg
        outputs.check_free_space(_output_sizes(manifest, cfg, train, model_fn, checkpoint_dir, save_model,
                                               predict_path))
        done = None
        if resume_dir:
            payload = checkpoint.load_checkpoint(resume_dir)  # sha256-verified
            checkpoint.check_compatible(payload, fingerprint_cfg, train.dtype, checkpoint.graph_facts(manifest))
            outputs.check_fault(fault, train.epochs, payload["epochs_done"], log)
            done = payload if payload["epochs_done"] >= train.epochs else None
        # the workers write into the run's own directory; outputs.deliver moves the files into place
        state_path = os.path.join(outdir, "model.pt")
        pred_path = os.path.join(outdir, "predictions" + (".npz" if (predict_path or "").endswith(".npz") else ".pt")) \
            if predict or predict_path else None
        if done is not None:
            log(f"the checkpoint in {resume_dir} has already done {done['epochs_done']} epochs (epochs="
                f"{train.epochs}): nothing left to train; no model or predictions written")
            records, state, pred_path = pd.DataFrame(done.get("history") or []), done["state"]["model"], None
        else:
            job = Job("train", pdir, cfg, train, engine, backend=backend, timeout_s=timeout_s, threads=threads,
                      fault=fault, quiet=quiet, label=label, checkpoint_dir=checkpoint_dir,
                      checkpoint_every=checkpoint_every, resume_dir=resume_dir, save_model=state_path,
                      predict=pred_path, force=force, memory=memory, sampling=sampling, model_factory=blob)
            records = pd.DataFrame(_execute(job, world, port, net, run_timeout_s, log))
            outputs.deliver([(state_path, save_model, "--save-model")] * bool(save_model)
                            + [(pred_path, predict_path, "--predict")] * bool(predict_path), records.to_dict("records"))
            if not os.path.exists(state_path):  # a torchrun rank other than 0: rank 0 wrote its own files
                return RunResult(records, None, None, None)
            state = torch.load(state_path, map_location="cpu", weights_only=True)["state"]
        in_dim = input_width(train, manifest["feature_dim"], manifest["num_classes"])
        if model_fn is not None:
            fresh = custom_model.build(model_fn, in_dim, manifest["num_classes"], cfg.seed, train.dtype)
        else:
            fresh = GNN(cfg, in_dim, manifest["num_classes"], num_relations=manifest.get("num_relations", 1))
            fresh = fresh.to(DTYPES[train.dtype])
        fresh.load_state_dict(state)
        fresh.in_dim = in_dim  # what predict() feeds it (features, plus the label columns with label_aug)
        predictions = None
        if pred_path and pred_path.endswith(".pt"):
            predictions = torch.load(pred_path, map_location="cpu", weights_only=True)["outputs"]
        elif pred_path:
            with np.load(pred_path, allow_pickle=False) as arrays:
                predictions = torch.from_numpy(arrays["outputs"])
        return RunResult(records, state, fresh.eval(), predictions)
    finally:
        shutil.rmtree(outdir, ignore_errors=True)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
        plan.close()


def gradients(graph: str | Graph | object, *, workers: int | None = None, model: ModelConfig | str = "sage",
              model_fn: Callable | None = None, engine: EngineConfig | None = None, dtype: str = "float64",
              method: str = "metis", partition_dir: str | None = None, force: bool = False,
              backend: str = "gloo", timeout_s: float = 60.0, run_timeout_s: float | None = None, threads: int = 0,
              port: int = 0, log: Callable[[str], None] = progress) -> GradientResult:
    """One distributed training forward/backward at the initial weights: loss, gradients and logits.

    Args: as :func:`run`; ``dtype`` is that of parameters and activations (float64 for exact comparisons).
    """
    cfg = _model_config(model)
    train = TrainConfig(dtype=dtype)
    world = _world(workers)
    blob = custom_model.pack(model_fn) if model_fn is not None else None
    if not under_torchrun():
        preflight(world, None, None, timeout_s)
    pdir, tmp = _partition(graph, world, method, cfg.seed, partition_dir, force, log)
    try:
        manifest = load_manifest(pdir)
        if model_fn is not None:
            _check_model_fn(model_fn, manifest, cfg, train)
        job = Job("verify", pdir, cfg, train, engine or EngineConfig(), backend=backend, timeout_s=timeout_s,
                  threads=threads, quiet=True, model_factory=blob)
        ranks = [variants[0] for variants in _execute(job, world, port, NetSpec(), run_timeout_s, log)]
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    first = ranks[0]
    logits = torch.zeros(manifest["num_nodes"], first["logits"].shape[1], dtype=first["logits"].dtype)
    for r in ranks:
        logits[r["orig_ids"]] = r["logits"]
    return GradientResult(loss=float(first["loss"]), grads=first["grads"], logits=logits, init=first["init"],
                          bytes_sent=[int(r["bytes_sent"]) for r in ranks])


def load_model(path: str, model_fn: Callable | None = None) -> nn.Module:
    """The model a run saved (``save_model=PATH`` / ``--save-model PATH``), with its weights, in eval mode.

    A built-in model comes back as a :class:`~sarlab.nn.model.GNN` (:func:`sarlab.training.checkpoint.load_model`).
    A user's model (``model_fn=``) is rebuilt by its model function, called as the run called it (same seed, dtype,
    ``in_dim`` and ``num_classes``), then given the saved weights: the function is imported from where the run
    found it (``module:qualname``, stored in the file), or ``model_fn`` when given (needed for one defined in
    ``__main__`` or a notebook, which no later process can import). Nothing in the file is unpickled but tensors.
    The returned model also carries ``in_dim`` (its input width), ``feature_dim`` and ``num_classes``, which
    :func:`predict` reads (a model trained with label augmentation takes ``feature_dim + num_classes`` inputs).

    Args:
        path: the model file.
        model_fn: the model function of a user's model (default: the one recorded in the file).
    """
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - not a model file: checkpoint.load_model says what it is
        payload = None
    if not isinstance(payload, dict):
        payload = None
    name = str(((payload or {}).get("model_config") or {}).get("model", ""))
    if payload is None or not name.startswith("custom:"):
        if model_fn is not None and payload is not None:
            raise InputError(f"{path!r} holds a built-in model ({name}): drop model_fn")
        model = checkpoint.load_model(path)  # says what is wrong with a missing or foreign file
    else:
        recorded = payload.get("model_fn")
        if model_fn is None and not recorded:
            raise InputError(f"{path!r} holds a user's model ({name}) whose model function was defined where no "
                             "other process can import it (__main__, a notebook, a function body): pass it again, "
                             "sarlab.load_model(path, model_fn=...)")
        factory = model_fn if model_fn is not None else custom_model.import_factory(recorded)
        dtype = str(payload.get("dtype", "float32"))
        model = custom_model.build(factory, int(payload.get("in_dim", payload["feature_dim"])),
                                   int(payload["num_classes"]), int(payload["model_config"].get("seed", 0)), dtype)
        try:
            model.load_state_dict(payload["state"])
        except RuntimeError as err:
            raise InputError(f"{path!r}: the weights do not fit the model {_fn_name(factory)} builds ({name} was "
                             f"saved): {str(err).splitlines()[0]}") from err
        model.eval()
    model.feature_dim, model.num_classes = int(payload["feature_dim"]), int(payload["num_classes"])
    model.in_dim = int(payload.get("in_dim", payload["feature_dim"]))
    return model


def _fn_name(fn: Callable) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def predict(model: nn.Module, graph: str | Graph | object, *, engine: EngineConfig | None = None) -> torch.Tensor:
    """Every node's eval-mode logits of ``model`` on the whole ``graph``, in this process (no workers, no launcher).

    The graph is held as one worker's shard (:meth:`~sarlab.core.shards.ShardedGraph.single`); row ``i`` is
    node ``i``. A model with ``in_dim = feature_dim + num_classes`` (label augmentation) gets the one-hot labels of
    the training nodes appended to the features, zero elsewhere, as at a run's evaluation. Example::

        import sarlab
        sarlab.run("planetoid:cora", workers=2, model="gcn", epochs=20, save_model="gcn.pt")
        logits = sarlab.predict(sarlab.load_model("gcn.pt"), "planetoid:cora")   # [2708, 7]
        accuracy = (logits.argmax(1).numpy() == sarlab.load_graph("planetoid:cora").labels).mean()

    Args:
        model: a model from :func:`load_model` or a run's ``RunResult.model`` (any module whose forward takes
            ``(graph, x)`` or ``(graph, x, epoch)``, or a PyG model: ``(x, edge_index[, edge_type])``).
        graph: a graph spec, a :class:`~sarlab.data.graphs.Graph`, a PyG ``Data`` or a networkx graph.
        engine: the aggregation settings (default :class:`~sarlab.core.config.EngineConfig`; one worker, so the
            mode changes no number beyond rounding).
    """
    from sarlab.core.shards import ShardedGraph
    from sarlab.strategies.label_aug import with_label_inputs

    if isinstance(graph, str) and is_partition_dir(graph):
        raise InputError(f"{graph!r} is a partition directory; predict needs the whole graph (give its spec)")
    g = load_graph(graph)
    first = next(iter(model.parameters()), None)
    dtype = first.dtype if first is not None else torch.float32
    x = torch.from_numpy(g.features).to(dtype)
    in_dim = getattr(model, "in_dim", g.feature_dim)
    if in_dim == g.feature_dim + g.num_classes and in_dim != g.feature_dim:
        x = with_label_inputs(x, torch.from_numpy(g.labels), g.num_classes, torch.from_numpy(g.train_mask))
    elif in_dim != g.feature_dim:
        raise InputError(f"the model takes {in_dim} inputs per node but graph {g.name!r} has {g.feature_dim} "
                         "features: it was trained on another graph")
    sharded = ShardedGraph.single(g.src, g.dst, g.num_nodes, engine or EngineConfig(), edge_type=g.edge_type,
                                  num_relations=g.num_relations)
    model.eval()
    with torch.no_grad():
        if pyg.is_pyg_model(model):  # forward(x, edge_index[, edge_type]), its propagate over the one shard
            with pyg.sharded(model):
                return model(sharded, x)
        if isinstance(model, GNN) or len(inspect.signature(model.forward).parameters) >= 3:
            return model(sharded, x, 0)
        return model(sharded, x)
