"""``sarlab verify``: distributed outputs and gradients against a single-process PyG reference."""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass

import torch

from sarlab.core.comm import check_backend
from sarlab.core.config import MODES
from sarlab.data.graphs import Graph
from sarlab.data.partition import partition
from sarlab.nn.model import GNN
from sarlab.real.commands.options import (
    EPILOG,
    add_engine_args,
    add_model_args,
    add_net_arg,
    engine_config,
    load_source,
    model_config,
    progress,
    write_json,
)
from sarlab.real.launch import outputs, sizing
from sarlab.real.launch.jobs import Job
from sarlab.real.launch.launcher import launch, preflight
from sarlab.real.launch.lifecycle import interruptible
from sarlab.real.launch.netspec import NetSpec
from sarlab.training.reference import reference_step
from sarlab.training.trainer import DTYPES, TrainConfig

_log = logging.getLogger(__name__)

DEFAULT_TOL = {"float32": 1e-5, "float64": 1e-10}


@dataclass(frozen=True)
class Comparison:
    """Errors of one (model, mode, dtype) against the reference.

    ``output_err`` = max |ours - ref| / max |ref| over the logits of every node; ``grad_err`` = the max
    over parameters of max |ours - ref| / max |ref|, except for parameters whose reference gradient is
    round-off (max |ref| <= 1000 * machine epsilon * S, where S is the largest gradient entry of the
    model; e.g. a bias right before BatchNorm, whose exact gradient is 0): those are judged as
    max |ours - ref| / S. ``loss_err`` is relative. ``ref_noise`` (when measured, see :func:`verify`) is the
    same error of the reference against a second evaluation of itself; the pass mark is then
    max(tol, 10 * ref_noise).
    """

    label: str
    dtype: str
    output_err: float
    grad_err: float
    worst_param: str
    loss_err: float
    tol: float
    ref_noise: float = 0.0

    @property
    def max_err(self) -> float:
        return max(self.output_err, self.grad_err, self.loss_err)

    @property
    def bound(self) -> float:
        return max(self.tol, 10 * self.ref_noise)

    @property
    def ok(self) -> bool:
        return self.max_err <= self.bound


def compare(worker_results: list, ref: dict, label: str, dtype: str, tol: float) -> Comparison:
    logits = torch.full_like(ref["logits"], float("nan"))
    for res in worker_results:
        logits[res["orig_ids"]] = res["logits"].to(logits.dtype)
    out_err = float((logits - ref["logits"]).abs().max() / ref["logits"].abs().max().clamp(min=1e-300))
    if torch.isnan(logits).any():
        out_err = float("inf")
    grads = worker_results[0]["grads"]
    scale = max(float(g.abs().max()) for g in ref["grads"].values())
    noise = 1000 * torch.finfo(ref["logits"].dtype).eps * scale
    worst, worst_name = 0.0, ""
    if set(grads) != set(ref["grads"]):
        raise RuntimeError(f"parameter sets differ: {sorted(set(grads) ^ set(ref['grads']))}")
    for name, g_ref in ref["grads"].items():
        magnitude = float(g_ref.abs().max())
        err = float((grads[name] - g_ref).abs().max()) / max(magnitude if magnitude > noise else scale, 1e-300)
        if err > worst or not worst_name:
            worst, worst_name = err, name
    loss_err = abs(worker_results[0]["loss"] - ref["loss"]) / max(abs(ref["loss"]), 1e-300)
    return Comparison(label, dtype, out_err, worst, worst_name, loss_err, tol)


