r"""Benchmarks of the host beyond single ops: the allocator, first-use memory, co-located processes, messages.

Each of the last four runs other processes (:func:`sarlab.real.calibration.harness.module_command`): for the memory
that an op family adds on first use one fresh interpreter set up as a worker, which forks a child per family
(:mod:`sarlab.real.calibration.memprobe`, which measures what a process maps as it runs a family for the first time),
and, forked from the zygote
(:func:`sarlab.real.calibration.ranks.run_group`: no torch import per process), ``C / T`` concurrent processes for
the efficiency of co-located workers (:mod:`sarlab.real.calibration.sharebench`), two ranks of a process group on
127.0.0.1 for the link (:mod:`sarlab.real.calibration.netbench`), and groups of 2 to 8 ranks for the software cost of
posting and waiting for messages and of all-reduces (:mod:`sarlab.real.calibration.commbench`). The last two run over
gloo (the default) or another backend (``backend="ccl"``: :mod:`sarlab.kernels.ccl`).
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile

import numpy as np
import torch

from sarlab.core.memory import rss_bytes
from sarlab.real.calibration.harness import free_port, module_command, module_env
from sarlab.real.calibration.memprobe import run_probe
from sarlab.real.calibration.ranks import run_group
from sarlab.real.calibration.sharebench import GAP_S, SETTLE_S, SYNC_TIMEOUT_S
from sarlab.simulator.calibration.calibration import Calibration, Findings
from sarlab.simulator.calibration.fitting import fit_link, fit_message_costs, pair_share_etas
from sarlab.simulator.hardware.profile import Link

#: all-reduce sizes commbench times beside the messages (bytes): the engine's 8-byte loss, a BatchNorm's few KB,
#: gradients of small and large models
ALLREDUCE_SIZES = (8, 4096, 262144, 4194304)


def bench_allocator(found: Findings) -> float:
    """Resident bytes per tensor byte for large tensors (page rounding, allocator headers)."""
    if not os.path.exists("/proc/self/status"):
        found.notes.append("allocator: /proc not available; factor 1.0 assumed")
        return 1.0
    sizes = [300_000, 1_000_000, 3_000_000]  # float32 elements: 1.2, 4 and 12 MB tensors
    ratios = []
    for size in sizes:
        before = rss_bytes()
        held = [torch.ones(size) for _ in range(8)]
        grown = rss_bytes() - before
        ratios.append(grown / (8 * size * 4))
        del held
    factor = float(np.clip(statistics.median(ratios), 1.0, 1.5))
    found.raw["allocator"] = {"sizes": sizes, "ratios": ratios}
    return factor


#: the rss first-use probe's processes: False, one fresh interpreter set up once whose forks measure the families
#: after re-faulting its resident file pages (within 0.25 MiB of fresh interpreters' bytes, in a third to a fifth of
#: their time: results/host_model/budget/first_use_fork/README.md); True, a fresh interpreter per family
FIRST_USE_FRESH = False


def bench_first_use(found: Findings, memory: str = "rss",
                    fresh: bool = FIRST_USE_FRESH) -> tuple[dict[str, float], dict[str, float]]:
    """Bytes per op family on first use as ``memory`` counts them (``rss``: resident bytes; ``live``: tensor bytes
    left live), and under ``rss`` the sparse products' temporaries (:func:`sarlab.real.calibration.memprobe.
    run_probe`): under ``rss`` forks of one set-up probe parent, or fresh interpreters where ``fresh`` is set; under
    ``live``, whose tensor bytes do not depend on how the process started, one process forked from the zygote.
    ``found.raw["first_use"]`` holds ``rss``'s, ``found.raw["first_use_live"]`` ``live``'s."""
    start = ("fresh" if fresh else "parent") if memory == "rss" else "zygote"
    result = run_probe(memory, start=start)
    found.raw["first_use" if memory == "rss" else f"first_use_{memory}"] = result["first_use"]
    if memory == "rss":
        found.raw["transients"] = result["transients"]
    return (
        {k: float(v) for k, v in result["first_use"].items()},
        {k: float(v) for k, v in result["transients"].items()},
    )


#: the longest sharebench window (seconds; a family's holds ``sharebench.WINDOW_CALLS`` of its calls, the slowest
#: families this long) in a full calibration (quick: 0.3 s, 2 pairs)
SHARE_WINDOW_S = 0.4
#: on the 2-core VM (results/host_model/budget/cuts2): the group's start and end (processes forked from the zygote,
#: inputs set up, every op warmed up before they agree their schedule: 2.4-3.0 s) and the families' mean window
SHARE_START_S, SHARE_MEAN_WINDOW_S = 3.0, 0.33


def share_seconds(cal: Calibration, families: int = 7) -> float:
    """Expected wall seconds of one :func:`bench_share` group: its start, then every family's windows."""
    seconds, pairs = (0.3, 2) if cal.quick else (SHARE_MEAN_WINDOW_S, max(cal.share_pairs, 1))
    return SHARE_START_S + families * (2 * pairs * seconds + GAP_S)


def colocation_threads(cores: int) -> list[int]:
    """Thread counts whose co-located ranks a full calibration measures: 1 (``C`` processes) and ``C/2`` where it
    is 2 or more (2 ranks): the two ends of ``P`` ranks of ``C/P`` threads, between which the host model interpolates
    in log T; at most two groups whatever the cores."""
    return sorted({1} | ({cores // 2} if cores // 2 >= 2 else set()))


def bench_share(cal: Calibration, found: Findings, cores: int, threads: int = 1) -> dict[str, float]:
    r"""Co-location efficiency per family from one :mod:`sarlab.real.calibration.sharebench` group of
    ``cores // threads`` processes of ``threads`` threads each (``share_eff`` for one thread, the ``colocation``
    entry of ``threads`` otherwise): a lead that runs in every window, the others in each pair's co-located window
    only.

    With the lead's rates ``r_1`` (alone) and ``r_C`` (beside ``C - 1`` copies) in two adjacent windows, ``C``
    processes together do ``C r_C / r_1`` times the work of one, so :math:`\eta = (C r_C / r_1 - 1) / (C - 1)`
    (:func:`sarlab.simulator.calibration.fitting.pair_share_etas`). A shared machine's speed drifts within
    minutes, so the two windows of a pair lie under a second apart, and each family's eta is the median over its
    ``cal.share_pairs`` pairs, clipped to [0, 1].
    """
    processes = cores // max(threads, 1)
    if processes <= 1:
        return {}
    longest = 0.3 if cal.quick else SHARE_WINDOW_S
    pairs = 2 if cal.quick else max(cal.share_pairs, 1)
    budget = SYNC_TIMEOUT_S + 8 * (2 * pairs * longest + GAP_S) + 60.0  # the start, at most 8 families, slack
    with tempfile.TemporaryDirectory(prefix="sharebench-") as sync:
        cmd = module_command("sharebench", "--sync", sync, "--processes", str(processes), "--seconds", str(longest),
                             "--pairs", str(pairs), "--threads", str(threads))
        if cal.quick:
            cmd.append("--quick")
        env = module_env(OMP_NUM_THREADS=str(threads))
        texts = run_group([cmd + (["--lead"] if i == 0 else []) for i in range(processes)], [env] * processes,
                          "sharebench", budget)
    outs = [json.loads(out.strip().splitlines()[-1]) for out in texts]
    lead = outs[0]
    late = max(o["late_s"] for o in outs)
    if late > SETTLE_S:  # the lead counts from SETTLE_S into a window: a partner later than that misses its start
        found.notes.append(f"sharebench: a process had its schedule {late:.2f} s after the first window opened")
    per_pair = pair_share_etas(lead["rates"], processes)
    result = {name: float(np.clip(statistics.median(v), 0.0, 1.0)) for name, v in per_pair.items() if v}
    found.raw["share" if threads == 1 else f"share_threads_{threads}"] = {
        "lead_rates": lead["rates"], "eta_per_pair": per_pair, "processes": processes, "threads": threads,
        "pairs": pairs, "window_s": lead["window_s"], "late_s": late,
        "warmup_s": max(o["warmup_s"] for o in outs)}
    return result


def bench_network(cal: Calibration, found: Findings, backend: str = "gloo", local_world: int = 2,
                  raw_key: str = "network") -> tuple[Link, float, float]:
    """Point-to-point between two local processes over ``backend`` (:mod:`sarlab.real.calibration.netbench`):
    (link, post time, CPU seconds per byte sent or received); the link is
    :func:`sarlab.simulator.calibration.fitting.fit_link` of the timings. ``local_world``: how many ranks the
    processes are told their host launches (``LOCAL_WORLD_SIZE``; more than the cores measures a backend as the
    executor runs it on a crowded host); the raw timings go to ``found.raw[raw_key]``."""
    sizes = [4, 4096, 65536, 1 << 20, 4 << 20] if cal.quick else [4, 1024, 16384, 131072, 1 << 20, 4 << 20, 16 << 20]
    repeats = 5 if cal.quick else 15
    stream = 64 if cal.quick else 256
    cmd = module_command(
        "netbench",
        "--port", str(free_port()),
        "--sizes", ",".join(map(str, sizes)),
        "--repeats", str(repeats),
        "--stream", str(stream),
        "--bulk", str((8 << 20) if cal.quick else (64 << 20)),
        "--backend", backend,
    )  # fmt: skip
    env = module_env(LOCAL_WORLD_SIZE=str(local_world))  # as the launcher says (see launch_commbench)
    outputs = run_group([cmd + ["--rank", str(r)] for r in (0, 1)], [env, env], f"netbench ({backend})", 120)
    result = json.loads(outputs[0].strip().splitlines()[-1])
    link = fit_link(sizes, result)
    found.raw[raw_key] = {"sizes": sizes, "local_world": local_world, **result}
    return link, float(result["call_s"]), float(result.get("cpu_s_per_byte", 0.0))


def launch_commbench(world: int, repeats: int, sizes: list[int], timeout: float = 300.0, backend: str = "gloo",
                     allreduce_sizes: tuple[int, ...] = ()) -> dict:
    """One :mod:`sarlab.real.calibration.commbench` group of ``world`` ranks of ``backend`` on 127.0.0.1; rank 0's
    result."""
    cmd = module_command("commbench", "--world", str(world), "--port", str(free_port()), "--repeats", str(repeats),
                         "--sizes", ",".join(map(str, sizes)), "--backend", backend,
                         "--allreduce-sizes", ",".join(map(str, allreduce_sizes)))
    # every rank on this host, as the launcher says (LOCAL_WORLD_SIZE): a backend that configures itself by it
    # (oneCCL's worker thread where ranks share cores, sarlab.kernels.ccl) then runs as it does in training
    env = module_env(OMP_NUM_THREADS="1", LOCAL_WORLD_SIZE=str(world))
    outputs = run_group([cmd + ["--rank", str(r)] for r in range(world)], [env] * world,
                        f"commbench (world {world}, {backend})", timeout)
    return json.loads(outputs[0].strip().splitlines()[-1])


def message_worlds(cal: Calibration) -> tuple[int, ...]:
    """The group sizes :func:`bench_messages` measures by default: 2, 4 and 8 ranks (quick: 2 and 3)."""
    return (2, 3) if cal.quick else (2, 4, 8)


#: commbench rounds over the world sizes in a full calibration, timed repeats of each group, and the message sizes
#: (bytes): one round of 14 repeats of 256-byte messages. The fit (:func:`fit_message_costs`) reads the smallest size
#: only, and a group's fixed costs (8 ranks joining gloo on 2 cores: 4 s) dominated the two rounds of 7 repeats over
#: 256 B - 2 MB that calibrations ran before (22 s on the 2-core VM, against 8 s): the message costs fitted either way
#: stayed within the spread of repeated two-round measurements (results/host_model/budget/trims/README.md)
MESSAGE_ROUNDS, MESSAGE_REPEATS, MESSAGE_SIZES = 1, 14, (256,)


def bench_messages(cal: Calibration, found: Findings, worlds: tuple[int, ...] | None = None,
                   rounds: int | None = None, backend: str = "gloo") -> dict[str, float]:
    """Software costs of posting and waiting for ``backend`` messages, and of its all-reduces
    (:func:`sarlab.simulator.calibration.fitting.fit_message_costs`) from :mod:`sarlab.real.calibration.commbench`
    groups of every size in ``worlds``, :data:`MESSAGE_ROUNDS` rounds (or ``rounds``; forward, then backward, so
    that drift of a shared machine spreads over the sizes) of :data:`MESSAGE_REPEATS` repeats."""
    sizes = [256] if cal.quick else list(MESSAGE_SIZES)
    repeats = 1 if cal.quick else MESSAGE_REPEATS
    worlds = message_worlds(cal) if worlds is None or cal.quick else worlds
    runs = []
    for i in range(1 if cal.quick else rounds or MESSAGE_ROUNDS):
        for world in (worlds if i % 2 == 0 else tuple(reversed(worlds))):
            runs.append(launch_commbench(world, repeats, sizes, backend=backend, allreduce_sizes=ALLREDUCE_SIZES))
    fit = fit_message_costs(runs)
    found.raw["messages"] = {"backend": backend, "fit": fit,
                             "runs": [{k: v for k, v in r.items() if not k.endswith("samples")} for r in runs]}
    return fit
