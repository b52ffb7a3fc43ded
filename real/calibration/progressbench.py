"""How evenly time-shared workers progress between two syncs (``python -m sarlab.real.calibration.progressbench``).

``P`` single-thread ranks on loopback (joined over gloo, or ``--backend ccl``) run the engine's SpMM
(:meth:`sarlab.core.shards.Shard.spmm`, C++ where built) on a random shard of ``--rows`` rows, ``--degree``
in-edges per row and ``--width`` features, ``--calls`` calls per round, then all join a one-element all-reduce (a
barrier), ``--rounds`` rounds after one warm-up round (at the smallest ``P``; a larger ``P`` as many rank-rounds,
:func:`rounds_for`). Each rank times the wall clock of its round's compute. With
``P`` no larger than the cores the ranks' times agree within a few per cent; with ``P`` above them the OS time-slices
memory-bound processes unevenly, and since every round ends at its slowest rank, that unevenness becomes waiting.
How a backend waits at the barrier (gloo's threads sleep in the kernel, oneCCL's worker polls) changes the
unevenness, so the ccl overlay of a profile has its own table. Per ``P`` the result has

.. math::
    \\sigma_P = \\operatorname{median}_k \\frac{\\operatorname{std}_r c_{rk}}{\\operatorname{mean}_r c_{rk}}, \\qquad
    \\text{loss}_P = \\frac{\\sum_k \\max_r c_{rk}}{\\sum_k \\operatorname{mean}_r c_{rk}}

(``c_rk``: rank ``r``'s compute wall time in round ``k``): the per-round spread the simulator draws a worker's
compute from (:attr:`sarlab.simulator.hardware.profile.Profile.progress_spread`, :mod:`sarlab.simulator.system.jitter`)
and what an ideal barrier after every round would lose to it. A calibration of this machine's scheduler, not of any
engine run; it needs a quiet machine. ``sarlab calibrate`` runs it at ``P = cores, 2 x cores, 4 x cores``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sarlab.real.calibration.ranks import BENCH_BACKENDS, run_ranks

_log = logging.getLogger(__name__)

#: the shard of one round's work: about a c11 GCN shard at N = 8 (13,750 rows, degree 28, width 240)
ROWS, DEGREE, WIDTH = 14_000, 28, 240


def _child(rows: int, degree: int, width: int, calls: int, rounds: int, out: str, backend: str = "gloo") -> None:
    """One rank: ``rounds + 1`` rounds of ``calls`` SpMM calls, each followed by a barrier; writes its times."""
    import torch
    import torch.distributed as dist

    from sarlab.core.comm import prepare_backend
    from sarlab.core.memory import tune_malloc
    from sarlab.real.calibration.ranks import random_shard

    torch.set_num_threads(1)
    tune_malloc(threshold=1 << 17)  # the engine's malloc settings
    prepare_backend(backend)
    dist.init_process_group(backend, init_method="env://", timeout=datetime.timedelta(seconds=300))
    rank = dist.get_rank()
    shard = random_shard(rows, degree, torch.Generator().manual_seed(rank))
    x, state = torch.randn(rows, width), torch.zeros(rows, width)
    token = torch.zeros(1)
    times = []
    for _ in range(rounds + 1):
        start = time.perf_counter()
        for _ in range(calls):
            shard.spmm(x, out=state)
        times.append(time.perf_counter() - start)
        dist.all_reduce(token)
    Path(f"{out}.{rank}").write_text(json.dumps(times[1:]))
    dist.destroy_process_group()


def measure(workers: int, calls: int, rounds: int, rows: int = ROWS, degree: int = DEGREE, width: int = WIDTH,
            timeout_s: float = 600.0, backend: str = "gloo") -> list[list[float]]:
    """``c[r][k]``: rank ``r``'s compute wall seconds in round ``k`` (``workers`` ranks on loopback, joined over
    ``backend``)."""
    from sarlab.real.launch.launcher import worker_env

    out = tempfile.mktemp(prefix="progressbench-")
    port = 29000 + (os.getpid() + 7 * workers) % 1000

    def command(rank: int) -> list[str]:
        return [sys.executable, "-m", "sarlab.real.calibration.progressbench", "--child", "--rows", str(rows),
                "--degree", str(degree), "--width", str(width), "--calls", str(calls), "--rounds", str(rounds),
                "--samples", out, "--backend", backend]

    try:
        run_ranks(workers, command, lambda rank: worker_env(rank, workers, "127.0.0.1", port), "progressbench",
                  timeout_s, fork=True)  # forked from the zygote: the ranks time their SpMM calls, not their start
        return [json.loads(Path(f"{out}.{rank}").read_text()) for rank in range(workers)]
    finally:
        for rank in range(workers):
            if os.path.exists(f"{out}.{rank}"):
                os.remove(f"{out}.{rank}")


def summarize(times: list[list[float]]) -> dict[str, float]:
    """``sigma`` and ``loss`` of the module docstring, plus the mean round's compute and its slowest rank's."""
    rounds = list(zip(*times))  # per round: every rank's time
    cvs = [statistics.pstdev(r) / statistics.fmean(r) for r in rounds]
    mean = sum(statistics.fmean(r) for r in rounds)
    slowest = sum(max(r) for r in rounds)
    return {"sigma": statistics.median(cvs), "sigma_mean": statistics.fmean(cvs), "loss": slowest / mean,
            "round_s": mean / len(rounds), "slowest_round_s": slowest / len(rounds)}


#: the fewest rounds a worker count gets from :func:`rounds_for`
MIN_ROUNDS = 10


def rounds_for(workers: int, fewest_workers: int, rounds: int) -> int:
    """Rounds of ``workers`` ranks when the smallest count of a table, ``fewest_workers``, runs ``rounds``: the
    same rank-rounds (``workers x rounds``, the samples ``sigma`` and ``loss`` are taken over) for every count, at
    least :data:`MIN_ROUNDS`. A round of ``P`` time-shared ranks lasts ``P / C`` times one rank's, so equal rounds
    spent most of the time on the largest ``P`` (19 of 30 s on the 2-core VM at P = 8); ``sigma`` and ``loss``
    of P = 4 and 8 from a quarter and a half of their rounds stayed within the spread of repeated full runs
    (results/host_model/budget/trims/README.md)."""
    return max(min(rounds, MIN_ROUNDS), -(-rounds * max(fewest_workers, 1) // max(workers, 1)))


def spread_table(worker_counts: list[int], calls: int, rounds: int, log=_log.info, rows: int = ROWS,
                 backend: str = "gloo") -> dict[int, dict[str, float]]:
    """:func:`summarize` of one :func:`measure` per worker count, the smallest count over ``rounds`` rounds and
    the others over as many rank-rounds (:func:`rounds_for`)."""
    table = {}
    fewest = min(worker_counts, default=1)
    for p in worker_counts:
        table[p] = summarize(measure(p, calls, rounds_for(p, fewest, rounds), rows=rows, backend=backend))
        row = table[p]
        log(f"    P={p}: round {row['round_s'] * 1e3:.1f} ms, spread sigma {row['sigma']:.3f} "
            f"(mean {row['sigma_mean']:.3f}), slowest / mean {row['loss']:.3f}")
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sarlab.real.calibration.progressbench",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--workers", default="2,4,8", help="comma list of rank counts (default 2,4,8)")
    parser.add_argument("--calls", type=int, default=3, help="SpMM calls per round (default 3)")
    parser.add_argument("--rounds", type=int, default=40,
                        help="timed rounds of the smallest count, the others as many rank-rounds (default 40)")
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--degree", type=int, default=DEGREE)
    parser.add_argument("--width", type=int, default=WIDTH)
    parser.add_argument("--backend", default="gloo", choices=BENCH_BACKENDS,
                        help="torch.distributed backend the ranks join (default gloo)")
    parser.add_argument("--out", help="write the table as JSON here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--samples", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.rows, args.degree, args.width, args.calls, args.rounds, args.samples, args.backend)
        return 0
    counts = [int(p) for p in args.workers.split(",") if p.strip()]
    if not counts or min(counts) < 1 or min(args.calls, args.rounds) < 1:
        parser.error("--workers needs counts >= 1; --calls and --rounds must be >= 1")
    table = spread_table(counts, args.calls, args.rounds, rows=args.rows, backend=args.backend)
    if args.out:
        Path(args.out).write_text(json.dumps({"calls": args.calls, "rounds": args.rounds, "rows": args.rows,
                                              "degree": args.degree, "width": args.width,
                                              "spread": {str(p): v for p, v in table.items()}}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
