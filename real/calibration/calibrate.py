"""Calibration: measure this machine and fit the measurements into a
:class:`~sarlab.simulator.hardware.profile.Profile`.

The steps, in order (each a :func:`sarlab.real.calibration.harness.quiet_step`):

1. every op family on one thread, then its slowest shape at 1, 2, 4, ... and all ``C`` cores
   (:mod:`sarlab.real.calibration.opbench`, :mod:`sarlab.real.calibration.gatbench`): rate, per-call overhead, row
   rate, backward ratio, the thread speed-ups at the counts runs use (``OpCost.speedups``);
2. co-located ranks of ``T`` threads, one alone and ``C / T`` at once, for ``T`` = 1 and ``C/2``
   (:func:`sarlab.real.calibration.hostbench.bench_share`; ``share_eff`` and ``OpCost.colocation``, read by the
   host model :mod:`sarlab.simulator.hardware.host`);
3. the allocator and the memory an op family adds on first use, under each memory method: resident bytes (``rss``)
   and tensor bytes left live (``live``, the workers' default) (:mod:`sarlab.real.calibration.hostbench`,
   ``Profile.first_use_memory``);
4. gloo point-to-point between two local processes (:func:`sarlab.real.calibration.hostbench.bench_network`),
   then the software cost of posting and waiting for messages on 2, 4 and 8 local ranks
   (:func:`sarlab.real.calibration.hostbench.bench_messages`; not a quiet step: it alternates world sizes
   instead), and how unevenly ``C``, ``2C`` and ``4C`` time-shared ranks progress between barriers
   (:mod:`sarlab.real.calibration.progressbench`, fitted by :func:`sarlab.simulator.system.spread.fit_sigma`);
5. real single-worker engine epochs for the compute scale, its curve under ``sarlab train``'s default allocator
   (``live``) and the other's (``rss``) ratio to it (:func:`sarlab.real.calibration.engine_runs.bench_engine`).

:func:`calibrate_backend` runs step 4's link, message and progress benchmarks alone over another backend (``ccl``) and
returns them as that backend's overlay (:mod:`sarlab.simulator.hardware.backends`), which ``sarlab calibrate --backend``
adds to an existing profile. The overlay's background CPU costs are measured twice where the host's setting changes how
the backend runs (:func:`_crowded_costs`): with the ranks fitting the cores, and crowded (more ranks than cores).

A calibration whose thread efficiencies are implausible for the core count
(:func:`sarlab.simulator.hardware.plausibility.implausible_thread_effs`) is flagged loudly: in the log, in the profile's
notes and in ``meta["implausible"]``; ``sarlab calibrate`` then refuses to write it where it was asked to. A compute
scale far from 1 under the microbenchmarks' allocator (:data:`sarlab.simulator.hardware.profile.MICROBENCHMARK_MEMORY`;
:func:`sarlab.simulator.hardware.plausibility.implausible_compute_scale`: a microbenchmark off the engine's code path)
is flagged in the log, the notes and ``meta["compute_scale_flag"]``, and written: calibrating again
would not change it.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import torch

from sarlab.common.machine import cpu_model, load_averages, today, usable_cores
from sarlab.core.memory import tune_malloc
from sarlab.real.calibration.budget import busy_warning, op_seconds, step_seconds
from sarlab.real.calibration.engine_runs import bench_engine
from sarlab.real.calibration.gatbench import bench_gat_autograd, bench_gat_fused, bench_gat_unfused
from sarlab.real.calibration.harness import jsonable, quiet_step, set_threads
from sarlab.real.calibration.hostbench import (
    bench_allocator,
    bench_first_use,
    bench_messages,
    bench_network,
    bench_share,
    colocation_threads,
    message_worlds,
    share_seconds,
)
from sarlab.real.calibration.opbench import bench_elementwise, bench_gemm, bench_max, bench_spmm, thread_counts
from sarlab.real.calibration.progressbench import ROWS, rounds_for, spread_table
from sarlab.real.calibration.ranks import preload
from sarlab.simulator.calibration.calibration import Calibration, Findings
from sarlab.simulator.calibration.fitting import fit_message_costs
from sarlab.simulator.hardware.backends import BASE_BACKEND
from sarlab.simulator.hardware.plausibility import implausible_compute_scale, implausible_thread_effs
from sarlab.simulator.hardware.profile import MICROBENCHMARK_MEMORY, Link, OpCost, Profile
from sarlab.simulator.system.spread import fit_sigma

__all__ = ["Calibration", "calibrate", "calibrate_backend"]

#: engine SpMM calls per progressbench round (~30 ms of one rank's work on the 2-core EPYC VM)
SPREAD_CALLS = 3
#: the link assumed when the gloo benchmark does not run
ASSUMED_LINK = Link(latency_s=50e-6, bandwidth_Bps=1e9)


@contextlib.contextmanager
def _took(cal: Calibration, what: str) -> Iterator[None]:
    """Log the wall seconds the block took at its end (``    what: 12.3 s``): every step's measured length beside
    the expected one its progress line announced."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        cal.log(f"    {what}: {time.perf_counter() - t0:.1f} s")


