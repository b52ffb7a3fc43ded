"""Rendering a memory profile: per-rank summaries, the combined report (Markdown and HTML), figures, flamegraphs.

The combined report is built once as a list of blocks and rendered to both Markdown and HTML, so the two
always say the same.
"""
from __future__ import annotations

import base64
import html
import io
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field

from matplotlib.figure import Figure  # no pyplot: the caller's backend (e.g. a notebook's) stays as it is

from sarlab.real.launch import outputs
from sarlab.real.profile.attribution import CATEGORIES, HEADING_OF_TAG, RankProfile

NOTE_MEASURES = ("memray counts heap allocations (malloc/mmap calls made while tracking, from after set-up "
                 "to the end of training) and reports the largest total alive at once; VmHWM counts resident "
                 "pages of the whole process (reset each epoch, minus the RSS after set-up), so it also sees "
                 "allocator slack, thread stacks, pages touched by libraries and memray's own buffers, and "
                 "misses allocations that were never touched. Compare modes with one measure at a time.")
NOTE_CATEGORIES = ("Headings come from the phase tags the engine sets (sarlab.core.phases): each allocation is filed "
                   "under the innermost tag on its Python stack (" + "; ".join(
                       f"{heading}: " + ", ".join(t for t, h in HEADING_OF_TAG.items() if h == heading)
                       for heading in dict.fromkeys(HEADING_OF_TAG.values())) + "). Code without tags is "
                   "filed by fallback rules (torch.optim: optimizer state; autograd's backward of the layers "
                   "and the loss: gradients; GAT's AttentionAggregation and the attention kernels: attention "
                   "tensors; the kernels' CSR transposes: graph structure; lazy imports: other); any other "
                   "frame of the engine or the model makes it a local activation; the rest is other. "
                   "oneshot's halo buffer also holds a copy of the worker's own rows ([own rows; halo rows]), "
                   "so it is all counted as remote rows.")


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
        for rank in self.ranks:
            data = asdict(rank)
            data.pop("timeline")
            ranks.append(data)
        return {"settings": self.settings, "categories": list(CATEGORIES), "ranks": ranks,
                "report_md": self.report_md, "report_html": self.report_html, "figures": self.figures}


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


def share(part: int, whole: int) -> str:
    """``part`` as a percentage of ``whole`` with one decimal."""
    return f"{100.0 * part / whole:.1f}%" if whole else "0.0%"


def largest(prof: RankProfile) -> str:
    """The heading holding most of a rank's peak, with its share."""
    heading = max(prof.categories, key=lambda c: prof.categories[c])
    return f"{heading} {share(prof.categories[heading], prof.peak_bytes)}"


