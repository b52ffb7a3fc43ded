"""A worker process's entry point: ``python -m sarlab.real.launch.worker_entry RUNDIR RANK`` (what the launcher
starts).

The cyclic garbage collector is paused through the worker's imports and set-up: importing torch and building
the graph create a few hundred thousand long-lived objects, and the collector's full passes over them cost each
worker seconds of CPU before its first epoch (N workers on few cores pay it N times).
:func:`sarlab.real.launch.worker.run` collects once, freezes what set-up built and turns the collector back on
before the work starts.
"""
from __future__ import annotations

import gc
import sys


def _main() -> None:
    gc.disable()
    from sarlab.common.log import configure_from_env
    from sarlab.real.launch.zygote import set_process_name

    set_process_name(f"sarlab-rank{sys.argv[2] if len(sys.argv) > 2 else ''}")  # as a forked worker is named

    configure_from_env(int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 0)  # as the launcher's
    from sarlab.real.launch.worker import main  # the heavy imports, with the collector paused

    main()


if __name__ == "__main__":
    _main()