def _preload(cal: Calibration) -> None:
    """Start the zygote the rank benchmarks fork from (:func:`sarlab.real.calibration.ranks.preload`) before the
    first step that needs it, outside any timed step: its one import of the engine is not another process's load
    during a measurement."""
    with _took(cal, "benchmark processes' interpreter (zygote) ready"):
        preload()


def _measure_ops(cal: Calibration, found: Findings, cores: int, steps_total: int) -> dict[str, OpCost]:
    """Step 1 and 2: every op family (one thread, then all cores), then co-located processes."""
    log = cal.log
    gen = torch.Generator().manual_seed(cal.seed)
    steps: list[tuple[str, Callable[[], OpCost | None]]] = [
        ("gemm", lambda: bench_gemm(cal, found, cores)),
        ("spmm", lambda: bench_spmm(cal, found, cores, gen)),
        ("max_aggr", lambda: bench_max(cal, found, cores, gen)),
        ("gat_unfused", lambda: bench_gat_unfused(cal, found, cores, gen)),
        ("gat_autograd", lambda: bench_gat_autograd(cal, found, cores, gen)),
        ("elementwise", lambda: bench_elementwise(cal, found, cores)),
    ]
    if cal.fused:
        steps.append(("gat_fused", lambda: bench_gat_fused(cal, found, cores, gen)))
    else:
        found.notes.append("fused GAT not measured (disabled); the simulator falls back to the unfused costs")
    ops: dict[str, OpCost] = {}
    counts = ", ".join(map(str, thread_counts(cores)))
    for i, (op_name, fn) in enumerate(steps, start=1):
        t0 = time.perf_counter()
        log(f"[calibrate {i}/{steps_total}] {op_name} at {counts} threads "
            f"(expected ~{op_seconds(cal, cores):.0f} s) ...")
        cost = quiet_step(cal, found, op_name, fn)
        if cost is not None:
            measured = found.raw.get("thread_speedups", {}).get(op_name, [])
            cost = replace(cost, speedups=tuple((float(t), max(0.1, float(s))) for t, s in measured))
            ops[op_name] = cost
            row = f", row {cost.row_rate:.3g}/s" if cost.row_rate else ""
            row += f", edge visit {cost.edge_rate:.3g}/s" if cost.edge_rate else ""
            log(
                f"    rate {cost.rate:.3g}/s{row}, overhead {cost.overhead_s * 1e6:.1f} us, "
                f"bwd x{cost.bwd_ratio:.2f}, thread eff {cost.parallel_eff:.2f} "
                f"({time.perf_counter() - t0:.1f}s)"
            )
    if cal.quick or cores <= 1:
        found.notes.append("co-location not measured (quick or one core): the host model derives it from the "
                           "thread speed-ups")
        return ops
    _preload(cal)
    return _measure_colocation(cal, found, cores, ops)


