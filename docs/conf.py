"""Sphinx configuration of the sarlab documentation.

Build (warnings are errors): ``python docs/build.py OUTDIR`` or ``make docs`` (HTML under ``.cache/docs``).
``build.py`` copies these sources to a temporary folder first, so the API stubs that autosummary generates
never land in the checkout.
"""
from __future__ import annotations

import os
import sys

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

templates_path = ["_templates"]
exclude_patterns = ["_build", "build.py"]
root_doc = "index"

# API reference: one page per module, generated from the docstrings.
autosummary_generate = True
autosummary_imported_members = False
autodoc_default_options = {"members": True, "show-inheritance": True}
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

# The simulator's default profiles and the kernels' build folder are found relative to the package.
os.environ.setdefault("SARLAB_KERNELS", "torch")  # importing for autodoc never compiles the C++ kernels
sys.setrecursionlimit(max(sys.getrecursionlimit(), 5000))
