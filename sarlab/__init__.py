"""sarlab: distributed full-batch GNN training with Sequential Aggregation and Rematerialization (SAR).

The front door. Everything here loads on first use, so ``import sarlab`` stays cheap (no torch until a name
that needs it is touched)::

    import sarlab
    result = sarlab.run("planetoid:cora", workers=2, model="gcn", epochs=20)
    result.records          # one row per (rank, epoch): times, bytes, peak memory, accuracies
    model = sarlab.load_model("model.pt")

Training and checking: :func:`run`, :func:`gradients` (:mod:`sarlab.real.api`). Graphs:
:func:`load_graph` (a spec string, a PyG ``Data``, a networkx graph, or scipy CSR + arrays through
:func:`from_pyg` / :func:`from_networkx` / :func:`from_scipy`), :mod:`sarlab.datasets` (shipped Cora and CiteSeer
with Planetoid's public split), :func:`partition`. Layers: :mod:`sarlab.nn`. Prediction without a cluster:
:func:`simulate`, :func:`plan`, :func:`calibrate`. Sub-packages: :mod:`sarlab.core` (the exact engine),
:mod:`sarlab.strategies`, :mod:`sarlab.data`, :mod:`sarlab.kernels`, :mod:`sarlab.simulator`, :mod:`sarlab.real`.

May import (``MAY_IMPORT`` below, held by tests/test_contracts.py): ``sarlab.version``, ``sarlab.data``.
"""
from __future__ import annotations

import importlib

from sarlab.version import __version__

#: public name -> (module, attribute); attribute None means the module itself
_LAZY = {
    "run": ("sarlab.real.api", "run"),
    "gradients": ("sarlab.real.api", "gradients"),
    "RunResult": ("sarlab.real.api", "RunResult"),
    "GradientResult": ("sarlab.real.api", "GradientResult"),
    "load_model": ("sarlab.real.api", "load_model"),
    "predict": ("sarlab.real.api", "predict"),
    "load_graph": ("sarlab.data.graphs", "load_graph"),
    "from_pyg": ("sarlab.data.convert", "from_pyg"),
    "from_networkx": ("sarlab.data.convert", "from_networkx"),
    "from_scipy": ("sarlab.data.convert", "from_scipy"),
    "to_pyg": ("sarlab.data.convert", "to_pyg"),
    "Graph": ("sarlab.data.graph_data", "Graph"),
    "partition": ("sarlab.data.partition", "partition"),
    "load_partition": ("sarlab.data.partition", "load_part"),
    "ModelConfig": ("sarlab.nn.model", "ModelConfig"),
    "TrainConfig": ("sarlab.training.trainer", "TrainConfig"),
    "EngineConfig": ("sarlab.core.config", "EngineConfig"),
    "simulate": ("sarlab.simulator.api", "simulate"),
    "plan": ("sarlab.simulator.api", "plan"),
    "calibrate": ("sarlab.real.calibration.calibrate", "calibrate"),
    "datasets": ("sarlab.datasets", None),
    "nn": ("sarlab.nn", None),
    "kernels": ("sarlab.kernels", None),
    "simulator": ("sarlab.simulator", None),
    "real": ("sarlab.real", None),
    "training": ("sarlab.training", None),
    "common": ("sarlab.common", None),
    "core": ("sarlab.core", None),
    "data": ("sarlab.data", None),
    "strategies": ("sarlab.strategies", None),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'sarlab' has no attribute {name!r}")
    module, attribute = _LAZY[name]
    value = importlib.import_module(module)
    if attribute is not None:
        value = getattr(value, attribute)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)

#: the sarlab packages this one may import (held by tests/test_contracts.py)
MAY_IMPORT = (
    "sarlab.version", "sarlab.data"
)