def _measure_colocation(cal: Calibration, found: Findings, cores: int, ops: dict[str, OpCost]) -> dict[str, OpCost]:
    """Step 2: co-located ranks of ``T`` threads for ``T`` in :func:`colocation_threads` (one thread: ``share_eff``;
    more: the ``colocation`` table, with the one-thread value as its first entry)."""
    tables: dict[str, list[tuple[float, float]]] = {}
    for threads in colocation_threads(cores):
        ranks = cores // threads
        cal.log(f"    co-located ranks: sharebench, one rank of {threads} thread(s) alone and beside {ranks - 1} more "
                f"in adjacent windows (expected ~{share_seconds(cal):.0f} s) ...")
        try:
            with _took(cal, f"co-location of {threads}-thread ranks"):
                shares = quiet_step(cal, found, "share" if threads == 1 else f"share_threads_{threads}",
                                    lambda t=threads: bench_share(cal, found, cores, t))
        except (subprocess.SubprocessError, OSError, ValueError, RuntimeError, KeyError) as err:
            found.notes.append(f"co-location of {threads}-thread ranks not measured ({type(err).__name__}: {err})")
            continue
        for family, eta in shares.items():
            if family in ops:
                tables.setdefault(family, []).append((float(threads), eta))
                if threads == 1:
                    ops[family] = replace(ops[family], share_eff=eta)
        cal.log(f"    co-location eta ({ranks} x {threads} threads) "
                + ", ".join(f"{k} {v:.2f}" for k, v in shares.items()))
    for family, table in tables.items():
        if len(table) > 1:  # ranks of several thread counts measured: the host model reads the table
            ops[family] = replace(ops[family], colocation=tuple(table))
    return ops


def _measure_memory(cal: Calibration, found: Findings) -> tuple[float, dict[str, dict[str, float]], dict[str, float]]:
    """Step 3: resident bytes per tensor byte, first-use bytes per family under each memory method
    (``{method: {family: bytes}}``, :attr:`Profile.first_use_memory`), sparse-kernel temporaries (a check)."""
    factor = bench_allocator(found)
    first_use: dict[str, dict[str, float]] = {}
    transients: dict[str, float] = {}
    if cal.quick:
        found.notes.append("first-use memory not measured (--quick); run a full calibration for it")
    else:
        for memory in ("rss", "live"):
            try:
                measured, kernel = bench_first_use(found, memory)
            except (subprocess.SubprocessError, OSError, ValueError, IndexError, KeyError, RuntimeError) as err:
                found.notes.append(f"first-use memory under {memory} not measured ({type(err).__name__}: {err})")
                continue
            if measured:
                first_use[memory] = measured
            transients = transients or kernel
        if not transients:
            found.notes.append("sparse-kernel temporaries not measured (VmHWM cannot be reset here)")
    for memory, measured in first_use.items():
        cal.log(f"    first use under {memory} (MiB): "
                + ", ".join(f"{k} {v / 2**20:.1f}" for k, v in measured.items()))
    cal.log(f"    resident bytes per tensor byte {factor:.3f}")
    if transients:
        cal.log("    sparse-kernel temporaries (a check, not priced): "
                + ", ".join(f"{k} {v:.3g}" for k, v in transients.items()))
    return factor, first_use, transients


def _measure_network(cal: Calibration, found: Findings, backend: str = "gloo") -> tuple[Link, float, float]:
    """Step 4: the loopback link, the CPU time of posting an exchange and of moving a byte (over ``backend``)."""
    if not cal.network:
        found.notes.append("network not measured (disabled); 50 us / 1 GB/s assumed")
        return ASSUMED_LINK, 0.0, 0.0
    try:
        link, call_s, cpu_per_byte = quiet_step(cal, found, "network", lambda: bench_network(cal, found, backend))
    except Exception as err:  # noqa: BLE001 - keep the compute calibration if the backend fails
        found.notes.append(f"network not measured ({type(err).__name__}: {err}); 50 us / 1 GB/s assumed")
        return ASSUMED_LINK, 0.0, 0.0
    cal.log(
        f"    alpha {link.alpha_s * 1e6:.1f} us (gap {link.gap_s * 1e6:.1f} us), "
        f"bandwidth {link.bandwidth_Bps / 1e9:.2f} GB/s, post {call_s * 1e6:.1f} us, "
        f"CPU {cpu_per_byte * 1e9:.3f} s/GB moved"
    )
    return link, call_s, cpu_per_byte


