"""Fixed start-up per run against importing torch and PyG once, as a ratio, alternating (issue 42, item 2).

    python results/first_hour/startup_ratio.py [--pairs 5] --sarlab after=.venv/bin/sarlab \
        [--sarlab before=/tmp/venv-before/bin/sarlab]

One round = ``python -c "import torch, torch_geometric"`` then, for each ``--sarlab LABEL=COMMAND`` in turn,
``sarlab train --graph planetoid:cora --workers 2 --epochs 1 --memory rss`` with ``SARLAB_KERNELS=torch`` (so no
kernel build of either version is timed: this is the start-up, not the compile); wall clock of each, the 1-minute
load average read just before it. A warm-up run of each command first (the partition cache where there is one, the
page cache). Appends rows (label, pair, what, seconds, load1) to ``startup_ratio.csv`` beside this file and prints
each label's run / import ratio per round and its median. The VM is shared: read the load beside each number.
"""
from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUN = ["train", "--graph", "planetoid:cora", "--workers", "2", "--epochs", "1", "--memory", "rss"]
ENV = {**os.environ, "SARLAB_KERNELS": "torch"}


def _timed(command: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=ENV, cwd="/tmp")
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    return time.perf_counter() - start


def _load1() -> float:
    return os.getloadavg()[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--sarlab", action="append", required=True, metavar="LABEL=COMMAND",
                        help="a sarlab command to time, with the label of its rows (repeat: they alternate)")
    parser.add_argument("--python", default=sys.executable, help="the Python that imports torch and PyG")
    parser.add_argument("--out", default=str(HERE / "startup_ratio.csv"))
    args = parser.parse_args(argv)
    imports = [args.python, "-c", "import torch, torch_geometric"]
    runs = [(label, [command, *RUN]) for label, command in (item.split("=", 1) for item in args.sarlab)]
    for _, run in runs:
        _timed(run)  # warm-up: the partition cache, the page cache
    rows = []
    for pair in range(1, args.pairs + 1):
        for label, what, command in (("import", "import_torch_pyg", imports),
                                     *((label, "run_1_epoch", run) for label, run in runs)):
            load = _load1()
            rows.append({"label": label, "pair": pair, "what": what, "seconds": round(_timed(command), 3),
                         "load1": round(load, 2)})
            print(rows[-1], flush=True)
    new = not os.path.exists(args.out)
    with open(args.out, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        if new:
            writer.writeheader()
        writer.writerows(rows)
    imported = {r["pair"]: r["seconds"] for r in rows if r["what"] == "import_torch_pyg"}
    for label, _ in runs:
        mine = [r for r in rows if r["label"] == label]
        ratios = [r["seconds"] / imported[r["pair"]] for r in mine]
        print(f"{label}: run / import per round {[round(x, 2) for x in ratios]}, "
              f"median {statistics.median(ratios):.2f}; load1 {min(r['load1'] for r in mine)}-"
              f"{max(r['load1'] for r in mine)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
