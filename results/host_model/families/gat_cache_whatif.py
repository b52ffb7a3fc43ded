"""What-if (no library change): would a cache model for the fused GAT kernels remove GAT's over-prediction across
ranks? Times the fused kernels (forward + backward, one thread, five rounds, medians) at one degree (8) and growing
rows, so that the source rows straddle the effective cache the s3 calibrations fitted (``llc_bytes``); fits an
in-cache and an out-of-cache rate with the profile's overhead, row rate and backward ratio held; then prices s3's
records again with those rates in each s3 profile (the family factors as calibrated, fitted on the old GAT pricing).
Usage: .venv/bin/python results/host_model/families/gat_cache_whatif.py"""

import glob
import json
import math
import statistics
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from scipy.optimize import nnls

from sarlab import kernels
from sarlab.nn.gat import AttentionAggregation
from sarlab.real.calibration.gatbench import gat_calls, gat_inputs
from sarlab.real.calibration.harness import time_call
from sarlab.simulator.api import resolve_profile
from sarlab.simulator.calibration.measured import read_records
from sarlab.simulator.studies.validate import validate

D = Path(__file__).resolve().parent
HEADS, CH, DEG = 4, 32, 8
ROWS = (5_000, 10_000, 20_000, 40_000, 80_000)

torch.set_num_threads(1)
att = AttentionAggregation(HEADS, CH, 0.2, False, True, kernels.backend("auto"))
gen = torch.Generator().manual_seed(0)
calls = {n: gat_calls(att, *gat_inputs(n, DEG, HEADS, CH, gen)) for n in ROWS}
times: dict = {n: [] for n in ROWS}
for _ in range(5):
    for n in ROWS:
        fwd, bwd = calls[n]
        times[n].append(time_call(fwd, 3) + time_call(bwd, 3))
med = {n: statistics.median(v) for n, v in times.items()}


def records(where: str) -> pd.DataFrame:
    return pd.concat([read_records(f) for f in sorted(glob.glob(str(D / "records_s3" / f"{where}_*.json")))],
                     ignore_index=True)


for base in ("1core", "2core"):
    profile = json.loads((D / f"profile_{base}_s3.json").read_text())
    op, llc = profile["ops"]["gat_fused"], profile["llc_bytes"]
    work, gathered, rest = [], [], []
    for n in ROWS:
        w, g = n * DEG * HEADS * CH, n * (HEADS * CH + HEADS) * 4.0
        active = n * (1 - math.exp(-DEG))
        left = med[n] / (1 + op["bwd_ratio"]) - op["overhead_s"] - active * HEADS * CH / op["row_rate"]
        hit = min(1.0, llc / g)
        work.append((w * hit, w * (1 - hit)))
        rest.append(left)
        gathered.append(g)
    (inv_r, inv_mem), _ = nnls(np.array(work), np.array(rest))
    print(f"{base}: llc {llc / 2**20:.1f} MB; rows {ROWS}: forward + backward "
          + ", ".join(f"{med[n] * 1e3:.1f}" for n in ROWS) + f" ms; in-cache rate {1 / inv_r:.3g} (profile "
          f"{op['rate']:.3g}), out-of-cache {1 / inv_mem if inv_mem > 0 else float('inf'):.3g} per s")
    changed = json.loads(json.dumps(profile))
    changed["ops"]["gat_fused"].update(rate=1 / inv_r, mem_rate=(1 / inv_mem) if inv_mem > 0 else None)
    for name, prof_json, cores, where in (("to_both", changed, 2, "both"), ("to_core0", changed, 1, "core0")):
        if base == "1core" and where == "core0":
            continue
        for label, pj in (("as calibrated", profile), ("gat_fused cache model", prof_json)):
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "p.json"
                path.write_text(json.dumps(pj))
                prof, _ = resolve_profile(f"describe:base={path},cores={cores}")
                table = validate(records(where), prof)
            err = table.time_error.abs()
            gat = table[table.model == "gat"].time_error
            print(f"  {base} {name:9s} {label:22s}: median {err.median():.1%}, max {err.max():.1%}, rows > 30 % "
                  f"{(err > 0.3).sum()}; GAT rows " + " ".join(f"{v:+.0%}" for v in gat))
