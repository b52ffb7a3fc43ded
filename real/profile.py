"""``sarlab profile``: memray captures per rank, flamegraphs, and what holds the memory at the peak per mode.

Every worker runs under ``memray.Tracker`` (see ``Job.memray_dir``) from after set-up to the end of
training. For each capture this module reads the allocations alive at the heap's high-water mark,
names the sarlab function behind each one by walking its Python stack (innermost frame first) and
files it under a category:

* ``remote rows``: buffers filled by ``ring_fetch`` (sar/sa rounds) or ``HaloExchange`` (oneshot halo);
* ``attention tensors``: GAT attention state and per-edge tensors (``AttentionAggregation``, kernels);
* ``gradients``: anything allocated by autograd's backward, ``GradReturn``, ``*.backward``, ``*_vjp``;
* ``graph structure``: CSR matrices and transposes that shards build lazily and cache;
* ``optimizer state``: Adam moments (``torch/optim``);
* ``local activations``: the rest of the model's forward (layers, aggregation outputs, loss);
* ``other``: modules imported during training, and allocations with no sarlab frame (metrics,
  threads without a Python stack).

The report puts memray's peak (heap bytes allocated while tracking) beside the metric records' peak
(VmHWM minus the post-set-up RSS), which counts resident pages, including the allocator's slack,
thread stacks, and memray's own buffers.
"""
from __future__ import annotations

import argparse
import ast
import base64
import fnmatch
import functools
import html
import io
import linecache
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from sarlab.config import MODES, EngineConfig
from sarlab.nn.model import ModelConfig
from sarlab.train import TrainConfig

ROOT = Path(__file__).resolve().parent.parent
CATEGORIES = ("local activations", "remote rows", "attention tensors", "gradients", "graph structure",
              "optimizer state", "other")
DEFAULT_GRAPH = "synthetic:nodes=3000,degree=10,features=32,classes=8,seed=0"
NO_STACK = "<no Python stack>"


@dataclass(frozen=True)
class Rule:
    """A frame matches when its short path and qualified function name match the globs.

    ``line_contains``: also require this text in the frame's source line (used to tell the gradient
    statements of ``Trainer.forward_backward`` from its forward statements).
    """

    category: str
    path: str
    name: str
    line_contains: str | None = None


# Specific rules: the innermost frame that matches any of them decides the category.
SPECIFIC_RULES = (
    Rule("other", "<frozen importlib*", "*"),  # modules imported lazily during training
    Rule("remote rows", "sarlab/aggregate.py", "ring_fetch*"),
    Rule("remote rows", "sarlab/aggregate.py", "HaloExchange.forward"),
    Rule("gradients", "sarlab/aggregate.py", "GradReturn.*"),
    Rule("gradients", "sarlab/aggregate.py", "HaloExchange.backward"),
    Rule("graph structure", "sarlab/shards.py", "Shard.matrix"),
    Rule("graph structure", "sarlab/shards.py", "Shard.transpose_index"),
    Rule("graph structure", "sarlab/shards.py", "ShardedGraph.merged_shard"),
    Rule("graph structure", "kernels/*", "csr_transpose"),
    Rule("attention tensors", "sarlab/nn/gat.py", "AttentionAggregation.*"),
    Rule("attention tensors", "kernels/*", "gat_*"),
    Rule("attention tensors", "kernels/gat.py", "GATFusedFunction.*"),
    Rule("optimizer state", "torch/optim/*", "*"),
    Rule("gradients", "sarlab/*", "*.backward"),
    Rule("gradients", "sarlab/*", "*.backward.*"),
    Rule("gradients", "sarlab/*", "*._backward*"),
    Rule("gradients", "sarlab/*", "*vjp*"),
    Rule("gradients", "kernels/*", "*backward*"),
    Rule("gradients", "torch/autograd/*", "*backward*"),
    Rule("gradients", "torch/autograd/__init__.py", "grad"),
    Rule("gradients", "torch/_tensor.py", "backward"),
    Rule("gradients", "sarlab/train.py", "Trainer.forward_backward", line_contains="grad"),
)
# Generic rules, tried only when no specific rule matched any frame of the stack.
FORWARD_RULES = (
    Rule("local activations", "sarlab/nn/*", "*"),
    Rule("local activations", "sarlab/aggregate*.py", "*"),
    Rule("local activations", "sarlab/shards.py", "*"),
    Rule("local activations", "kernels/*", "*"),
    Rule("local activations", "sarlab/train.py", "Trainer.forward_backward"),
)


