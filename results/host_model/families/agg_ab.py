"""The A/B of the measured aggregation factor on one calibration: a profile's family factors refitted from its own
engine runs the way calibrations before it did (GEMM apart, every other family one least-squares factor, no
aggregation timed), written beside it as ``<profile>.lsq.json``, so both price the same records.

    .venv/bin/python results/host_model/families/agg_ab.py results/host_model/families/profile_2core_s15.json

Prints both sets of factors. The split of each engine run over the families is the calibration's own
(``meta.raw.engine.family_split``, at the curve's scale).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from sarlab.simulator.calibration.fitting import fit_family_scale

FAMILIES = ("gemm", "spmm", "max_aggr", "gat_unfused", "gat_fused", "gat_autograd", "elementwise")


def main() -> None:
    path = Path(sys.argv[1])
    profile = json.loads(path.read_text())
    runs = profile["meta"]["raw"]["engine"]["family_split"]
    splits = [{f: r[f] for f in FAMILIES if f in r} for r in runs]
    old = fit_family_scale([r["measured_s"] for r in runs], splits)
    print("measured aggregation:", {k: round(v, 3) for k, v in profile["family_scale"].items()})
    print("least squares       :", {k: round(v, 3) for k, v in old.items()})
    out = path.with_suffix(".lsq.json")
    out.write_text(json.dumps({**profile, "family_scale": old, "name": profile["name"] + "-lsq"}, indent=1))
    print("wrote", out)


if __name__ == "__main__":
    main()
