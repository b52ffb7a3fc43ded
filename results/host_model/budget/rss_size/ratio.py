"""Does the rss / live epoch ratio of the calibration's engine runs depend on the graph size? GCN and SAGE (3 x 256,
one worker, one thread, 3 epochs: the median of the last two) at 8,000 and 24,000 nodes, rss then live in one
process per round (the counting allocator, once installed, stays), rounds alternating the sizes' order. Prints one
JSON line per round: each run's median epoch.

    .venv/bin/python results/host_model/budget/rss_size/ratio.py ROUNDS > results/host_model/budget/rss_size/ratio.jsonl
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from sarlab.real.calibration import engine_runs as er


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    sizes = (8_000, 24_000)
    with tempfile.TemporaryDirectory(prefix="rss-size-") as tmp:
        for r in range(rounds):
            order = sizes if r % 2 == 0 else sizes[::-1]
            runs = []
            for memory in ("rss", "live"):
                for n in order:
                    for model in er.ENGINE_MODELS:
                        runs.append({"spec": er.ENGINE_GRAPH.format(nodes=n),
                                     "partition_dir": str(Path(tmp) / f"parts-{n}"), "model": model, "layers": 3,
                                     "hidden": 256, "epochs": 3, "threads": 1, "memory": memory})
            rows = er.run_child(runs, Path(tmp))
            out = [{"nodes": int(row["num_nodes"]), "model": run["model"], "memory": str(row["mem_method"]),
                    "epoch_s": float(row["measured_epoch_time_s"])} for run, row in zip(runs, rows, strict=True)]
            print(json.dumps({"round": r, "load": os.getloadavg()[0], "runs": out}), flush=True)


if __name__ == "__main__":
    main()