def _measure_messages(cal: Calibration, found: Findings, backend: str = "gloo") -> dict[str, float]:
    """Step 4b: software costs of ``backend`` exchanges on 2-8 local ranks
    (:func:`sarlab.real.calibration.hostbench.bench_messages`): per call, per op posted and waited, the
    backend's background CPU per op. Empty when the backend fails or the network step is disabled."""
    if not cal.network:
        return {}
    try:
        fit = bench_messages(cal, found, backend=backend)
    except Exception as err:  # noqa: BLE001 - keep the rest of the calibration if gloo fails
        found.notes.append(f"message costs not measured ({type(err).__name__}: {err}); the exchange call alone")
        return {}
    cal.log(f"    exchange call {fit['p2p_call_s'] * 1e6:.1f} us + {fit['p2p_op_s'] * 1e6:.1f} us per op posted, "
            f"{fit['p2p_wait_s'] * 1e6:.1f} us per op waited, "
            f"{fit['p2p_msg_cpu_s'] * 1e6:.1f} us background CPU per op")
    found.notes.append("message costs (p2p_call_s, p2p_op_s, p2p_wait_s, p2p_msg_cpu_s): main-thread CPU time of "
                       f"posting and waiting {backend} ops on {', '.join(map(str, message_worlds(cal)))} local ranks, "
                       "256-byte messages (commbench)")
    return {k: v for k, v in fit.items() if k.startswith("p2p_")}


def _measure_spread(cal: Calibration, found: Findings, cores: int, backend: str = BASE_BACKEND) -> dict[int, float]:
    """Step 4c: how unevenly ``P = C, 2C, 4C`` time-shared single-thread ranks, joined over ``backend``, progress
    between barriers (:mod:`sarlab.real.calibration.progressbench`), as the ``sigma_P`` of
    :mod:`sarlab.simulator.system.spread`. Empty when the backend fails or the network steps are disabled."""
    if not cal.network:
        return {}
    counts = sorted({max(2, cores), 2 * cores, 4 * cores})
    rounds = 10 if cal.quick else 40
    try:
        table = spread_table(counts, SPREAD_CALLS, rounds, log=cal.log, rows=ROWS // 8 if cal.quick else ROWS,
                             backend=backend)
    except Exception as err:  # noqa: BLE001 - keep the rest of the calibration if the backend fails
        found.notes.append(f"progress spread not measured ({type(err).__name__}: {err}): even progress")
        return {}
    found.raw["progress_spread"] = {str(p): row for p, row in table.items()}
    fitted = {p: fit_sigma(row["loss"], p, cores) for p, row in table.items()}
    cal.log("    progress spread sigma_P (fitted to the slowest / mean loss): "
            + ", ".join(f"P={p}: {v:.3f}" for p, v in fitted.items()))
    found.notes.append(f"progress_spread: P = {counts} single-thread ranks, {SPREAD_CALLS} engine SpMM calls per "
                       f"round ({', '.join(str(rounds_for(p, counts[0], rounds)) for p in counts)} rounds: the same "
                       f"rank-rounds) then a {backend} barrier (progressbench); sigma fitted by "
                       "spread.fit_sigma")
    return fitted


