"""Command-line plumbing every ``sarlab`` command shares: options, configs from arguments, progress, JSON.

A command module builds its parser from these helpers, turns the parsed arguments into the engine's frozen
configs with :func:`model_config` / :func:`engine_config`, reports progress on stderr with :func:`progress`
and writes ``--json`` output with :func:`write_json`. Nothing here starts work.
"""
from __future__ import annotations

import argparse

from sarlab.core.config import EngineConfig, SamplingConfig, parse_fanouts
from sarlab.core.memory import METHODS as MEMORY_METHODS
from sarlab.data.validate_data import InputError
from sarlab.nn.model import ModelConfig
from sarlab.real.launch import outputs
from sarlab.real.launch.netspec import SPEC_HELP, NetSpec
from sarlab.real.launch.prepare import load_source, prepare_partition, progress  # noqa: F401 (the commands' names)

EPILOG = ("Graph specs: synthetic:nodes=100000,degree=20,features=64,classes=16,seed=0 | npz:PATH | "
          "planetoid:cora | planetoid:citeseer (shipped, public split) | "
          "ogb:ogbn-arxiv:ROOT | hetero:nodes=20000,seed=0 (ogbn-mag-like, typed nodes, 4 relations) | "
          "ogb:ogbn-mag[+rev]:ROOT | a partition directory (from `sarlab partition`).")
MODEL_DEFAULTS = {"model": "sage", "layers": 2, "hidden": 64, "aggr": "mean", "heads": 4, "dropout": 0.0}


def write_json(path: str | None, payload) -> None:
    """Write ``payload`` as JSON to ``path`` atomically (:func:`sarlab.real.launch.outputs.write_json_atomic`);
    nothing when ``path`` is empty."""
    if path:
        outputs.write_json_atomic(path, payload)


