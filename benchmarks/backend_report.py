"""Tables and plot of a gloo-vs-ccl campaign (:mod:`benchmarks.backend_bench`'s outputs).

``python -m benchmarks.backend_report DIR`` (re)writes, next to the campaign's CSVs in DIR:

* ``backends_tables.md``: per network, the collectives (median over repeats of GB/s and µs per call, the ccl
  speed-up = gloo time / ccl time of the medians, and the range of that ratio over the repeats), the ring rounds
  (median pass time per backend), the epochs (median epoch time per backend, the speed-up, the final losses);
* ``backends_epochs_summary.csv``: one row per (net, model, mode, N, backend): the summary of
  :func:`sarlab.common.records.summarize`;
* ``backends.png``: algorithm bandwidth against message size for both collectives, and the epochs' ccl speed-up.

A speed-up above 1 means ccl was faster. Only files of these names are written.
"""
from __future__ import annotations

import os
import sys

import pandas as pd

from sarlab.common.records import summarize

#: the campaign's measurements (written by backend_bench) and what this module derives from them
COLL_FILE, ROUND_FILE, EPOCH_FILE, META_FILE = ("backends_collectives.csv", "backends_rounds.csv",
                                                "backends_epochs.csv", "backends_bench.json")
TABLES, SUMMARY, PLOT = "backends_tables.md", "backends_epochs_summary.csv", "backends.png"