def _fit_engine(cal: Calibration, found: Findings, profile: Profile) -> Profile:
    """Step 5: the compute scale curve from real engine epochs (or the profile as it is when that fails)."""
    if not cal.engine:
        found.notes.append("compute_scale not fitted (disabled): microbenchmarks alone")
        return profile
    cal.log("[calibrate] engine epochs (1 worker, live and rss allocators) vs the microbenchmark prediction "
            f"(expected ~{step_seconds(cal, 'engine'):.0f} s) ...")
    try:
        scale, curve, raw = quiet_step(cal, found, "engine", lambda: bench_engine(cal, profile))
    except (subprocess.SubprocessError, OSError, ValueError, RuntimeError, KeyError, IndexError) as err:
        found.notes.append(f"compute_scale not fitted ({type(err).__name__}: {err}); 1.0 used")
        return profile
    found.raw["engine"] = raw
    what = "predicted peak memory" if cal.scale_key == "peak" else "activations"
    memory, ratios = raw.get("compute_scale_memory", "rss"), dict(raw.get("memory_scale", {}))
    note = (
        f"compute_scale_curve: engine epoch / microbenchmark prediction (GCN and SAGE, 1 worker, "
        f"{len(raw['runs'])} runs under the {memory} allocator) as a power law of {what}: "
        f"{', '.join(f'{v:.2f} at {b / 2**20:.0f} MB' for b, v in curve)}; compute_scale "
        f"{scale:.3f} is the runs' geometric mean"
        + "".join(f"; memory_scale {m}: {r:.2f} ({m} / {memory} epochs of the same graphs, "
                  f"{raw.get('ratio_nodes', 0):,d} nodes)" for m, r in ratios.items())
    )
    families = dict(raw.get("family_scale", {}))
    if families:
        note += ("; family_scale (GEMM and the other families over the curve, fitted on "
                 f"{len(raw.get('family_split', []))} GCN, SAGE and GAT runs): "
                 + ", ".join(f"{f} {k:.2f}" for f, k in sorted(families.items())))
    cal.log(f"    compute_scale {scale:.3f} ({memory})"
            + "".join(f", {m} {r:.2f} x that" for m, r in ratios.items()))
    return replace(profile, compute_scale=scale, compute_scale_curve=curve, compute_scale_key=cal.scale_key,
                   compute_scale_memory=memory, memory_scale=ratios, family_scale=families,
                   notes=(*profile.notes, note))  # fmt: skip


def _crowded_costs(cal: Calibration, found: Findings, backend: str, cores: int) -> tuple[dict[str, float],
                                                                                        dict[str, float]]:
    """The background CPU costs of ``backend`` (per message op, per byte) apart for hosts whose ranks fit their
    ``cores`` and for crowded ones (more ranks than cores, ``LOCAL_WORLD_SIZE`` as the launcher sets it: oneCCL
    then runs without its worker thread, ``sarlab.kernels.ccl.SHARED_CORES_ENV``). Per message: commbench's runs
    (already in ``found.raw["messages"]``) of the world sizes on each side of ``cores``; per byte: netbench again,
    its two ranks told that their host launches ``cores + 1``. Returns ``(own, crowded)``: the first replaces the
    fields of one fit over every world size (where a world fits the cores), the second is the overlay's
    ``crowded_cpu`` (empty where nothing could be measured crowded)."""
    runs = found.raw.get("messages", {}).get("runs", [])
    own_runs = [r for r in runs if int(r.get("world", 0)) <= cores]
    crowded_runs = [r for r in runs if int(r.get("world", 0)) > cores]
    own: dict[str, float] = {}
    crowded: dict[str, float] = {}
    if own_runs and crowded_runs:  # world sizes on both sides of the cores: one per-message fit for each
        own["p2p_msg_cpu_s"] = fit_message_costs(own_runs)["p2p_msg_cpu_s"]
        crowded["p2p_msg_cpu_s"] = fit_message_costs(crowded_runs)["p2p_msg_cpu_s"]
    cal.log(f"    {backend} on a crowded host ({cores + 1} ranks told, {cores} cores): point-to-point CPU per byte ...")
    try:
        _, _, per_byte = quiet_step(cal, found, "network_crowded", lambda: bench_network(
            cal, found, backend, local_world=cores + 1, raw_key="network_crowded"))
        crowded["p2p_cpu_s_per_byte"] = per_byte
    except Exception as err:  # noqa: BLE001 - the overlay keeps one per-byte cost for every host
        found.notes.append(f"{backend} per-byte CPU on a crowded host not measured ({type(err).__name__}: {err})")
    if crowded:
        values = ", ".join(f"{k} {v:.3g}" for k, v in crowded.items())
        fitting = f"p2p_msg_cpu_s {own['p2p_msg_cpu_s']:.3g}" if own else ""
        worlds = ", ".join(str(w) for w in sorted({int(r["world"]) for r in crowded_runs}))
        found.notes.append(
            f"crowded_cpu: background CPU where a host launches more ranks than its {cores} cores ("
            + (f"per message from commbench on {worlds} ranks, " if worlds else "")
            + f"per byte from netbench told {cores + 1}): {values}"
            + (f"; {fitting} from the world sizes that fit the cores" if own else ""))
        cal.log(f"    crowded: {values}" + (f"; ranks fitting the cores: {fitting}" if own else ""))
    return own, crowded


