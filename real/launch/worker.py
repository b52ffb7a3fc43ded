"""A worker process: join the process group, load its part, run the job, report to rank 0.

``python -m sarlab.real.launch.worker_entry RUNDIR RANK`` (:mod:`sarlab.real.launch.worker_entry`) is how the
launcher starts one (the job is in ``RUNDIR/job.pkl``, the rendezvous in the env:// variables); :func:`run_from_env` is
the same under torchrun.
"""
from __future__ import annotations

import datetime
import gc
import json
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import replace

import torch
import torch.distributed as dist

from sarlab import kernels
from sarlab.common.log import ON_STDOUT
from sarlab.core import memory
from sarlab.core.comm import Comm, prepare_backend
from sarlab.core.shards import ShardedGraph
from sarlab.data.partition import load_manifest, load_part
from sarlab.nn.model import ModelConfig
from sarlab.real.launch import custom_model
from sarlab.real.launch.jobs import Job
from sarlab.real.launch.lifecycle import die_with_parent
from sarlab.training import checkpoint
from sarlab.training.minibatch import MiniBatchTrainer
from sarlab.training.trainer import TrainConfig, Trainer

_log = logging.getLogger(__name__)


class RendezvousError(RuntimeError):
    """The worker could not reach the rendezvous store."""


def _threads(job: Job, world: int) -> int:
    if job.threads:
        return job.threads
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // world)


def _connect(job: Job, rank: int, world: int, host: str, port: int) -> None:
    """Join the process group through the TCP store at host:port (hosted by the launcher, or under
    torchrun by its agent or by rank 0)."""
    timeout = datetime.timedelta(seconds=job.timeout_s)
    rank0_hosts = os.environ.get("SARLAB_STORE_HOST_RANK0") == "1"
    host_store = rank0_hosts and rank == 0
    try:
        if rank0_hosts and not host_store:  # rank 0 starts its store as we start: wait until it listens
            _wait_for_listener(host, port, job.timeout_s)
        store = dist.TCPStore(host, port, world_size=world if host_store else None, is_master=host_store,
                              timeout=timeout, wait_for_workers=False)
    except (RuntimeError, OSError) as err:
        raise RendezvousError(f"rank {rank}: could not reach the rendezvous store at {host}:{port} within "
                              f"{job.timeout_s:g}s ({err.__class__.__name__}: {str(err).splitlines()[0]}). "
                              "Is the launcher (or rank 0) running, and are MASTER_ADDR/MASTER_PORT right?") \
            from err
    store = _round_store(store)
    prepare_backend(job.backend)  # ccl: load and register the oneCCL backend (built by the launcher's check)
    dist.init_process_group(job.backend, store=store, rank=rank, world_size=world, timeout=timeout)


def _round_store(store):
    """The part of ``store`` this round of workers uses. torchrun's agent hosts one store for all its rounds
    (``TORCHELASTIC_USE_AGENT_STORE=True``): after a restart (``--max-restarts``) the keys the previous round's
    process group wrote are still there, and a rank that reads them before the new rank 0 overwrites them (gloo's
    connectFullMesh reads each peer's address) connects to a dead process (``Connection refused`` or a connect
    timeout). A prefix per round (``TORCHELASTIC_RESTART_COUNT``, as torch's own env:// rendezvous once did) keeps
    rounds apart. Stores hosted by our launcher or by rank 0 are new in every round and used as they are."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return store
    return dist.PrefixStore(f"/sarlab/round_{os.environ.get('TORCHELASTIC_RESTART_COUNT') or 0}", store)


def _wait_for_listener(host: str, port: int, timeout_s: float) -> None:
    """Return once ``host:port`` accepts a TCP connection; OSError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((host, port), timeout=max(0.1, min(1.0, deadline - time.monotonic()))).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _inject(job: Job, rank: int, epoch: int) -> None:
    """Fire the job's fault at the start of epoch index ``epoch`` (the fault counts epochs from 1, as progress does),
    once: a torchrun restart (``TORCHELASTIC_RESTART_COUNT`` > 0) does not repeat it."""
    fault = job.fault
    if fault is None or fault.rank != rank or fault.epoch != epoch + 1:
        return
    if os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") not in ("", "0"):
        return
    if fault.kind == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault.kind == "hang":
        time.sleep(10 * job.timeout_s + 3600)
    if fault.kind == "cut":  # this host's link goes down; the epoch goes on and finds nobody to talk to
        dev = os.environ.get("GLOO_SOCKET_IFNAME", "eth0")
        subprocess.run(["ip", "link", "set", "dev", dev, "down"], check=True, capture_output=True)
        _log.warning("rank %d: link %s cut at epoch %d (injected fault)", rank, dev, epoch + 1)
        return
    raise RuntimeError(f"injected fault on rank {rank} at epoch {epoch + 1}")


