"""Frozen configuration objects passed explicitly (no global state), checked when they are made."""
from __future__ import annotations

from dataclasses import dataclass

from sarlab.data.validate_data import InputError, check_int

MODES = ("sar", "sa", "oneshot")


@dataclass(frozen=True)
class EngineConfig:
    """How a worker aggregates across partitions.

    Args:
        mode: ``sar`` (sequential aggregation and rematerialization), ``sa`` (sequential aggregation,
            fetched shards kept for backward), ``oneshot`` (all halo rows in one exchange).
        prefetch: number of ring rounds fetched ahead of the one being aggregated (``sar``/``sa``; >= 0).
        kernels: ``auto``, ``cpp`` or ``torch`` for the fused attention kernels.
        fused: GAT: the fused attention kernels; R-GCN: aggregate, then ``W_r`` (False: one message
            ``x_j W_r`` per edge, as PyG's ``FastRGCNConv`` / DGL's ``RelGraphConv``).
        staleness: ``S >= 0``; with ``S >= 1`` (``sar``/``oneshot`` only) training aggregates halo rows computed up
            to ``S`` epochs ago, fetched asynchronously (:mod:`sarlab.strategies.stale`); 0 is the exact mode.
    """

    mode: str = "sar"
    prefetch: int = 1
    kernels: str = "auto"
    fused: bool = True
    staleness: int = 0

    def __post_init__(self):
        if self.mode not in MODES:
            raise InputError(f"unknown mode {self.mode!r}: choose one of {', '.join(MODES)}")
        check_int("prefetch depth", self.prefetch, 0)
        if self.kernels not in ("auto", "cpp", "torch"):
            raise InputError(f"kernels must be auto, cpp or torch, got {self.kernels!r}")
        check_int("staleness", self.staleness, 0)
        if self.staleness and self.mode not in ("sar", "oneshot"):
            raise InputError(f"--staleness {self.staleness} needs --mode sar or oneshot (mode {self.mode!r} has no "
                             "halo cache): drop --staleness or change the mode")


#: a fan-out that takes every in-neighbour
ALL_NEIGHBOURS = -1


def parse_fanouts(text: str, layers: int) -> tuple[int, ...]:
    """``"15,10,5"`` or ``"all"`` as one fan-out per layer (``all`` = :data:`ALL_NEIGHBOURS`), hop 1 first.

    Hop ``h`` (1-based) samples the in-neighbours of the nodes whose layer ``L - h`` output is needed, as PyG's
    ``num_neighbors``: ``15,10,5`` on a 3-layer model samples 15 neighbours of every seed for the last layer.
    A single ``all`` applies to every layer; an entry may also be ``all`` (or -1) on its own.

    Args:
        text: comma list of positive integers or ``all``.
        layers: the model's number of graph convolutions (the list must have one entry per layer).
    """
    items = [t.strip().lower() for t in str(text).split(",") if t.strip()]
    if items == ["all"]:
        return (ALL_NEIGHBOURS,) * layers
    fanouts = []
    for item in items:
        if item in ("all", "-1"):
            fanouts.append(ALL_NEIGHBOURS)
            continue
        try:
            value = int(item)
        except ValueError:
            raise InputError(f"fan-out {item!r} is not a positive integer or 'all' (e.g. --fanouts 15,10,5)") from None
        if value < 1:
            raise InputError(f"fan-outs must be >= 1 (or 'all'), got {value}")
        fanouts.append(value)
    if len(fanouts) != layers:
        raise InputError(f"{len(fanouts)} fan-out(s) {text!r} for a {layers}-layer model: give one per layer "
                         f"(hop 1, the last layer, first) or 'all'")
    return tuple(fanouts)


@dataclass(frozen=True)
class SamplingConfig:
    """Mini-batch training with neighbour sampling (``--mode sampling``, :mod:`sarlab.training.minibatch`).

    Args:
        fanouts: neighbours sampled per node, one per layer, hop 1 (the last layer) first; -1 = all
            (see :func:`parse_fanouts`).
        batch_size: training nodes per worker and step (>= 1); every worker runs the same number of steps,
            ``ceil(max over workers of its training nodes / batch_size)``, over its training nodes split evenly.
        prefetch: sample the next round of mini-batches and post the fetch of its remote features before computing
            this one.
        round_batches: mini-batches sampled and fetched together (a round, :mod:`sarlab.training.minibatch`: one
        frontier
            sample per layer and one feature fetch for all of them, each node sampled and fetched once); 0 (the
            default): the whole epoch is one round. Smaller rounds keep fewer input rows resident (and let prefetch
            overlap a round's fetch with the previous round's steps) at the price of more exchanges per epoch.
    """

    fanouts: tuple[int, ...] = (15, 10, 5)
    batch_size: int = 1024
    prefetch: bool = True
    round_batches: int = 0

    def __post_init__(self):
        if not self.fanouts or any(not isinstance(f, int) or isinstance(f, bool) or (f < 1 and f != ALL_NEIGHBOURS)
                                   for f in self.fanouts):
            raise InputError(f"fan-outs must be integers >= 1 or {ALL_NEIGHBOURS} (all), got {self.fanouts!r}")
        check_int("batch size", self.batch_size, 1)
        check_int("batches per sampling round (--round-batches; 0: all of an epoch's)", self.round_batches, 0)

    def label(self) -> str:
        """The fan-outs as written on the command line (``15,10,5``, ``all``)."""
        if all(f == ALL_NEIGHBOURS for f in self.fanouts):
            return "all"
        return ",".join("all" if f == ALL_NEIGHBOURS else str(f) for f in self.fanouts)