def _size(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"


def _md(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    align = ["---:" if pd.api.types.is_numeric_dtype(df[c]) or c.endswith(("speed-up", "repeats")) else "---"
             for c in cols]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def _pair(df: pd.DataFrame, keys: list[str], value: str) -> pd.DataFrame:
    """Per ``keys``: the median of ``value`` per backend, the speed-up (gloo / ccl) and its range over repeats."""
    med = df.groupby([*keys, "backend"], sort=False)[value].median().unstack("backend")
    per_rep = df.pivot_table(index=[*keys, "rep"], columns="backend", values=value, aggfunc="median")
    ratio = (per_rep["gloo"] / per_rep["ccl"]).groupby(level=list(range(len(keys)))).agg(["min", "max"])
    out = med.join(ratio).reset_index()
    out["speedup"] = out["gloo"] / out["ccl"]
    return out


def collectives_table(coll: pd.DataFrame, net: str) -> str:
    t = _pair(coll[coll.net == net], ["op", "bytes"], "seconds")
    rows = pd.DataFrame({
        "op": t.op, "size per rank": t.bytes.map(_size),
        "gloo GB/s": (t.bytes / t.gloo / 1e9).round(3), "ccl GB/s": (t.bytes / t.ccl / 1e9).round(3),
        "gloo µs": (t.gloo * 1e6).round(0).astype(int), "ccl µs": (t.ccl * 1e6).round(0).astype(int),
        "ccl speed-up": t.speedup.map("{:.2f}x".format),
        "range over repeats": [f"{a:.2f}-{b:.2f}" for a, b in zip(t["min"], t["max"])]})
    return _md(rows)


def rounds_table(rnd: pd.DataFrame, net: str) -> str:
    t = _pair(rnd[rnd.net == net], ["pattern", "workers", "bytes"], "pass_s")
    rows = pd.DataFrame({
        "pattern": t.pattern, "N": t.workers, "message": (t.bytes / 1e6).map("{:g} MB".format),
        "gloo ms/pass": (t.gloo * 1e3).round(1), "ccl ms/pass": (t.ccl * 1e3).round(1),
        "ccl speed-up": t.speedup.map("{:.2f}x".format),
        "range over repeats": [f"{a:.2f}-{b:.2f}" for a, b in zip(t["min"], t["max"])]})
    return _md(rows)


def epoch_summary(records: pd.DataFrame) -> pd.DataFrame:
    return summarize(records, keys=("net", "model", "mode", "workers", "backend"))


def epochs_table(summary: pd.DataFrame, net: str) -> str:
    s = summary[summary.net == net]
    wide = s.pivot_table(index=["model", "mode", "workers"], columns="backend",
                         values=["epoch_time_s", "comm_wait_s", "loss"], aggfunc="first")
    wide = wide.reset_index().sort_values(["model", "mode", "workers"])
    rows = pd.DataFrame({
        "model": wide["model"], "mode": wide["mode"], "N": wide["workers"],
        "gloo s": wide[("epoch_time_s", "gloo")].round(4), "ccl s": wide[("epoch_time_s", "ccl")].round(4),
        "ccl speed-up": (wide[("epoch_time_s", "gloo")] / wide[("epoch_time_s", "ccl")]).map("{:.2f}x".format),
        "gloo wait s": wide[("comm_wait_s", "gloo")].round(4), "ccl wait s": wide[("comm_wait_s", "ccl")].round(4),
        "final loss gloo / ccl": [f"{a:.6f} / {b:.6f}" for a, b in zip(wide[("loss", "gloo")],
                                                                         wide[("loss", "ccl")])]})
    return _md(rows)


def plot(coll: pd.DataFrame | None, summary: pd.DataFrame | None, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for ax, op in zip(axes[:2], ("all_reduce", "all_to_all_single")):
        if coll is not None:
            for (net, backend), d in coll[coll.op == op].groupby(["net", "backend"]):
                m = d.groupby("bytes").GBps.median()
                ax.plot(m.index, m.values, marker="o", ls="-" if backend == "ccl" else "--",
                        label=f"{backend}, {net}")
        ax.set(xscale="log", xlabel="bytes per rank", ylabel="GB/s (bytes per rank / time)",
               title=f"{op}, 2 ranks (median of repeats)")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    ax = axes[2]
    if summary is not None:
        wide = summary.pivot_table(index=["net", "model", "mode", "workers"], columns="backend",
                                   values="epoch_time_s").reset_index()
        wide["speedup"] = wide.gloo / wide.ccl
        for (net, mode), d in wide.groupby(["net", "mode"]):
            ax.scatter(d.workers + (0.1 if net != "loopback" else -0.1), d.speedup,
                       marker="o" if mode == "sar" else "s", label=f"{mode}, {net}")
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set(xlabel="workers N", ylabel="gloo epoch time / ccl epoch time", yscale="log",
               title="epochs (GCN, SAGE, GAT): ccl speed-up")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(out: str) -> list[str]:
    """Write the tables, the epoch summary and the plot for the campaign in ``out``; returns the paths."""
    def read(name: str) -> pd.DataFrame | None:
        path = os.path.join(out, name)
        return pd.read_csv(path) if os.path.exists(path) else None

    coll, rnd, rec = read(COLL_FILE), read(ROUND_FILE), read(EPOCH_FILE)
    summary = epoch_summary(rec) if rec is not None else None
    nets = list(dict.fromkeys(pd.concat([d.net for d in (coll, rnd, rec) if d is not None])))
    lines = ["# gloo vs ccl: tables", "", "Speed-up = gloo time / ccl time (above 1: ccl faster).", ""]
    for net in nets:
        lines += [f"## {net}", ""]
        if coll is not None and (coll.net == net).any():
            lines += ["### Collectives, 2 ranks", "", collectives_table(coll, net), ""]
        if rnd is not None and (rnd.net == net).any():
            lines += ["### Ring rounds (roundbench, no compute)", "", rounds_table(rnd, net), ""]
        if summary is not None and (summary.net == net).any():
            lines += ["### Epochs (median over epochs after the first, slowest rank)", "",
                      epochs_table(summary, net), ""]
    written = [os.path.join(out, TABLES)]
    with open(written[0], "w") as f:
        f.write("\n".join(lines))
    if summary is not None:
        written.append(os.path.join(out, SUMMARY))
        summary.to_csv(written[-1], index=False)
    written.append(os.path.join(out, PLOT))
    plot(coll, summary, written[-1])
    return written


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m benchmarks.backend_report DIR")
    for p in write_report(sys.argv[1]):
        print(f"wrote {p}")
