"""Measure per-worker peak RSS (VmHWM) of `sarlab train` over a small grid and compare the size check's estimate
(sarlab.real.launch.sizing.worker_bytes: the simulator's memory model plus the process base).

Usage: python results/safety/size_grid.py [GRAPH,WORKERS,HIDDEN ...] [--remeasure]
    -> results/safety/size_estimate.csv and .md (measured peaks of an earlier run are reused)
Larger graphs (nodes 1e7..1e9, workers 64) are only estimated: the check refuses them on this machine.
"""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tempfile

from sarlab.nn.model import ModelConfig
from sarlab.real.launch import sizing
from sarlab.training.trainer import TrainConfig

HERE = os.path.dirname(os.path.abspath(__file__))
#: (graph, workers, hidden); measured
MEASURED = [("planetoid:cora", 2, h) for h in (16, 256, 4096, 30000)] + \
           [("planetoid:cora", w, 64) for w in (1, 4, 8, 16, 32)] + \
           [(f"synthetic:nodes={n},degree=10,features=32,classes=8", 2, 64) for n in (1000, 10000, 100000, 1000000, 3000000)]
#: estimated only (refused here or too large to measure on this machine)
ESTIMATED = [("planetoid:cora", 2, 100000), ("planetoid:cora", 64, 64),
             ("synthetic:nodes=10000000,degree=10,features=32,classes=8", 2, 64),
             ("synthetic:nodes=1000000000,degree=10,features=32,classes=8", 2, 64)]


def measure(graph: str, workers: int, hidden: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        cmd = [sys.executable, "-m", "sarlab", "train", "--graph", graph, "--workers", str(workers), "--hidden",
               str(hidden), "--epochs", "2", "--eval-every", "0", "--json", out, "--method", "random"]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if res.returncode != 0:
            raise RuntimeError(res.stderr[-2000:])
        records = json.load(open(out))
    return max(r["peak_vmhwm_bytes"] for r in records)


def _previous() -> dict:
    """Measured peaks (bytes) of an earlier run of this script, by (graph, workers, hidden): reused, so that a
    change of the estimate is re-scored without measuring again (``--remeasure`` measures every point)."""
    path = os.path.join(HERE, "size_estimate.csv")
    if "--remeasure" in sys.argv or not os.path.exists(path):
        return {}
    with open(path) as f:
        return {(r["graph"], int(r["workers"]), int(r["hidden"])): float(r["measured_mib"]) * 2**20
                for r in csv.DictReader(f) if r["measured_mib"]}


def main() -> None:
    """Args: ``GRAPH,WORKERS,HIDDEN`` adds a measured point; ``--remeasure`` ignores the earlier measurements."""
    rows, previous = [], _previous()
    extra = [tuple(a.split(",")) for a in sys.argv[1:] if a.count(",") == 2]
    grid = MEASURED + [(g, int(w), int(h)) for g, w, h in extra]
    for graph, workers, hidden in grid + [e for e in ESTIMATED if e not in grid]:
        est = sizing.worker_bytes(sizing.graph_sizes(graph), workers, ModelConfig(hidden=hidden), TrainConfig())
        key = (graph, workers, hidden)
        measured = (previous.get(key) or measure(graph, workers, hidden)) if key in grid else None
        err = (est - measured) / measured if measured else None
        rows.append({"graph": graph, "workers": workers, "hidden": hidden, "estimate_mib": round(est / 2**20, 1),
                     "measured_mib": round(measured / 2**20, 1) if measured else "",
                     "error_pct": round(100 * err, 1) if err is not None else ""})
        print(rows[-1], flush=True)
    with open(os.path.join(HERE, "size_estimate.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    errs = sorted(abs(r["error_pct"]) for r in rows if r["error_pct"] != "")
    signed = [r["error_pct"] for r in rows if r["error_pct"] != ""]
    median = errs[len(errs) // 2] if len(errs) % 2 else (errs[len(errs) // 2 - 1] + errs[len(errs) // 2]) / 2
    with open(os.path.join(HERE, "size_estimate.md"), "w") as f:
        f.write("# The size check's per-worker estimate against measured peaks\n\n"
                f"Command: `python results/safety/size_grid.py {' '.join(sys.argv[1:])}` (sarlab train, 2 epochs, "
                "random partition, peak VmHWM of the largest rank; estimate: sizing.worker_bytes with a process "
                f"base of {sizing.WORKER_BASE_BYTES / 2**20:.0f} MiB).\n\n"
                f"|error| median {median:.1f} %, worst {errs[-1]:.1f} % over {len(errs)} measured points "
                f"(signed: {min(signed):+.1f} .. {max(signed):+.1f} %; + = the estimate is above the peak).\n\n"
                "| graph | workers | hidden | estimate MiB | measured MiB | error % |\n|---|---|---|---|---|---|\n")
        for r in rows:
            f.write(f"| {r['graph']} | {r['workers']} | {r['hidden']} | {r['estimate_mib']} | "
                    f"{r['measured_mib'] or 'not run'} | {r['error_pct']} |\n")


if __name__ == "__main__":
    main()
