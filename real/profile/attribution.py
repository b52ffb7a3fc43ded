"""What holds a worker's memory at its peak: a memray capture's allocations filed under headings by phase tag.

The engine runs its phases under :mod:`sarlab.core.phases` tags, so every allocation made during a phase has a
frame named ``phase:<tag>`` on its Python stack. An allocation alive at the capture's high-water mark is
filed by walking its stack from the innermost frame outwards:

1. the first frame that is a phase tag (heading from :data:`HEADING_OF_TAG`) or that a fallback rule
   names (:data:`FALLBACK_RULES`: code the engine does not tag) decides;
2. otherwise a frame of the layers, the aggregation or the loss (:data:`LOCAL_ACTIVATION_RULES`) makes it a
   ``local activation``;
3. otherwise it is ``other`` (metrics, threads without a Python stack, the launcher).

Renaming or wrapping an engine function therefore moves no memory between headings; only the tags do.
"""
from __future__ import annotations

import ast
import fnmatch
import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sarlab.common.paths import package_parent
from sarlab.core import phases

try:
    import memray
except ImportError:  # an optional dependency: only reading captures needs it
    memray = None

ROOT = package_parent()  # the directory holding the sarlab package
CATEGORIES = ("local activations", "remote rows", "attention tensors", "gradients", "graph structure",
              "optimizer state", "other")
NO_STACK = "<no Python stack>"
UNTAGGED = "(untagged)"

# The one place that says which heading a phase's memory belongs to (every tag of sarlab.core.phases.TAGS).
HEADING_OF_TAG = {
    "aggregation": "local activations",
    "remote_rows": "remote rows",
    "halo_exchange": "remote rows",  # oneshot's buffer holds [own rows; halo rows], all counted here
    "aggregation_backward": "gradients",
    "rematerialization": "gradients",
    "gradient_return": "gradients",
    "graph_structure": "graph structure",
}


@dataclass(frozen=True)
class Rule:
    """A frame matches when its short path and qualified function name match the globs."""

    category: str
    path: str
    name: str = "*"


# Code the engine does not tag (outside sarlab, or not yet tagged); tried frame by frame with the tags.
FALLBACK_RULES = (
    Rule("other", "<frozen importlib*"),  # modules imported lazily during training
    Rule("optimizer state", "torch/optim/*"),  # Adam's moments
    Rule("gradients", "torch/autograd/__init__.py"),  # torch.autograd.grad / backward ...
    Rule("gradients", "torch/autograd/graph.py", "_engine_run_backward"),  # ... and the engine they run
    Rule("gradients", "torch/_tensor.py", "backward"),
    Rule("attention tensors", "sarlab/nn/gat.py", "AttentionAggregation.*"),  # sarlab/nn/gat.py sets no tag
    Rule("attention tensors", "kernels/*", "gat_*"),  # fused attention kernels
    Rule("graph structure", "kernels/*", "csr_transpose"),  # CSC transposes the attention kernels cache
)
# Tried only when no frame of the stack is a tag or matches a fallback rule.
LOCAL_ACTIVATION_RULES = (
    Rule("local activations", "sarlab/nn/*"),
    Rule("local activations", "sarlab/core/aggregat*.py"),
    Rule("local activations", "sarlab/core/shards.py"),
    Rule("local activations", "kernels/*"),
    Rule("local activations", "sarlab/training/trainer.py", "Trainer.forward_backward"),  # the trainer sets no tag
)


@dataclass(frozen=True)
class Frame:
    """One stack frame: path relative to the repo (or to site-packages), qualified name, line."""

    path: str
    name: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line} {self.name}"


@dataclass(frozen=True)
class Site:
    """Memory alive at the peak attributed to one allocation site (the innermost sarlab frame)."""

    location: str
    category: str
    size_bytes: int
    allocations: int
    called_from: tuple[str, ...]
    tag: str = UNTAGGED


@dataclass
class RankProfile:
    """What one rank's capture says about its peak.

    Args:
        mode: aggregation mode of the run.
        rank: worker rank.
        capture: memray capture file.
        peak_bytes: bytes alive at memray's high-water mark (the sum over its records).
        memray_reported_peak_bytes: memray's own ``peak_memory`` field (equal to ``peak_bytes``).
        tracked_s: seconds between the start and the end of tracking.
        total_allocations: allocations recorded in the whole capture.
        categories: bytes alive at the peak per heading (sums to ``peak_bytes``).
        tags: bytes alive at the peak per innermost phase tag (``(untagged)`` for none; sums to ``peak_bytes``).
        sites: largest allocation sites at the peak, largest first.
        timeline: ``(seconds, heap bytes, rss bytes)`` snapshots.
        vmhwm_bytes: max over epochs of VmHWM minus the post-set-up RSS (from the metric records).
        flamegraph: HTML flamegraph path (empty if not written).
        summary: Markdown summary path (empty if not written).
    """

    mode: str
    rank: int
    capture: str
    peak_bytes: int
    memray_reported_peak_bytes: int
    tracked_s: float
    total_allocations: int
    categories: dict[str, int]
    tags: dict[str, int]
    sites: list[Site]
    timeline: list[tuple[float, int, int]] = field(default_factory=list)
    vmhwm_bytes: int | None = None
    flamegraph: str = ""
    summary: str = ""


# --- frames -----------------------------------------------------------------------------------------

def short_path(filename: str) -> str:
    """``filename`` relative to site-packages if installed there, else to the repository, else unchanged."""
    marker = "site-packages" + os.sep
    at = filename.rfind(marker)
    if at >= 0:
        return filename[at + len(marker):].replace(os.sep, "/")
    try:
        relative = os.path.relpath(filename, ROOT)
    except ValueError:
        return filename
    return filename if relative.startswith("..") else relative.replace(os.sep, "/")


