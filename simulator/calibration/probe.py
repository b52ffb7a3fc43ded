"""The speed probe's reading: what the fixed real workload run next to each measured configuration says.

A shared VM's speed drifts between minutes, so ``sarlab bench engine --probe`` runs
:func:`sarlab.real.calibration.engine_runs.speed_probe`
between configurations; the validation divides each configuration's adjacent probe epoch time by the
simulator's prediction of the probe to get the ``compute_scale`` that held while it ran (:func:`probe_scale`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sarlab.common.records import RUN_COLUMN
from sarlab.simulator.hardware.profile import Profile
from sarlab.simulator.system.replay import MEMORY_COLUMN, simulate_row

#: the probe: one worker with one thread, GCN, 3 layers, hidden 256, 3 epochs (~15-20 s), on a graph no benchmark uses
PROBE_GRAPH = "synthetic:nodes=100000,degree=30,features=128,classes=16,seed=11"
PROBE_MODEL = {"model": "gcn", "layers": 3, "hidden": 256, "epochs": 3}
#: the memory method the probe runs under (glibc with the engine's thresholds, as it always has): its scale is priced
#: as that method's (:meth:`sarlab.simulator.hardware.profile.Profile.for_memory`)
PROBE_MEMORY = "rss"


def probe_row(row: pd.Series) -> pd.Series:
    """The configuration of the speed probe that ran next to ``row``
    (:func:`sarlab.real.calibration.engine_runs.speed_probe`), as a
    :func:`sarlab.simulator.calibration.measured.summarize_measured`-like row that
    :func:`sarlab.simulator.system.replay.simulate_row` accepts."""
    return pd.Series(
        {
            "label": "probe",
            "graph": row["probe_graph"],
            "partition_dir": row.get("probe_partition_dir") or "",
            "num_nodes": int(row["probe_num_nodes"]),
            "num_edges": int(row["probe_num_edges"]),
            "feature_dim": int(row["probe_feature_dim"]),
            "num_classes": int(row["probe_num_classes"]),
            "model": PROBE_MODEL["model"],
            "layers": PROBE_MODEL["layers"],
            "hidden": PROBE_MODEL["hidden"],
            "heads": 1,
            "aggr": "mean",
            "fused": False,
            "mode": "sar",
            "workers": 1,
            "prefetch": 1,
            "dtype": "float32",
            "batchnorm": False,
            "dropout": 0.0,
            "threads": int(row["probe_threads"]),
            MEMORY_COLUMN: PROBE_MEMORY,
            RUN_COLUMN: row.get(RUN_COLUMN) or "",
        }
    )


def probe_scale(row: pd.Series, profile: Profile) -> float:
    """``compute_scale`` while ``row`` ran: its adjacent speed-probe epoch time over the simulator's
    prediction of the probe with ``compute_scale`` 1 (NaN when the records carry no probe), for the memory method of
    ``profile``'s curve (the probe runs under :data:`PROBE_MEMORY`: a profile that knows that method's ratio to its
    curve's divides it out)."""
    value = row.get("probe_epoch_s")
    if value is None or not np.isfinite(float(value)) or float(value) <= 0:
        return math.nan
    predicted = float(simulate_row(probe_row(row), profile.with_scale(1.0)).epoch_time_s.max())
    return float(value) / predicted