def write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically (:func:`sarlab.real.launch.outputs.write_bytes`)."""
    outputs.write_bytes(path, text)


# --- one rank ---------------------------------------------------------------------------------------

def rank_summary_markdown(prof: RankProfile) -> str:
    """The per-rank summary: peak, headings and phase tags at the peak, largest allocation sites."""
    lines = [f"# memray summary: mode {prof.mode}, rank {prof.rank}", "",
             f"- capture: `{os.path.basename(prof.capture)}` ({prof.total_allocations} allocations recorded, "
             f"{prof.tracked_s:.2f} s tracked)",
             f"- peak heap while tracked (memray high-water mark): **{fmt_bytes(prof.peak_bytes)}** "
             f"({prof.peak_bytes} bytes)",
             f"- VmHWM minus post-set-up RSS, max over epochs (metric records): {fmt_bytes(prof.vmhwm_bytes)}"]
    if prof.flamegraph:
        lines.append(f"- flamegraph: [{os.path.basename(prof.flamegraph)}]({os.path.basename(prof.flamegraph)})")
    lines += ["", "## What holds the memory at the peak", "", "| category | bytes | share |", "|---|---:|---:|"]
    for heading in CATEGORIES:
        lines.append(f"| {heading} | {prof.categories[heading]} | {share(prof.categories[heading], prof.peak_bytes)} |")
    lines.append(f"| **total (peak)** | {prof.peak_bytes} | 100.0% |")
    lines += ["", "## Engine phases at the peak (innermost tag)", "", "| phase tag | bytes | share |",
              "|---|---:|---:|"]
    lines += [f"| {tag} | {size} | {share(size, prof.peak_bytes)} |" for tag, size in prof.tags.items()]
    lines += ["", "## Largest allocation sites at the peak", "",
              "| # | site | phase | category | size | share | allocations | called from |",
              "|---:|---|---|---|---:|---:|---:|---|"]
    for i, s in enumerate(prof.sites, 1):
        lines.append(f"| {i} | `{s.location}` | {s.tag} | {s.category} | {fmt_bytes(s.size_bytes)} | "
                     f"{share(s.size_bytes, prof.peak_bytes)} | {s.allocations} | {' < '.join(s.called_from)} |")
    lines += ["", NOTE_MEASURES, "", NOTE_CATEGORIES, ""]
    return "\n".join(lines)


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


# --- the combined report ----------------------------------------------------------------------------

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
    columns = [p for mode in modes for p in result.of(mode)]
    header = ["category"] + [f"{p.mode} r{p.rank}" for p in columns]
    rows = [[heading] + [f"{fmt_bytes(p.categories[heading])} ({share(p.categories[heading], p.peak_bytes)})"
                         for p in columns] for heading in CATEGORIES]
    rows.append(["total (peak)"] + [fmt_bytes(p.peak_bytes) for p in columns])
    blocks.append(("table", header, rows))
    for fig in result.figures:
        blocks.append(("img", os.path.relpath(fig, out_dir)))

    blocks.append(("h2", "Largest allocation sites (rank with the highest peak)"))
    for mode in modes:
        worst = max(result.of(mode), key=lambda p: p.peak_bytes)
        blocks.append(("h3", f"{mode}, rank {worst.rank}: peak {fmt_bytes(worst.peak_bytes)}"))
        blocks.append(("table", ["site", "phase", "category", "size", "share", "called from"],
                       [[s.location, s.tag, s.category, fmt_bytes(s.size_bytes), share(s.size_bytes, worst.peak_bytes),
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
                        "them); hover for sizes, click to zoom, search for phase: (or phase:remote_rows, "
                        "phase:halo_exchange) to highlight the engine's phases."))
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
    """Stacked bars of the headings at the peak per rank, and heap over time per rank (PNG files)."""
    paths = []
    ranks = [p for mode in result.modes() for p in result.of(mode)]
    fig = Figure(figsize=(max(5.0, 1.0 + 0.9 * len(ranks)), 4.0))
    ax = fig.subplots()
    bottoms = [0.0] * len(ranks)
    labels = [f"{p.mode}\nr{p.rank}" for p in ranks]
    for heading in CATEGORIES:
        heights = [p.categories[heading] / 2**20 for p in ranks]
        if any(heights):
            ax.bar(labels, heights, bottom=bottoms, label=heading)
            bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    ax.set_ylabel("MiB alive at memray's peak")
    ax.set_title("What holds the memory at the peak (memray, per rank)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    paths.append(os.path.join(out_dir, "report_categories.png"))
    with outputs.staged_file(paths[-1]) as png:
        fig.savefig(png, dpi=100)

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
    with outputs.staged_file(paths[-1]) as png:
        fig.savefig(png, dpi=100)
    return paths


def write_report(result: ProfileResult, out_dir: str) -> tuple[str, str]:
    """Write ``report.md`` and ``report.html`` (and their figures) into ``out_dir``; returns both paths."""
    result.figures = plot_figures(result, out_dir)
    blocks = _report_blocks(result, out_dir)
    result.report_md = os.path.join(out_dir, "report.md")
    result.report_html = os.path.join(out_dir, "report.html")
    write_text(result.report_md, _render_markdown(blocks))
    write_text(result.report_html, _render_html(blocks, out_dir))
    return result.report_md, result.report_html


def side_by_side(result: ProfileResult) -> str:
    """A short plain-text table: peak per mode (max over ranks) and its largest heading."""
    out = io.StringIO()
    out.write(f"{'mode':<9}{'memray peak':>14}{'VmHWM-base':>14}  largest category at the peak\n")
    for mode in result.modes():
        worst = max(result.of(mode), key=lambda p: p.peak_bytes)
        vmhwm = max((p.vmhwm_bytes or 0) for p in result.of(mode))
        out.write(f"{mode:<9}{fmt_bytes(worst.peak_bytes):>14}{fmt_bytes(vmhwm):>14}  {largest(worst)} "
                  f"(rank {worst.rank})\n")
    return out.getvalue().rstrip("\n")
