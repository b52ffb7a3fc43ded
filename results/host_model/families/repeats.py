"""The validations of a sitting run with PASSES=2 (sitting.sh): each configuration measured twice, minutes apart
(the second pass in reverse order), validated per pass (validation_NAME_p1_TAG.csv, ..._p2_TAG.csv) and pooled
(validation_NAME_TAG.csv: the median epoch over both runs' epochs). Prints, per validation, how far the two
measurements of one configuration differ (the runs' own repeatability, |m1 - m2| / mean), each pass's errors and
the pooled ones. The prediction is the same for both passes (one profile, one configuration).
Usage: python repeats.py TAG [--rows]."""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).parent
KEY = ["model", "num_nodes", "workers", "threads"]


def summary(errors) -> str:
    a = [abs(float(e)) for e in errors]
    over = sum(x > 0.3 for x in a)
    return f"median {100 * statistics.median(a):5.1f} %, worst {100 * max(a):5.1f} %, over 30 %: {over}"


def main(tag: str, rows: bool = False) -> None:
    for pooled_csv in sorted(HERE.glob(f"validation_*_{tag}.csv")):
        name = pooled_csv.name[len("validation_"): -len(f"_{tag}.csv")]
        p1, p2 = (HERE / f"validation_{name}_p{k}_{tag}.csv" for k in (1, 2))
        if name.endswith(("_p1", "_p2")) or not (p1.exists() and p2.exists()):
            continue
        a, b, pooled = (pd.read_csv(f).set_index(KEY).sort_index() for f in (p1, p2, pooled_csv))
        m1, m2 = a["measured_epoch_time_s"], b["measured_epoch_time_s"]
        differ = (m1 - m2).abs() / ((m1 + m2) / 2)
        print(f"{name} ({len(a)} configurations)")
        print(f"  repeatability |m1 - m2| / mean: {summary(differ)}")
        print(f"  pass 1 time errors:             {summary(a['time_error'])}")
        print(f"  pass 2 time errors:             {summary(b['time_error'])}")
        print(f"  pooled time errors:             {summary(pooled['time_error'])}")
        print(f"  pooled memory errors:           {summary(pooled['memory_error'])}")
        if rows:
            for key in a.index:
                print(f"    {'/'.join(map(str, key)):22s} m1 {m1[key]:.3f} m2 {m2[key]:.3f} "
                      f"pred {a['predicted_epoch_time_s'][key]:.3f} differ {100 * differ[key]:5.1f} % errors "
                      f"{100 * a['time_error'][key]:+6.1f} / {100 * b['time_error'][key]:+6.1f} / pooled "
                      f"{100 * pooled['time_error'][key]:+6.1f} %")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "s9", "--rows" in sys.argv)
