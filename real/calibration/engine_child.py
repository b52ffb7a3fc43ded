"""Several single-worker engine runs in one process, each under the memory method (allocator) it asks for
(``python -m sarlab.real.calibration.engine_child PLAN.json OUT.json``; what
:func:`sarlab.real.calibration.engine_runs.bench_engine` starts).

Each run is what a one-worker ``sarlab train --mode sar --eval-every 0 --threads T --memory M`` does in its worker
(:func:`sarlab.real.launch.worker.run`): the partition loaded and verified, the graph and trainer built with the
cyclic collector paused, then collected and frozen, the baseline taken and the epochs stepped; without the launcher
and its process group (one worker needs none), and with one interpreter and one torch import for all the runs
instead of one per run (6-8 s each on the 2-core VM).

The allocator cannot be chosen freely per run: ``live`` installs the counting allocator as torch's CPU allocator,
which cannot be taken out again (:func:`sarlab.core.memory.use_method`; only its block cache can be switched off,
which is not what an ``rss`` run does). So a plan lists its ``rss`` runs first, run under glibc with the engine's
thresholds, and its ``live`` runs after them; a plan that does otherwise is refused.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

from sarlab import kernels
from sarlab.core import memory
from sarlab.core.comm import Comm
from sarlab.core.config import EngineConfig
from sarlab.core.shards import ShardedGraph
from sarlab.data.partition import load_manifest, load_part
from sarlab.nn.model import ModelConfig
from sarlab.real.launch.prepare import prepare_partition
from sarlab.training.trainer import TrainConfig, Trainer

#: the keys of one run in a plan
RUN_KEYS = ("spec", "partition_dir", "model", "layers", "hidden", "epochs", "threads", "memory")


def check_plan(runs: list[dict[str, Any]]) -> None:
    """Raise ValueError unless every run has :data:`RUN_KEYS` and no ``rss`` run follows a ``live`` one (the counting
    allocator, once installed, stays)."""
    for i, run in enumerate(runs):
        missing = [k for k in RUN_KEYS if k not in run]
        if missing:
            raise ValueError(f"run {i} of the plan lacks {missing}")
        if run["memory"] not in memory.METHODS:
            raise ValueError(f"run {i}: memory must be one of {memory.METHODS}, got {run['memory']!r}")
    methods = [run["memory"] for run in runs]
    if "live" in methods and "rss" in methods[methods.index("live"):]:
        raise ValueError("a plan runs its rss runs before its live ones: the counting allocator cannot be taken out")


def _partition(spec: str, pdir: Path) -> str:
    """The one-part partition of ``spec`` in ``pdir`` (made there the first time, as ``sarlab train --partition-dir``
    makes it: METIS, seed 0)."""
    if (pdir / "manifest.json").exists():
        return str(pdir)
    made, _ = prepare_partition(spec, 1, "metis", 0, str(pdir), cache=False, say=lambda _line: None)
    return made


def run_one(run: dict[str, Any]) -> list[dict[str, Any]]:
    """One run of a plan: its records, one per epoch, with the configuration columns the worker adds."""
    method = memory.use_method(run["memory"])
    kernels.backend("auto")  # built and loaded before the first measured epoch, as the worker does
    torch.set_num_threads(int(run["threads"]) or max(1, len(os.sched_getaffinity(0))))
    pdir = _partition(run["spec"], Path(run["partition_dir"]))
    gc.disable()  # the worker builds its graph and trainer with the collector paused (worker_entry)
    try:
        manifest = load_manifest(pdir)
        part = load_part(pdir, 0, manifest, verify=True)
        graph = ShardedGraph.from_partition(part, Comm(0, 1), EngineConfig(mode="sar"))
        trainer = Trainer(graph, part, ModelConfig(model=run["model"], layers=int(run["layers"]),
                                                   hidden=int(run["hidden"])),
                          TrainConfig(epochs=int(run["epochs"]), eval_every=0))
    finally:
        gc.collect()
        gc.freeze()
        gc.enable()
    extra = trainer.config_columns()
    extra.update(graph=manifest["graph"], partition_dir=os.path.abspath(pdir), num_edges=manifest["num_edges"],
                 label="", net="loopback", backend="gloo", mem_method=method)
    baseline = memory.baseline_bytes()
    records = []
    for epoch in range(int(run["epochs"])):
        rec = trainer.step(epoch, baseline)
        rec.update(extra, peak_vmhwm_bytes=memory.vmhwm_bytes())
        records.append(rec)
    del trainer, graph, part
    gc.unfreeze()  # the next run's set-up is frozen on its own; this one's objects may go
    gc.collect()
    return records


def main(argv: list[str] | None = None) -> None:
    """``python -m sarlab.real.calibration.engine_child PLAN.json OUT.json``: run ``PLAN``'s ``runs`` in order and
    write ``{"runs": [records of each run]}`` to ``OUT``."""
    plan_path, out_path = sys.argv[1:3] if argv is None else argv
    runs = json.loads(Path(plan_path).read_text())["runs"]
    check_plan(runs)
    memory.tune_malloc()  # the engine's thresholds before any tensor, whatever the first run's method
    out = [run_one(run) for run in runs]
    Path(out_path).write_text(json.dumps({"runs": out}, default=str))


if __name__ == "__main__":
    main()
