"""Hardware profiles: per-op compute throughputs, network alpha-beta parameters, host layout.

A profile is what `sarlab calibrate` measures on one machine (or what a preset assumes for a machine we
cannot run on); the calibrated profiles that ship with the simulator are in ``simulator/profiles/``
(:mod:`sarlab.simulator.hardware.provenance`). The cost model (:mod:`sarlab.simulator.system.costs`) turns a profile
into seconds per operation.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from sarlab.simulator.hardware.allocators import checked_first_use, for_memory, memory_label, memory_ratio
from sarlab.simulator.hardware.backends import (
    BASE_BACKEND,
    checked_crowded,
    checked_spread,
    comm_cpu,
    for_backend,
    overlay_from_json,
    overlay_to_json,
)
from sarlab.simulator.hardware.opcost import Link, OpCost

PROFILE_FORMAT_VERSION = 1

#: names of the compute ops a profile must price, with the unit of work their ``rate`` counts per second
OP_UNITS: dict[str, str] = {
    "gemm": "FLOP (2*m*k*n per dense product)",
    "spmm": "edge*feature (sum aggregation over a CSR shard)",
    "max_aggr": "edge*feature (gather + scatter_reduce amax)",
    "gat_unfused": "edge*head*channel (the streamed torch attention kernels of one shard, sar)",
    "gat_fused": "edge*head*channel (fused attention kernel over one shard)",
    "gat_autograd": "edge*head*channel (edge-wise attention under torch autograd: sa, oneshot, one worker)",
    "elementwise": "byte moved (read + write)",
}

#: families a profile may lack (priced as ``gat_unfused`` then)
OPTIONAL_OPS = ("gat_fused", "gat_autograd")
#: the memory method the op microbenchmarks run under (glibc with the engine's thresholds: large outputs on fresh
#: pages): a compute scale's plausibility is judged under it (:meth:`Profile.for_memory`)
MICROBENCHMARK_MEMORY = "rss"
#: what :attr:`Profile.compute_scale_curve` is keyed by (see :class:`Profile`)
SCALE_KEYS = ("activation", "peak")


@dataclass(frozen=True)
class Profile:
    """A machine profile: compute op costs, links, and how workers sit on hosts.

    Args:
        name: short name (``local``, ``icelake-hdr200``...).
        ops: :class:`OpCost` per op family (keys of :data:`OP_UNITS`; :data:`OPTIONAL_OPS` may be absent).
        inter_host: link between workers on different hosts.
        intra_host: link between workers on the same host (loopback / shared memory).
        cores_per_host: physical cores of one host.
        workers_per_host: default placement (``0`` = all workers on one host).
        p2p_call_s: CPU time of one exchange call besides its ops (``dist.batch_isend_irecv``'s fixed part; in
            profiles without ``p2p_op_s``, the whole call of one isend/irecv pair).
        p2p_op_s: CPU time of posting one message op (one ``isend`` or ``irecv``) within an exchange call: a
            ring round posts 2, ``oneshot`` ``2 (N-1)``
            (:func:`sarlab.simulator.calibration.fitting.fit_message_costs`).
        p2p_wait_s: CPU time of waiting for one posted op (``work.wait()``), beyond the time blocked.
        p2p_msg_cpu_s: background CPU seconds per message op (gloo's threads), charged to the host's shared
            cores like ``p2p_cpu_s_per_byte`` (0 = none).
        round_jitter_s: mean of a random delay (exponential) each exchange call suffers before it posts (OS
            noise, interrupts, Python's garbage collector); a ring round then ends with the slowest of its
            pairs' delays. 0 = none. Drawn from a fixed seed, so a prediction is repeatable.
        progress_spread: ``{P: sigma_P}``: how unevenly ``P`` single-thread workers sharing one host's cores
            progress between two exchange calls (:mod:`sarlab.simulator.system.spread`; measured by
            :mod:`sarlab.real.calibration.progressbench` and fitted by
            :func:`sarlab.simulator.system.spread.fit_sigma`). Empty = even progress (presets: one worker per core).
        p2p_cpu_s_per_byte: CPU seconds a worker's process spends per byte it sends or receives (loopback
            copies in the communication threads); charged to its host's shared cores when co-located
            workers share them (0 = the NIC moves the bytes).
        crowded_cpu: ``p2p_msg_cpu_s`` and/or ``p2p_cpu_s_per_byte`` where more ranks share a host's cores than
            ``cores_per_host`` (:meth:`comm_cpu`; oneCCL runs without its worker thread there). Empty = the same.
        mem_overhead_factor: measured resident bytes per tensor byte (allocator + page rounding).
        first_use_bytes: resident bytes an op family adds the first time a process runs it (library code
            pages, allocator arenas), measured by :mod:`sarlab.real.calibration.memprobe`; ``autograd`` (the first
            backward pass: engine threads, backward kernels) counts for every model, since the engine
            measures its baseline before any backward has run.
        transient_bytes: temporaries of the engine's sparse kernels beyond their output, measured by
            :func:`sarlab.real.calibration.memprobe.kernel_transients` (``spmm_{fwd,bwd}_out`` per output byte,
            ``spmm_{fwd,bwd}_edge`` per edge); recorded as a check, not priced: the C++ shard SpMM allocates
            nothing beyond its output (about 0 measured); empty = not measured.
        llc_bytes: effective last-level cache of one worker for random row gathers (fitted by calibration:
            a gather from a matrix of ``G`` bytes hits with probability ``min(1, llc / G)``); 0 = no cache
            model.
        mem_per_host_bytes: memory of one host (for "does it fit" reports; 0 = unknown).
        dtype_slowdown: compute-time multiplier per dtype relative to float32.
        compute_scale: multiplier of every compute cost, fitted by ``sarlab calibrate`` from short epochs of
            the real engine (:func:`sarlab.real.calibration.engine_runs.bench_engine`): what the microbenchmarks
            miss in a whole epoch (first-touch faults of GBs of fresh tensors under memory pressure, small ops they do
            not price). 1.0 = microbenchmarks alone (presets).
        compute_scale_curve: ``((bytes, scale), ...)`` by increasing ``bytes``: the same ratio measured at
            several graph sizes, keyed by :attr:`compute_scale_key` (:meth:`scale_at`; ``sarlab calibrate``
            stores the two ends of a power law, :func:`sarlab.simulator.calibration.fitting.fit_scale_curve`). Empty =
            ``compute_scale`` everywhere.
        compute_scale_memory: the engine's memory method (allocator) the engine epochs behind ``compute_scale`` and
            its curve ran under: ``live`` (the counting allocator, whose block cache reuses resident pages:
            ``sarlab train``'s default) or ``rss`` (glibc with the engine's thresholds: every large tensor on fresh
            pages, page faults paid every op). Profiles older than the field were fitted on ``rss`` runs.
        family_scale: ``{op family: factor}``: each family's cost relative to the compute-scale curve, where the
            engine's epochs say the microbenchmarks price it off by a different factor than the rest (fitted by
            ``sarlab calibrate`` from one-worker GCN, SAGE and GAT epochs,
            :func:`sarlab.simulator.calibration.fitting.fit_family_scale`). Families absent: 1. Empty = one compute
            scale for every family (profiles before the field).
        memory_scale: ``{method: ratio}``: the compute scale of runs under another memory method relative to
            :attr:`compute_scale_memory`'s, measured by ``sarlab calibrate`` (``rss`` epoch over ``live`` epoch of
            the same graphs); a record priced with :meth:`for_memory` of its ``mem_method`` column. Empty = every
            method priced as :attr:`compute_scale_memory`.
        first_use_memory: ``{method: {family: bytes}}``: :attr:`first_use_bytes` as measured under each memory
            method (:meth:`for_memory` puts a record's in place); empty = ``first_use_bytes`` for every method.
        notes: free-text provenance (how each number was obtained or assumed).
        meta: machine description, date, torch version; ``backend``: the backend this profile's communication
            fields price (absent: gloo).
        backends: per-backend communication overlays, ``{name: {field: value, notes, meta}}`` over
            :data:`sarlab.simulator.hardware.backends.OVERLAY_FIELDS` (:meth:`for_backend`); empty = gloo only.
    """

    name: str
    ops: dict[str, OpCost]
    inter_host: Link
    intra_host: Link
    cores_per_host: int
    workers_per_host: int = 0
    p2p_call_s: float = 0.0
    p2p_op_s: float = 0.0
    p2p_wait_s: float = 0.0
    p2p_msg_cpu_s: float = 0.0
    round_jitter_s: float = 0.0
    progress_spread: dict[int, float] = field(default_factory=dict)
    p2p_cpu_s_per_byte: float = 0.0
    crowded_cpu: dict[str, float] = field(default_factory=dict)
    mem_overhead_factor: float = 1.0
    first_use_bytes: dict[str, float] = field(default_factory=dict)
    transient_bytes: dict[str, float] = field(default_factory=dict)
    llc_bytes: float = 0.0
    mem_per_host_bytes: int = 0
    dtype_slowdown: dict[str, float] = field(
        default_factory=lambda: {"float32": 1.0, "float64": 2.0, "bfloat16": 1.0, "float16": 1.0}
    )
    compute_scale: float = 1.0
    compute_scale_curve: tuple[tuple[float, float], ...] = ()
    compute_scale_key: str = "activation"
    compute_scale_memory: str = "rss"
    memory_scale: dict[str, float] = field(default_factory=dict)
    family_scale: dict[str, float] = field(default_factory=dict)
    first_use_memory: dict[str, dict[str, float]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)
    backends: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        missing = [k for k in OP_UNITS if k not in self.ops and k not in OPTIONAL_OPS]
        if missing:
            raise ValueError(f"profile {self.name!r} lacks op costs for {missing}; re-run `sarlab calibrate`")
        if self.cores_per_host < 1 or self.workers_per_host < 0:
            raise ValueError("cores_per_host must be >= 1 and workers_per_host >= 0")
        if min(self.p2p_call_s, self.p2p_op_s, self.p2p_wait_s, self.p2p_msg_cpu_s, self.round_jitter_s) < 0:
            raise ValueError("message costs (p2p_*) and round_jitter_s must be >= 0")
        checked_spread(self.progress_spread, "progress_spread")  # raises for a count < 1 or a negative spread
        object.__setattr__(self, "crowded_cpu", checked_crowded(self.crowded_cpu, "crowded_cpu"))
        if self.compute_scale_key not in SCALE_KEYS:
            raise ValueError(f"compute_scale_key must be one of {SCALE_KEYS}, got {self.compute_scale_key!r}")
        if not self.compute_scale_memory:
            raise ValueError("compute_scale_memory must name the memory method the compute scale was fitted under")
        ratios = {str(k): float(v) for k, v in self.memory_scale.items()}
        if self.compute_scale_memory in ratios or not all(k and np.isfinite(v) and v > 0 for k, v in ratios.items()):
            raise ValueError(f"memory_scale takes ratios > 0 of methods other than {self.compute_scale_memory!r} "
                             f"(the curve's own), got {self.memory_scale}")
        object.__setattr__(self, "memory_scale", ratios)
        factors = {str(k): float(v) for k, v in self.family_scale.items()}
        if not all(k in OP_UNITS and np.isfinite(v) and v > 0 for k, v in factors.items()):
            raise ValueError(f"family_scale takes factors > 0 of op families {sorted(OP_UNITS)}, "
                             f"got {self.family_scale}")
        object.__setattr__(self, "family_scale", factors)
        object.__setattr__(self, "first_use_memory", checked_first_use(self.first_use_memory))
        if BASE_BACKEND in self.backends:
            raise ValueError(f"backends: {BASE_BACKEND} is the profile's own communication fields, not an overlay")
        object.__setattr__(self, "backends", {k: overlay_from_json(k, v, Link) for k, v in self.backends.items()})

    def for_backend(self, name: str) -> Profile:
        """This profile priced for torch.distributed backend ``name``: its communication fields replaced by that
        backend's overlay (:func:`sarlab.simulator.hardware.backends.for_backend`; gloo: the profile itself)."""
        return for_backend(self, name)

    def comm_cpu(self, ranks_per_host: int) -> tuple[float, float]:
        """(p2p_msg_cpu_s, p2p_cpu_s_per_byte) of a host launching that many ranks (:func:`comm_cpu`)."""
        return comm_cpu(self, ranks_per_host)

    def scale_at(self, nbytes: float) -> float:
        """``compute_scale`` at ``nbytes`` of the curve's key (:attr:`compute_scale_key`): log-linear
        interpolation of :attr:`compute_scale_curve` in log(bytes), constant beyond its ends;
        :attr:`compute_scale` without a curve."""
        if not self.compute_scale_curve:
            return self.compute_scale
        xs = np.log([max(float(b), 1.0) for b, _ in self.compute_scale_curve])
        ys = np.log([float(v) for _, v in self.compute_scale_curve])
        return float(np.exp(np.interp(np.log(max(float(nbytes), 1.0)), xs, ys)))

    def with_scale(self, scale: float) -> Profile:
        """A copy priced with one ``compute_scale`` everywhere (no curve), for the same memory method
        (:attr:`compute_scale_memory`, whose :attr:`memory_scale` ratios still apply)."""
        return replace(self, compute_scale=float(scale), compute_scale_curve=())

    def memory_ratio(self, method: str) -> float | None:
        """The compute scale of runs under ``method`` over the curve's
        (:func:`sarlab.simulator.hardware.allocators.memory_ratio`)."""
        return memory_ratio(self, method)

    def for_memory(self, method: str) -> Profile:
        """This profile priced for runs under memory method ``method``, a record's ``mem_method``
        (:func:`sarlab.simulator.hardware.allocators.for_memory`)."""
        return for_memory(self, method)

    def memory_label(self, method: str) -> str:
        """Which memory method priced a record run under ``method``, for tables
        (:func:`sarlab.simulator.hardware.allocators.memory_label`)."""
        return memory_label(self, method)

    def op(self, name: str) -> OpCost:
        """The cost of op family ``name``; ``gat_fused`` and ``gat_autograd`` fall back to ``gat_unfused``
        when not measured."""
        if name in OPTIONAL_OPS and name not in self.ops:
            return self.ops["gat_unfused"]
        return self.ops[name]

    def with_link_bandwidth(self, factor: float) -> Profile:
        """A copy with both links' bandwidth multiplied by ``factor`` (for sensitivity sweeps)."""
        return replace(self, inter_host=replace(self.inter_host, bandwidth_Bps=self.inter_host.bandwidth_Bps * factor),
                       intra_host=replace(self.intra_host, bandwidth_Bps=self.intra_host.bandwidth_Bps * factor))

    # ----------------------------------------------------------------------------------- JSON
    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form (what :func:`save_profile` writes)."""
        d = asdict(self)
        d["notes"] = list(self.notes)
        d["compute_scale_curve"] = [list(point) for point in self.compute_scale_curve]
        d["backends"] = {k: overlay_to_json(v) for k, v in self.backends.items()}
        if not self.backends:  # gloo only: written as before overlays existed
            del d["backends"]
        if not self.crowded_cpu:  # the same costs however many ranks a host runs: written as before
            del d["crowded_cpu"]
        if not self.memory_scale and self.compute_scale_memory == "rss":  # as fitted before the fields: as before
            del d["memory_scale"], d["compute_scale_memory"]
        if not self.family_scale:  # one compute scale for every family: written as before the field
            del d["family_scale"]
        if not self.first_use_memory:  # one first-use table for every method: written as before the field
            del d["first_use_memory"]
        d["format_version"] = PROFILE_FORMAT_VERSION
        d["units"] = dict(OP_UNITS)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Profile:
        """Inverse of :meth:`to_json`; unknown keys are ignored, missing optional ones take defaults."""
        version = d.get("format_version", PROFILE_FORMAT_VERSION)
        if version != PROFILE_FORMAT_VERSION:
            raise ValueError(f"profile format_version {version} is not supported (expected {PROFILE_FORMAT_VERSION})")
        ops = {k: OpCost(**v) for k, v in d["ops"].items()}
        for key in ("inter_host", "intra_host"):
            d[key] = {k: v for k, v in d[key].items() if k in ("latency_s", "bandwidth_Bps", "gap_s")}
        kwargs: dict[str, Any] = {
            "name": d["name"],
            "ops": ops,
            "inter_host": Link(**d["inter_host"]),
            "intra_host": Link(**d["intra_host"]),
            "cores_per_host": int(d["cores_per_host"]),
            "workers_per_host": int(d.get("workers_per_host", 0)),
            "p2p_call_s": float(d.get("p2p_call_s", 0.0)),
            "p2p_op_s": float(d.get("p2p_op_s", 0.0)),
            "p2p_wait_s": float(d.get("p2p_wait_s", 0.0)),
            "p2p_msg_cpu_s": float(d.get("p2p_msg_cpu_s", 0.0)),
            "round_jitter_s": float(d.get("round_jitter_s", 0.0)),
            "progress_spread": {int(k): float(v) for k, v in d.get("progress_spread", {}).items()},
            "p2p_cpu_s_per_byte": float(d.get("p2p_cpu_s_per_byte", 0.0)),
            "crowded_cpu": dict(d.get("crowded_cpu", {})),
            "mem_overhead_factor": float(d.get("mem_overhead_factor", 1.0)),
            "first_use_bytes": {k: float(v) for k, v in d.get("first_use_bytes", {}).items()},
            "transient_bytes": {k: float(v) for k, v in d.get("transient_bytes", {}).items()},
            "llc_bytes": float(d.get("llc_bytes", 0.0)),
            "mem_per_host_bytes": int(d.get("mem_per_host_bytes", 0)),
            "compute_scale": float(d.get("compute_scale", 1.0)),
            "compute_scale_curve": tuple(
                sorted((float(b), float(v)) for b, v in d.get("compute_scale_curve", ()))
            ),
            "compute_scale_key": str(d.get("compute_scale_key", "activation")),
            "compute_scale_memory": str(d.get("compute_scale_memory", "rss")),
            "memory_scale": {str(k): float(v) for k, v in d.get("memory_scale", {}).items()},
            "family_scale": {str(k): float(v) for k, v in d.get("family_scale", {}).items()},
            "first_use_memory": dict(d.get("first_use_memory", {})),
            "notes": tuple(d.get("notes", ())),
            "meta": dict(d.get("meta", {})),
            "backends": dict(d.get("backends", {})),
        }
        if "dtype_slowdown" in d:
            kwargs["dtype_slowdown"] = {k: float(v) for k, v in d["dtype_slowdown"].items()}
        return cls(**kwargs)


def save_profile(profile: Profile, path: str | Path) -> Path:
    """Write ``profile`` as JSON to ``path`` (parents created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(profile.to_json(), indent=2, sort_keys=True) + "\n")
    return path


def load_profile(spec: str | Path) -> Profile:
    """Load a profile from a JSON path or a preset name (``icelake-hdr200``, ``reference-laptop``)."""
    name = str(spec)
    if name in PRESETS:
        return PRESETS[name]()
    path = Path(name)
    if not path.exists():
        raise FileNotFoundError(
            f"profile {name!r} is neither a file nor a preset ({', '.join(sorted(PRESETS))}); "
            "run `sarlab calibrate --out PATH` to make one"
        )
    return Profile.from_json(json.loads(path.read_text()))


# --------------------------------------------------------------------------------------- presets
#: software cost of gloo exchanges, measured here (sarlab.real.calibration.commbench on 2, 4 and 8 ranks, 256-byte
#: messages,
#: main-thread CPU time, AMD EPYC VM 2026-11-23 under a 1-min load of 9-14 on 2 cores; fit_message_costs):
#: what the presets assume for torch.distributed's Python path on any machine
MEASURED_MESSAGE_COSTS = {"p2p_call_s": 28e-6, "p2p_op_s": 17e-6, "p2p_wait_s": 4e-6}
#: what :func:`icelake_hdr200` assumes, and where its message costs and jitter come from (the profile's ``notes``)
ICELAKE_NOTES = (
    "Assumed, not measured: Xeon Platinum 8360Y-class nodes (2 x 36 cores, 2.4 GHz, AVX-512).",
    "gemm: 60% of fp32 peak per core (2 FMA x 16 lanes x 2 FLOP x 2.4 GHz), 85% thread efficiency.",
    "memory: 2 x 204.8 GB/s DDR4-3200 theoretical, 70% sustained per node, 12 GB/s per core;",
    "sparse ops are capped by node bandwidth at ~8 B per edge*feature (sum), 32 B (max),",
    "64 B (unfused GAT; its streamed backward recomputes the attention: 3x the forward, autograd's 2x);",
    "each shard also rewrites its n x w state at 12 B per row*feature.",
    "network: HDR InfiniBand 200 Gb/s = 25 GB/s per direction, 80% effective; 5 us per message.",
    "one worker per node, all 72 cores as threads; 256 GB per node.",
    "message software (measured, not assumed): an exchange call 28 us + 17 us per op posted + 4 us per op "
    "waited: torch.distributed's Python path over gloo timed by sarlab.real.calibration.commbench on 2-8 "
    "ranks (AMD EPYC "
    "VM, 2026-11-23, main-thread CPU time; the same code runs on a cluster node whatever the transport).",
    "per-round jitter (assumed, order of magnitude): exponential delays of mean 20 us per exchange call. OS "
    "noise costs 0.5-2.5 % of run time on ASCI Q with detours up to ms (Petrini et al., SC 2003); 0.31 % "
    "daemon activity slowed an IBM SP's 4096-way allreduce from 710 us to 3 ms (Jones et al., SC 2003); a "
    "1 kHz timer tick costs microseconds per tick (Tsafrir et al., ICS 2005). The sensitivity sweep "
    "(results/cluster_claims/simulator_sensitivity.md) varies it from 0 to 1 ms.",
)


def icelake_hdr200() -> Profile:
    """The SAR paper's cluster: 2-socket Intel Icelake nodes, 256 GB each, HDR InfiniBand 200 Gb/s.

    Throughputs are assumptions (documented in ``notes``), not measurements: one worker per node with
    all of the node's cores.
    """
    cores = 72  # 2 sockets x 36 cores (SAR's README: "2 Icelake processors (36 cores each)")
    return Profile(
        name="icelake-hdr200",
        ops=_icelake_ops(cores),
        inter_host=Link(latency_s=5e-6, bandwidth_Bps=0.8 * 200e9 / 8),
        intra_host=Link(latency_s=1e-6, bandwidth_Bps=20e9),
        cores_per_host=cores,
        workers_per_host=1,
        p2p_call_s=MEASURED_MESSAGE_COSTS["p2p_call_s"],
        p2p_op_s=MEASURED_MESSAGE_COSTS["p2p_op_s"],
        p2p_wait_s=MEASURED_MESSAGE_COSTS["p2p_wait_s"],
        round_jitter_s=20e-6,
        mem_overhead_factor=1.0,
        mem_per_host_bytes=256 * 2**30,
        notes=ICELAKE_NOTES,
        meta={"machine": "SAR paper cluster (assumed figures)", "source": "preset"},
    )


def _icelake_ops(cores: int) -> dict[str, OpCost]:
    """The op costs :func:`icelake_hdr200` assumes for one worker with all ``cores`` of a node as threads: from the
    clock and vector units (``gemm``) and the memory bandwidth per core and per node (the rest), as
    :data:`ICELAKE_NOTES` says."""
    ghz = 2.4  # Xeon Platinum 8360Y-class base clock
    fp32_peak_per_core = ghz * 1e9 * 2 * 16 * 2  # 2 AVX-512 FMA units x 16 lanes x 2 FLOP
    # DDR4-3200, 8 channels per socket: 204.8 GB/s per socket theoretical; assume ~70 % sustained.
    node_stream_Bps = 2 * 204.8e9 * 0.7
    per_core_stream_Bps = 12e9  # one core's sustained stream bandwidth
    # Gathered aggregation reads a 4-byte feature per edge*feature plus index/output traffic: ~8 B each.
    per_core_spmm = per_core_stream_Bps / 8.0
    row_rate = per_core_stream_Bps / 12.0  # writing a new n x w state: read old + partial, write new (fp32)

    def eff_for_cap(per_core: float, node_cap: float) -> float:
        """Parallel efficiency at which ``cores`` threads reach ``node_cap``."""
        return max(0.0, min(1.0, (node_cap / per_core - 1.0) / (cores - 1)))

    return {
        "gemm": OpCost(rate=0.6 * fp32_peak_per_core, overhead_s=10e-6, bwd_ratio=2.0, parallel_eff=0.85),
        "spmm": OpCost(
            rate=per_core_spmm,
            overhead_s=20e-6,
            bwd_ratio=1.2,
            row_rate=row_rate,
            parallel_eff=eff_for_cap(per_core_spmm, node_stream_Bps / 8.0),
        ),
        "max_aggr": OpCost(
            rate=per_core_spmm / 4.0,
            overhead_s=100e-6,
            bwd_ratio=3.0,
            row_rate=row_rate / 4,
            parallel_eff=eff_for_cap(per_core_spmm / 4.0, node_stream_Bps / 32.0),
        ),
        "gat_unfused": OpCost(  # streamed torch kernels: the backward recomputes the attention first
            rate=per_core_spmm / 8.0,
            overhead_s=200e-6,
            bwd_ratio=3.0,
            row_rate=row_rate,
            parallel_eff=eff_for_cap(per_core_spmm / 8.0, node_stream_Bps / 64.0),
        ),
        "gat_autograd": OpCost(
            rate=per_core_spmm / 8.0,
            overhead_s=200e-6,
            bwd_ratio=2.0,
            row_rate=row_rate,
            parallel_eff=eff_for_cap(per_core_spmm / 8.0, node_stream_Bps / 64.0),
        ),
        "gat_fused": OpCost(
            rate=per_core_spmm / 1.5,
            overhead_s=30e-6,
            bwd_ratio=2.5,
            row_rate=row_rate,
            parallel_eff=eff_for_cap(per_core_spmm / 1.5, node_stream_Bps / 12.0),
        ),
        "elementwise": OpCost(
            rate=per_core_stream_Bps,
            overhead_s=5e-6,
            bwd_ratio=1.5,
            parallel_eff=eff_for_cap(per_core_stream_Bps, node_stream_Bps),
        ),
    }


def reference_laptop() -> Profile:
    """A round-number 2-core profile used when no calibrated profile exists (and by tests' examples).

    Every number is a plausible order of magnitude for one x86 core with PyTorch; calibrate for real use.
    """
    ops = {
        "gemm": OpCost(rate=50e9, overhead_s=10e-6, bwd_ratio=2.0, parallel_eff=0.9),
        "spmm": OpCost(rate=0.5e9, overhead_s=20e-6, bwd_ratio=1.2, parallel_eff=0.8, row_rate=0.4e9),
        "max_aggr": OpCost(rate=0.1e9, overhead_s=100e-6, bwd_ratio=3.0, parallel_eff=0.7, row_rate=0.1e9),
        "gat_unfused": OpCost(rate=0.08e9, overhead_s=300e-6, bwd_ratio=3.0, parallel_eff=0.7, row_rate=0.4e9),
        "gat_autograd": OpCost(rate=0.08e9, overhead_s=300e-6, bwd_ratio=2.0, parallel_eff=0.7, row_rate=0.4e9),
        "elementwise": OpCost(rate=5e9, overhead_s=5e-6, bwd_ratio=1.5, parallel_eff=0.5),
    }
    return Profile(
        name="reference-laptop",
        ops=ops,
        inter_host=Link(latency_s=50e-6, bandwidth_Bps=1e9),
        intra_host=Link(latency_s=50e-6, bandwidth_Bps=1e9),
        cores_per_host=2,
        workers_per_host=0,
        p2p_call_s=50e-6,
        notes=("Round-number placeholder; run `sarlab calibrate` for measured figures.",),
        meta={"source": "preset"},
    )


PRESETS = {"icelake-hdr200": icelake_hdr200, "reference-laptop": reference_laptop}
