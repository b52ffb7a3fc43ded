"""The speed probe: a fixed real workload (:data:`~sarlab.simulator.calibration.probe.PROBE_MODEL` on
:data:`~sarlab.simulator.calibration.probe.PROBE_GRAPH`) run next to each measured configuration; the simulator
reads it with :func:`sarlab.simulator.calibration.probe.probe_scale`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sarlab.real.calibration.engine_runs import engine_epoch
from sarlab.simulator.calibration.probe import PROBE_GRAPH, PROBE_MODEL


def speed_probe(partition_dir: str | Path, spec: str = PROBE_GRAPH) -> dict[str, Any]:
    """Measure the machine's current speed with the probe (:data:`PROBE_MODEL` on ``spec``, one worker with
    one thread); returns its epoch time and the configuration columns its prediction needs (:func:`probe_row`).

    One thread, like the calibration's engine runs (:func:`engine_epoch`): the scale the probe gives then
    holds no error of the profile's thread efficiencies (records of probes run with all cores carry
    ``probe_threads`` and are priced as they ran).
    """
    row = engine_epoch(spec, PROBE_MODEL["model"], PROBE_MODEL["layers"], PROBE_MODEL["hidden"],
                       PROBE_MODEL["epochs"], partition_dir, threads=1)  # fmt: skip
    return {
        "probe_epoch_s": float(row["measured_epoch_time_s"]),
        "probe_graph": spec,
        "probe_num_nodes": int(row["num_nodes"]),
        "probe_num_edges": int(row["num_edges"]),
        "probe_feature_dim": int(row["feature_dim"]),
        "probe_num_classes": int(row["num_classes"]),
        "probe_partition_dir": str(partition_dir),
        "probe_threads": int(row["threads"]),
        "probe_time": time.time(),
    }
