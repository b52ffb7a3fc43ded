"""The documentation site builds with no Sphinx warning, its hand-written pages keep up with the code, and its
tutorials run (each ``docs/tutorials/*.py`` executed as a user would, in a temporary folder)."""
from __future__ import annotations

import glob
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
TUTORIALS = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(DOCS, "tutorials", "*.py")))


def _read(name: str) -> str:
    with open(os.path.join(DOCS, name), encoding="utf-8") as fh:
        return fh.read()


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> str:
    """Build the HTML site once (``docs/build.py``: -W --keep-going, sources copied to a temporary folder)."""
    pytest.importorskip("sphinx")
    out = tmp_path_factory.mktemp("docs")
    html, warnings = out / "html", out / "warnings.txt"
    cmd = [sys.executable, os.path.join(DOCS, "build.py"), str(html), "--warnings", str(warnings)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=540, cwd=ROOT)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"the docs build did not finish in 540 s\nstdout:\n{err.stdout}\nstderr:\n{err.stderr}")
    text = warnings.read_text() if warnings.exists() else ""
    if proc.returncode != 0 or text.strip():
        pytest.fail(f"the docs build failed (exit {proc.returncode}); Sphinx's warnings:\n{text}\n"
                    f"stderr:\n{proc.stderr[-6000:]}")
    return str(html)


@pytest.mark.timeout(600)
def test_docs_build_without_warnings(built):
    assert os.path.isfile(os.path.join(built, "index.html"))
    pages = ("getting_started", "pyg", "modes", "python_api", "cli", "simulator", "results", "api", "internals")
    for page in (*pages, *(f"tutorials/{t}" for t in TUTORIALS)):
        assert os.path.isfile(os.path.join(built, f"{page}.html")), page
    with open(os.path.join(built, "index.html"), encoding="utf-8") as fh:
        assert "furo" in fh.read(), "the site is built with the furo theme (pip install '.[docs]')"


def _public_names() -> list[str]:
    """``sarlab.X`` for every function and class the front door re-exports, ``sarlab.nn.X`` for every layer."""
    import sarlab
    import sarlab.nn

    names = [f"sarlab.{name}" for name, (_, attribute) in sarlab._LAZY.items() if attribute is not None]
    return names + [f"sarlab.nn.{name}" for name in sarlab.nn.__all__ if name != "MODELS"]


@pytest.mark.timeout(600)
def test_api_reference_is_by_public_name(built):
    """Every name ``import sarlab`` gives a user has its page under that name, reached from api.html."""
    with open(os.path.join(built, "api.html"), encoding="utf-8") as fh:
        api = fh.read()
    missing = [n for n in _public_names() if not os.path.isfile(os.path.join(built, "generated", f"{n}.html"))]
    assert not missing, f"no API page for {missing}: add them to docs/api.rst"
    unlinked = [n for n in _public_names() if f'href="generated/{n}.html' not in api]
    assert not unlinked, f"docs/api.rst does not link {unlinked}"


@pytest.mark.timeout(600)
def test_intersphinx_links_torch_pyg_numpy_pandas(built):
    """Names of torch, PyG, numpy and pandas link to those projects' docs (from the inventories shipped in
    docs/_inventories, so the build needs no network)."""
    text = ""
    for path in glob.glob(os.path.join(built, "**", "*.html"), recursive=True):
        with open(path, encoding="utf-8") as fh:
            text += fh.read()
    for base in ("https://pytorch.org/docs/stable/", "https://pytorch-geometric.readthedocs.io/en/latest/",
                 "https://numpy.org/doc/stable/", "https://pandas.pydata.org/docs/"):
        assert re.search(f'href="{re.escape(base)}[^"]+"', text), f"no page links into {base}"


def test_every_tutorial_is_in_the_site():
    with open(os.path.join(DOCS, "index.rst"), encoding="utf-8") as fh:
        index = fh.read()
    assert TUTORIALS, "docs/tutorials holds no tutorial script"
    for name in TUTORIALS:
        assert f"tutorials/{name}" in index, f"docs/index.rst does not list tutorials/{name}"
        assert f"literalinclude:: {name}.py" in _read(f"tutorials/{name}.rst"), f"{name}.rst shows its script"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", TUTORIALS)
def test_tutorial_runs(name, tmp_path):
    """The tutorial's script runs as a user would run it (its asserts check what the page says it shows)."""
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}
    script = os.path.join(DOCS, "tutorials", f"{name}.py")
    try:
        proc = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=280,
                              cwd=str(tmp_path), env=env)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"docs/tutorials/{name}.py did not finish in 280 s\nstdout:\n{err.stdout}\nstderr:\n{err.stderr}")
    assert proc.returncode == 0, (f"docs/tutorials/{name}.py failed (exit {proc.returncode})\n"
                                  f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}")


def test_record_columns_are_all_explained():
    from sarlab.common.records import METRIC_COLUMNS

    text = _read("results.rst")
    missing = [c for c in METRIC_COLUMNS if f"``{c}``" not in text]
    assert not missing, f"docs/results.rst does not explain the metric columns {missing}"


def test_every_command_is_documented():
    from sarlab.real.commands.cli import BENCHES, COMMANDS

    text = _read("cli.rst")
    missing = [c for c in COMMANDS if f"``{c}``" not in text] + [b for b in BENCHES if f"``{b}``" not in text]
    assert not missing, f"docs/cli.rst does not describe {missing}"
