"""The ``sarlab`` command line: partition, train, verify, bench, calibrate, simulate, reproduce, profile, demo."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

EPILOG = ("Graph specs: synthetic:nodes=100000,degree=20,features=64,classes=16,seed=0 | npz:PATH | "
          "ogb:ogbn-arxiv:ROOT | a partition directory (from `sarlab partition`).")


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _write_json(path: str | None, payload) -> None:
    if not path:
        return
    tmp = path + ".tmp"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=1, default=str)
    os.replace(tmp, path)


def _add_model_args(p: argparse.ArgumentParser, defaults: dict | None = None) -> None:
    d = {"model": "sage", "layers": 2, "hidden": 64, "aggr": "mean", "heads": 4, "dropout": 0.0}
    d.update(defaults or {})
    p.add_argument("--model", default=d["model"], help="gcn, sage or gat (default %(default)s)")
    p.add_argument("--aggr", default=d["aggr"], help="SAGE aggregator: mean, max or pool (default %(default)s)")
    p.add_argument("--layers", type=int, default=d["layers"], help="graph convolutions (default %(default)s)")
    p.add_argument("--hidden", type=int, default=d["hidden"], help="hidden size (default %(default)s)")
    p.add_argument("--heads", type=int, default=d["heads"], help="GAT heads (default %(default)s)")
    p.add_argument("--dropout", type=float, default=d["dropout"], help="dropout (default %(default)s)")
    p.add_argument("--batchnorm", action="store_true", help="distributed BatchNorm after hidden layers")
    p.add_argument("--seed", type=int, default=0, help="initialisation/dropout seed (default 0)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])


def _add_engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mode", default="sar", help="sar, sa or oneshot (default %(default)s)")
    p.add_argument("--prefetch", type=int, default=1, help="ring rounds fetched ahead (default %(default)s)")
    p.add_argument("--kernels", default="auto", choices=["auto", "cpp", "torch"],
                   help="fused attention kernels implementation (default %(default)s)")
    p.add_argument("--unfused", action="store_true", help="GAT: do not use the fused attention kernels")
    p.add_argument("--backend", default="gloo", help="gloo, nccl, ccl or mpi (default %(default)s)")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds any wait may block before a worker gives up (default %(default)s)")
    p.add_argument("--port", type=int, default=0, help="rendezvous port on 127.0.0.1 (0: any free port)")


def _model_cfg(a):
    from sarlab.nn.model import ModelConfig

    return ModelConfig(model=a.model, layers=a.layers, hidden=a.hidden, aggr=a.aggr, heads=a.heads,
                       dropout=a.dropout, batchnorm=a.batchnorm, seed=a.seed)


def _engine_cfg(a, mode: str | None = None):
    from sarlab.config import EngineConfig

    return EngineConfig(mode=mode or a.mode, prefetch=a.prefetch, kernels=a.kernels, fused=not a.unfused)


def _load_source(spec: str):
    from sarlab.graphs import load_graph

    _progress(f"loading graph {spec}")
    return load_graph(spec)


def cmd_partition(a) -> int:
    from sarlab.partition import partition, report

    graph = _load_source(a.graph)
    manifest = partition(graph, a.parts, a.out, method=a.method, seed=a.seed, source=a.graph, progress=_progress)
    print(report(manifest))
    _write_json(a.json, {k: v for k, v in manifest.items() if k != "files"})
    return 0


def prepare_partition(spec: str, workers: int, method: str, seed: int, out_dir: str | None) -> tuple[str, str | None]:
    """A partition directory for ``spec``: itself if it is one, else a new one (temporary unless
    ``out_dir``). Returns (directory, temp dir to delete or None)."""
    from sarlab.partition import is_partition_dir, partition, report

    if is_partition_dir(spec):
        return spec, None
    if os.path.isdir(spec):
        raise SystemExit(f"error: {spec!r} is a directory without manifest.json; not a partition directory")
    graph = _load_source(spec)
    tmp = None
    if out_dir is None:
        tmp = tempfile.mkdtemp(prefix="sarlab-parts-")
        out_dir = os.path.join(tmp, "parts")
    manifest = partition(graph, workers, out_dir, method=method, seed=seed, source=spec, progress=_progress)
    _progress(report(manifest))
    return out_dir, tmp


def _check_dims(a, pdir: str) -> None:
    from sarlab.partition import load_manifest

    m = load_manifest(pdir)
    if a.in_dim is not None and a.in_dim != m["feature_dim"]:
        raise SystemExit(f"error: the model expects {a.in_dim} input features but the graph has "
                         f"{m['feature_dim']}; drop --in-dim or use a matching graph")
    if a.num_classes is not None and a.num_classes != m["num_classes"]:
        raise SystemExit(f"error: the model expects {a.num_classes} classes but the graph has "
                         f"{m['num_classes']}; drop --num-classes or use a matching graph")


def cmd_train(a) -> int:
    from sarlab.comm import check_backend
    from sarlab.train import TrainConfig

    from .jobs import Fault, Job

    model_cfg, engine_cfg = _model_cfg(a), _engine_cfg(a)
    train_cfg = TrainConfig(epochs=a.epochs, lr=a.lr, weight_decay=a.weight_decay, dtype=a.dtype,
                            eval_every=a.eval_every)
    check_backend(a.backend)
    fault = Fault.parse(a.inject_fault) if a.inject_fault else None
    under_torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ
    if under_torchrun:
        from .worker import run_from_env

        _check_dims(a, a.graph)
        job = Job("train", a.graph, model_cfg, train_cfg, engine_cfg, backend=a.backend, timeout_s=a.timeout,
                  threads=a.threads, fault=fault)
        out = a.json + ".records" if a.json else None
        run_from_env(job, out)
        if out and int(os.environ["RANK"]) == 0:
            os.replace(out, a.json)
        return 0
    from .launcher import launch

    pdir, tmp = prepare_partition(a.graph, a.workers, a.method, a.seed, a.partition_dir)
    try:
        _check_dims(a, pdir)
        job = Job("train", pdir, model_cfg, train_cfg, engine_cfg, backend=a.backend, timeout_s=a.timeout,
                  threads=a.threads, fault=fault)
        records = launch(job, a.workers, port=a.port)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    print(summarize(records))
    _write_json(a.json, records)
    return 0


def summarize(records: list) -> str:
    import pandas as pd

    df = pd.DataFrame(records)
    last = df[df.epoch == df.epoch.max()]
    steady = df[df.epoch > 0] if df.epoch.max() > 0 else df
    return (f"final: loss {last.loss.iloc[0]:.4f} train acc {last.train_acc.iloc[0]:.3f} "
            f"val acc {last.val_acc.iloc[0]:.3f} test acc {last.test_acc.iloc[0]:.3f}; "
            f"epoch time (median over epochs>0, max over ranks) "
            f"{steady.groupby('epoch').epoch_time_s.max().median():.3f}s; "
            f"peak memory per worker above baseline (max) "
            f"{(df.peak_mem_bytes - df.baseline_mem_bytes).max() / 2**20:.1f} MiB")


def cmd_verify(a) -> int:
    from sarlab.config import MODES

    from .verify import format_table, verify

    modes = MODES if a.mode == "all" else a.mode.split(",")
    graph = _load_source(a.graph)
    variants = []
    for mode in modes:
        for model in a.model.split(","):
            model_name, _, aggr = model.partition("-")  # sage-max: model sage with aggregator max
            cfg = _model_cfg(argparse.Namespace(**{**vars(a), "model": model_name, "aggr": aggr or a.aggr}))
            variants.append((cfg, _engine_cfg(a, mode), a.dtype))
    rows = verify(graph, a.workers, variants, method=a.method, tol=a.tol, backend=a.backend, timeout_s=a.timeout,
                  progress=_progress)
    print(format_table(rows))
    worst = max(r.max_err for r in rows)
    print(f"max relative error {worst:.3e} ({'ok' if all(r.ok for r in rows) else 'ABOVE TOLERANCE'})")
    _write_json(a.json, [r.__dict__ | {"max_err": r.max_err, "ok": r.ok} for r in rows])
    return 0 if all(r.ok for r in rows) else 1


def cmd_bench(a, rest: list[str]) -> int:
    if a.what == "kernels":
        from kernels.bench import main as kernels_main

        return kernels_main(rest)
    from .bench import main as engine_main

    return engine_main(rest)


def cmd_demo(a) -> int:
    from .demo import run_demo

    return run_demo(workers=a.workers, epochs=a.epochs, json_path=a.json)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sarlab", description="Distributed full-batch GNN training with "
                                     "Sequential Aggregation and Rematerialization (SAR).", epilog=EPILOG)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("partition", help="partition a graph into parts on disk", epilog=EPILOG)
    p.add_argument("--graph", required=True, help="graph spec")
    p.add_argument("--parts", type=int, required=True, help="number of parts")
    p.add_argument("--out", required=True, help="output directory (replaced atomically)")
    p.add_argument("--method", default="metis", choices=["metis", "random"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the manifest summary here")

    p = sub.add_parser("train", help="train on N local workers (or as one rank under torchrun)", epilog=EPILOG)
    p.add_argument("--graph", required=True, help="graph spec or partition directory")
    p.add_argument("--workers", type=int, default=2, help="local worker processes (default %(default)s)")
    _add_model_args(p)
    _add_engine_args(p)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--eval-every", type=int, default=1, help="evaluate every K epochs (0: never)")
    p.add_argument("--threads", type=int, default=0, help="threads per worker (0: cores // workers)")
    p.add_argument("--method", default="metis", choices=["metis", "random"], help="partitioning method")
    p.add_argument("--partition-dir", help="keep the partition here (default: a temporary directory)")
    p.add_argument("--in-dim", type=int, help="expected input feature size (checked against the graph)")
    p.add_argument("--num-classes", type=int, help="expected number of classes (checked against the graph)")
    p.add_argument("--inject-fault", help=argparse.SUPPRESS)
    p.add_argument("--json", help="write all metric records (one per rank and epoch) here")

    p = sub.add_parser("verify", help="compare distributed outputs/gradients with a PyG reference",
                       epilog=EPILOG)
    p.add_argument("--graph", required=True, help="graph spec")
    p.add_argument("--workers", type=int, default=2)
    _add_model_args(p, {"layers": 2, "hidden": 16})
    p.epilog = EPILOG + " --model takes a comma list; sage-max / sage-pool select the SAGE aggregator."
    _add_engine_args(p)
    p.set_defaults(mode="all")
    p.add_argument("--method", default="metis", choices=["metis", "random"])
    p.add_argument("--tol", type=float, help="max relative error allowed (default 1e-5 fp32, 1e-10 fp64)")
    p.add_argument("--json", help="write the comparison rows here")

    p = sub.add_parser("bench", help="benchmarks: `bench engine` or `bench kernels` (see their --help)",
                       add_help=False)
    p.add_argument("what", choices=["engine", "kernels"])

    p = sub.add_parser("demo", help="4 workers, GraphSAGE in sar and oneshot on a built-in graph")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--json", help="write the metric records here")

    p = sub.add_parser("reproduce", help="regenerate the paper's figures (measured here or simulated, labelled)",
                       add_help=False)
    p = sub.add_parser("profile", help="memray per rank: flamegraphs, peak summaries, mode comparison",
                       add_help=False)
    p = sub.add_parser("calibrate", help="measure this machine's cost profile for the simulator", add_help=False)
    p = sub.add_parser("simulate", help="predict epoch time and peak memory (SimPy model)", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if argv and argv[0] == "profile":
        from .profile import main as profile_main

        return profile_main(argv[1:])
    if argv and argv[0] == "reproduce":
        from .reproduce import main as reproduce_main

        return reproduce_main(argv[1:])
    if argv and argv[0] in ("calibrate", "simulate"):
        from simulator import cli as sim_cli

        return (sim_cli.calibrate_main if argv[0] == "calibrate" else sim_cli.simulate_main)(argv[1:])
    if argv and argv[0] == "bench":
        if len(argv) < 2 or argv[1] not in ("engine", "kernels"):
            print("usage: sarlab bench {engine,kernels} [options]  (sarlab bench engine --help)")
            return 0 if len(argv) > 1 and argv[1] in ("-h", "--help") else 2
        return cmd_bench(argparse.Namespace(what=argv[1]), argv[2:])
    a = parser.parse_args(argv)
    handlers = {"partition": cmd_partition, "train": cmd_train, "verify": cmd_verify, "demo": cmd_demo}
    from sarlab.partition import PartitionError

    from .launcher import LaunchError, WorkerError

    try:
        return handlers[a.command](a)
    except (PartitionError, LaunchError, WorkerError, ValueError, RuntimeError, FileNotFoundError,
            ImportError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
