"""Which assumed cluster figure moves which of the SAR paper's conclusions (``python -m
sarlab.simulator.studies.sensitivity``).

Starting from a cluster preset (``icelake-hdr200``), one assumed figure at a time is varied (:data:`VARIATIONS`):
the link's bandwidth and latency, the software cost of a message, the per-round jitter, the edge cut of the
METIS partitions, the compute speed, how vanilla GAT computes its attention (sarlab's torch autograd, or
fused kernels as DGL's ``GATConv`` would) and how a ring round is exchanged (sarlab's isend/irecv pair, or one
``all_to_all`` of all workers per round, as the SAR paper's library does). Under each, the paper's claims are
evaluated as numbers (:func:`conclusions`):

* ``fig3_sage_sar_over_vanilla_N16`` (and at N=4): GraphSAGE on ogbn-products, SAR over vanilla epoch time
  (paper: SAR slightly faster as N grows, a ratio below 1 that falls with N);
* ``fig4_gat_sar_over_vanilla_N16``: plain SAR over vanilla for GAT (paper: "significantly slower", > 1.2);
* ``fig4_gat_fak_over_vanilla_N16``: SAR+FAK over vanilla (paper: "just as fast", 0.8 - 1.25);
* ``fig5_sage_sar_speedup_32_128``: SAR's GraphSAGE speed-up on ogbn-papers100M from 32 to 128 workers
  (real full-batch systems: far below the 4x of linear scaling);
* ``fig6_gat_fak_128_over_64``: SAR+FAK epoch at 128 over 64 workers (paper: > 1, communication-bound);
* ``fig6_gat_vanilla_over_fak_N128``: vanilla over SAR+FAK at 128 (paper: domain parallel "significantly
  faster", < 1);
* ``fig6_vanilla_oom_N32``: vanilla needs more than a node's memory at 32 workers (paper: out of memory);
* ``fig6_gat_vanilla_over_sar_memory_N128``: peak memory per worker, vanilla over SAR (paper: almost 4).

Writes ``<out>.csv`` (one row per variation), ``<out>.md`` (the table, with what moves) and ``<out>.png``.
"""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import replace
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd

from sarlab.common.machine import today
from sarlab.simulator.hardware.profile import Profile, load_profile
from sarlab.simulator.system.epoch import simulate_epoch
from sarlab.simulator.system.runspec import RunSpec
from sarlab.simulator.workload.model import ModelSpec
from sarlab.simulator.workload.workload import GRAPH_PRESETS

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

_log = logging.getLogger(__name__)

SAGE = ModelSpec("sage", layers=3, hidden=256, aggr="mean", batchnorm=False, dropout=0.0)
GAT = ModelSpec("gat", layers=3, hidden=128, heads=4, fused=False, batchnorm=False, dropout=0.0)
FAK = replace(GAT, fused=True)
#: the figures' assumed edge cuts (real/reproduce/reproduce_plan.py's EDGE_CUT)
CUTS = {"ogbn-products": 0.2, "ogbn-papers100M": 0.3}
#: what each claim would be in the paper's direction (the test that says "reproduced")
PAPER = {
    "fig3_sage_sar_over_vanilla_N16": ("< 1", lambda v: v < 1.0),
    "fig4_gat_sar_over_vanilla_N16": ("> 1.2", lambda v: v > 1.2),
    "fig4_gat_fak_over_vanilla_N16": ("0.8-1.25", lambda v: 0.8 <= v <= 1.25),
    "fig5_sage_sar_speedup_32_128": ("< 3 (sub-linear)", lambda v: v < 3.0),
    "fig6_gat_fak_128_over_64": ("> 1", lambda v: v > 1.0),
    "fig6_gat_vanilla_over_fak_N128": ("< 0.8", lambda v: v < 0.8),
    "fig6_vanilla_oom_N32": ("True", lambda v: bool(v)),
    "fig6_gat_vanilla_over_sar_memory_N128": ("~4 (3-5)", lambda v: 3.0 <= v <= 5.0),
}


def _scale_compute(profile: Profile, factor: float) -> Profile:
    return replace(profile, compute_scale=profile.compute_scale * factor, compute_scale_curve=())


def _links(profile: Profile, **changes: float) -> Profile:
    return replace(profile, inter_host=replace(profile.inter_host, **changes),
                   intra_host=replace(profile.intra_host, **changes))  # fmt: skip


def _messages(profile: Profile, factor: float) -> Profile:
    return replace(profile, p2p_call_s=profile.p2p_call_s * factor, p2p_op_s=profile.p2p_op_s * factor,
                   p2p_wait_s=profile.p2p_wait_s * factor)  # fmt: skip


