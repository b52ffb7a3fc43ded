"""One full-batch training epoch on ``N`` workers in ``sar``, ``sa`` or ``oneshot`` mode, simulated with SimPy.

:func:`simulate_epoch` prices the configuration (:mod:`sarlab.simulator.system.pricing`), starts one SimPy process per
worker running the engine's schedule (:mod:`sarlab.simulator.system.schedule`) on per-worker clocks
(:mod:`sarlab.simulator.system.clock`) over the network model (:mod:`sarlab.simulator.network.network`), runs the
simulation to its end and returns per-rank predictions (:class:`sarlab.simulator.system.result.EpochResult`). Where
every worker owns its NIC and no cores are shared, the same schedule runs once for all workers as arrays instead
(:mod:`sarlab.simulator.system.lockstep`).
"""

from __future__ import annotations

import gc
import time
from dataclasses import replace

import numpy as np
import simpy

from sarlab.simulator.hardware.host import spread_sigma
from sarlab.simulator.hardware.profile import Profile
from sarlab.simulator.network.network import NETWORKS, SharedCores
from sarlab.simulator.system import lockstep
from sarlab.simulator.system.clock import Worker, WorkerClocks
from sarlab.simulator.system.memory import MemoryTracker
from sarlab.simulator.system.pricing import EpochPricing
from sarlab.simulator.system.result import EpochResult
from sarlab.simulator.system.runspec import RunSpec, resolve_placement
from sarlab.simulator.system.schedule import Schedule
from sarlab.simulator.workload.model import ModelSpec
from sarlab.simulator.workload.workload import PartitionStats


