"""Build the C++ kernel extension: ``python -m sarlab.kernels.build [--verbose]`` prints where and how long."""

from __future__ import annotations

import argparse
import sys
import time

from ._loader import build, build_dir, loaded_from


def main(argv: list[str] | None = None) -> int:
    """Compile (or find up to date) the extension and print the time taken."""
    parser = argparse.ArgumentParser(prog="python -m sarlab.kernels.build", description=__doc__)
    parser.add_argument("--verbose", action="store_true", help="show compiler commands and output")
    args = parser.parse_args(argv)
    print(f"building sarlab kernels in {build_dir()} ...", flush=True)
    start = time.perf_counter()
    try:
        build(verbose=args.verbose)
    except Exception as exc:
        print(f"kernel build FAILED after {time.perf_counter() - start:.1f} s: {exc}", file=sys.stderr)
        return 1
    print(f"kernels built and loaded in {time.perf_counter() - start:.1f} s ({loaded_from()})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