def calibrate_backend(cal: Calibration, backend: str, command: str = "") -> dict[str, Any]:
    """Measure this machine's links, message software costs and progress spread over ``backend`` (step 4 alone:
    netbench, commbench on 2, 4 and 8 ranks, progressbench) and return them as that backend's overlay
    (:mod:`sarlab.simulator.hardware.backends`): the fields of
    :data:`~sarlab.simulator.hardware.backends.OVERLAY_FIELDS` it measured, ``notes`` and ``meta`` (date, machine,
    command, load before and after, raw timings). Raises RuntimeError when the backend cannot be measured."""
    if backend == BASE_BACKEND:
        raise ValueError(f"{BASE_BACKEND} is the profile's own communication; `sarlab calibrate` measures it")
    found = Findings()
    start, load_before = time.perf_counter(), load_averages()
    _preload(cal)
    cal.log(f"[calibrate --backend {backend} 1/3] point-to-point (2 local processes) ...")
    link, _, cpu_per_byte = _measure_network(replace(cal, network=True), found, backend)
    if link is ASSUMED_LINK:
        raise RuntimeError(f"{backend} point-to-point could not be measured: {found.notes[-1]}")
    worlds = ", ".join(map(str, message_worlds(cal)))
    cal.log(f"[calibrate --backend {backend} 2/3] message costs on {worlds} local ranks ...")
    messages = _measure_messages(replace(cal, network=True), found, backend)
    if not messages:
        raise RuntimeError(f"{backend} message costs could not be measured: {found.notes[-1]}")
    overlay: dict[str, Any] = {"intra_host": link, "inter_host": link, "p2p_cpu_s_per_byte": cpu_per_byte,
                               **messages}
    cores = cal.threads or usable_cores()
    own, crowded = _crowded_costs(cal, found, backend, usable_cores())
    overlay.update(own)
    if crowded:
        overlay["crowded_cpu"] = crowded
    cal.log(f"[calibrate --backend {backend} 3/3] progress of ranks sharing {cores} cores ...")
    spread = _measure_spread(replace(cal, network=True), found, cores, backend)
    if spread:
        overlay["progress_spread"] = spread
    overlay["notes"] = (f"links, message costs and progress spread measured over {backend} on 127.0.0.1 "
                        "(netbench, commbench, progressbench); inter_host = intra_host", *found.notes)
    overlay["meta"] = {"backend": backend, "machine": cpu_model(), "date": today(), "torch": torch.__version__,
                       "command": command, "loadavg_before": load_before, "loadavg_after": load_averages(),
                       "cores": usable_cores(), "quick": cal.quick,
                       "seconds": round(time.perf_counter() - start, 2), "raw": jsonable(found.raw)}
    return overlay


