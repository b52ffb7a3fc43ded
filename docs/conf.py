"""Sphinx configuration of the sarlab documentation.

Build (warnings are errors): ``make docs`` or ``python docs/build.py OUTDIR``, which copies these sources to a
temporary folder first, so the API stubs that autosummary generates never land in the checkout (a plain
``python -m sphinx docs OUTDIR`` works too and writes them to the ignored ``docs/generated/``).
"""
from __future__ import annotations

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
]

exclude_patterns = ["_build"]
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

# References to names outside this project (torch, numpy, pandas) stay plain text, not warnings.
nitpicky = False

html_theme = "alabaster"
html_title = f"sarlab {release}"
html_static_path: list[str] = []
