"""Per-process peak-memory measurement from /proc (tracemalloc cannot see torch tensors)."""
from __future__ import annotations

import os

_STATUS = "/proc/self/status"


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


def peak_bytes() -> int:
    """Peak resident set size since the last :func:`reset_peak` (VmHWM) in bytes."""
    kib = _status_kib("VmHWM")
    return 0 if kib is None else kib * 1024


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS (``echo 5 > /proc/self/clear_refs``); False if not permitted."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def tune_malloc(threshold: int = 1 << 17) -> bool:
    """Fix glibc's mmap and trim thresholds so freed large blocks go back to the OS at once.

    Without this glibc raises its mmap threshold dynamically and keeps freed tensors cached in the heap,
    and the RSS high-water mark would count memory that is no longer live.
    """
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(libc.mallopt(m_mmap_threshold, threshold)) and bool(libc.mallopt(m_trim_threshold, threshold))


def memray_tracker(path: str):
    """A ``memray.Tracker`` writing to ``path`` (memray is an optional test/profiling dependency)."""
    try:
        import memray
    except ImportError as err:
        raise ImportError("memory profiling needs memray: pip install memray") from err
    if os.path.exists(path):
        os.remove(path)
    return memray.Tracker(path)