def add_model_args(p: argparse.ArgumentParser, defaults: dict | None = None) -> None:
    """``--model --aggr --layers --hidden --heads --bases --dropout --batchnorm --seed --dtype``."""
    d = {**MODEL_DEFAULTS, **(defaults or {})}
    p.add_argument("--model", default=d["model"], help="gcn, sage, gat or rgcn (relational GCN: one weight per "
                   "relation of a heterogeneous graph) (default %(default)s)")
    p.add_argument("--aggr", default=d["aggr"], help="SAGE aggregator: mean, max or pool (default %(default)s)")
    p.add_argument("--layers", type=int, default=d["layers"], help="graph convolutions (default %(default)s)")
    p.add_argument("--hidden", type=int, default=d["hidden"], help="hidden size (default %(default)s)")
    p.add_argument("--heads", type=int, default=d["heads"], help="GAT heads (default %(default)s)")
    p.add_argument("--bases", type=int, default=0,
                   help="R-GCN basis decomposition: number of bases (0: one weight per relation)")
    p.add_argument("--dropout", type=float, default=d["dropout"], help="dropout (default %(default)s)")
    p.add_argument("--batchnorm", action="store_true", help="distributed BatchNorm after hidden layers")
    p.add_argument("--seed", type=int, default=0, help="initialisation/dropout seed (default 0)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])


def add_engine_args(p: argparse.ArgumentParser, mode: bool = True) -> None:
    """``--mode --staleness --prefetch --kernels --unfused`` and the launch options ``--backend --timeout --port``
    (``--staleness`` with ``mode``)."""
    if mode:
        p.add_argument("--mode", default="sar", help="sar, sa or oneshot (default %(default)s); `train` also takes "
                       "sampling (mini-batches, see --fanouts)")
        p.add_argument("--staleness", type=int, default=0, metavar="S",
                       help="sar/oneshot: aggregate halo rows computed up to S epochs ago, fetched asynchronously "
                            "(no gradient flows back to their owner); 0: exact (default %(default)s)")
    p.add_argument("--prefetch", type=int, default=1, help="ring rounds fetched ahead (default %(default)s)")
    p.add_argument("--kernels", default="auto", choices=["auto", "cpp", "torch"],
                   help="fused attention kernels implementation (default %(default)s)")
    p.add_argument("--unfused", action="store_true", help="GAT: no fused attention kernels; R-GCN: one message "
                   "per edge (PyG FastRGCNConv's order)")
    p.add_argument("--backend", default="gloo", help="gloo, nccl, ccl or mpi (default %(default)s)")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds any wait may block before a worker gives up (default %(default)s)")
    p.add_argument("--port", type=int, default=0, help="rendezvous port on 127.0.0.1 (0: any free port)")


#: fan-outs of ``--mode sampling`` without ``--fanouts``: PyG's examples' 15, 10, 5, then 5 for deeper models
DEFAULT_FANOUTS = (15, 10, 5)


def add_sampling_args(p: argparse.ArgumentParser) -> None:
    """``--fanouts --batch-size --round-batches --no-sampling-prefetch`` of ``--mode sampling``."""
    p.add_argument("--fanouts", default=None, metavar="K1,K2,...|all",
                   help="sampling: neighbours per node and layer, hop 1 (the last layer) first, as PyG's "
                        "num_neighbors, or 'all' (default 15,10,5 cut or padded with 5 to --layers)")
    p.add_argument("--batch-size", type=int, default=1024,
                   help="sampling: training nodes per worker and step (default %(default)s)")
    p.add_argument("--round-batches", type=int, default=0, metavar="B",
                   help="sampling: mini-batches sampled and fetched together, each node once per round (0: the "
                        "whole epoch is one round; smaller rounds hold fewer rows, larger ones exchange less) "
                        "(default %(default)s)")
    p.add_argument("--no-sampling-prefetch", dest="sampling_prefetch", action="store_false",
                   help="sampling: do not sample the next round of mini-batches and fetch its features during this "
                        "one")


def sampling_config(a: argparse.Namespace) -> SamplingConfig | None:
    """The :class:`SamplingConfig` of ``--mode sampling`` (None for the full-batch modes)."""
    if a.mode != "sampling":
        return None
    if a.fanouts is None:
        fanouts = tuple(DEFAULT_FANOUTS[i] if i < len(DEFAULT_FANOUTS) else 5 for i in range(a.layers))
    else:
        fanouts = parse_fanouts(a.fanouts, a.layers)
    return SamplingConfig(fanouts=fanouts, batch_size=a.batch_size, prefetch=a.sampling_prefetch,
                          round_batches=a.round_batches)


def add_memory_arg(p: argparse.ArgumentParser) -> None:
    """``--memory live|rss``: how workers measure their peak memory (see :mod:`sarlab.core.memory`)."""
    p.add_argument("--memory", default="live", choices=list(MEMORY_METHODS),
                   help="peak-memory method of the workers: live (tensor bytes from a counting allocator, which "
                        "also reuses large freed blocks: fast) or rss (VmHWM with every large tensor on fresh "
                        "pages: exact for all memory, slower) (default %(default)s)")


def net_spec(text: str) -> NetSpec:
    """``--net`` as an argparse type: the parsed spec, or argparse's usage error with what is wrong."""
    try:
        return NetSpec.parse(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


def add_net_arg(p: argparse.ArgumentParser) -> None:
    """``--net loopback | veth:rate=R[,hosts=H]`` (parsed into a :class:`~sarlab.real.launch.netspec.NetSpec`)."""
    p.add_argument("--net", type=net_spec, default=NetSpec(), metavar="SPEC", help=SPEC_HELP)


def model_config(a: argparse.Namespace, **override) -> ModelConfig:
    """The :class:`ModelConfig` the model arguments describe (``override`` replaces single fields)."""
    fields = {k: getattr(a, k) for k in ("model", "layers", "hidden", "aggr", "heads", "bases", "dropout",
                                         "batchnorm", "seed")}
    return ModelConfig(**{**fields, **override})


def engine_config(a: argparse.Namespace, mode: str | None = None) -> EngineConfig:
    """The :class:`EngineConfig` the engine arguments describe (``mode`` replaces ``--mode``)."""
    staleness = getattr(a, "staleness", 0)
    if staleness and getattr(a, "mode", None) == "sampling":
        raise InputError(f"--staleness {staleness} applies to the full-batch modes sar and oneshot; mini-batch "
                         "sampling fetches every batch's rows fresh: drop --staleness or use --mode sar/oneshot")
    return EngineConfig(mode=mode or a.mode, prefetch=a.prefetch, kernels=a.kernels, fused=not a.unfused,
                        staleness=staleness)
