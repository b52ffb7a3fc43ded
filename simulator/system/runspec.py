"""How an epoch runs: :class:`RunSpec` (mode, prefetch, threads, placement) and the placement it resolves to."""

from __future__ import annotations

from dataclasses import dataclass

from sarlab.simulator.hardware.host import CROWDED, colocation_eff, regime, running_ranks
from sarlab.simulator.hardware.profile import Profile
from sarlab.simulator.network.network import NETWORKS

MODES = ("sar", "sa", "oneshot")
#: how an epoch is executed: ``auto`` (lockstep where it applies), ``events`` (one SimPy process per worker),
#: ``lockstep`` (all workers as arrays, :mod:`sarlab.simulator.system.lockstep`; an error where it does not apply)
EXECUTORS = ("auto", "events", "lockstep")
#: how a ring round synchronises: ``pairwise`` (sarlab: one isend/irecv pair per round) or ``global`` (the SAR
#: paper's library: every round one ``all_to_all`` of all workers, with 1-element tensors for the other peers)
ROUND_SYNCS = ("pairwise", "global")


@dataclass(frozen=True)
class RunSpec:
    """How the epoch runs: mode, prefetch, threads and placement.

    Args:
        mode: ``sar``, ``sa`` or ``oneshot``.
        prefetch: the engine's prefetch depth ``d`` (``d + 1`` rounds in flight while one is computed).
        threads: compute threads per worker; ``None`` = the host's cores divided among its workers.
        workers_per_host: placement; ``None`` = the profile's (0 = all workers on one host).
        workers_per_nic: workers sharing one NIC; ``None`` = ``workers_per_host``. Emulated hosts on one
            machine (``veth:rate=R,hosts=H``) have ``N / H`` workers per NIC, all of them on one host's cores.
        shared_cores: model a host's workers competing for its cores and memory system (processor
            sharing, :class:`sarlab.simulator.network.network.SharedCores`, with ``cores // threads`` slots); ``None`` =
            when the host is crowded or its co-located ranks interfere (a co-location efficiency below 1, the
            host model of :mod:`sarlab.simulator.hardware.host`).
        trace: record Gantt intervals, transfers and memory timelines (slower).
        network: NIC channel discipline, ``reserve`` (fast) or ``simpy`` (``simpy.Resource``), see
            :mod:`sarlab.simulator.network.network`.
        executor: :data:`EXECUTORS`.
        seed: seed of the per-round jitter draws (:mod:`sarlab.simulator.system.jitter`).
        round_sync: :data:`ROUND_SYNCS`.
    """

    mode: str = "sar"
    prefetch: int = 1
    threads: float | None = None
    workers_per_host: int | None = None
    workers_per_nic: int | None = None
    shared_cores: bool | None = None
    trace: bool = False
    network: str = "reserve"
    executor: str = "auto"
    seed: int = 0
    round_sync: str = "pairwise"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, got {self.prefetch}")
        if self.round_sync not in ROUND_SYNCS:
            raise ValueError(f"round_sync must be one of {ROUND_SYNCS}, got {self.round_sync!r}")
        if self.executor not in EXECUTORS:
            raise ValueError(f"executor must be one of {EXECUTORS}, got {self.executor!r}")
        if self.network not in NETWORKS:
            raise ValueError(f"network must be one of {tuple(NETWORKS)}, got {self.network!r}")


@dataclass(frozen=True)
class Placement:
    """Resolved placement: workers per host, threads per worker, shared core slots per host (or None), workers
    per NIC."""

    workers_per_host: int
    threads: float
    core_slots: int | None
    workers_per_nic: int = 0

    def __post_init__(self) -> None:
        if self.workers_per_nic <= 0:
            object.__setattr__(self, "workers_per_nic", self.workers_per_host)


def resolve_placement(profile: Profile, workers: int, run: RunSpec) -> Placement:
    """Workers per host, threads per worker and whether cores are shared (see :class:`RunSpec`)."""
    wph = profile.workers_per_host if run.workers_per_host is None else run.workers_per_host
    wph = workers if wph <= 0 else min(wph, workers)
    threads = run.threads if run.threads is not None else max(1, profile.cores_per_host // wph)
    oversubscribed = regime(wph, threads, profile.cores_per_host) == CROWDED
    running = running_ranks(wph, threads, profile.cores_per_host)
    interfere = wph > 1 and any(colocation_eff(profile.op(name), running, threads) < 1.0 for name in profile.ops)
    shared = (oversubscribed or interfere) if run.shared_cores is None else run.shared_cores
    slots = max(1, int(profile.cores_per_host // max(threads, 1))) if shared else None
    wpn = wph if run.workers_per_nic is None else max(1, min(run.workers_per_nic, workers))
    return Placement(wph, float(threads), slots, wpn)
