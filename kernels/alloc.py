"""A counting CPU allocator for torch: peak live tensor bytes for free, and a bounded cache of large blocks.

Installed with :func:`install` (C++ extension, ``c10::SetCPUAllocator``), it adds the size of every CPU block
torch allocates to a live-byte counter and subtracts it at free; the peak of that counter since
:func:`reset_peak` is the peak of live tensor memory, at the cost of two atomic adds per allocation.

With ``cache=True`` freed blocks of 128 KiB and more are kept by size and reused by the next allocation they
fit (the smallest cached block at most 1/8 larger than the request; the reused block counts its whole size as
live), so an epoch that repeats the last one's shapes, or a ring round whose peer sends a few rows fewer than
another, touches resident pages instead of faulting in new ones. The cache is bounded so that live + cached
bytes never exceed the highest live bytes since installation (or since ``reset_peak(high_water=True)``, which a
run calls at its baseline, after emptying the cache): the resident set holds no more than the run's live peak
needs.

Blocks allocated before installation keep their own deleter and are not counted.
"""
from __future__ import annotations

from . import _loader

STAT_KEYS = ("live", "peak", "high_water", "cached", "allocations", "cache_hits", "cache_misses", "evictions")


def _extension():
    extension = _loader.extension()
    if extension is None:
        raise RuntimeError(f"the counting allocator needs the C++ kernel extension, which could not be built "
                           f"({_loader.extension_error()!r})")
    return extension


def available() -> bool:
    """Whether the extension (and with it the allocator) builds and loads here."""
    return _loader.extension() is not None


def install(cache: bool = True) -> bool:
    """Make the counting allocator torch's CPU allocator (again: only switches the cache); True if installed.

    Args:
        cache: keep freed blocks of 128 KiB and more for reuse (bounded by the live high-water mark).
    """
    return bool(_extension().alloc_install(cache))


def installed() -> bool:
    """Whether the counting allocator is torch's CPU allocator (False without the extension)."""
    extension = _loader.extension() if _loader.loaded_from() is not None else None
    return bool(extension is not None and extension.alloc_installed())


def stats() -> dict[str, int]:
    """Counters: ``live``, ``peak`` (since :func:`reset_peak`), ``high_water`` (since installation or the last
    ``reset_peak(high_water=True)``) and ``cached``
    bytes; ``allocations``, ``cache_hits``, ``cache_misses`` (allocations of cacheable size) and ``evictions``."""
    return dict(_extension().alloc_stats())


def live_bytes() -> int:
    """Bytes of the CPU blocks torch holds now (allocated since installation)."""
    return int(stats()["live"])


def peak_bytes() -> int:
    """The most live bytes since the last :func:`reset_peak`."""
    return int(stats()["peak"])


def reset_peak(high_water: bool = False) -> None:
    """Start a new peak at the current live bytes.

    Args:
        high_water: restart the high-water mark (the cache's bound) there too: a run's set-up can have
            needed more memory than its epochs will, and the cache should not keep that much.
    """
    _extension().alloc_reset_peak(high_water)


def empty_cache() -> None:
    """Free every cached block now."""
    _extension().alloc_empty_cache()
