"""``sarlab bench network``: read `sarlab bench engine --net veth:rate=R` records of several rates and report how
epoch time, communication wait, bytes and peak memory move with the link rate and N.

Per configuration (model label, mode, fused kernels, prefetch, network, N) the summary is
:func:`sarlab.common.records.summarize`'s: the slowest rank's median epoch after the warm-up, its wait, the bytes, the
largest peak above baseline. Two derived columns:

* ``comm_share = comm_wait_mean_s / epoch_time_s``: the share of an epoch a worker spends waiting on the network;
* ``wire_bound_s = bytes_sent_per_worker / (rate / 8)``: the time the worker's own link needs for what it sends
  in an epoch (every emulated host has a full-duplex link of the rate), a lower bound of the epoch at that rate.
  ``epoch_over_bound`` >= 1 is what a correct shaper gives.

Writes ``<out>.csv`` (the summary), ``<out>.md`` (tables) and ``<out>.png`` (epoch time and comm share against N,
one panel per model, a line per mode and rate).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from sarlab.common.paths import cache_dir
from sarlab.common.records import summarize  # noqa: E402
from sarlab.common.tables import md_table  # noqa: E402
from sarlab.real.commands.options import progress  # noqa: E402
from sarlab.real.launch import outputs  # noqa: E402
from sarlab.real.launch.netspec import NetSpec, format_rate  # noqa: E402

KEYS = ("label", "mode", "fused", "prefetch", "net", "workers")
DEFAULT_OUT = cache_dir("network-scaling", "network_scaling")


def summarize_network(records: pd.DataFrame, warmup: int = 2) -> pd.DataFrame:
    """One row per (label, mode, fused, prefetch, net, N) with the rate, comm share and wire bound."""
    if "net" not in records.columns:
        raise ValueError("the records have no `net` column: make them with `sarlab bench engine --net veth:...`")
    table = summarize(records, KEYS, warmup=warmup).reset_index()
    rates = {net: NetSpec.parse(net).rate_bps for net in table.net.unique()}
    table["rate_bps"] = table.net.map(rates)
    table["rate"] = table.rate_bps.map(lambda b: format_rate(int(b)) if b else "loopback")
    fused = table.fused.astype(bool) & (table.label == "gat") & ~table["mode"].str.contains("fused")
    table["series"] = table["mode"].where(~fused, table["mode"] + "+fused")
    table["comm_share"] = table.comm_wait_mean_s / table.epoch_time_s
    bound = table.bytes_sent_per_worker / (table.rate_bps / 8)
    table["wire_bound_s"] = bound.where(table.rate_bps > 0)
    table["epoch_over_bound"] = table.epoch_time_s / table.wire_bound_s
    return table.sort_values(["label", "rate_bps", "series", "prefetch", "workers"]).reset_index(drop=True)


def markdown(table: pd.DataFrame) -> str:
    """The summary as Markdown tables, one per model label."""
    cols = ["rate", "series", "prefetch", "workers", "epoch_time_s", "comm_wait_mean_s", "comm_share",
            "bytes_sent_per_worker", "wire_bound_s", "epoch_over_bound", "peak_mem_above_baseline_bytes"]
    out = []
    for label, part in table.groupby("label", sort=False):
        view = part[cols].assign(bytes_sent_per_worker=(part.bytes_sent_per_worker / 2**20).round(1),
                                 peak_mem_above_baseline_bytes=(part.peak_mem_above_baseline_bytes / 2**20).round(1))
        view = view.rename(columns={"bytes_sent_per_worker": "MiB_sent_per_worker",
                                    "peak_mem_above_baseline_bytes": "peak_MiB_above_baseline"})
        out.append(f"### {label}\n\n" + md_table(view.round(3)))
    return "\n\n".join(out) + "\n"


def plot(table: pd.DataFrame, path: Path, title: str) -> None:
    """Epoch time (top) and comm share (bottom) against N, one column per model label (prefetch 1)."""
    labels = list(dict.fromkeys(table.label))
    fig, axes = plt.subplots(2, len(labels), figsize=(5 * len(labels), 7.5), squeeze=False)
    for j, label in enumerate(labels):
        part = table[(table.label == label) & (table.prefetch == 1)]  # prefetch 0/2 rows: in the tables
        for (series, rate), line in part.groupby(["series", "rate"], sort=False):
            line = line.sort_values("workers")
            style = "--" if series.startswith("oneshot") else "-"
            axes[0, j].plot(line.workers, line.epoch_time_s, style, marker="o", label=f"{series} @ {rate}")
            axes[1, j].plot(line.workers, line.comm_share, style, marker="o", label=f"{series} @ {rate}")
        axes[0, j].set_title(label)
        axes[0, j].set_ylabel("epoch time (s, slowest rank)")
        axes[1, j].set_ylabel("share of the epoch waiting on the network")
        axes[1, j].set_ylim(0, 1)
        for ax in axes[:, j]:
            ax.set_xlabel("workers N (one emulated host each)")
            ax.set_xticks(sorted(table.workers.unique()))
            ax.grid(alpha=0.3)
        axes[0, j].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="sarlab bench network", description=__doc__.splitlines()[0])
    p.add_argument("records", nargs="+", help="record CSVs of `sarlab bench engine --net veth:rate=R` runs")
    p.add_argument("--warmup", type=int, default=2, help="epochs left out of each run (default %(default)s)")
    p.add_argument("--out", default=str(DEFAULT_OUT),
                   help="output prefix (default %(default)s, not committed; e.g. results/network_scaling)")
    p.add_argument("--title", default="measured: sarlab bench engine on emulated hosts (--net veth)")
    p.add_argument("--force", action="store_true", help="replace OUT.csv, .md and .png when they exist and this "
                   "command did not write them (in sarlab's cache, the default --out, it replaces them without)")
    a = p.parse_args(argv)
    for end in (".csv", ".md", ".png"):  # before anything is read
        outputs.check_file(Path(a.out).with_suffix(end), "--out", a.force)
    records = pd.concat([pd.read_csv(f) for f in a.records], ignore_index=True)
    progress(f"{len(records)} records from {len(a.records)} file(s)")
    table = summarize_network(records, a.warmup)
    out = Path(a.out)
    outputs.write_csv(out.with_suffix(".csv"), table)
    outputs.write_bytes(out.with_suffix(".md"), markdown(table))
    with outputs.staged_file(out.with_suffix(".png")) as png:
        plot(table, png, a.title)
    progress(f"wrote {out}.csv, .md, .png")
    below = table[table.epoch_over_bound < 1]
    if len(below):
        progress(f"{len(below)} configuration(s) ran faster than bytes / rate: check the shaping")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