@dataclass(frozen=True)
class Frame:
    """One stack frame: path relative to the repo (or to site-packages), qualified name, line."""

    path: str
    name: str
    line: int
    source: str = ""

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
        categories: bytes alive at the peak per category (sums to ``peak_bytes``).
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
    sites: list[Site]
    timeline: list[tuple[float, int, int]] = field(default_factory=list)
    vmhwm_bytes: int | None = None
    flamegraph: str = ""
    summary: str = ""


@dataclass
class ProfileResult:
    """All ranks of all profiled modes, with the run's settings and output paths."""

    settings: dict
    ranks: list[RankProfile]
    report_md: str = ""
    report_html: str = ""
    figures: list[str] = field(default_factory=list)

    def modes(self) -> list[str]:
        return list(dict.fromkeys(r.mode for r in self.ranks))

    def of(self, mode: str) -> list[RankProfile]:
        return sorted((r for r in self.ranks if r.mode == mode), key=lambda r: r.rank)

    def to_json(self) -> dict:
        """Plain data for ``--json`` (timelines left out; they are in the figures)."""
        ranks = []
        for r in self.ranks:
            d = asdict(r)
            d.pop("timeline")
            ranks.append(d)
        return {"settings": self.settings, "categories": list(CATEGORIES), "ranks": ranks,
                "report_md": self.report_md, "report_html": self.report_html, "figures": self.figures}


# --- stacks -> categories ---------------------------------------------------------------------------

def short_path(filename: str) -> str:
    """``filename`` relative to site-packages if installed there, else to the repository, else unchanged."""
    marker = "site-packages" + os.sep
    at = filename.rfind(marker)
    if at >= 0:
        return filename[at + len(marker):].replace(os.sep, "/")
    try:
        rel = os.path.relpath(filename, ROOT)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel.replace(os.sep, "/")


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
    """``Class.method`` (or ``outer.inner``) for a frame of a repository file; ``function`` elsewhere."""
    if not _in_repo(filename):
        return function
    enclosing = [s for s in _scopes(filename) if s[0] <= line <= s[1]]
    if not enclosing:
        return function
    best = max(enclosing, key=lambda s: s[0])[2]
    return best if best.rsplit(".", 1)[-1] == function else function  # source changed since the capture


def make_frame(function: str, filename: str, line: int) -> Frame:
    """A :class:`Frame` from memray's ``(function, filename, line)``."""
    path = short_path(filename)
    source = linecache.getline(filename, line).strip() if path.startswith(("sarlab/", "kernels/")) else ""
    return Frame(path, qualified_name(filename, line, function), line, source)


def _matches(rule: Rule, frame: Frame) -> bool:
    if not fnmatch.fnmatchcase(frame.path, rule.path) or not fnmatch.fnmatchcase(frame.name, rule.name):
        return False
    return rule.line_contains is None or rule.line_contains in frame.source


def classify(frames: Sequence[Frame]) -> str:
    """The category of an allocation from its stack (innermost frame first)."""
    for rules in (SPECIFIC_RULES, FORWARD_RULES):
        for frame in frames:
            for rule in rules:
                if _matches(rule, frame):
                    return rule.category
    return "other"


def _is_ours(frame: Frame) -> bool:
    return frame.path.startswith(("sarlab/", "kernels/", "real/"))


