"""The engine's own aggregation time in one epoch, for the sparse families' factors
(:func:`sarlab.simulator.calibration.fitting.aggregation_factors`).

The calibration's engine runs time whole epochs; how an epoch's time splits over the op families was fitted by least
squares, and on GCN and SAGE runs the sparse aggregation and the elementwise work are collinear (their shares move
together), so both got one factor, fitted mostly on the elementwise work that the counting allocator speeds up. The
aggregation priced that way came out at 0.35-0.7 of what torch.profiler measured in the same epochs, narrow rows the
least (results/host_model/width). Here the aggregation is measured instead: one more epoch of an engine run under
``torch.profiler``, the self CPU time of the engine's aggregation ``autograd.Function`` forward and backward
(:data:`AGGREGATION_EVENTS`): the shard kernels and the Python around them, not the torch ops they call (the state's
zero fill, the mean's division, which the simulator prices as elementwise work).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: profiler events of a single worker's aggregation (:class:`sarlab.core.aggregate.ShardAggregate`): the forward
#: and its autograd backward
AGGREGATION_EVENTS = ("ShardAggregate", "ShardAggregateBackward")


def aggregation_seconds(step: Callable[[], Any]) -> float:
    """Seconds of self CPU time of :data:`AGGREGATION_EVENTS` while ``step()`` runs (one epoch) under
    ``torch.profiler`` (CPU activity only); 0.0 where no such event ran."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    return sum(ev.self_cpu_time_total for ev in prof.key_averages() if ev.key in AGGREGATION_EVENTS) / 1e6