def verify(graph: Graph, workers: int, variants: list, method: str = "metis", tol: float | None = None,
           backend: str = "gloo", timeout_s: float = 60.0, progress=_log.info,
           conditioning: bool = False, net: NetSpec | str | None = None) -> list[Comparison]:
    """Partition ``graph``, run every (ModelConfig, EngineConfig, dtype) variant on ``workers`` processes
    in one process group, and compare each against the PyG reference.

    ``net``: the network the workers talk over (``loopback`` or ``veth:rate=R[,hosts=H]``, see
    :mod:`sarlab.real.launch.netspec`); the numbers must not depend on it.

    ``conditioning``: measure the reference's own rounding sensitivity and allow 10x of it (for
    ill-conditioned cases such as a saturated attention softmax): in fp32, the distance between the fp32
    and fp64 PyG references; in fp64, how far the fp64 reference moves when every weight is perturbed by
    about one unit in the last place.
    """
    tmp = tempfile.mkdtemp(prefix="sarlab-verify-")
    try:
        pdir = os.path.join(tmp, "parts")
        partition(graph, workers, pdir, method=method)
        model0, engine0, dtype0 = variants[0]
        job = Job("verify", pdir, model0, TrainConfig(dtype=dtype0), engine0, backend=backend,
                  timeout_s=timeout_s, variants=tuple(variants))
        progress(f"verify: {len(variants)} configuration(s) on {workers} worker(s), graph {graph.name}")
        gathered = launch(job, workers, net=net, log=progress)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = []
    for i, (model_cfg, engine_cfg, dtype) in enumerate(variants):
        model = GNN(model_cfg, graph.feature_dim, graph.num_classes, num_relations=graph.num_relations)
        model = model.to(DTYPES[dtype])
        model.load_state_dict(gathered[0][i]["init"])
        ref = reference_step(model, graph, DTYPES[dtype])
        noise = 0.0
        if conditioning:  # fp32: the fp32 reference's distance from the fp64 one; fp64: relabelled nodes
            if dtype == "float32":
                alt = reference_step(model, graph, torch.float64)
                alt = {"logits": alt["logits"].float(), "loss": alt["loss"],
                       "grads": {k: v.float() for k, v in alt["grads"].items()}}
            else:
                alt = reference_step(_perturbed(model, model_cfg, graph), graph, DTYPES[dtype])
            alt_rows = [{"orig_ids": torch.arange(graph.num_nodes), "logits": alt["logits"], "loss": alt["loss"],
                         "grads": alt["grads"]}]
            noise = compare(alt_rows, ref, "", dtype, 0.0).max_err
        label = f"{model_cfg.model}{'-' + model_cfg.aggr if model_cfg.model == 'sage' else ''}"
        if model_cfg.model == "gat":
            label += f"-h{model_cfg.heads}{'' if model_cfg.self_loops else '-noloops'}"
            label += "-fused" if engine_cfg.fused else "-unfused"
        if model_cfg.model == "rgcn":
            label += f"-b{model_cfg.bases}" + ("" if engine_cfg.fused else "-per-edge")
        label += f" {engine_cfg.mode} N={workers}"
        row = compare([g[i] for g in gathered], ref, label, dtype, tol or DEFAULT_TOL[dtype])
        out.append(Comparison(**{**row.__dict__, "ref_noise": noise}))
    return out


def _perturbed(model: GNN, model_cfg, graph: Graph) -> GNN:
    """A copy of ``model`` with every parameter moved by about one unit in the last place."""
    twin = GNN(model_cfg, graph.feature_dim, graph.num_classes, num_relations=graph.num_relations)
    twin = twin.to(next(model.parameters()).dtype)
    twin.load_state_dict(model.state_dict())
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in twin.parameters():
            eps = torch.finfo(p.dtype).eps
            p.mul_(1 + eps * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return twin


def format_table(rows: list[Comparison]) -> str:
    lines = [f"{'configuration':<34} {'dtype':<8} {'output':>9} {'grads':>9} {'loss':>9} {'tol':>7}  result"]
    for c in rows:
        lines.append(f"{c.label:<34} {c.dtype:<8} {c.output_err:9.2e} {c.grad_err:9.2e} {c.loss_err:9.2e} "
                     f"{c.bound:7.0e}  {'ok' if c.ok else 'FAIL (worst: ' + c.worst_param + ')'}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sarlab verify", description="Compare every worker's outputs and every "
                                "parameter gradient with a single-process PyG model with the same weights; exits 1 "
                                "above tolerance.",
                                epilog=EPILOG + " --model takes a comma list; sage-max / sage-pool select the SAGE "
                                "aggregator.")
    p.add_argument("--graph", required=True, help="graph spec")
    p.add_argument("--workers", type=int, default=2)
    add_model_args(p, {"layers": 2, "hidden": 16})
    add_engine_args(p)
    p.set_defaults(mode="all")
    p.add_argument("--method", default="metis", choices=["metis", "random"])
    add_net_arg(p)
    p.add_argument("--tol", type=float, help="max relative error allowed (default 1e-5 fp32, 1e-10 fp64)")
    p.add_argument("--json", help="write the comparison rows here")
    p.add_argument("--force", action="store_true", help="replace an existing --json file, and go on although the "
                   "memory estimate exceeds what is available")
    return p


@interruptible
def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    preflight(a.workers, a.net, timeout_s=a.timeout)  # before the graph is loaded or partitioned
    check_backend(a.backend)
    if a.json:
        outputs.check_output_file(a.json, "json", a.force)
    modes = MODES if a.mode == "all" else a.mode.split(",")
    variants = []
    for mode in modes:
        for model in a.model.split(","):
            model_name, _, aggr = model.partition("-")  # sage-max: model sage with aggregator max
            variants.append((model_config(a, model=model_name, aggr=aggr or a.aggr), engine_config(a, mode),
                             a.dtype))
    for model_cfg, engine_cfg, dtype in variants:  # before the graph is loaded: every variant must fit
        sizing.check_run_size(a.graph, a.workers, model_cfg, TrainConfig(dtype=dtype), a.force, progress,
                              engine_cfg.mode, engine_cfg.fused)
    graph = load_source(a.graph)
    rows = verify(graph, a.workers, variants, method=a.method, tol=a.tol, backend=a.backend, timeout_s=a.timeout,
                  progress=progress, net=a.net)
    print(format_table(rows))
    worst = max(r.max_err for r in rows)
    print(f"max relative error {worst:.3e} ({'ok' if all(r.ok for r in rows) else 'ABOVE TOLERANCE'})")
    write_json(a.json, [r.__dict__ | {"max_err": r.max_err, "ok": r.ok} for r in rows])
    return 0 if all(r.ok for r in rows) else 1
