"""Replay every committed record of sittings s1-s8 (results/host_model/families/records_sN/) with its sitting's
2-core profile and write the memory errors, one row per configuration.

    python results/host_model/gat_memory/replay.py after results/host_model/gat_memory/after.csv
    python results/host_model/gat_memory/replay.py before results/host_model/gat_memory/before.csv --rev 10bce46
    python results/host_model/gat_memory/replay.py after results/host_model/gat_memory/extra_after.csv \
        --records 'results/host_model/gat_memory/records/*.json'

``before`` loads ``simulator/workload/layer_memory.py``, ``simulator/system/schedule.py`` and
``simulator/system/pricing.py`` as they were at ``--rev`` (the rest of the tree as it is); ``after`` is the tree;
``--pricing FILE`` loads ``pricing.py`` from FILE instead (the tree with ``pricing.diff`` applied, until it is).
"""
from __future__ import annotations

import argparse
import glob
import importlib.abc
import importlib.util
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
FILES = {"sarlab.simulator.workload.layer_memory": "simulator/workload/layer_memory.py",
         "sarlab.simulator.system.schedule": "simulator/system/schedule.py",
         "sarlab.simulator.system.pricing": "simulator/system/pricing.py"}


class _Sources(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves modules from given sources: ``{module name: (label, source text)}``."""

    def __init__(self, sources: dict[str, tuple[str, str]]):
        self.sources = sources

    def find_spec(self, name, path, target=None):
        return importlib.util.spec_from_loader(name, self) if name in self.sources else None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        label, src = self.sources[module.__name__]
        exec(compile(src, label, "exec"), module.__dict__)


def _at(rev: str, path: str) -> tuple[str, str]:
    src = subprocess.run(["git", "-C", ROOT, "show", f"{rev}:{path}"], capture_output=True, text=True, check=True)
    return f"{rev}:{path}", src.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variant", choices=("before", "after"))
    ap.add_argument("out")
    ap.add_argument("--rev", default="HEAD", help="the revision 'before' loads the memory model from")
    ap.add_argument("--sittings", default="1,2,3,4,5,6,7,8")
    ap.add_argument("--pricing", help="with after: load simulator/system/pricing.py from this file")
    ap.add_argument("--records", help="replay these records (a glob) instead of the sittings'")
    ap.add_argument("--profile", default="results/host_model/families/profile_2core_s8.json",
                    help="with --records: the profile")
    args = ap.parse_args()
    sources = {name: _at(args.rev, path) for name, path in FILES.items()} if args.variant == "before" else {}
    if args.variant == "after" and args.pricing:
        with open(args.pricing) as f:
            sources["sarlab.simulator.system.pricing"] = (args.pricing, f.read())
    if sources:
        sys.meta_path.insert(0, _Sources(sources))
    import pandas as pd

    from sarlab.simulator.calibration.measured import read_records
    from sarlab.simulator.hardware.profile import load_profile
    from sarlab.simulator.studies.validate import validate

    rows = []
    families = os.path.join(ROOT, "results", "host_model", "families")
    if args.records:
        runs = [(0, os.path.join(ROOT, args.profile), sorted(glob.glob(os.path.join(ROOT, args.records))))]
    else:
        runs = [(s, os.path.join(families, f"profile_2core_s{s}.json"),
                 sorted(glob.glob(os.path.join(families, f"records_s{s}", "*.json"))))
                for s in (int(x) for x in args.sittings.split(","))]
    for s, profile_path, paths in runs:
        profile = load_profile(profile_path)
        for path in paths:
            for _, r in validate(read_records(path), profile).iterrows():
                rows.append({"sitting": s, "records": os.path.relpath(path, ROOT), "model": r["model"],
                             "mode": r["mode"], "fused": bool(r["fused"]), "prefetch": int(r["prefetch"]),
                             "nodes": int(r["num_nodes"]), "workers": int(r["workers"]), "threads": int(r["threads"]),
                             "measured_mib": r["measured_peak_above_baseline_bytes"] / 2**20,
                             "predicted_mib": r["predicted_peak_above_baseline_bytes"] / 2**20,
                             "memory_error": r["memory_error"]})
        print(f"{len(rows)} configurations so far", flush=True)
    pd.DataFrame(rows).round(6).to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
