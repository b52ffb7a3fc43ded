"""The documentation site builds with no Sphinx warning, and its hand-written pages keep up with the code."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")


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
    for page in ("getting_started", "modes", "python_api", "cli", "simulator", "results", "api"):
        assert os.path.isfile(os.path.join(built, f"{page}.html")), page


@pytest.mark.timeout(600)
def test_api_reference_covers_the_front_door(built):
    """Every module the front door (``sarlab._LAZY``) draws a name from has its generated API page."""
    import sarlab

    modules = sorted({module for module, _ in sarlab._LAZY.values()})
    missing = [m for m in modules if not os.path.isfile(os.path.join(built, "generated", f"{m}.html"))]
    assert not missing, f"no API page for {missing}: add them (or their package) to docs/api.rst"


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