class EpochModel:
    """Builds and runs the SimPy model of one epoch.

    Args:
        stats: partition statistics (``num_parts`` = number of workers).
        model: the model configuration.
        run: mode, prefetch, threads, placement.
        profile: the machine profile.
        scale_bytes: look the compute scale up at these bytes (:meth:`Profile.scale_at`) instead of the
            workers' mean activation (:func:`simulate_epoch` passes the predicted peak for ``"peak"``-keyed
            profiles).
    """

    def __init__(
        self, stats: PartitionStats, model: ModelSpec, run: RunSpec, profile: Profile, scale_bytes: float | None = None
    ) -> None:
        self.run_spec, self.profile = run, profile
        self.N = stats.num_parts
        self.placement = resolve_placement(profile, self.N, run)
        self.lockstep = run.executor == "lockstep" or (
            run.executor == "auto" and lockstep.applies(run, self.placement, self.N)
        )
        if self.lockstep and not lockstep.applies(run, self.placement, self.N):
            raise ValueError(
                "the lockstep executor needs one worker per host (or all on one host), no shared cores, the "
                "reserve network and no trace; use executor='events'"
            )
        # uneven progress of time-shared ranks (sarlab.simulator.hardware.host; 0 where they leave cores free)
        self.spread = spread_sigma(profile.progress_spread, self.placement.workers_per_host, self.placement.threads,
                                   profile.cores_per_host)
        self.pricing = EpochPricing(stats, model, run, profile, self.placement, scale_bytes, vector=self.lockstep)

    def run(self) -> EpochResult:
        """Simulate one steady-state epoch and return per-rank predictions."""
        if self.lockstep:
            return self._run_lockstep()
        wall, cpu = time.perf_counter(), time.process_time()
        N, trace, pricing = self.N, self.run_spec.trace, self.pricing
        env = simpy.Environment()
        network = NETWORKS[self.run_spec.network]
        net = network(
            env,
            N,
            self.profile.inter_host,
            self.profile.intra_host,
            self.placement.workers_per_nic,
            trace=trace,
        )
        slots, wph = self.placement.core_slots, self.placement.workers_per_host
        pools = [SharedCores(env, slots) for _ in range(-(-N // wph))] if slots is not None else None
        clock = WorkerClocks(env, net, N, pools, self.placement.workers_per_host, trace, pricing.share_eta,
                             pricing.copy_s_per_byte, pricing.copy_eta, pricing.copy_s_per_message,
                             self.profile.round_jitter_s, self.run_spec.seed, self.spread)  # fmt: skip
        schedule = Schedule(pricing, clock, self.run_spec)
        workers = [Worker(p, MemoryTracker(start=float(pricing.persistent[p]), trace=trace)) for p in range(N)]
        procs = [env.process(schedule.worker(w)) for w in workers]
        events = 0
        step, peek, inf = env.step, env.peek, float("inf")
        collecting = gc.isenabled()
        gc.disable()  # the run allocates ~1e5 short-lived objects; cyclic collection would only slow it down
        try:
            while peek() != inf:
                step()
                events += 1
        finally:
            if collecting:
                gc.enable()
        left = net.unmatched() + [f"worker {p.rank} blocked" for p, proc in zip(workers, procs) if proc.is_alive]
        if left:
            raise RuntimeError(f"schedule bug: {len(left)} messages/collectives never matched, e.g. {left[:3]}")
        return self._result(
            [w.clock for w in workers], [w.compute_s for w in workers], [w.wait_s for w in workers],
            [w.sent for w in workers], [w.recv for w in workers], [w.mem.peak for w in workers],
            [w.mem.current for w in workers], events, net.matched, wall, cpu,
            intervals=[w.intervals for w in workers] if trace else [], transfers=net.transfers,
            memory=[(w.mem.times, w.mem.values) for w in workers] if trace else [],
        )  # fmt: skip

    def _run_lockstep(self) -> EpochResult:
        """All workers at once (:mod:`sarlab.simulator.system.lockstep`): the schedule runs once, without events."""
        wall, cpu = time.perf_counter(), time.process_time()
        prof, pricing = self.profile, self.pricing
        clock = lockstep.LockstepClocks(self.N, prof.inter_host, prof.intra_host, self.placement.workers_per_nic,
                                        prof.round_jitter_s, self.run_spec.seed, self.spread)  # fmt: skip
        w = lockstep.VectorWorker(self.N, pricing.persistent)
        for _ in Schedule(pricing, clock, self.run_spec).worker(w):  # type: ignore[arg-type]
            raise RuntimeError("schedule bug: a lockstep worker waited for an event")
        return self._result(w.clock, w.compute_s, w.wait_s, w.sent, w.recv, w.mem.peak, w.mem.current,
                            clock.steps, clock.matched, wall, cpu)  # fmt: skip

    def _result(self, clocks, compute, wait, sent, recv, peak, end, events, messages, wall, cpu,
                **traces) -> EpochResult:
        """The per-rank predictions of either executor."""
        pricing = self.pricing
        return EpochResult(
            mode=self.run_spec.mode,
            workers=self.N,
            epoch_time_s=np.asarray(clocks, dtype=np.float64),
            compute_s=np.asarray(compute, dtype=np.float64),
            comm_wait_s=np.asarray(wait, dtype=np.float64),
            bytes_sent=np.broadcast_to(np.asarray(sent, dtype=np.float64), (self.N,)).copy(),
            bytes_recv=np.broadcast_to(np.asarray(recv, dtype=np.float64), (self.N,)).copy(),
            peak_above_baseline_bytes=np.asarray(peak, dtype=np.float64) * self.profile.mem_overhead_factor,
            baseline_bytes=pricing.baseline_bytes(),
            placement=self.placement,
            events=events,
            messages=messages,
            wall_s=time.perf_counter() - wall,
            cpu_s=time.process_time() - cpu,
            end_bytes=np.asarray(end, dtype=np.float64),
            start_bytes=pricing.persistent.copy(),
            activation_bytes=pricing.activation_bytes,
            scale_key_bytes=pricing.scale_bytes,
            compute_scale=pricing.costs.scale,
            **traces,
        )


def predicted_peak(stats: PartitionStats, model: ModelSpec, run: RunSpec, profile: Profile) -> EpochResult:
    """The untraced epoch with ``compute_scale`` 1 whose largest per-worker peak keys a ``"peak"`` profile's
    compute scale."""
    return EpochModel(stats, model, replace(run, trace=False), profile.with_scale(1.0)).run()


def simulate_epoch(stats: PartitionStats, model: ModelSpec, run: RunSpec, profile: Profile) -> EpochResult:
    """Simulate one epoch (see :class:`EpochModel`).

    A profile whose compute scale curve is keyed by peak memory (``compute_scale_key == "peak"``) takes two
    runs: :func:`predicted_peak` first, then the epoch priced at the scale of that peak; the result's
    ``events``, ``wall_s`` and ``cpu_s`` count both.
    """
    if profile.compute_scale_curve and profile.compute_scale_key == "peak":
        first = predicted_peak(stats, model, run, profile)
        result = EpochModel(stats, model, run, profile, float(first.peak_above_baseline_bytes.max())).run()
        result.events += first.events
        result.wall_s += first.wall_s
        result.cpu_s += first.cpu_s
        return result
    return EpochModel(stats, model, run, profile).run()