def _in_repo(filename: str) -> bool:
    return "site-packages" + os.sep not in filename and filename.startswith(str(ROOT) + os.sep)


@functools.lru_cache(maxsize=256)
def _scopes(filename: str) -> tuple[tuple[int, int, str], ...]:
    """``(first line, last line, qualified name)`` of every function defined in a source file."""
    try:
        tree = ast.parse(Path(filename).read_text())
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return ()
    scopes = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    scopes.append((child.lineno, child.end_lineno or child.lineno, name))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return tuple(scopes)


def qualified_name(filename: str, line: int, function: str) -> str:
    """``Class.method`` (or ``outer.inner``) for a frame of a repository file; ``function`` elsewhere.

    memray records a code object's plain name; the enclosing class comes from the source file.
    """
    if not _in_repo(filename) or phases.tag_of_frame(function):
        return function
    enclosing = [s for s in _scopes(filename) if s[0] <= line <= s[1]]
    if not enclosing:
        return function
    best = max(enclosing, key=lambda s: s[0])[2]
    return best if best.rsplit(".", 1)[-1] == function else function  # source changed since the capture


def make_frame(function: str, filename: str, line: int) -> Frame:
    """A :class:`Frame` from memray's ``(function, filename, line)``."""
    return Frame(short_path(filename), qualified_name(filename, line, function), line)


# --- stacks -> headings -----------------------------------------------------------------------------

def _matches(rule: Rule, frame: Frame) -> bool:
    return fnmatch.fnmatchcase(frame.path, rule.path) and fnmatch.fnmatchcase(frame.name, rule.name)


def tag_of(frames: Sequence[Frame]) -> str:
    """The innermost phase tag on a stack (innermost frame first); :data:`UNTAGGED` if none."""
    for frame in frames:
        tag = phases.tag_of_frame(frame.name)
        if tag:
            return tag
    return UNTAGGED


def classify(frames: Sequence[Frame]) -> str:
    """The heading of an allocation from its stack (innermost frame first); see the module docstring."""
    for frame in frames:
        tag = phases.tag_of_frame(frame.name)
        if tag:
            return HEADING_OF_TAG[tag]
        for rule in FALLBACK_RULES:
            if _matches(rule, frame):
                return rule.category
    for frame in frames:
        for rule in LOCAL_ACTIVATION_RULES:
            if _matches(rule, frame):
                return rule.category
    return "other"


def _is_ours(frame: Frame) -> bool:
    return frame.path.startswith(("sarlab/", "kernels/", "real/")) and not phases.tag_of_frame(frame.name)


def site_of(frames: Sequence[Frame]) -> tuple[str, tuple[str, ...]]:
    """(innermost sarlab frame, up to three sarlab callers) of a stack; any frame if none is ours.

    Phase frames are skipped (the tag is reported on its own). An allocation made while importing a module
    is labelled ``import in <site>``.
    """
    ours = [i for i, f in enumerate(frames) if _is_ours(f)]
    if not ours:
        if not frames:
            return NO_STACK, ()
        return str(frames[0]), tuple(f"{f.name}:{f.line}" for f in frames[1:4])
    first = frames[ours[0]]
    importing = any(f.path.startswith("<frozen importlib") for f in frames[:ours[0]])
    callers = tuple(f"{frames[i].name}:{frames[i].line}" for i in ours[1:4])
    return ("import in " if importing else "") + str(first), callers


# --- captures ---------------------------------------------------------------------------------------

def _reader(path: str):
    if memray is None:
        raise ImportError("memory profiling needs memray: pip install memray")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"memray capture {path} is missing: did the worker run with memray_dir set?")
    return memray.FileReader(path)


def analyze_capture(path: str, mode: str = "", rank: int = 0, top: int = 10) -> RankProfile:
    """Read a memray capture: the allocations alive at its peak, by heading, by phase tag and by site.

    Args:
        path: ``rank{r}.bin`` written by a worker's ``memray.Tracker``.
        mode: aggregation mode (label only).
        rank: rank (label only).
        top: how many of the largest sites to keep.
    """
    categories = dict.fromkeys(CATEGORIES, 0)
    tags: dict[str, int] = {}
    sites: dict[tuple[str, str, str], list] = {}
    with _reader(path) as reader:
        meta = reader.metadata
        for record in reader.get_high_watermark_allocation_records(merge_threads=True):
            frames = [make_frame(*f) for f in record.stack_trace()]
            category, tag = classify(frames), tag_of(frames)
            categories[category] += record.size
            tags[tag] = tags.get(tag, 0) + record.size
            location, called_from = site_of(frames)
            entry = sites.setdefault((location, category, tag), [location, category, 0, 0, called_from, tag])
            entry[2] += record.size
            entry[3] += record.n_allocations
        snapshots = list(reader.get_memory_snapshots())
    timeline = []
    if snapshots:
        start = snapshots[0].time
        timeline = [((s.time - start) / 1000.0, int(s.heap), int(s.rss)) for s in snapshots]
    ranked = sorted(sites.values(), key=lambda e: -e[2])[:top]
    return RankProfile(
        mode=mode, rank=rank, capture=path, peak_bytes=sum(categories.values()),
        memray_reported_peak_bytes=int(meta.peak_memory),
        tracked_s=(meta.end_time - meta.start_time).total_seconds(), total_allocations=int(meta.total_allocations),
        categories=categories, tags=dict(sorted(tags.items(), key=lambda item: -item[1])),
        sites=[Site(e[0], e[1], e[2], e[3], e[4], e[5]) for e in ranked], timeline=timeline)

