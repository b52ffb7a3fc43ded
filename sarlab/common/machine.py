"""Facts about the machine a measurement ran on (CPU model, usable cores, load, the date) and how this process was
started (:func:`under_torchrun`).

Every measured record, figure banner and calibrated profile names its machine through these functions, so
that records from different CPUs are never compared without a warning.
"""
from __future__ import annotations

import datetime
import os
import platform


def cpu_model() -> str:
    """The CPU model name from ``/proc/cpuinfo`` (``platform.processor()`` as a fallback)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def load_1min() -> float:
    """The 1-minute load average (NaN where the OS has none)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def load_averages() -> str:
    """The 1-, 5- and 15-minute load averages as ``/proc/loadavg`` writes them (``''`` where the OS has none)."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return ""


def today() -> str:
    """Today's date in UTC, ``YYYY-MM-DD``."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")


def under_torchrun() -> bool:
    """True in a process that torchrun (or another env:// launcher) started: ``RANK``, ``WORLD_SIZE`` and
    ``MASTER_ADDR`` set."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR"))
