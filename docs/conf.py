"""Sphinx configuration of the sarlab documentation.

Build (warnings are errors): ``make docs`` or ``python docs/build.py OUTDIR``, which copies these sources to a
temporary folder first, so the API stubs that autosummary generates never land in the checkout (a plain
``python -m sphinx docs OUTDIR`` works too and writes them to the ignored ``docs/generated/``).
"""
from __future__ import annotations

import os

import sarlab

project = "sarlab"
author = "The sarlab developers"
copyright = "the sarlab developers, MIT licence"
release = sarlab.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "sphinx.ext.intersphinx",
]

exclude_patterns = ["_build", "_inventories"]
root_doc = "index"

# API reference: one page per module, generated from the docstrings.
autosummary_generate = True
autosummary_imported_members = False
# ignore-module-all: a package's __init__ re-exports names for users; they are documented once, where defined
# (listing them under every package that re-exports them makes ambiguous cross-references).
autodoc_default_options = {"members": True, "show-inheritance": True, "ignore-module-all": True}
# torch.autograd.Function.forward/backward docstrings (with labels of torch's own docs) are not ours to show.
autodoc_inherit_docstrings = False
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
# Optional dependencies some modules import at the top: the docs build needs none of them installed.
autodoc_mock_imports = ["ogb", "dgl", "memray"]
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

# References to names outside this project that no inventory below lists stay plain text, not warnings.
nitpicky = False
# The front door's names are documented twice on purpose: under the name a user types (api.rst: sarlab.run,
# sarlab.ModelConfig) and where they are defined (internals.rst). A short reference such as a type hint
# ``ModelConfig`` then finds both; either page is right, so that ambiguity is not a warning.
suppress_warnings = ["ref.python"]

# Links to torch, PyG, numpy and pandas, offline: each project's address with a small inventory shipped in
# _inventories/ (written by _inventories/make_inventories.py; the build never downloads one).
intersphinx_mapping = {
    key: (url, os.path.join(os.path.dirname(os.path.abspath(__file__)), "_inventories", f"{key}.inv"))
    for key, url in {
        "torch": "https://pytorch.org/docs/stable/",
        "torch_geometric": "https://pytorch-geometric.readthedocs.io/en/latest/",
        "numpy": "https://numpy.org/doc/stable/",
        "pandas": "https://pandas.pydata.org/docs/",
    }.items()
}
intersphinx_timeout = 1

# furo: in the docs and test extras (pip install '.[docs]')
html_theme = "furo"
html_title = f"sarlab {release}"
html_static_path: list[str] = []
