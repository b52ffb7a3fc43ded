"""``sarlab train``: train on N local workers (on loopback or an emulated cluster network), or as one rank under
``torchrun`` (env:// rendezvous)."""
from __future__ import annotations

import argparse
import os
import sys

from sarlab.common.log import is_quiet
from sarlab.common.records import describe
from sarlab.core.comm import check_backend
from sarlab.data.partition import load_manifest
from sarlab.data.validate_data import InputError, check_int
from sarlab.real import api
from sarlab.real.commands.options import (
    EPILOG,
    add_engine_args,
    add_memory_arg,
    add_model_args,
    add_net_arg,
    add_sampling_args,
    engine_config,
    model_config,
    sampling_config,
    write_json,
)
from sarlab.real.launch import outputs
from sarlab.real.launch.jobs import FAULT_KINDS, Fault
from sarlab.real.launch.lifecycle import interruptible
from sarlab.training.trainer import TrainConfig


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sarlab train", epilog=EPILOG,
                                description="Train on N local workers (or as one rank under torchrun).")
    p.add_argument("--graph", required=True, help="graph spec or partition directory")
    p.add_argument("--workers", type=int, default=2, help="local worker processes (default %(default)s)")
    add_model_args(p)
    add_engine_args(p)
    add_sampling_args(p)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--lr-schedule", default="constant", choices=["constant", "cosine"],
                   help="constant, or cosine: epoch e of E uses lr (1 + cos(pi e / E)) / 2 (default %(default)s)")
    p.add_argument("--mfg", action="store_true",
                   help="message-flow-graph pruning: compute per layer only the rows that reach a training node "
                        "(same loss and gradients; not with --batchnorm)")
    p.add_argument("--label-aug", type=float, default=0.0, metavar="RATE",
                   help="label augmentation: share of the training nodes whose label is an input each epoch (the "
                        "loss is on the others; at inference every training label is an input) (default 0: off)")
    p.add_argument("--correct-smooth", nargs="?", const="products", default="", metavar="PRESET",
                   help="Correct & Smooth on the outputs after the last epoch, with the hyperparameters of the C&S "
                        "paper's products or arxiv setting (default preset: products); its accuracies are the "
                        "last epoch's cs_*_acc")
    p.add_argument("--eval-every", type=int, default=1, help="evaluate every K epochs (0: never)")
    p.add_argument("--threads", type=int, default=0, help="threads per worker (0: cores // workers)")
    p.add_argument("--method", default="metis", choices=["metis", "random"], help="partitioning method")
    p.add_argument("--partition-dir", help="keep the partition here (default: a graph spec's partition is cached in "
                                           "sarlab's cache directory and reused by the next run)")
    p.add_argument("--no-cache", action="store_true", help="partition a graph spec again instead of reusing the "
                                                           "cached partition (and do not cache it)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing sarlab partition/checkpoint/model/predictions file of the same kind "
                        "and an existing --json file (over a checkpoint: start afresh), and run although the memory "
                        "estimate exceeds what is available")
    p.add_argument("--checkpoint", metavar="DIR",
                   help="write a checkpoint here (atomically, sha256-summed) every K epochs and at the end; if DIR "
                        "already holds a compatible checkpoint the run continues it (one command line survives a "
                        "restart, e.g. torchrun --max-restarts); DIR is locked while the run lasts")
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="K",
                   help="checkpoint every K epochs (0: at the end)")
    p.add_argument("--resume", metavar="DIR|auto",
                   help="continue from the checkpoint in DIR (--epochs is the total; a checkpoint that has done them "
                        "all ends the run at once, exit 0); auto: the --checkpoint directory's if it holds one, else "
                        "start afresh (the default with --checkpoint)")
    p.add_argument("--save-model", metavar="PATH", help="write the final weights here (.pt)")
    p.add_argument("--predict", metavar="PATH",
                   help="write every node's final logits here (.pt or .npz), in original node order")
    p.add_argument("--in-dim", type=int, help="expected input feature size (checked against the graph)")
    p.add_argument("--num-classes", type=int, help="expected number of classes (checked against the graph)")
    add_net_arg(p)
    add_memory_arg(p)
    p.add_argument("--fault", metavar="RANK:EPOCH:KIND",
                   help=f"deliberate failure, for rehearsing faults: KIND one of {', '.join(FAULT_KINDS)} on RANK at "
                        "the start of EPOCH, counted from 1 as progress is (1..--epochs; fires once, not again after "
                        "a torchrun restart) (cut: that rank's host link goes down; needs --net veth:...)")
    p.add_argument("--inject-fault", dest="fault", help=argparse.SUPPRESS)
    p.add_argument("--json", metavar="PATH.json",
                   help="write all metric records (one per rank and epoch) here (checked before training; if the "
                        "write fails the records go to a fallback file the error names)")
    return p