def site_of(frames: Sequence[Frame]) -> tuple[str, tuple[str, ...]]:
    """(innermost sarlab frame, up to three sarlab callers) of a stack; any frame if none is ours.

    An allocation made while importing a module is labelled ``import in <site>``.
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

def analyze_capture(path: str, mode: str = "", rank: int = 0, top: int = 10) -> RankProfile:
    """Read a memray capture: the allocations alive at its peak, by category and by site.

    Args:
        path: ``rank{r}.bin`` written by a worker's ``memray.Tracker``.
        mode: aggregation mode (label only).
        rank: rank (label only).
        top: how many of the largest sites to keep.
    """
    try:
        import memray
    except ImportError as err:
        raise ImportError("memory profiling needs memray: pip install memray") from err
    if not os.path.isfile(path):
        raise FileNotFoundError(f"memray capture {path} is missing: did the worker run with memray_dir set?")
    categories = dict.fromkeys(CATEGORIES, 0)
    sites: dict[str, list] = {}
    with memray.FileReader(path) as reader:
        meta = reader.metadata
        for rec in reader.get_high_watermark_allocation_records(merge_threads=True):
            frames = [make_frame(*f) for f in rec.stack_trace()]
            category = classify(frames)
            categories[category] += rec.size
            location, called_from = site_of(frames)
            key = f"{location}|{category}"
            entry = sites.setdefault(key, [location, category, 0, 0, called_from])
            entry[2] += rec.size
            entry[3] += rec.n_allocations
        snaps = list(reader.get_memory_snapshots())
    timeline = []
    if snaps:
        t0 = snaps[0].time
        timeline = [((s.time - t0) / 1000.0, int(s.heap), int(s.rss)) for s in snaps]
    ranked = sorted(sites.values(), key=lambda e: -e[2])[:top]
    return RankProfile(
        mode=mode, rank=rank, capture=path, peak_bytes=sum(categories.values()),
        memray_reported_peak_bytes=int(meta.peak_memory),
        tracked_s=(meta.end_time - meta.start_time).total_seconds(), total_allocations=int(meta.total_allocations),
        categories=categories, sites=[Site(e[0], e[1], e[2], e[3], e[4]) for e in ranked], timeline=timeline)


def write_flamegraph(capture: str, out_html: str, timeout_s: float = 300.0) -> str:
    """``python -m memray flamegraph`` of the allocations alive at the peak; returns ``out_html``."""
    cmd = [sys.executable, "-m", "memray", "flamegraph", "-f", "-o", out_html, capture]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as err:
        raise RuntimeError(f"memray flamegraph for {capture} did not finish in {timeout_s:g}s") from err
    if done.returncode != 0 or not os.path.isfile(out_html):
        raise RuntimeError(f"memray flamegraph failed for {capture} (exit {done.returncode}):\n"
                           f"{done.stderr.strip() or done.stdout.strip()}")
    return out_html


# --- running ----------------------------------------------------------------------------------------

def _vmhwm_by_rank(records: list[dict]) -> dict[int, int]:
    out: dict[int, int] = {}
    for rec in records:
        above = int(rec["peak_mem_bytes"]) - int(rec["baseline_mem_bytes"])
        out[rec["rank"]] = max(out.get(rec["rank"], above), above)
    return out


def run_profile(partition_dir: str, workers: int, modes: Sequence[str], model: ModelConfig, train: TrainConfig,
                engine: EngineConfig, out_dir: str, backend: str = "gloo", timeout_s: float = 60.0,
                port: int = 0, top: int = 10, flamegraphs: bool = True, settings: dict | None = None,
                progress: Callable[[str], None] = print) -> ProfileResult:
    """Train once per mode with memray in every worker, then analyse each capture and write the report.

    Writes ``out_dir/<mode>/rank{r}.bin``, ``rank{r}_flamegraph.html``, ``rank{r}_summary.md`` and
    ``out_dir/report.md`` / ``report.html`` (with two figures). ``engine.mode`` is replaced by each mode.
    """
    from .jobs import Job
    from .launcher import launch

    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise ValueError(f"unknown mode(s) {unknown or modes}: choose from {', '.join(MODES)}")
    os.makedirs(out_dir, exist_ok=True)
    profiles: list[RankProfile] = []
    for mode in modes:
        mode_dir = os.path.abspath(os.path.join(out_dir, mode))
        os.makedirs(mode_dir, exist_ok=True)
        job = Job("train", partition_dir, model, train, replace(engine, mode=mode), backend=backend,
                  timeout_s=timeout_s, quiet=True, label=f"profile-{mode}", memray_dir=mode_dir)
        progress(f"[{mode}] training {train.epochs} epoch(s) on {workers} workers with memray in every rank")
        t0 = time.perf_counter()
        records = launch(job, workers, port=port)
        progress(f"[{mode}] training done in {time.perf_counter() - t0:.1f}s; analysing captures")
        vmhwm = _vmhwm_by_rank(records)
        for rank in range(workers):
            capture = os.path.join(mode_dir, f"rank{rank}.bin")
            prof = analyze_capture(capture, mode, rank, top)
            prof.vmhwm_bytes = vmhwm.get(rank)
            if flamegraphs:
                prof.flamegraph = write_flamegraph(capture, os.path.join(mode_dir, f"rank{rank}_flamegraph.html"))
            prof.summary = os.path.join(mode_dir, f"rank{rank}_summary.md")
            _write_text(prof.summary, rank_summary_markdown(prof))
            progress(f"[{mode}] rank {rank}: memray peak {fmt_bytes(prof.peak_bytes)}, VmHWM - baseline "
                     f"{fmt_bytes(prof.vmhwm_bytes)}; largest share: {_largest(prof)}")
            profiles.append(prof)
    settings = dict(settings or {})
    settings.setdefault("partition_dir", os.path.abspath(partition_dir))
    settings.update(workers=workers, modes=list(modes), model=asdict(model), train=asdict(train),
                    engine={k: v for k, v in asdict(engine).items() if k != "mode"})
    result = ProfileResult(settings, profiles)
    write_report(result, out_dir)
    progress(f"report: {result.report_md}")
    return result


def _largest(prof: RankProfile) -> str:
    cat = max(prof.categories, key=lambda c: prof.categories[c])
    return f"{cat} {_share(prof.categories[cat], prof.peak_bytes)}"


# --- formatting -------------------------------------------------------------------------------------

def fmt_bytes(n: int | None) -> str:
    """Bytes in B / KiB / MiB / GiB with about three significant figures; ``n/a`` for None."""
    if n is None:
        return "n/a"
    value, unit = float(n), "B"
    for next_unit in ("KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            break
        value, unit = value / 1024, next_unit
    if unit == "B":
        return f"{value:.0f} B"
    digits = 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2
    return f"{value:.{digits}f} {unit}"


def _share(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "0.0%"


def _write_text(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


NOTE_MEASURES = ("memray counts heap allocations (malloc/mmap calls made while tracking, from after set-up "
                 "to the end of training) and reports the largest total alive at once; VmHWM counts resident "
                 "pages of the whole process (reset each epoch, minus the RSS after set-up), so it also sees "
                 "allocator slack, thread stacks, pages touched by libraries and memray's own buffers, and "
                 "misses allocations that were never touched. Compare modes with one measure at a time.")
NOTE_CATEGORIES = ("Categories come from each allocation's Python stack: the innermost frame that a specific "
                   "rule names decides (ring_fetch / HaloExchange.forward: remote rows; AttentionAggregation "
                   "and the GAT kernels: attention tensors; autograd backward, *.backward, *_vjp and GradReturn: "
                   "gradients; Shard.matrix / transpose_index / merged_shard: graph structure; torch.optim: "
                   "optimizer state); otherwise frames in layers, aggregation and the loss make it a local "
                   "activation; anything else is other. oneshot's halo buffer also holds a copy of the worker's "
                   "own rows ([own rows; halo rows]), so it is all counted as remote rows.")


def rank_summary_markdown(prof: RankProfile) -> str:
    """The per-rank summary table: peak, categories at the peak, largest allocation sites."""
    lines = [f"# memray summary: mode {prof.mode}, rank {prof.rank}", "",
             f"- capture: `{os.path.basename(prof.capture)}` ({prof.total_allocations} allocations recorded, "
             f"{prof.tracked_s:.2f} s tracked)",
             f"- peak heap while tracked (memray high-water mark): **{fmt_bytes(prof.peak_bytes)}** "
             f"({prof.peak_bytes} bytes)",
             f"- VmHWM minus post-set-up RSS, max over epochs (metric records): {fmt_bytes(prof.vmhwm_bytes)}"]
    if prof.flamegraph:
        lines.append(f"- flamegraph: [{os.path.basename(prof.flamegraph)}]({os.path.basename(prof.flamegraph)})")
    lines += ["", "## What holds the memory at the peak", "", "| category | bytes | share |", "|---|---:|---:|"]
    for cat in CATEGORIES:
        lines.append(f"| {cat} | {prof.categories[cat]} | {_share(prof.categories[cat], prof.peak_bytes)} |")
    lines.append(f"| **total (peak)** | {prof.peak_bytes} | 100.0% |")
    lines += ["", "## Largest allocation sites at the peak", "",
              "| # | site | category | size | share | allocations | called from |", "|---:|---|---|---:|---:|---:|---|"]
    for i, s in enumerate(prof.sites, 1):
        lines.append(f"| {i} | `{s.location}` | {s.category} | {fmt_bytes(s.size_bytes)} | "
                     f"{_share(s.size_bytes, prof.peak_bytes)} | {s.allocations} | {' < '.join(s.called_from)} |")
    lines += ["", NOTE_MEASURES, "", NOTE_CATEGORIES, ""]
    return "\n".join(lines)


# --- the combined report ----------------------------------------------------------------------------
# Built as a list of blocks rendered to both Markdown and HTML, so the two always say the same.

def _report_blocks(result: ProfileResult, out_dir: str) -> list[tuple]:
    s = result.settings
    modes = result.modes()
    workers = s["workers"]
    m, t = s["model"], s["train"]
    config = (f"graph `{s.get('graph', s['partition_dir'])}`, {workers} workers, model {m['model']} "
              f"({m['layers']} layers, hidden {m['hidden']}"
              + (f", aggr {m['aggr']}" if m["model"] == "sage" else "")
              + (f", {m['heads']} heads" if m["model"] == "gat" else "")
              + f"), {t['epochs']} epoch(s), {t['dtype']}, prefetch {s['engine']['prefetch']}")
    blocks: list[tuple] = [("h1", "sarlab memory profile"), ("p", config), ("p", NOTE_MEASURES)]

    blocks.append(("h2", "Peak per rank"))
    header = ["rank"] + [f"{mode}: memray peak" for mode in modes] + [f"{mode}: VmHWM - baseline" for mode in modes]
    rows = []
    for rank in range(workers):
        by_mode = {p.mode: p for p in result.ranks if p.rank == rank}
        rows.append([str(rank)] + [fmt_bytes(by_mode[mode].peak_bytes) for mode in modes]
                    + [fmt_bytes(by_mode[mode].vmhwm_bytes) for mode in modes])
    rows.append(["max"] + [fmt_bytes(max(p.peak_bytes for p in result.of(mode))) for mode in modes]
                + [fmt_bytes(max((p.vmhwm_bytes or 0) for p in result.of(mode))) for mode in modes])
    blocks.append(("table", header, rows))

    blocks.append(("h2", "What holds the memory at the peak"))
    blocks.append(("p", NOTE_CATEGORIES))
    header = ["category"] + [f"{p.mode} r{p.rank}" for mode in modes for p in result.of(mode)]
    rows = [[cat] + [f"{fmt_bytes(p.categories[cat])} ({_share(p.categories[cat], p.peak_bytes)})"
                     for mode in modes for p in result.of(mode)] for cat in CATEGORIES]
    rows.append(["total (peak)"] + [fmt_bytes(p.peak_bytes) for mode in modes for p in result.of(mode)])
    blocks.append(("table", header, rows))
    for fig in result.figures:
        blocks.append(("img", os.path.relpath(fig, out_dir)))

    blocks.append(("h2", "Largest allocation sites (rank with the highest peak)"))
    for mode in modes:
        worst = max(result.of(mode), key=lambda p: p.peak_bytes)
        blocks.append(("h3", f"{mode}, rank {worst.rank}: peak {fmt_bytes(worst.peak_bytes)}"))
        blocks.append(("table", ["site", "category", "size", "share", "called from"],
                       [[s.location, s.category, fmt_bytes(s.size_bytes), _share(s.size_bytes, worst.peak_bytes),
                         " < ".join(s.called_from)] for s in worst.sites[:5]]))

    blocks.append(("h2", "Files"))
    items = []
    for p in result.ranks:
        links = [(os.path.basename(p.capture), os.path.relpath(p.capture, out_dir))]
        if p.summary:
            links.append(("summary", os.path.relpath(p.summary, out_dir)))
        if p.flamegraph:
            links.append(("flamegraph", os.path.relpath(p.flamegraph, out_dir)))
        items.append((f"{p.mode} rank {p.rank}: ", links))
    blocks.append(("links", items))
    blocks.append(("p", "Flamegraphs show the allocations alive at the peak: each box is a function, its width "
                        "the bytes allocated by it and its callees that were still alive. memray opens them as "
                        "icicles, the worker's entry at the top and the allocating frames below (a toggle flips "
                        "them); hover for sizes, click to zoom, search for ring_fetch or HaloExchange."))
    return blocks


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def _render_markdown(blocks: list[tuple]) -> str:
    out = []
    for block in blocks:
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            out += ["#" * int(kind[1]) + " " + block[1], ""]
        elif kind == "p":
            out += [block[1], ""]
        elif kind == "table":
            header, rows = block[1], block[2]
            out.append("| " + " | ".join(_md_cell(h) for h in header) + " |")
            out.append("|" + "|".join("---" for _ in header) + "|")
            out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
            out.append("")
        elif kind == "img":
            out += [f"![{os.path.basename(block[1])}]({block[1]})", ""]
        elif kind == "links":
            out += [f"- {label}" + ", ".join(f"[{text}]({href})" for text, href in links)
                    for label, links in block[1]]
            out.append("")
    return "\n".join(out)


def _render_html(blocks: list[tuple], out_dir: str) -> str:
    e = html.escape
    body = []
    for block in blocks:
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            body.append(f"<{kind}>{e(block[1])}</{kind}>")
        elif kind == "p":
            body.append(f"<p>{e(block[1]).replace('`', '')}</p>")
        elif kind == "table":
            head = "".join(f"<th>{e(h)}</th>" for h in block[1])
            rows = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in block[2])
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif kind == "img":
            with open(os.path.join(out_dir, block[1]), "rb") as f:
                data = base64.b64encode(f.read()).decode("ascii")
            body.append(f'<img alt="{e(block[1])}" src="data:image/png;base64,{data}">')
        elif kind == "links":
            items = "".join(f"<li>{e(label)}" + ", ".join(f'<a href="{e(href)}">{e(text)}</a>' for text, href in links)
                            + "</li>" for label, links in block[1])
            body.append(f"<ul>{items}</ul>")
    style = ("body{font-family:sans-serif;max-width:75em;margin:2em auto;padding:0 1em}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.25em .6em;"
             "text-align:right}td:first-child,th:first-child{text-align:left}img{max-width:100%}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>sarlab memory profile</title>"
            f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n")


def plot_figures(result: ProfileResult, out_dir: str) -> list[str]:
    """Stacked bars of the categories at the peak per rank, and heap over time per rank (PNG files)."""
    from matplotlib.figure import Figure  # no pyplot: the caller's backend (e.g. a notebook's) stays as it is

    paths = []
    ranks = [p for mode in result.modes() for p in result.of(mode)]
    fig = Figure(figsize=(max(5.0, 1.0 + 0.9 * len(ranks)), 4.0))
    ax = fig.subplots()
    bottoms = [0.0] * len(ranks)
    labels = [f"{p.mode}\nr{p.rank}" for p in ranks]
    for cat in CATEGORIES:
        heights = [p.categories[cat] / 2**20 for p in ranks]
        if any(heights):
            ax.bar(labels, heights, bottom=bottoms, label=cat)
            bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    ax.set_ylabel("MiB alive at memray's peak")
    ax.set_title("What holds the memory at the peak (memray, per rank)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    paths.append(os.path.join(out_dir, "report_categories.png"))
    fig.savefig(paths[-1], dpi=100)

    fig = Figure(figsize=(7.0, 3.5))
    ax = fig.subplots()
    for p in ranks:
        if p.timeline:
            ax.plot([t for t, _, _ in p.timeline], [h / 2**20 for _, h, _ in p.timeline],
                    label=f"{p.mode} r{p.rank}", linestyle="-" if p.mode == result.modes()[0] else "--")
    ax.set_xlabel("seconds since tracking started")
    ax.set_ylabel("heap MiB (memray)")
    ax.set_title("Tracked heap over training")
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(os.path.join(out_dir, "report_timeline.png"))
    fig.savefig(paths[-1], dpi=100)
    return paths


def write_report(result: ProfileResult, out_dir: str) -> tuple[str, str]:
    """Write ``report.md`` and ``report.html`` (and their figures) into ``out_dir``; returns both paths."""
    result.figures = plot_figures(result, out_dir)
    blocks = _report_blocks(result, out_dir)
    result.report_md = os.path.join(out_dir, "report.md")
    result.report_html = os.path.join(out_dir, "report.html")
    _write_text(result.report_md, _render_markdown(blocks))
    _write_text(result.report_html, _render_html(blocks, out_dir))
    return result.report_md, result.report_html


def side_by_side(result: ProfileResult) -> str:
    """A short plain-text table: peak per mode (max over ranks) and its largest category."""
    out = io.StringIO()
    out.write(f"{'mode':<9}{'memray peak':>14}{'VmHWM-base':>14}  largest category at the peak\n")
    for mode in result.modes():
        worst = max(result.of(mode), key=lambda p: p.peak_bytes)
        vm = max((p.vmhwm_bytes or 0) for p in result.of(mode))
        out.write(f"{mode:<9}{fmt_bytes(worst.peak_bytes):>14}{fmt_bytes(vm):>14}  {_largest(worst)} "
                  f"(rank {worst.rank})\n")
    return out.getvalue().rstrip("\n")


# --- command line -----------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    """Arguments of ``sarlab profile``."""
    from .cli import EPILOG, _add_model_args

    p = argparse.ArgumentParser(
        prog="sarlab profile", epilog=EPILOG,
        description="Train with memray in every worker; write per-rank flamegraphs and peak summaries and a "
                    "report comparing modes: peak per rank and what holds the memory at the peak.")
    p.add_argument("--graph", default=DEFAULT_GRAPH, help="graph spec or partition directory (default %(default)s)")
    p.add_argument("--workers", type=int, default=2, help="local worker processes (default %(default)s)")
    p.add_argument("--modes", default="sar,oneshot", help="comma list of sar, sa, oneshot, or all "
                   "(default %(default)s)")
    _add_model_args(p, {"layers": 3})
    p.add_argument("--prefetch", type=int, default=1, help="ring rounds fetched ahead (default %(default)s)")
    p.add_argument("--kernels", default="auto", choices=["auto", "cpp", "torch"],
                   help="fused attention kernels implementation (default %(default)s)")
    p.add_argument("--unfused", action="store_true", help="GAT: do not use the fused attention kernels")
    p.add_argument("--backend", default="gloo", help="torch.distributed backend (default %(default)s)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds any wait may block (default %(default)s)")
    p.add_argument("--port", type=int, default=0, help="rendezvous port on 127.0.0.1 (0: any free port)")
    p.add_argument("--epochs", type=int, default=2, help="epochs per mode (default %(default)s)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--method", default="metis", choices=["metis", "random"], help="partitioning method")
    p.add_argument("--top", type=int, default=10, help="allocation sites listed per rank (default %(default)s)")
    p.add_argument("--no-flamegraph", action="store_true", help="skip the HTML flamegraphs")
    p.add_argument("--out", required=True, help="output directory (<mode>/rank{r}.* and report.md/.html)")
    p.add_argument("--json", help="write peaks, categories and top sites per rank here")
    return p


def parse_modes(text: str) -> list[str]:
    """``sar,oneshot`` -> ``["sar", "oneshot"]``; ``all`` -> every mode."""
    modes = list(MODES) if text.strip() == "all" else [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise ValueError(f"--modes: unknown mode(s) {', '.join(bad) or '(none)'}; choose from "
                         f"{', '.join(MODES)} or all")
    return list(dict.fromkeys(modes))


def main(argv: list[str] | None = None) -> int:
    """``sarlab profile``: run, analyse, report; 0 on success, 1 with a message on failure."""
    from sarlab.partition import PartitionError

    from .cli import _model_cfg, _progress, _write_json, prepare_partition
    from .launcher import LaunchError, WorkerError

    a = build_parser().parse_args(argv)
    tmp = None
    try:
        if a.workers < 1 or a.epochs < 1:
            raise ValueError("--workers and --epochs must be >= 1")
        modes = parse_modes(a.modes)
        model = _model_cfg(a)
        train = TrainConfig(epochs=a.epochs, lr=a.lr, dtype=a.dtype, eval_every=0)
        engine = EngineConfig(mode=modes[0], prefetch=a.prefetch, kernels=a.kernels, fused=not a.unfused)
        pdir, tmp = prepare_partition(a.graph, a.workers, a.method, a.seed, None)
        result = run_profile(pdir, a.workers, modes, model, train, engine, a.out, backend=a.backend,
                             timeout_s=a.timeout, port=a.port, top=a.top, flamegraphs=not a.no_flamegraph,
                             settings={"graph": a.graph}, progress=_progress)
    except (PartitionError, LaunchError, WorkerError, ValueError, RuntimeError, FileNotFoundError,
            ImportError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    print(side_by_side(result))
    print(f"report: {result.report_md} (and {os.path.basename(result.report_html)})")
    _write_json(a.json, result.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