def _resume_collector() -> None:
    """Collect once, freeze what set-up built (it leaves the cyclic collector's generations, so later passes do
    not re-scan it) and turn the collector back on: :mod:`sarlab.real.launch.worker_entry` pauses it through the
    imports and set-up (a no-op re-enable under torchrun)."""
    gc.collect()
    gc.freeze()
    gc.enable()


def run(job: Job, rank: int, world: int, host: str, port: int, out_path: str | None) -> list:
    """Run ``job`` as ``rank`` of ``world``; rank 0 writes the gathered result to ``out_path``; returns it (one
    entry per rank) on every rank."""
    mem_method = _memory_method(job)  # first: the counting allocator must see every tensor of the run
    torch.set_num_threads(_threads(job, world))
    _connect(job, rank, world, host, port)
    try:
        manifest = load_manifest(job.partition_dir)
        part = load_part(job.partition_dir, rank, manifest, verify=True)
        comm = Comm(rank, world)
        if job.kind == "verify":
            _resume_collector()
            result = [_verify(_trainer(job, ShardedGraph.from_partition(part, comm, engine), part, model,
                                       replace(job.train, dtype=dtype)))
                      for model, engine, dtype in job.all_variants()]
        else:
            graph = ShardedGraph.from_partition(part, comm, job.engine)
            trainer = _trainer(job, graph, part, job.model, job.train) if job.sampling is None else \
                MiniBatchTrainer(graph, part, job.model, job.train, job.sampling, job.sampling.round_batches)
            _resume_collector()  # after the trainer: its objects are frozen too
            comm.barrier()
            baseline = memory.baseline_bytes()
            if job.memray_dir:
                with memory.memray_tracker(os.path.join(job.memray_dir, f"rank{rank}.bin")):
                    result = _train(job, trainer, baseline, manifest, mem_method)
            else:
                result = _train(job, trainer, baseline, manifest, mem_method)
        gathered = [None] * world
        dist.all_gather_object(gathered, result)
        if rank == 0 and out_path:
            _write(job, gathered, out_path)
        comm.barrier()
    finally:
        dist.destroy_process_group()
    return gathered


def _trainer(job: Job, graph: ShardedGraph, part, model: ModelConfig, train: TrainConfig) -> Trainer:
    """The rank's trainer: the built-in model ``model`` describes, or the job's own (``job.model_factory``, built
    with ``model.seed``)."""
    trainer = Trainer(graph, part, model, train)
    if job.model_factory is not None:
        custom_model.install(trainer, custom_model.unpack(job.model_factory), model.seed)
    return trainer


def _memory_method(job: Job) -> str:
    """Set up the job's peak-memory method (:func:`sarlab.core.memory.use_method`) and return the one in effect;
    load the kernels. memray runs measure with ``rss``: a block cache would hide re-allocations from memray."""
    method = memory.use_method("rss" if job.memray_dir else job.memory)
    for requested in {job.engine.kernels, "auto"}:  # the layers' choice and Shard.spmm's ($SARLAB_KERNELS)
        kernels.backend(requested)  # build/load the extension now, not inside the first measured epoch
    return method


def _train(job: Job, trainer: Trainer, baseline: int, manifest: dict, mem_method: str) -> list:
    rank = trainer.graph.rank
    extra = trainer.config_columns()
    extra.update(graph=manifest["graph"], partition_dir=os.path.abspath(job.partition_dir),
                 num_edges=manifest["num_edges"], label=job.label, net=job.net, backend=job.backend,
                 mem_method=mem_method)
    records = []
    facts = checkpoint.graph_facts(manifest)
    history = []
    start = 0
    if job.resume_dir:
        payload = checkpoint.load_checkpoint(job.resume_dir)
        start, history = checkpoint.restore(trainer, payload, facts), list(payload.get("history") or [])
    for epoch in range(start, job.train.epochs):
        _progress(epoch + 1)  # before a fault fires: the launcher names the epoch it fired in, as progress counts
        _inject(job, rank, epoch)
        rec = trainer.step(epoch, baseline)
        rec.update(extra, peak_vmhwm_bytes=memory.vmhwm_bytes())  # the RSS peak too, whatever the method
        records.append(rec)
        done = epoch + 1
        if job.checkpoint_dir and rank == 0 and (done == job.train.epochs or
                                                 (job.checkpoint_every and done % job.checkpoint_every == 0)):
            checkpoint.save_checkpoint(job.checkpoint_dir, trainer, done, facts,
                                       history=json.loads(json.dumps(history + records, default=str)))
        if rank == 0 and not job.quiet and _log.isEnabledFor(logging.INFO):
            _log.info(_epoch_line(job, trainer, rec, epoch), extra=ON_STDOUT)  # on stdout (sarlab.common.log)
    if job.predict:
        outputs = trainer.predict(job.train.epochs)
        if rank == 0:
            checkpoint.write_predictions(job.predict, outputs, "logits", force=job.force)
    if job.save_model and rank == 0:
        checkpoint.save_model(job.save_model, trainer, force=job.force)
    return records


