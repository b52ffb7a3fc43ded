"""The validations of a sitting run with PASSES=2 (sitting.sh): each configuration measured twice, minutes apart
(the second pass in reverse order). Prints, per validation, how far the two measurements of one configuration
differ (the runs' own repeatability, |m1 - m2| / mean), each pass's errors, and the error against the mean of the
two. The prediction is the same for both (one profile, one configuration). Usage: python repeats.py TAG."""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).parent


def summary(errors: list[float]) -> str:
    a = [abs(e) for e in errors]
    over = sum(x > 0.3 for x in a)
    return f"median {100 * statistics.median(a):5.1f} %, worst {100 * max(a):5.1f} %, over 30 %: {over}"


def main(tag: str) -> None:
    for csv in sorted(HERE.glob(f"validation_*_{tag}.csv")):
        t = pd.read_csv(csv)
        t["config"] = t["records_path"].str.replace("_r2.json", ".json", regex=False)
        t["pass"] = t["records_path"].str.endswith("_r2.json").map({True: 2, False: 1})
        wide = t.pivot_table(index="config", columns="pass",
                             values=["measured_epoch_time_s", "predicted_epoch_time_s", "memory_error"])
        if 2 not in wide["measured_epoch_time_s"]:
            print(f"{csv.name}: one pass only")
            continue
        m1, m2 = wide["measured_epoch_time_s"][1], wide["measured_epoch_time_s"][2]
        pred = wide["predicted_epoch_time_s"][1]
        mean = (m1 + m2) / 2
        print(f"{csv.name} ({len(wide)} configurations)")
        print(f"  repeatability |m1 - m2| / mean:  {summary(list(((m1 - m2) / mean).abs()))}")
        print(f"  pass 1 errors:                   {summary(list(pred / m1 - 1))}")
        print(f"  pass 2 errors:                   {summary(list(wide['predicted_epoch_time_s'][2] / m2 - 1))}")
        print(f"  errors against the mean of both: {summary(list(pred / mean - 1))}")
        mem = list(wide["memory_error"][1]) + list(wide["memory_error"][2])
        print(f"  memory errors (both passes):     {summary(mem)}")
        for config in wide.index:
            print(f"    {Path(config).stem:32s} m1 {m1[config]:.3f} m2 {m2[config]:.3f} pred {pred[config]:.3f} "
                  f"differ {100 * abs(m1[config] - m2[config]) / mean[config]:5.1f} % "
                  f"error vs mean {100 * (pred[config] / mean[config] - 1):+6.1f} %")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "s9")
