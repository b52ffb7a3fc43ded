"""Whether a profile's measured thread efficiencies are plausible for the cores they were measured on, and
whether its compute scale says that the microbenchmarks time what the engine runs.

A calibration that measured each extra thread as almost useless (other processes on the cores, SMT
siblings sold as cores, a slow spell of a VM) misprices every multi-thread worker; ``sarlab calibrate``
refuses such a profile and ``sarlab simulate`` warns when it uses one. A compute scale (engine epochs over the
microbenchmarks' prediction) far from 1 means a family is timed on another code path than the engine's, and
the one scale then misprices every other family; ``sarlab calibrate`` flags it (and writes the profile: calibrating
again would not change it).
"""

from __future__ import annotations

from collections.abc import Mapping

from sarlab.simulator.hardware.profile import OpCost

#: the smallest plausible efficiency of each extra thread (:attr:`OpCost.parallel_eff`) over the first
#: :data:`THREAD_CHECK_CORES` cores: a compute-bound GEMM on separate physical cores speeds up by at least
#: 1.5x on two of them, memory-bound families by at least 1.25x (two cores are far from saturating a memory
#: system). Calibrations on quiet 2-core VMs measured 0.56-1.0 for every family but SAGE-max's (0.26-0.67);
#: the disturbed one of campaign 7 (``simulator/README.md``, History) had spmm at 0.10 and GEMM at 0.42. The unfused
#: GAT form that ``sar`` streams (plain torch in chunks of edges, ``--no-fused``) is not checked: it scales little on
#: any day (0.0-0.46 in the 2-core profiles committed under results/, 0.13-0.60 in one quiet sitting,
#: results/host_model/budget/repeats), so its number cannot tell a disturbed calibration from a quiet one, and a
#: floor made ``sarlab calibrate`` refuse quiet calibrations over a form no default run uses.
MIN_THREAD_EFF: Mapping[str, float] = {"gemm": 0.5, "gat_unfused": 0.0}
DEFAULT_MIN_THREAD_EFF = 0.25
#: beyond this many cores a memory-bound family may legitimately stop scaling (its bandwidth is saturated):
#: the check asks for the speed-up of the first ``THREAD_CHECK_CORES`` cores only
THREAD_CHECK_CORES = 8


def implausible_thread_effs(ops: Mapping[str, OpCost], cores: int) -> list[str]:
    r"""The op families whose measured thread efficiency is implausible for ``cores`` cores, one line each.

    With :math:`k = \min(C, 8)` (:data:`THREAD_CHECK_CORES`), a family is implausible when its all-core
    speed-up falls below what ``k`` cores give at the family's floor :math:`\eta_{min}`
    (:data:`MIN_THREAD_EFF`, :data:`DEFAULT_MIN_THREAD_EFF`):

    .. math::
        1 + (C - 1)\,\eta < 1 + (k - 1)\,\eta_{min}

    Such a number says more about the calibration (other processes on the cores, SMT siblings sold as
    cores, a slow spell of a VM) than about the machine, and it misprices every multi-thread worker.
    """
    if cores <= 1:
        return []
    k = min(cores, THREAD_CHECK_CORES)
    out = []
    for name, cost in sorted(ops.items()):
        floor = MIN_THREAD_EFF.get(name, DEFAULT_MIN_THREAD_EFF)
        speedup, least = 1.0 + (cores - 1) * cost.parallel_eff, 1.0 + (k - 1) * floor
        if speedup < least:
            out.append(f"{name}: thread efficiency {cost.parallel_eff:.2f} (x{speedup:.2f} on {cores} cores), "
                       f"below the plausible {floor:.2f} (x{least:.2f})")  # fmt: skip
    return out


#: the plausible range of :attr:`Profile.compute_scale` (engine epochs over the microbenchmarks' prediction):
#: within a factor of 2 of 1. The microbenchmarks time the engine's own kernels
#: (:mod:`sarlab.real.calibration.opbench`,
#: :mod:`sarlab.real.calibration.gatbench`) under the allocator regime of the engine epochs they are compared with
#: (:func:`sarlab.real.calibration.engine_runs.engine_epoch`), so the scale only holds what they leave out (Python,
#: small
#: ops); campaign 9's 0.46 came from engine epochs under the counting allocator's block cache and spmm timed on
#: ``torch.sparse`` where the engine ran its C++ SpMM.
COMPUTE_SCALE_RANGE = (0.5, 2.0)


def implausible_compute_scale(scale: float) -> list[str]:
    """One line when the fitted compute scale lies outside :data:`COMPUTE_SCALE_RANGE`, else none.

    Args:
        scale: :attr:`sarlab.simulator.hardware.profile.Profile.compute_scale` (the runs' geometric mean).
    """
    low, high = COMPUTE_SCALE_RANGE
    if low <= scale <= high:
        return []
    return [f"compute_scale {scale:.3f} (engine epochs / microbenchmark prediction) outside [{low:g}, {high:g}]: "
            "a microbenchmark times another code path than the engine runs"]