def check_dims(a: argparse.Namespace, pdir: str) -> None:
    """The graph's feature and class counts match what the user said the model expects."""
    m = load_manifest(pdir)
    if a.in_dim is not None and a.in_dim != m["feature_dim"]:
        raise InputError(f"the model expects {a.in_dim} input features but the graph has "
                         f"{m['feature_dim']}; drop --in-dim or use a matching graph")
    if a.num_classes is not None and a.num_classes != m["num_classes"]:
        raise InputError(f"the model expects {a.num_classes} classes but the graph has "
                         f"{m['num_classes']}; drop --num-classes or use a matching graph")


@interruptible
def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    check_int("workers", a.workers, 1)
    if a.json:
        outputs.check_output_file(a.json, "json", a.force)  # the other outputs: api.run, before any compute
    train_cfg = TrainConfig(epochs=a.epochs, lr=a.lr, weight_decay=a.weight_decay, dtype=a.dtype,
                            eval_every=a.eval_every, lr_schedule=a.lr_schedule, mfg=a.mfg, label_aug=a.label_aug,
                            correct_smooth=a.correct_smooth)
    check_backend(a.backend)
    fault = Fault.parse(a.fault) if a.fault else None

    sampling = sampling_config(a)
    engine = engine_config(a, mode="sar" if sampling is not None else None)  # sampling: the exact engine evaluates

    if api.under_torchrun() and a.net.emulated:
        raise InputError("--net builds the network of a local launch; under torchrun the ranks use the "
                         "network torchrun was given (drop --net)")

    def on_partition(pdir: str) -> None:
        check_dims(a, pdir)

    result = api.run(a.graph, workers=None if api.under_torchrun() else a.workers, model=model_config(a),
                     train=train_cfg, engine=engine, sampling=sampling, net=a.net, method=a.method,
                     partition_dir=a.partition_dir, force=a.force, backend=a.backend, timeout_s=a.timeout,
                     threads=a.threads, port=a.port, memory=a.memory, quiet=is_quiet(), fault=fault,
                     checkpoint_dir=a.checkpoint, checkpoint_every=a.checkpoint_every, resume_dir=a.resume,
                     save_model=a.save_model, predict_path=a.predict, on_partition=on_partition,
                     cache=not a.no_cache)
    if os.environ.get("RANK", "0") == "0":  # under torchrun every rank has the records: rank 0 reports them
        records = result.records.to_dict("records")
        if records:
            print(describe(records))
        first = min((r["epoch"] for r in records), default=0)
        if a.json and first > 0:  # a resumed run: say what --json holds
            print(f"note: --json holds the epochs of this start ({first + 1}..{a.epochs}); the run resumed after "
                  f"epoch {first}, and rank 0's earlier records are the checkpoint's history", file=sys.stderr)
        try:
            write_json(a.json, records)
        except OSError as err:
            raise outputs.save_records_fallback(records, err, f"--json {a.json!r}") from None
    return 0
