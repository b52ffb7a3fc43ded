"""A profile priced for the memory method (allocator) a run used: its compute scale and its first-use bytes.

Workers measure their peak under ``live`` (the counting allocator, whose block cache hands freed blocks back: large
tensors land on pages already touched) or ``rss`` (glibc with the engine's thresholds: every large tensor on fresh
pages, whose first-touch faults every op pays). A calibrated profile says

* which method its compute-scale curve was fitted under (``compute_scale_memory``; the op microbenchmarks run under
  ``rss``);
* the other method's ratio to the curve (``memory_scale``: ``rss`` over ``live`` epochs of one-thread engine runs of
  the same graphs);
* the resident bytes each op family adds on first use under each method (``first_use_memory``: the memory probe run
  under each; ``first_use_bytes`` is the method-less value older profiles hold).

A record is priced with :func:`for_memory` of its method. The ratio is measured on one-thread ranks and priced as a
multiplier whatever the threads: the page faults of ``rss`` go through the process's one memory map, so a rank of
several threads pays more than ``r`` (measured here: 2.2-2.5 for two threads against 1.3-1.6 for one), which this
module does not model yet.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

#: imported by :mod:`sarlab.simulator.hardware.profile`, importing nothing of it: a profile is any object with its
#: fields
Profile = Any


def memory_ratio(profile: Profile, method: str) -> float | None:
    """The compute scale of runs under ``method`` over the curve's (:attr:`compute_scale_memory`): 1 for the curve's
    own (or an empty ``method``), :attr:`memory_scale`'s ratio, or None where the profile does not know it."""
    if not method or method == profile.compute_scale_memory:
        return 1.0
    return profile.memory_scale.get(method)


def for_memory(profile: Profile, method: str) -> Profile:
    """``profile`` priced for runs under ``method`` (a record's ``mem_method``; empty: the profile as it is).

    First-use bytes: the method's own where the profile measured them (:attr:`first_use_memory`). Compute: the scale
    and its curve times :func:`memory_ratio`, the ratios restated relative to ``method``; unchanged where the ratio
    is 1 or unknown (priced as the curve's method)."""
    if not method:
        return profile
    first_use = profile.first_use_memory.get(method)
    if first_use is not None and first_use != profile.first_use_bytes:
        profile = replace(profile, first_use_bytes=dict(first_use))
    ratio = memory_ratio(profile, method)
    if ratio is None or method == profile.compute_scale_memory:
        return profile
    others = {k: v / ratio for k, v in profile.memory_scale.items() if k != method}
    return replace(profile, compute_scale=profile.compute_scale * ratio,
                   compute_scale_curve=tuple((b, v * ratio) for b, v in profile.compute_scale_curve),
                   compute_scale_memory=method, memory_scale={**others, profile.compute_scale_memory: 1.0 / ratio})


def memory_label(profile: Profile, method: str) -> str:
    """Which memory method priced a record run under ``method``, for tables: ``rss`` (the curve's own),
    ``rss = live x 2.30`` (the curve of ``live`` times its ratio), ``rss as live`` (no ratio known: priced as the
    curve's method)."""
    ratio = memory_ratio(profile, method)
    own = profile.compute_scale_memory
    if not method or method == own:
        return own
    return f"{method} as {own}" if ratio is None else f"{method} = {own} x {ratio:.2f}"


def ratio_note(profile: Profile, methods: list[str]) -> str | None:
    """A warning where records ran under a method that ``profile`` prices through its :attr:`memory_scale` ratio
    (``methods``: the records' ``mem_method`` values), else None. The ratio was measured once, on the calibration's
    day, and the fault-paying side drifts: ``rss`` over ``live`` epochs read 1.5-2.3 on different days of one
    shared 2-core VM (results/host_model/shipped_profile)."""
    through = sorted({m for m in methods if m and m != profile.compute_scale_memory
                      and memory_ratio(profile, m) is not None})
    if not through:
        return None
    said = ", ".join(memory_label(profile, m) for m in through)
    day = profile.meta.get("date", "the day of the calibration")
    return (f"records under {', '.join(through)} are priced through one ratio ({said}) measured on {day}; it drifts "
            "from day to day on a shared machine, so predict such runs with a calibration of their own day")


def checked_first_use(value: dict) -> dict[str, dict[str, float]]:
    """``{method: {family: bytes}}`` as floats; raises ValueError for a negative or non-finite byte count."""
    out = {str(m): {str(k): float(v) for k, v in fams.items()} for m, fams in (value or {}).items()}
    if any(not (v >= 0.0 and v < float("inf")) for fams in out.values() for v in fams.values()):
        raise ValueError(f"first_use_memory takes byte counts >= 0 per method and family, got {value}")
    return out
