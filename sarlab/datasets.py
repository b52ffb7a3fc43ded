"""The shipped datasets, importable as a module: ``import sarlab.datasets`` (the same as :mod:`sarlab.data.datasets`).

Cora and CiteSeer with Planetoid's public split, inside the package (nothing is downloaded)::

    import sarlab.datasets
    g = sarlab.datasets.load("cora")        # = sarlab.load_graph("planetoid:cora")
"""
from sarlab.data.datasets import load, names, path

__all__ = ["load", "names", "path"]