#: (figure varied, value shown, how it changes the profile, edge cuts, vanilla GAT fused[, ring rounds])
VARIATIONS = [
    ("baseline", "preset", lambda p: p, CUTS, False),
    *[("link bandwidth", f"x{f:g} ({20 * f:g} GB/s)", lambda p, f=f: p.with_link_bandwidth(f), CUTS, False)
      for f in (0.3, 0.1, 0.03)],
    *[("link latency", f"{lat * 1e6:g} us", lambda p, lat=lat: _links(p, latency_s=lat), CUTS, False)
      for lat in (50e-6, 500e-6)],
    *[("message software cost", f"x{f:g}", lambda p, f=f: _messages(p, f), CUTS, False) for f in (0.1, 10.0, 100.0)],
    *[("per-round jitter (mean)", f"{j * 1e6:g} us", lambda p, j=j: replace(p, round_jitter_s=j), CUTS, False)
      for j in (0.0, 200e-6, 2e-3, 10e-3)],
    *[("edge cut", f"{c:g}", lambda p: p, {"ogbn-products": c, "ogbn-papers100M": c}, False) for c in (0.1, 0.5)],
    ("edge cut", "METIS law's own (grows with N)", lambda p: p, {"ogbn-products": None, "ogbn-papers100M": None},
     False),
    ("pair sizes", "uniform split (no METIS law)", lambda p: p, {k: (v, "uniform") for k, v in CUTS.items()}, False),
    *[("compute speed", f"x{f:g}", lambda p, f=f: _scale_compute(p, 1.0 / f), CUTS, False) for f in (0.5, 2.0)],
    ("vanilla GAT kernels", "fused (as DGL's GATConv)", lambda p: p, CUTS, True),
    ("ring round exchange", "all_to_all of all workers (SAR library)", lambda p: p, CUTS, False, "global"),
    ("SAR library rounds + DGL-like vanilla", "both", lambda p: p, CUTS, True, "global"),
]


def _stats(graph: str, workers: int, cut) -> object:
    law = "metis"
    if isinstance(cut, tuple):
        cut, law = cut
    return GRAPH_PRESETS[graph].estimate(workers, cut, law=law)


def conclusions(profile: Profile, cuts: dict, vanilla_fused: bool, round_sync: str = "pairwise") -> dict[str, float]:
    """The claims' numbers (module docstring) under ``profile``, the edge cuts ``cuts``, vanilla GAT's kernels
    and the ring rounds' exchange (:data:`sarlab.simulator.system.runspec.ROUND_SYNCS`)."""
    vanilla_gat = FAK if vanilla_fused else GAT

    def run(graph: str, n: int, spec: ModelSpec, mode: str):
        return simulate_epoch(_stats(graph, n, cuts[graph]), spec, RunSpec(mode=mode, round_sync=round_sync), profile)

    def t(graph: str, n: int, spec: ModelSpec, mode: str) -> float:
        return float(run(graph, n, spec, mode).epoch_time_s.max())

    prod, papers = "ogbn-products", "ogbn-papers100M"
    out = {
        "fig3_sage_sar_over_vanilla_N4": t(prod, 4, SAGE, "sar") / t(prod, 4, SAGE, "oneshot"),
        "fig3_sage_sar_over_vanilla_N16": t(prod, 16, SAGE, "sar") / t(prod, 16, SAGE, "oneshot"),
    }
    vanilla16 = t(prod, 16, vanilla_gat, "oneshot")
    out["fig4_gat_sar_over_vanilla_N16"] = t(prod, 16, GAT, "sar") / vanilla16
    out["fig4_gat_fak_over_vanilla_N16"] = t(prod, 16, FAK, "sar") / vanilla16
    out["fig5_sage_sar_speedup_32_128"] = t(papers, 32, SAGE, "sar") / t(papers, 128, SAGE, "sar")
    fak64, fak128 = run(papers, 64, FAK, "sar"), run(papers, 128, FAK, "sar")
    out["fig6_gat_fak_128_over_64"] = float(fak128.epoch_time_s.max() / fak64.epoch_time_s.max())
    out["fig6_fak_wait_share_N128"] = float(fak128.comm_wait_s.mean() / fak128.epoch_time_s.max())
    van128 = run(papers, 128, vanilla_gat, "oneshot")
    out["fig6_gat_vanilla_over_fak_N128"] = float(van128.epoch_time_s.max() / fak128.epoch_time_s.max())
    van32 = run(papers, 32, vanilla_gat, "oneshot")
    need = float((van32.baseline_bytes + van32.peak_above_baseline_bytes).max()) * van32.placement.workers_per_host
    out["fig6_vanilla_oom_N32"] = float(bool(profile.mem_per_host_bytes) and need > profile.mem_per_host_bytes)
    sar128 = run(papers, 128, GAT, "sar")
    out["fig6_gat_vanilla_over_sar_memory_N128"] = float(
        (van128.baseline_bytes + van128.peak_above_baseline_bytes).max()
        / (sar128.baseline_bytes + sar128.peak_above_baseline_bytes).max())
    return out


