"""The datasets shipped inside the package: Cora and CiteSeer with Planetoid's public split.

The files (``sarlab/data/planetoid/{cora,citeseer}.npz``, plain numpy arrays, no pickles) are the Planetoid
release of Yang et al. (ICML 2016) that Kipf & Welling (ICLR 2017) and PyG's ``Planetoid`` use: the adjacency is
symmetric without self-loops, features are the binary bag-of-words rows, and the stored masks are the public
split (Cora: 140 train / 500 val / 1000 test nodes; CiteSeer: 120 / 500 / 1000). Nothing is downloaded::

    import sarlab
    g = sarlab.datasets.load("cora")        # = sarlab.load_graph("planetoid:cora")
    g.num_nodes, g.feature_dim, g.num_classes, int(g.train_mask.sum())   # (2708, 1433, 7, 140)
"""
from __future__ import annotations

import importlib.resources
from pathlib import Path

from sarlab.data.convert import from_scipy, read_npz
from sarlab.data.graph_data import Graph
from sarlab.data.validate_data import InputError

__all__ = ["names", "path", "load"]

#: dataset name -> file under sarlab/data/planetoid
_FILES = {"cora": "cora.npz", "citeseer": "citeseer.npz"}


def names() -> list[str]:
    """The shipped datasets' names (what :func:`load` and the ``planetoid:NAME`` graph spec take)."""
    return sorted(_FILES)


def path(name: str) -> Path:
    """The shipped npz file of dataset ``name`` (inside the installed package, found through importlib.resources)."""
    key = name.lower()
    if key not in _FILES:
        raise InputError(f"unknown shipped dataset {name!r}; sarlab ships {', '.join(names())}")
    resource = importlib.resources.files("sarlab.data").joinpath("planetoid", _FILES[key])
    found = Path(str(resource))
    if not found.is_file():
        raise InputError(f"the shipped dataset file {found} is missing: the sarlab installation is incomplete "
                         "(reinstall it)")
    return found


def load(name: str) -> Graph:
    """Dataset ``name`` (``cora`` or ``citeseer``) as a :class:`~sarlab.data.graph_data.Graph` with the public split.

    Edges: both directions of every undirected edge (Cora 10,556, CiteSeer 9,104). The name is e.g.
    ``cora [split: stored]``.
    """
    arrays = read_npz(str(path(name)))
    return from_scipy(arrays["adj"], arrays["features"], arrays["labels"], arrays["train_mask"], arrays["val_mask"],
                      arrays["test_mask"], name=name.lower(), undirected=True)
