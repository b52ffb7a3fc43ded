"""Collective times on a link: the all-reduce of gradients, BatchNorm statistics and loss sums.

Below the system's clocks and the network's booking, which both price collectives with it.
"""
from __future__ import annotations

import math

from sarlab.simulator.hardware.profile import Link


def allreduce_seconds(link: Link, nbytes: float, workers: int) -> float:
    """All-reduce of ``nbytes`` over ``workers`` workers: the faster of ring and recursive doubling.

    .. math::
        t = \\min\\left(2 (N-1) \\alpha + \\frac{2 (N-1)}{N} \\frac{b}{B},\\;
        \\lceil \\log_2 N \\rceil \\left(\\alpha + \\frac{b}{B}\\right)\\right)

    (ring: reduce-scatter + all-gather, bandwidth-optimal for large buffers; recursive doubling:
    latency-optimal for the small BatchNorm and loss buffers.)
    """
    if workers <= 1:
        return 0.0
    steps = 2 * (workers - 1)
    ring = steps * link.alpha_s + steps / workers * nbytes / link.bandwidth_Bps
    doubling = math.ceil(math.log2(workers)) * (link.alpha_s + nbytes / link.bandwidth_Bps)
    return min(ring, doubling)