def sweep(profile: Profile, progress=_log.info) -> pd.DataFrame:
    """One row per variation: its figure, value and the claims' numbers."""
    rows = []
    for figure, value, change, cuts, vanilla_fused, *rounds in VARIATIONS:
        t0 = time.perf_counter()
        row = {"figure": figure, "value": value, **conclusions(change(profile), cuts, vanilla_fused, *rounds)}
        rows.append(row)
        progress(f"{figure}: {value} ({time.perf_counter() - t0:.1f} s)")
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame, profile: Profile) -> str:
    """The table, each claim's cell marked where it agrees with the paper, and what moves each claim."""
    claims = list(PAPER)
    head = ["figure varied", "value", *claims]
    lines = [f"Sensitivity of the simulated conclusions to the assumed cluster figures (profile `{profile.name}`, "
             f"{today()}; `python -m sarlab.simulator.studies.sensitivity`). One figure varied at a time from the "
             f"preset; a cell "
             "is **bold** where the claim goes the paper's way (the paper's value in the second row).", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head),
             "| paper | | " + " | ".join(PAPER[c][0] for c in claims) + " |"]
    for _, r in table.iterrows():
        cells = []
        for c in claims:
            v = r[c]
            text = ("yes" if v else "no") if c.endswith("oom_N32") else f"{v:.2f}"
            cells.append(f"**{text}**" if PAPER[c][1](v) else text)
        lines.append(f"| {r['figure']} | {r['value']} | " + " | ".join(cells) + " |")
    base = table.iloc[0]
    lines += ["", "What moves each claim (variations under which it changes side against the baseline):", ""]
    for c in claims:
        flips = [f"{r['figure']} {r['value']}" for _, r in table.iloc[1:].iterrows()
                 if PAPER[c][1](r[c]) != PAPER[c][1](base[c])]
        lines.append(f"- `{c}`: baseline {'agrees' if PAPER[c][1](base[c]) else 'disagrees'}; "
                     + (f"flips under {', '.join(flips)}" if flips else "no single variation flips it"))
    return "\n".join(lines) + "\n"


def plot(table: pd.DataFrame, path: Path) -> None:
    """Each numeric claim relative to its baseline value, per variation (log scale)."""
    claims = [c for c in PAPER if not c.endswith("oom_N32")]
    rel = table[claims].to_numpy() / table[claims].iloc[0].to_numpy()
    fig, ax = plt.subplots(figsize=(10, 0.35 * len(table) + 2))
    im = ax.imshow(np.log2(rel), aspect="auto", cmap="coolwarm", vmin=-2, vmax=2)
    ax.set_yticks(range(len(table)), [f"{f}: {v}" for f, v in zip(table.figure, table.value)], fontsize=7)
    ax.set_xticks(range(len(claims)), [c.replace("_", " ") for c in claims], rotation=30, ha="right", fontsize=7)
    for i in range(rel.shape[0]):
        for j in range(rel.shape[1]):
            ax.text(j, i, f"{table[claims[j]].iloc[i]:.2f}", ha="center", va="center", fontsize=6)
    fig.colorbar(im, ax=ax, label="log2(value / baseline)")
    ax.set_title("Simulated claims under one varied cluster figure (numbers: the claim's value)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="icelake-hdr200", help="cluster preset or profile JSON (default %(default)s)")
    p.add_argument("--out", required=True, help="output stem: writes STEM.csv, STEM.md and STEM.png")
    args = p.parse_args(argv)
    profile = load_profile(args.profile)
    table = sweep(profile)
    stem = Path(args.out)
    stem.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(stem.with_suffix(".csv"), index=False)
    stem.with_suffix(".md").write_text(markdown(table, profile))
    plot(table, stem.with_suffix(".png"))
    print(f"wrote {stem.with_suffix('.csv')}, {stem.with_suffix('.md')}, {stem.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
