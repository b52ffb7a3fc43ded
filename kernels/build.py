"""Build the C++ kernel extension now: ``sarlab build-kernels`` (or ``python -m sarlab.kernels.build``) [-v].

Without it, the first run that needs the kernels starts this same build in the background and runs on the torch
kernels meanwhile (see :mod:`sarlab.kernels._loader`); building ahead makes the first run use the compiled ones.
Progress (objects compiled, seconds elapsed) is logged every ~10 s; the last line says where and how long.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from ._loader import EXTENSION_NAME, build, build_dir, loaded_from

log = logging.getLogger(__name__)


def _log_to(stream, stamped: bool) -> None:
    """Send the ``sarlab`` loggers' INFO lines to ``stream`` unless something already shows them."""
    root = logging.getLogger("sarlab")
    if root.hasHandlers():
        return
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s" if stamped else "%(message)s"))
    root.addHandler(handler)
    if root.getEffectiveLevel() > logging.INFO:
        root.setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> int:
    """Compile (or find up to date) the extension and say how long it took; 1 if the build failed."""
    parser = argparse.ArgumentParser(prog="sarlab build-kernels", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verbose", "-v", action="store_true", help="show compiler commands and output")
    parser.add_argument("--background", action="store_true",
                        help="(what a run starts) time-stamped lines; on failure leave build.failed so runs stop "
                             "retrying until the sources change")
    args = parser.parse_args(argv)
    _log_to(sys.stdout if args.background else sys.stderr, stamped=args.background)
    log.info("building the sarlab kernels (%s) in %s ...", EXTENSION_NAME, build_dir())
    start = time.perf_counter()
    try:
        build(verbose=args.verbose or logging.getLogger("sarlab").isEnabledFor(logging.DEBUG))  # or sarlab -v
    except Exception as exc:
        log.error("kernel build FAILED after %.1f s: %s", time.perf_counter() - start, exc)
        if args.background:
            (build_dir() / "build.failed").write_text(f"{exc}\n")
        return 1
    log.info("kernels built and loaded in %.1f s (%s)", time.perf_counter() - start, loaded_from())
    return 0


if __name__ == "__main__":
    sys.exit(main())
