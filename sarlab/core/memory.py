"""Per-process peak-memory measurement: live tensor bytes from a counting allocator, or the RSS high-water mark.

Two methods (:data:`METHODS`), chosen once per process with :func:`use_method` before any tensor is made:

* ``live`` (the default of workers): torch's CPU allocator is replaced by a counting one
  (:mod:`sarlab.kernels.alloc`); the peak is the most live tensor bytes. It costs two atomic adds per allocation, so
  large freed blocks can be kept for reuse (a cache bounded by the run's live peak) instead of being
  unmapped and faulted in afresh every time. Non-tensor memory (gloo buffers, Python objects, index arrays
  held by numpy) is not counted: on the engine's workloads it is 1-4 % of the peak above the baseline.
* ``rss``: the kernel's resident-set high-water mark (VmHWM, reset per epoch through ``clear_refs``) with
  glibc's mmap/trim thresholds fixed low (:func:`tune_malloc`) so that freed tensors leave the resident set
  at once. Exact for everything the process touches, but every large tensor is then page-faulted and zeroed
  anew. The simulator's memory model was validated against records of this method; it predicts live bytes
  plus the allocator's slack, which is what both methods measure on the engine's workloads.

:func:`peak_bytes` and :func:`reset_peak` follow the method in effect; a ``live`` peak is reported on the
RSS scale (the baseline's RSS plus the live bytes above the baseline's live bytes), so
``peak - baseline`` means the same under both methods.
"""
from __future__ import annotations

import ctypes
import logging
import os
import warnings

from sarlab import kernels

_log = logging.getLogger(__name__)

_STATUS = "/proc/self/status"
METHODS = ("live", "rss")


class _LiveScale:
    """RSS minus live bytes at the last baseline (:func:`baseline_bytes`): puts live peaks on the RSS scale."""

    offset = 0


def _status_kib(field: str) -> int | None:
    try:
        with open(_STATUS) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_bytes() -> int:
    """Current resident set size (VmRSS) in bytes (0 where /proc is unavailable)."""
    kib = _status_kib("VmRSS")
    return 0 if kib is None else kib * 1024


def vmhwm_bytes() -> int:
    """Peak resident set size since the last reset (VmHWM) in bytes, whatever the method (0 without /proc)."""
    kib = _status_kib("VmHWM")
    return 0 if kib is None else kib * 1024


def method() -> str:
    """The peak-memory method in effect in this process: ``live`` once the counting allocator is installed,
    else ``rss``."""
    return "live" if kernels.alloc.installed() else "rss"


def use_method(name: str = "live", cache: bool = True) -> str:
    """Set this process up for peak-memory method ``name`` (call before any tensor is made); returns the method
    in effect.

    Both fix glibc's thresholds (:func:`tune_malloc`). ``live`` installs the counting allocator, with the
    bounded block cache when ``cache``; where the C++ extension cannot be built it warns and stays ``rss``.
    The allocator cannot be taken out again: ``rss`` after ``live`` in one process raises.

    Args:
        name: ``live`` or ``rss``.
        cache: with ``live``: reuse large freed blocks (live + cached bytes stay under the live peak).
    """
    if name not in METHODS:
        raise ValueError(f"unknown memory method {name!r}: choose one of {', '.join(METHODS)}")
    tune_malloc()
    if name == "rss":
        if method() == "live":
            raise RuntimeError("the counting allocator is installed in this process; rss needs a fresh process")
        return "rss"
    if not kernels.alloc.available():
        if isinstance(kernels.extension_error(), kernels.BuildPending):  # the first run, while they build
            _log.info("memory measured as RSS: the live method needs the C++ kernels, not built yet")
        else:
            warnings.warn(f"memory method live needs the C++ kernels ({kernels.extension_error()!r}); using rss",
                          stacklevel=2)
        return "rss"
    kernels.alloc.install(cache=cache)
    _LiveScale.offset = rss_bytes() - kernels.alloc.live_bytes()
    return method()


def baseline_bytes() -> int:
    """The resident set now (a run's baseline, taken after set-up); under ``live`` also the reference the
    following live peaks are measured from.

    Under ``live`` the block cache is emptied first and its bound restarts at the live bytes now, so that
    neither the baseline nor the cache holds what only the set-up needed.
    """
    if method() != "live":
        return rss_bytes()
    kernels.alloc.empty_cache()
    kernels.alloc.reset_peak(high_water=True)
    rss = rss_bytes()
    _LiveScale.offset = rss - kernels.alloc.live_bytes()
    return rss


def peak_bytes() -> int:
    """Peak memory since the last :func:`reset_peak`: VmHWM under ``rss``; under ``live`` the peak of live bytes
    on the RSS scale (the last baseline's RSS plus the live bytes above the baseline's live bytes)."""
    if method() == "live":
        return _LiveScale.offset + kernels.alloc.peak_bytes()
    return vmhwm_bytes()


def reset_peak() -> bool:
    """Start a new peak: VmHWM back to the current RSS (``echo 5 > /proc/self/clear_refs``) and, under ``live``,
    the live peak back to the live bytes. False if the method's reset is not permitted here."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        cleared = True
    except OSError:
        cleared = False
    if method() == "live":
        kernels.alloc.reset_peak()
        return True
    return cleared


def _glibc():
    """glibc through ctypes, or None where there is none (macOS, musl)."""
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def tune_malloc(threshold: int = 1 << 17) -> bool:
    """Fix glibc's mmap and trim thresholds so freed large blocks go back to the OS at once.

    Without this glibc raises its mmap threshold dynamically and keeps freed tensors cached in the heap,
    and the RSS high-water mark would count memory that is no longer live.
    """
    libc = _glibc()
    if libc is None:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(libc.mallopt(m_mmap_threshold, threshold)) and bool(libc.mallopt(m_trim_threshold, threshold))


def trim_malloc() -> bool:
    """Return the heap's free pages to the OS now (glibc ``malloc_trim(0)``), so that a following peak reading
    is not lowered by pages an earlier operation freed and the next one reuses; False without glibc."""
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


def memray_tracker(path: str):
    """A ``memray.Tracker`` writing to ``path`` (memray is an optional test/profiling dependency)."""
    try:
        import memray
    except ImportError as err:
        raise ImportError("memory profiling needs memray: pip install memray") from err
    if os.path.exists(path):
        os.remove(path)
    return memray.Tracker(path)
