"""Sittings s1 and s2 ran with a factor per op family (code 55f6119); this prices their records again with the factors
the final code (c563362: GEMM apart, one factor for the other families) fits from the same engine runs, read from each
profile's stored split (meta.raw.engine.family_split): no new measurement. Writes validation_<name>_<sitting>.refit.csv
and prints one line per validation. Usage: .venv/bin/python results/host_model/families/refit.py"""

import glob
import json
import tempfile
from pathlib import Path

import pandas as pd

from sarlab.simulator.api import resolve_profile
from sarlab.simulator.calibration.fitting import fit_family_scale
from sarlab.simulator.calibration.measured import read_records
from sarlab.simulator.studies.validate import validate

D = Path(__file__).resolve().parent
SKIP = ("model", "nodes", "measured_s")


def refitted(sitting: str, base: str) -> dict:
    profile = json.loads((D / f"profile_{base}_{sitting}.json").read_text())
    split = profile["meta"]["raw"]["engine"]["family_split"]
    profile["family_scale"] = fit_family_scale([r["measured_s"] for r in split],
                                               [{k: v for k, v in r.items() if k not in SKIP} for r in split])
    return profile


def run(sitting: str, name: str, base: str, cores: int, where: str) -> None:
    profile = refitted(sitting, base)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "profile.json"
        path.write_text(json.dumps(profile))
        prof, _ = resolve_profile(f"describe:base={path},cores={cores}")
        files = sorted(glob.glob(str(D / f"records_{sitting}" / f"{where}_*.json")))
        table = validate(pd.concat([read_records(f) for f in files], ignore_index=True), prof)
    table.to_csv(D / f"validation_{name}_{sitting}.refit.csv", index=False)
    err = table.time_error.abs()
    factors = {k: round(v, 2) for k, v in profile["family_scale"].items() if k in ("gemm", "spmm")}
    print(f"{sitting} {name:14s} factors {factors}: median {err.median():.1%}, max {err.max():.1%}, "
          f"rows > 30 % {(err > 0.3).sum()}, memory median {table.memory_error.abs().median():.1%}")


for s in ("s1", "s2"):
    run(s, "1core_to_both", "1core", 2, "both")
    run(s, "2core_to_both", "2core", 2, "both")
    run(s, "2core_to_core0", "2core", 1, "core0")
