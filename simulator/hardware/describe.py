"""A machine described rather than calibrated: a calibrated profile plus the named differences of another host.

``sarlab simulate --profile describe:cores=16,gemm=2x,membw=120,net=100`` (or ``describe:SPEC.json`` holding the
same keys) prices a host that was never calibrated from one that was (``base=``, default this machine's own
calibration) and what is said to differ:

* ``cores``: the host's cores (``cores_per_host``). Thread speed-ups measured on the base up to its cores carry
  over; beyond them each family's table goes on at the efficiency of its last measured segment (a base measured on
  one core has none: :data:`ASSUMED_THREAD_EFF`, stated in the profile's notes). The progress spread measured with
  ``k`` single-thread ranks on the base's ``C_b`` cores is kept at the same crowding, ``k C / C_b`` ranks.
* ``eff``: the parallel efficiency of each thread beyond the base's cores, in (0, 1], for every family (instead of
  the last measured segment's, or the assumed ones): ``s(T) = s_b(C_b) + (T - C_b) eff``. What a user knows of the
  described host's scaling (a vendor's figures, a measurement there) and the base could not measure.
* ``gemm``: GEMM FLOP/s of one core, absolute (``1.2e11``) or relative to the base (``2x``).
* ``membw``: the host's memory bandwidth in GB/s, or relative (``2x``) to what the base's elementwise benchmark
  reached on all its cores (:func:`base_bandwidth`). The memory-bound families' speed-ups stop at the thread count
  whose elementwise traffic fills it: :math:`s(T) \\le B / r_{elementwise}` (all of them assumed to bind where
  elementwise streaming does). Without ``membw`` no family is capped beyond what the base measured.
* ``net``: the inter-host link, Gbit/s per direction (latency and per-message gap stay the base's), or ``2x``.

Everything else (per-op costs on one core, memory, message software, the compute scale) is the base's.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from sarlab.simulator.hardware.opcost import OpCost
from sarlab.simulator.hardware.profile import Profile

PREFIX = "describe:"
KEYS = ("base", "cores", "eff", "gemm", "membw", "net")
#: families whose speed-up the memory bandwidth caps (``gemm`` is compute-bound)
MEMORY_BOUND = ("spmm", "max_aggr", "gat_unfused", "gat_fused", "gat_autograd", "elementwise")
#: thread efficiency assumed where the base was calibrated on one core (nothing measured), per family; stated in
#: the described profile's notes
ASSUMED_THREAD_EFF = {"gemm": 0.85, "elementwise": 0.7}
DEFAULT_ASSUMED_EFF = 0.8


def parse_spec(spec: str) -> dict[str, str]:
    """The ``key=value`` pairs of ``describe:...`` (or of the JSON file it names); raises ValueError naming an
    unknown key or a malformed pair."""
    body = spec[len(PREFIX):] if spec.startswith(PREFIX) else spec
    if body and "=" not in body:
        path = Path(body)
        if not path.exists():
            raise ValueError(f"describe: {body!r} is neither key=value pairs nor a JSON file")
        fields = {str(k): str(v) for k, v in json.loads(path.read_text()).items()}
    else:
        fields = {}
        for pair in filter(None, body.split(",")):
            key, eq, value = pair.partition("=")
            if not eq or not value:
                raise ValueError(f"describe: {pair!r} is not key=value (keys: {', '.join(KEYS)})")
            fields[key.strip()] = value.strip()
    unknown = sorted(set(fields) - set(KEYS))
    if unknown:
        raise ValueError(f"describe: unknown key(s) {unknown}; known: {', '.join(KEYS)}")
    return fields


def _amount(value: str, base: float, unit: float) -> float:
    """``2x`` -> ``2 base``; a number -> ``number * unit``."""
    v = value.lower()
    out = float(v[:-1]) * base if v.endswith("x") else float(v) * unit
    if not out > 0:
        raise ValueError(f"describe: {value!r} must be positive")
    return out


def base_bandwidth(profile: Profile) -> float:
    """Bytes per second the base's elementwise benchmark moved on all its cores (its memory bandwidth, as far as
    that benchmark reaches it)."""
    elem = profile.op("elementwise")
    return elem.rate * elem.speedup(profile.cores_per_host)


def _speedups(cost: OpCost, name: str, base_cores: int, cores: int, cap: float | None,
              eff: float | None = None) -> tuple:
    """The described host's speed-up table of one family at 1, 2, 4, ... ``cores`` threads; ``eff``: the efficiency
    of the threads beyond ``base_cores`` (None: the base's last segment, or the assumed one for a one-core base)."""
    if eff is None and base_cores <= 1:
        eff = ASSUMED_THREAD_EFF.get(name, DEFAULT_ASSUMED_EFF)
    known = max(1, base_cores)
    counts, t = [], 2
    while t < cores:
        counts.append(t)
        t *= 2
    table = []
    for t in counts + ([cores] if cores > 1 else []):
        if eff is not None and t > known:
            s = cost.speedup(known) + (t - known) * eff
        else:
            s = cost.speedup(t)
        table.append((float(t), min(s, cap) if cap is not None else s))
    return tuple(table)


def describe_profile(spec: str, resolve: Any) -> Profile:
    """The profile ``spec`` describes (module docstring); ``resolve(name)`` loads the base (``None``: this machine's
    own calibration), as :func:`sarlab.simulator.hardware.provenance.resolve_profile` does."""
    fields = parse_spec(spec)
    base, source = resolve(fields.get("base"))
    cores = int(fields.get("cores", base.cores_per_host))
    if cores < 1:
        raise ValueError(f"describe: cores must be >= 1, got {cores}")
    gemm = base.op("gemm")
    gemm_rate = _amount(fields["gemm"], gemm.rate, 1.0) if "gemm" in fields else gemm.rate
    elem_rate = base.op("elementwise").rate
    bw = _amount(fields["membw"], base_bandwidth(base), 1e9) if "membw" in fields else None
    cap = max(1.0, bw / elem_rate) if bw is not None else None
    eff = float(fields["eff"]) if "eff" in fields else None
    if eff is not None and not 0.0 < eff <= 1.0:
        raise ValueError(f"describe: eff is a parallel efficiency in (0, 1], got {fields['eff']!r}")
    ops = {}
    for name, cost in base.ops.items():
        table = _speedups(cost, name, base.cores_per_host, cores, cap if name in MEMORY_BOUND else None, eff)
        ops[name] = replace(cost, speedups=table, colocation=(),
                            rate=gemm_rate if name == "gemm" else cost.rate)
    inter = base.inter_host
    if "net" in fields:
        inter = replace(inter, bandwidth_Bps=_amount(fields["net"], inter.bandwidth_Bps, 1e9 / 8))
    ratio = cores / base.cores_per_host
    spread = {max(1, round(k * ratio)): v for k, v in base.progress_spread.items()}
    notes = [f"described, not calibrated: {spec} from {source} ({base.cores_per_host} cores)"]
    if eff is not None and cores > base.cores_per_host:
        notes.append(f"thread efficiency {eff:g} beyond the base's {base.cores_per_host} core(s), as described")
    elif base.cores_per_host <= 1 and cores > 1:
        notes.append(f"thread efficiencies assumed (the base measured one core): {ASSUMED_THREAD_EFF}, others "
                     f"{DEFAULT_ASSUMED_EFF}")
    if cap is not None:
        notes.append(f"memory-bound families capped at x{cap:.2f} one thread's speed ({bw / 1e9:.1f} GB/s)")
    meta = {**base.meta, "source": "describe", "describe": fields, "base_cores": base.cores_per_host}
    return replace(base, name=f"described-{cores}core", ops=ops, cores_per_host=cores, inter_host=inter,
                   progress_spread=spread, notes=(*notes, *base.notes), meta=meta)
