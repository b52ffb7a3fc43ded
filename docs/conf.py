"""Sphinx configuration of the sarlab documentation.

Build (warnings are errors): ``make docs`` or ``python docs/build.py OUTDIR``, which copies these sources to a
temporary folder first, so the API stubs that autosummary generates never land in the checkout (a plain
``python -m sphinx docs OUTDIR`` works too and writes them to the ignored ``docs/generated/``).
"""
from __future__ import annotations

import importlib
import os
import pkgutil

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

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

exclude_patterns = ["_build", "_inventories", "_templates"]
templates_path = ["_templates"]  # autosummary/module.rst: a package's page lists its modules
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


class Modules(SphinxDirective):
    """``.. sarlab-modules:: PACKAGE``: a section per module under PACKAGE that no page of its own documents (no
    ``generated/NAME`` page of it or of a package between), with the module's docstring; each section is the
    target of ``:mod:`` links to that module. The module's functions and classes stay in the source (``[source]``
    links): one page per module would triple the build's time."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        package = self.arguments[0]
        pages = {doc.split("/", 1)[1] for doc in self.env.found_docs if doc.startswith("generated/")}
        lines = []
        for name in _modules_under(package):
            owner = max((p for p in pages if name == p or name.startswith(p + ".")), key=len, default=None)
            if owner == package:
                lines += [name, "~" * len(name), "", f".. automodule:: {name}", "   :no-members:", ""]
        if not lines:
            return []
        lines = ["Modules", "-------", "", *lines]
        node = nodes.section()
        node.document = self.state.document
        nested_parse_with_titles(self.state, StringList(lines, source=f"<modules of {package}>"), node)
        return node.children


def _modules_under(package: str) -> list[str]:
    """Every module and package below ``package``, sorted (its subpackages imported to walk them)."""
    path = getattr(importlib.import_module(package), "__path__", None)
    return sorted(m.name for m in pkgutil.walk_packages(path, prefix=package + ".")) if path else []


def setup(app) -> dict:
    app.add_directive("sarlab-modules", Modules)
    return {"parallel_read_safe": True}
