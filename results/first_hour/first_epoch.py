"""Seconds from start to the first epoch line of the README's quickstart, kernels not built (issue 42, Done means).

    python results/first_hour/first_epoch.py --python /tmp/venv-after/bin/python --label after

Runs the quickstart (``sarlab.run("planetoid:cora", workers=2, model="gcn", epochs=20)``, with ``quiet=False`` so the
epoch lines show) with the given Python (a fresh venv with the wheel installed: ``fresh_venv.sh``) in a new, empty
``SARLAB_CACHE_DIR``, and notes the time of every output line. Appends label, seconds to the first ``epoch 1/``
line, seconds to the end, and the 1-minute load average before and after to ``first_epoch.csv`` beside this file.
A background kernel build the run started is left to finish (its pid is in the output).
"""
from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
QUICKSTART = ("import sarlab\n"
              "result = sarlab.run('planetoid:cora', workers=2, model='gcn', epochs=20, quiet=False)\n"
              "print(result.records[['rank', 'epoch', 'loss', 'epoch_time_s']].tail(2))\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", required=True, help="the fresh venv's python")
    parser.add_argument("--label", required=True)
    parser.add_argument("--out", default=str(HERE / "first_epoch.csv"))
    args = parser.parse_args(argv)
    cache = tempfile.mkdtemp(prefix="sarlab-first-hour-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SARLAB_")}
    env["SARLAB_CACHE_DIR"] = cache
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.Popen([args.python, "-c", QUICKSTART], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=tempfile.gettempdir())
    first: list[float] = []

    def read(stream, name):
        for line in stream:
            now = time.perf_counter() - start
            print(f"{now:7.1f}s {name}: {line.rstrip()}", flush=True)
            if "epoch 1/" in line and not first:
                first.append(now)

    readers = [threading.Thread(target=read, args=(proc.stdout, "out")),
               threading.Thread(target=read, args=(proc.stderr, "err"))]
    for reader in readers:
        reader.start()
    code = proc.wait(timeout=3600)
    for reader in readers:
        reader.join()
    total = time.perf_counter() - start
    if code != 0 or not first:
        raise SystemExit(f"the quickstart failed (exit {code}) or printed no epoch line")
    row = {"label": args.label, "first_epoch_s": round(first[0], 1), "total_s": round(total, 1),
           "load1_before": round(load_before, 2), "load1_after": round(os.getloadavg()[0], 2), "cache_dir": cache}
    new = not os.path.exists(args.out)
    with open(args.out, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(row))
        if new:
            writer.writeheader()
        writer.writerow(row)
    print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
