"""Build the documentation site with warnings as errors: ``python docs/build.py OUTDIR``.

Sphinx's autosummary writes one stub page per module next to the sources; this script copies ``docs/`` to a
temporary folder first and builds from there, so a build leaves the checkout as it was and two builds at once
do not share stubs. Exit status: Sphinx's (0 = no warning). ``--warnings FILE`` keeps the warnings in FILE.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def build(outdir: str, warnings_file: str | None = None, quiet: bool = True) -> int:
    """Build the HTML site into ``outdir`` (``-W --keep-going``); return Sphinx's exit status.

    Args:
        outdir: output folder (created; stale pages in it are rebuilt as Sphinx sees fit).
        warnings_file: also write the warnings there.
        quiet: only warnings and errors on stderr.
    """
    from sphinx.cmd.build import build_main

    with tempfile.TemporaryDirectory(prefix="sarlab-docs-") as tmp:
        src = os.path.join(tmp, "src")
        shutil.copytree(HERE, src, ignore=shutil.ignore_patterns("generated", "__pycache__", "_build"))
        args = ["-W", "--keep-going", "-b", "html", "-d", os.path.join(tmp, "doctrees")]
        args += ["-q"] if quiet else []
        args += ["-w", warnings_file] if warnings_file else []
        return build_main([*args, src, outdir])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir")
    parser.add_argument("--warnings", metavar="FILE", help="write the warnings to FILE too")
    args = parser.parse_args(argv)
    rc = build(args.outdir, args.warnings)
    if rc == 0:
        print(f"docs: {os.path.join(args.outdir, 'index.html')}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
