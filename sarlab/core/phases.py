"""Named engine phases that memory profiles can see: each phase runs inside a frame named ``phase:<tag>``.

memray records Python stacks only, so a phase is visible in an allocation's stack only if some frame on it
carries the phase's name. A ``with`` block adds no frame, so instead the engine runs a phase's body through
:func:`run` (``phases.run("rematerialization", agg.shard_vjp, ...)``) or marks a function whose whole body
is one phase with :func:`tagged`. Either way the body runs one call deeper, inside a function whose code
object is named ``phase:<tag>``; every allocation made during the phase (by the body or anything it calls)
then has that frame on its stack, whatever the body's functions are called. ``sarlab profile`` files
memory by the innermost such frame (:func:`tag_of_frame`).

Cost: one (:func:`tagged`) or two (:func:`run`) extra Python calls per phase, whether or not a profiler
runs; no global state changes and nothing is recorded. The tags are fixed here, so a misspelt tag fails
at import (:func:`tagged`) or at the call (:func:`run`).
"""
from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

FRAME_PREFIX = "phase:"

TAGS: Mapping[str, str] = types.MappingProxyType({
    "aggregation": "forward aggregation over shards: running state, messages, output",
    "remote_rows": "a ring round's rows: the gather sent to a peer and the buffer its rows arrive in",
    "halo_exchange": "oneshot's [own rows; halo rows] buffer and the gathers sent to every peer",
    "aggregation_backward": "an aggregation's backward: gradient buffers, case 1's A^T g, the local shard's VJP",
    "rematerialization": "case 2 backward: one remote shard's contribution rebuilt under autograd and differentiated",
    "gradient_return": "source-row gradients sent back to their owners and the buffers theirs arrive in",
    "graph_structure": "CSR matrices, transposes and oneshot's merged shard, built lazily and cached",
})

F = TypeVar("F", bound=Callable[..., Any])


def _check(tag: str) -> None:
    if tag not in TAGS:
        raise ValueError(f"unknown phase tag {tag!r}: add it to sarlab.core.phases.TAGS (and a heading in "
                         f"real/profile/attribution.py) or use one of {', '.join(TAGS)}")


def _renamed(code: types.CodeType, name: str) -> types.CodeType:
    fields = {"co_name": name}
    if hasattr(code, "co_qualname"):  # Python >= 3.11
        fields["co_qualname"] = name
    return code.replace(**fields)


def _runner(tag: str) -> Callable[..., Any]:
    def phase(fn, /, *args, **kwargs):
        return fn(*args, **kwargs)

    phase.__code__ = _renamed(phase.__code__, FRAME_PREFIX + tag)
    return phase


_RUNNERS = types.MappingProxyType({tag: _runner(tag) for tag in TAGS})


def run(tag: str, fn: Callable[..., Any], /, *args, **kwargs) -> Any:
    """``fn(*args, **kwargs)`` called inside a frame named ``phase:<tag>``.

    Args:
        tag: one of :data:`TAGS`.
        fn: the phase's body.
    """
    if tag not in _RUNNERS:
        _check(tag)
    return _RUNNERS[tag](fn, *args, **kwargs)


def tagged(tag: str) -> Callable[[F], F]:
    """Decorator: every call of the function runs inside a frame named ``phase:<tag>``.

    The wrapper keeps the function's name, docstring and signature (``__wrapped__``); only its code
    object carries the tag. Generator functions are refused: their body would run after the call returns,
    outside the tagged frame.

    Args:
        tag: one of :data:`TAGS`.
    """
    _check(tag)

    def decorate(fn: F) -> F:
        if inspect.isgeneratorfunction(fn) or inspect.iscoroutinefunction(fn):
            raise TypeError(f"phases.tagged({tag!r}) cannot tag {fn.__qualname__}: its body runs after the call "
                            f"returns; tag the function that does the work instead")

        def phase(*args, **kwargs):
            return fn(*args, **kwargs)

        phase.__code__ = _renamed(phase.__code__, FRAME_PREFIX + tag)
        return functools.update_wrapper(phase, fn)

    return decorate


def tag_of_frame(function_name: str) -> str | None:
    """The tag of a stack frame named by :func:`run` or :func:`tagged` (``phase:remote_rows`` ->
    ``remote_rows``); None for any other frame."""
    if function_name.startswith(FRAME_PREFIX):
        tag = function_name[len(FRAME_PREFIX):]
        return tag if tag in TAGS else None
    return None