def _epoch_line(job: Job, trainer: Trainer, rec: dict, epoch: int) -> str:
    """Rank 0's progress line of one epoch (INFO on the worker's logger: shown at the launcher's verbosity)."""
    acc = f" val {rec['val_acc']:.3f}" if rec["val_acc"] == rec["val_acc"] else ""
    return (f"[{rec['mode']} {job.model.model} x{trainer.graph.world}] epoch {epoch + 1}/"
            f"{job.train.epochs} loss {rec['loss']:.4f} train {rec['train_acc']:.3f}{acc} "
            f"time {rec['epoch_time_s']:.2f}s peak {rec['peak_mem_bytes'] / 2**20:.0f} MiB "
            f"(+{(rec['peak_mem_bytes'] - rec['baseline_mem_bytes']) / 2**20:.0f} above baseline)")


_PROGRESS_FD: list[int] = []  # the launcher's worker: RUNDIR/rank{r}.progress, the epoch this rank has begun


def _progress(epoch: int) -> None:
    """Tell the launcher which epoch this rank has begun (it names a rank that stops making progress)."""
    for fd in _PROGRESS_FD:
        os.pwrite(fd, f"{epoch:>12d} {time.time():.3f}\n".encode(), 0)


def _verify(trainer: Trainer) -> dict:
    init = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    logits, loss, grads = trainer.forward_backward(0)
    names = [n for n, _ in trainer.model.named_parameters()]
    return {"orig_ids": trainer.graph.orig_ids.clone(), "logits": logits.detach().clone(), "loss": loss,
            "grads": {n: g.clone() for n, g in zip(names, grads)}, "init": init,
            "bytes_sent": trainer.graph.comm.stats.bytes_sent}


def _write(job: Job, gathered: list, out_path: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".result-", suffix=".tmp", dir=os.path.dirname(os.path.abspath(out_path)))
    try:
        with os.fdopen(fd, "wb") as f:
            if job.kind == "verify":
                torch.save(gathered, f)
            else:
                f.write(json.dumps([rec for recs in gathered for rec in recs]).encode())
        os.replace(tmp, out_path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def run_from_env(job: Job, out_path: str | None) -> list:
    """Run as one rank under ``torchrun`` (or any launcher that sets the env:// variables); returns
    :func:`run`'s gathered result."""
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise RuntimeError(f"env:// launch needs {', '.join(missing)} in the environment (torchrun sets them)")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        os.environ["SARLAB_STORE_HOST_RANK0"] = "1"  # nobody else hosts the store: rank 0 does
    if job.net == "loopback":  # a network sarlab did not set up: rendezvous through the env:// variables
        job = replace(job, net="env")
    return run(job, rank, world, os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
               out_path if rank == 0 else None)


def main(argv: list[str] | None = None) -> None:
    """``python -m sarlab.real.launch.worker RUNDIR RANK`` (the launcher starts it through
    :mod:`sarlab.real.launch.worker_entry`): the launcher's worker. Dies with the launcher; on failure leaves its
    traceback in ``RUNDIR/rank{RANK}.err`` for the launcher; rank 0 writes the gathered result to ``RUNDIR/result``.
    """
    rundir, rank_text = sys.argv[1:3] if argv is None else argv
    rank = int(rank_text)
    die_with_parent(int(os.environ["SARLAB_LAUNCHER_PID"]))
    try:
        _PROGRESS_FD.append(os.open(os.path.join(rundir, f"rank{rank}.progress"), os.O_WRONLY | os.O_CREAT, 0o600))
        with open(os.path.join(rundir, "job.pkl"), "rb") as f:
            spec = pickle.load(f)  # written by our launcher into its private (0700) run directory
        run(spec["job"], rank, spec["world"], os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
            os.path.join(rundir, "result") if rank == 0 else None)
    except BaseException:
        with open(os.path.join(rundir, f"rank{rank}.err"), "w") as f:
            f.write(traceback.format_exc())
        sys.stderr.flush()
        os._exit(1)
    # Done, results written and the process group destroyed: leave without the interpreter's teardown. A
    # C++ static destructor there has aborted finished workers ("terminate called without an active
    # exception", SIGABRT, about 1 run in 20 of a 1-worker `sarlab train` on this VM), which the launcher
    # must report as a failure although the run was complete.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
