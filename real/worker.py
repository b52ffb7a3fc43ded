"""A worker process: join the process group, load its part, run the job, report to rank 0."""
from __future__ import annotations

import datetime
import gc
import json
import os
import signal
import sys
import time
import traceback
from dataclasses import replace

import torch
import torch.distributed as dist

from sarlab import memory
from sarlab.comm import Comm
from sarlab.partition import load_manifest, load_part
from sarlab.shards import ShardedGraph
from sarlab.train import Trainer

from .jobs import Job


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
    host_store = os.environ.get("SARLAB_STORE_HOST_RANK0") == "1" and rank == 0
    try:
        store = dist.TCPStore(host, port, world_size=world if host_store else None, is_master=host_store,
                              timeout=timeout, wait_for_workers=False)
    except (RuntimeError, OSError) as err:
        raise RendezvousError(f"rank {rank}: could not reach the rendezvous store at {host}:{port} within "
                              f"{job.timeout_s:g}s ({err.__class__.__name__}: {str(err).splitlines()[0]}). "
                              "Is the launcher (or rank 0) running, and are MASTER_ADDR/MASTER_PORT right?") \
            from err
    dist.init_process_group(job.backend, store=store, rank=rank, world_size=world, timeout=timeout)


def _inject(job: Job, rank: int, epoch: int) -> None:
    fault = job.fault
    if fault is None or fault.rank != rank or fault.epoch != epoch:
        return
    if fault.kind == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault.kind == "hang":
        time.sleep(10 * job.timeout_s + 3600)
    raise RuntimeError(f"injected fault on rank {rank} at epoch {epoch}")


def run(job: Job, rank: int, world: int, host: str, port: int, out_path: str | None) -> None:
    """Run ``job`` as ``rank`` of ``world``; rank 0 writes the gathered result to ``out_path``."""
    torch.set_num_threads(_threads(job, world))
    memory.tune_malloc()
    _connect(job, rank, world, host, port)
    try:
        manifest = load_manifest(job.partition_dir)
        part = load_part(job.partition_dir, rank, manifest, verify=True)
        comm = Comm(rank, world)
        if job.kind == "verify":
            result = [_verify(Trainer(ShardedGraph.from_partition(part, comm, engine), part, model,
                                      replace(job.train, dtype=dtype)))
                      for model, engine, dtype in job.all_variants()]
        else:
            graph = ShardedGraph.from_partition(part, comm, job.engine)
            trainer = Trainer(graph, part, job.model, job.train)
            gc.collect()
            comm.barrier()
            baseline = memory.rss_bytes()
            if job.memray_dir:
                with memory.memray_tracker(os.path.join(job.memray_dir, f"rank{rank}.bin")):
                    result = _train(job, trainer, baseline, manifest)
            else:
                result = _train(job, trainer, baseline, manifest)
        gathered = [None] * world
        dist.all_gather_object(gathered, result)
        if rank == 0 and out_path:
            _write(job, gathered, out_path)
        comm.barrier()
    finally:
        dist.destroy_process_group()


def _train(job: Job, trainer: Trainer, baseline: int, manifest: dict) -> list:
    rank = trainer.graph.rank
    extra = trainer.config_columns()
    extra.update(graph=manifest["graph"], partition_dir=os.path.abspath(job.partition_dir),
                 num_edges=manifest["num_edges"], label=job.label)
    records = []
    for epoch in range(job.train.epochs):
        _inject(job, rank, epoch)
        rec = trainer.step(epoch, baseline)
        rec.update(extra)
        records.append(rec)
        if rank == 0 and not job.quiet:
            acc = f" val {rec['val_acc']:.3f}" if rec["val_acc"] == rec["val_acc"] else ""
            print(f"[{job.engine.mode} {job.model.model} x{trainer.graph.world}] epoch {epoch + 1}/"
                  f"{job.train.epochs} loss {rec['loss']:.4f} train {rec['train_acc']:.3f}{acc} "
                  f"time {rec['epoch_time_s']:.2f}s peak {rec['peak_mem_bytes'] / 2**20:.0f} MiB", flush=True)
    return records


def _verify(trainer: Trainer) -> dict:
    init = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    logits, loss, grads = trainer.forward_backward(0)
    names = [n for n, _ in trainer.model.named_parameters()]
    return {"orig_ids": trainer.graph.orig_ids.clone(), "logits": logits.detach().clone(), "loss": loss,
            "grads": {n: g.clone() for n, g in zip(names, grads)}, "init": init,
            "bytes_sent": trainer.graph.comm.stats.bytes_sent}


def _write(job: Job, gathered: list, out_path: str) -> None:
    tmp = out_path + ".tmp"
    if job.kind == "verify":
        torch.save(gathered, tmp)
    else:
        with open(tmp, "w") as f:
            json.dump([rec for recs in gathered for rec in recs], f)
    os.replace(tmp, out_path)


def run_from_env(job: Job, out_path: str | None) -> None:
    """Run as one rank under ``torchrun`` (or any launcher that sets the env:// variables)."""
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise RuntimeError(f"env:// launch needs {', '.join(missing)} in the environment (torchrun sets them)")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        os.environ["SARLAB_STORE_HOST_RANK0"] = "1"  # nobody else hosts the store: rank 0 does
    run(job, rank, world, os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
        out_path if rank == 0 else None)


def spawned_entry(job: Job, rank: int, world: int, host: str, port: int, rundir: str) -> None:
    """Target of the launcher's processes: run, and on failure leave the traceback for the launcher."""
    try:
        run(job, rank, world, host, port, os.path.join(rundir, "result") if rank == 0 else None)
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