def _measure_compute(cal: Calibration, found: Findings, cores: int, steps_total: int):
    """Steps 1-3 with the process at one thread (restored after): the op families, co-location, memory. Returns
    ``(ops, implausible thread efficiencies, (resident factor, first-use bytes, transients))``."""
    old_threads = torch.get_num_threads()
    set_threads(1)
    try:
        ops = _measure_ops(cal, found, cores, steps_total)
        implausible = implausible_thread_effs(ops, cores)
        for line in implausible:
            cal.log(f"    WARNING: implausible {line}")
        cal.log(f"[calibrate {steps_total - 1}/{steps_total}] allocator and first-use memory "
                f"(expected ~{step_seconds(cal, 'memory'):.0f} s) ...")
        with _took(cal, "allocator and first-use memory"):
            return ops, implausible, _measure_memory(cal, found)
    finally:
        set_threads(old_threads)


def calibrate(cal: Calibration | None = None, name: str = "local") -> Profile:
    """Measure this machine and return its :class:`Profile` (see the module docstring)."""
    cal = cal or Calibration()
    found = Findings()
    log = cal.log
    cores = cal.threads or usable_cores()
    start = time.perf_counter()
    # the engine's malloc settings: large tensors are fresh pages, whose first-touch faults belong to the op
    if not tune_malloc(threshold=1 << 17):
        found.notes.append("allocator: glibc mallopt unavailable; measured with default malloc settings")
    found.raw["loadavg_start"] = load_averages()
    for line in busy_warning(cal, cores):
        log(line)
    steps_total = 9 if cal.fused else 8
    ops, implausible, (factor, first_use, transients) = _measure_compute(cal, found, cores, steps_total)
    if cal.network or cal.engine:
        _preload(cal)
    log(f"[calibrate {steps_total}/{steps_total}] gloo point-to-point, message costs and progress spread "
        f"(expected ~{step_seconds(cal, 'network'):.0f} s) ...")
    with _took(cal, "point-to-point"):
        link, call_s, cpu_per_byte = _measure_network(cal, found)
    with _took(cal, "message costs"):
        messages = _measure_messages(cal, found)
    with _took(cal, "progress spread"):
        spread = _measure_spread(cal, found, cores)
    profile = Profile(
        name=name,
        ops=ops,
        inter_host=link,
        intra_host=link,
        cores_per_host=usable_cores(),
        workers_per_host=0,
        p2p_call_s=messages.get("p2p_call_s", call_s),
        p2p_op_s=messages.get("p2p_op_s", 0.0),
        p2p_wait_s=messages.get("p2p_wait_s", 0.0),
        p2p_msg_cpu_s=messages.get("p2p_msg_cpu_s", 0.0),
        p2p_cpu_s_per_byte=cpu_per_byte,
        progress_spread=spread,
        mem_overhead_factor=factor,
        first_use_bytes=first_use.get("rss", {}),
        first_use_memory=first_use if "live" in first_use else {},
        transient_bytes=transients,
        llc_bytes=float(found.raw.get("llc_bytes", 0.0)),
        notes=(
            "rates are per thread at 1 thread; speedups at 1, 2, 4, ... usable cores, parallel_eff at all of them",
            "inter_host = intra_host: measured on one machine (loopback gloo)",
        ),
    )
    with _took(cal, "engine epochs"):
        profile = _fit_engine(cal, found, profile)
    off_scale = implausible_compute_scale(profile.for_memory(MICROBENCHMARK_MEMORY).compute_scale)
    for line in off_scale:
        log(f"    WARNING: implausible {line}")
    elapsed = time.perf_counter() - start
    log(f"calibration done in {elapsed:.1f}s")
    flagged = (*(f"IMPLAUSIBLE {line}: re-run `sarlab calibrate` on quiet, separate cores" for line in implausible),
               *(f"IMPLAUSIBLE {line}" for line in off_scale))
    return replace(
        profile,
        notes=(*flagged, *profile.notes, *found.notes),
        meta={
            "machine": cpu_model(),
            "torch": torch.__version__,
            "date": today(),
            "threads_measured": thread_counts(cores),
            "loadavg_start": found.raw.get("loadavg_start"),
            "quick": cal.quick,
            "seconds": round(elapsed, 2),
            "implausible": list(implausible),
            "compute_scale_flag": list(off_scale),
            "raw": jsonable(found.raw),
        },
    )
