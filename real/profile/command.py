"""``sarlab profile``: memray captures per rank, flamegraphs, and what holds the memory at the peak per mode.

The command's plumbing only: :mod:`sarlab.real.profile.run` trains with memray in every worker,
:mod:`sarlab.real.profile.attribution` files each capture's peak under headings by the engine's phase tags,
:mod:`sarlab.real.profile.report` writes the summaries, flamegraphs and the report.

The report puts memray's peak (heap bytes allocated while tracking) beside the metric records' peak
(VmHWM minus the post-set-up RSS), which counts resident pages, including the allocator's slack,
thread stacks, and memray's own buffers.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys

from sarlab.core.config import MODES
from sarlab.data.partition import PartitionError
from sarlab.real.commands.options import (
    EPILOG,
    add_engine_args,
    add_model_args,
    add_net_arg,
    engine_config,
    model_config,
    prepare_partition,
    progress,
    write_json,
)
from sarlab.real.launch import outputs
from sarlab.real.launch.launcher import LaunchError, WorkerError, preflight
from sarlab.real.launch.lifecycle import interruptible
from sarlab.real.profile.report import side_by_side
from sarlab.real.profile.run import run_profile
from sarlab.training.trainer import TrainConfig

DEFAULT_GRAPH = "synthetic:nodes=3000,degree=10,features=32,classes=8,seed=0"


def build_parser() -> argparse.ArgumentParser:
    """Arguments of ``sarlab profile``."""
    p = argparse.ArgumentParser(
        prog="sarlab profile", epilog=EPILOG,
        description="Train with memray in every worker; write per-rank flamegraphs and peak summaries and a "
                    "report comparing modes: peak per rank and what holds the memory at the peak.")
    p.add_argument("--graph", default=DEFAULT_GRAPH, help="graph spec or partition directory (default %(default)s)")
    p.add_argument("--workers", type=int, default=2, help="local worker processes (default %(default)s)")
    p.add_argument("--modes", default="sar,oneshot", help="comma list of sar, sa, oneshot, or all "
                   "(default %(default)s)")
    add_model_args(p, {"layers": 3})
    add_engine_args(p, mode=False)
    add_net_arg(p)
    p.add_argument("--epochs", type=int, default=2, help="epochs per mode (default %(default)s)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--method", default="metis", choices=["metis", "random"], help="partitioning method")
    p.add_argument("--top", type=int, default=10, help="allocation sites listed per rank (default %(default)s)")
    p.add_argument("--no-flamegraph", action="store_true", help="skip the HTML flamegraphs")
    p.add_argument("--out", required=True, help="output directory (<mode>/rank{r}.* and report.md/.html); one that "
                   "already holds these files is refused without --force")
    p.add_argument("--json", help="write peaks, categories and top sites per rank here")
    p.add_argument("--force", action="store_true", help="replace the files of --out and --json when they exist and "
                   "this command did not write them")
    return p


#: what ``--out DIR`` gets: the report, its figures, and per mode each rank's capture, summary and flamegraph
OUTPUT_FILES = ("report.md", "report.html", "report_*.png", "*/rank*.bin", "*/rank*_summary.md",
                "*/rank*_flamegraph.html")


def check_outputs(a: argparse.Namespace) -> None:
    """``--out`` and ``--json`` before anything is partitioned or trained: one
    :class:`~sarlab.real.launch.outputs.OutputError` naming the option and the path."""
    outputs.check_dir(a.out, "--out", a.force, writes=OUTPUT_FILES)
    if a.json:
        outputs.check_file(a.json, "--json", a.force)


def parse_modes(text: str) -> list[str]:
    """``sar,oneshot`` -> ``["sar", "oneshot"]``; ``all`` -> every mode."""
    modes = list(MODES) if text.strip() == "all" else [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise ValueError(f"--modes: unknown mode(s) {', '.join(bad) or '(none)'}; choose from "
                         f"{', '.join(MODES)} or all")
    return list(dict.fromkeys(modes))


@interruptible
def main(argv: list[str] | None = None) -> int:
    """``sarlab profile``: run, analyse, report; 0 on success, 1 with a message on failure."""
    a = build_parser().parse_args(argv)
    check_outputs(a)
    tmp = None
    try:
        if a.workers < 1 or a.epochs < 1:
            raise ValueError("--workers and --epochs must be >= 1")
        modes = parse_modes(a.modes)
        train = TrainConfig(epochs=a.epochs, lr=a.lr, dtype=a.dtype, eval_every=0)
        engine = engine_config(a, mode=modes[0])
        model = model_config(a)
        preflight(a.workers, a.net, None, a.timeout)  # before anything is partitioned or built
        pdir, tmp = prepare_partition(a.graph, a.workers, a.method, a.seed, None)
        result = run_profile(pdir, a.workers, modes, model, train, engine, a.out, backend=a.backend,
                             timeout_s=a.timeout, port=a.port, top=a.top, flamegraphs=not a.no_flamegraph,
                             settings={"graph": a.graph}, progress=progress, net=a.net)
    except (PartitionError, LaunchError, WorkerError, ValueError, RuntimeError, FileNotFoundError,
            ImportError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    print(side_by_side(result))
    print(f"report: {result.report_md} (and {os.path.basename(result.report_html)})")
    write_json(a.json, result.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
