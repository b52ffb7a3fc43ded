"""Tables and banners every report shares: atomic CSV writes, Markdown tables, and the
banner text that says whether a number is measured (CPU, cores, date) or simulated (the profile).

Nothing here measures, simulates or draws; :mod:`sarlab.common.figures` draws the figures these banners head.
"""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from sarlab.common.records import summarize

MEASURED, SIMULATED = "measured", "simulated"
#: what every figure and table of a smoke-sized run (``sarlab reproduce --quick``) says on its face
SMOKE_MARK = "SMOKE-SIZED (--quick): tiny graphs, few epochs; checks that the pipeline runs, NOT results"


def write_csv(df: pd.DataFrame, path: Path) -> None:
    """Write a table atomically (write, then rename)."""
    tmp = path.with_suffix(".csv.tmp")
    df.to_csv(tmp, index=False)
    os.replace(tmp, path)


def md_table(df: pd.DataFrame) -> str:
    """A DataFrame as a Markdown table (cells as ``str`` prints them; round before)."""
    head = "| " + " | ".join(str(c) for c in df.columns) + " |"
    rule = "|" + "---|" * len(df.columns)
    rows = ["| " + " | ".join(str(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, rule, *rows])


def epochs_text(epochs: int) -> str:
    """Which epochs the figure's times are from (epoch 0 is warm-up when there are more)."""
    if epochs <= 1:
        return "epoch 0 (no warm-up epoch)"
    if epochs == 2:
        return "epoch 1 (epoch 0 is warm-up)"
    return f"median of epochs 1..{epochs - 1} (epoch 0 is warm-up)"


def summarize_measured(records: pd.DataFrame, series: list) -> pd.DataFrame:
    """One row per (series, N) from :func:`sarlab.common.records.summarize`, with the series' label and the memory
    scaling (peak at the smallest N / peak at N)."""
    label = {bench_mode: name for name, bench_mode, _, _ in series}
    table = summarize(records, keys=("mode", "workers"))
    threads = records.groupby(["mode", "workers"]).threads.first() if "threads" in records else None
    table = pd.DataFrame({
        "series": table["mode"].map(lambda m: label.get(m, m)), "mode": table["mode"].str.split("+").str[0],
        "fused": table["mode"].str.endswith("+fused"), "workers": table["workers"].astype(int),
        "epochs_measured": table["epochs"].astype(int), "epoch_time_s": table["epoch_time_s"],
        "comm_wait_s": table["comm_wait_s"], "bytes_sent_per_epoch": table["bytes_sent_per_epoch"],
        "baseline_mem_bytes": table["baseline_mem_bytes"].astype(int),
        "peak_mem_above_baseline_bytes": (table["peak_mem_bytes"] - table["baseline_mem_bytes"]).astype(int),
        "peak_mem_bytes": table["peak_mem_bytes"].astype(int),
        "threads_per_worker": [int(threads.loc[(m, n)]) if threads is not None else 0
                               for m, n in zip(table["mode"], table["workers"])],
        "loss_last_epoch": table["loss"]})
    order = {name: i for i, (name, *_rest) in enumerate(series)}
    table = table.sort_values(["series", "workers"], key=lambda c: c.map(order) if c.name == "series" else c)
    first = table.groupby("series").peak_mem_bytes.transform("first")
    return table.assign(mem_scaling=first / table.peak_mem_bytes).reset_index(drop=True)


def measured_banner(cpu: str, cores: int, date: str, extra: str = "") -> str:
    """The banner text of a figure measured on this machine."""
    return f"MEASURED on {cpu} ({cores} cores), {date}" + (f"; {extra}" if extra else "")


def simulated_banner(profile_name: str, where: str, date: str) -> str:
    """The banner text of a figure predicted by the simulator."""
    return f"SIMULATED (SimPy model, not measured) with profile '{profile_name}': {where}; generated {date}"
