"""Do forked workers (the zygote, the default) train as fast as fresh interpreters? Alternating A/B, one sitting.

    python results/house/worker_start_ab.py [--rounds 3] [--out results/house/worker_start_ab.csv]

Each round runs ``sarlab train`` on ``synthetic:nodes=20000,degree=20,features=64,classes=16,seed=0`` (2 workers,
3 x 128, 6 epochs) with ``SARLAB_WORKER_START=zygote`` then ``=spawn`` (the order flips every round), and records
the run's wall time, its median epoch time over epochs > 0 (max over ranks), its peak above baseline and its last
loss (which must be equal). The 1-minute load average is read before each run.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SARLAB = str(Path(sys.executable).with_name("sarlab"))
RUN = ["train", "--graph", "synthetic:nodes=20000,degree=20,features=64,classes=16,seed=0", "--workers", "2",
       "--model", "gcn", "--layers", "3", "--hidden", "128", "--epochs", "6", "--eval-every", "0", "-q"]


def one(mode: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        load = os.getloadavg()[0]
        start = time.perf_counter()
        done = subprocess.run([SARLAB, *RUN, "--json", out], capture_output=True, text=True, timeout=600,
                              env=dict(os.environ, SARLAB_WORKER_START=mode))
        wall = time.perf_counter() - start
        if done.returncode:
            raise SystemExit(done.stdout + done.stderr)
        recs = json.load(open(out))
    epochs = sorted({r["epoch"] for r in recs if r["epoch"] > 0})
    per_epoch = [max(r["epoch_time_s"] for r in recs if r["epoch"] == e) for e in epochs]
    last = max(r["epoch"] for r in recs)
    peak = max(r["peak_mem_bytes"] - r["baseline_mem_bytes"] for r in recs) / 2**20
    loss = next(r["loss"] for r in recs if r["epoch"] == last and r["rank"] == 0)
    return {"mode": mode, "wall_s": round(wall, 3), "epoch_time_s": round(statistics.median(per_epoch), 4),
            "peak_above_baseline_mib": round(peak, 2), "last_loss": loss, "load1": round(load, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(HERE / "worker_start_ab.csv"))
    args = parser.parse_args()
    one("zygote")  # warm-up: the partition cache, the page cache
    rows = []
    for r in range(args.rounds):
        for mode in (("zygote", "spawn") if r % 2 == 0 else ("spawn", "zygote")):
            rows.append({"round": r + 1, **one(mode)})
            print(rows[-1], flush=True)
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    for key in ("wall_s", "epoch_time_s", "peak_above_baseline_mib"):
        ratios = [z[key] / s[key] for z, s in zip((x for x in rows if x["mode"] == "zygote"),
                                                 (x for x in rows if x["mode"] == "spawn"))]
        print(f"{key}: zygote / spawn per round {[round(x, 3) for x in ratios]}, "
              f"median {statistics.median(ratios):.3f}")
    print("last losses equal:", len({x["last_loss"] for x in rows}) == 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
