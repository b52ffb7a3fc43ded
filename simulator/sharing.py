"""Links whose concurrent flows lose throughput: the shaped links of the emulated network.

A message's bytes hold its sender's send channel and its receiver's receive channel for ``g + b / B``
(:class:`simulator.profile.Link`, :mod:`simulator.network`), one message after the other. On a rate-limited link
with a short queue (``veth:rate=R``: an htb shaper and a 20 ms byte FIFO at every link end, :mod:`real.netns`) two
TCP flows that use one link end at once do not split its rate without loss: the queue overflows, segments are
dropped and retransmitted, flows back off and time out. ``python -m simulator.roundbench`` measures it with gloo
ranks and no compute: one flow per link end at a time (``ring:0``) moves 0.99-1.02 of the rate's payload, while two
or more at once (``ring:1``, ``ring:2``, ``oneshot``) take 1.3-2.6x as long (N = 4 and 8, 75 and 150 mbit), with
hundreds to thousands of retransmitted segments per pass; at 400 mbit, whose queue holds 1 MB, only the
all-to-all loses much. What a message loses grows with its length: at 75 mbit 35-61 ms for 34 ms messages (0.3 MB)
and 108 ms for 100 ms ones (0.9 MB), so the model moves a message that shares a busy link end at a share of the
bandwidth:

.. math::
    \\text{occupancy} = g + \\frac{b}{\\eta B}, \\qquad \\eta = \\begin{cases} \\eta_{\\text{shared}} & \\text{its send
    or receive channel is busy when both ends have posted it} \\\\ 1 & \\text{otherwise} \\end{cases}

``eta_shared`` (``shared_efficiency`` of a link profile; 1 = no loss, every booking the plain one) is measured by
``roundbench`` per link rate (0.48 at 75 mbit, 0.59 at 100, 0.57 at 150, 0.93 at 400 mbit, 100 ms messages, N = 8,
on the 2-core VM under a load of 11-16).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from simulator.linkprofile import LinkProfile
from simulator.profile import Link


@dataclass(frozen=True)
class SharedLink(Link):
    """A :class:`Link` on which a message sharing a busy link end moves at ``shared_efficiency`` of its bandwidth.

    Args:
        shared_efficiency: ``eta_shared`` of the module docstring, in (0, 1]; 1 = no loss.
    """

    shared_efficiency: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 < self.shared_efficiency <= 1.0:
            raise ValueError(f"shared_efficiency must be in (0, 1], got {self.shared_efficiency}")


def shared_efficiency(link: Link) -> float:
    """``eta_shared`` of ``link`` (1 for a plain :class:`Link`)."""
    return float(getattr(link, "shared_efficiency", 1.0))


def shared_occupancy(link: Link, nbytes: float, shared: bool) -> float:
    """Seconds a message of ``nbytes`` holds its channels, sharing a busy link end (``shared``) or not."""
    return link.gap_s + nbytes / ((shared_efficiency(link) if shared else 1.0) * link.bandwidth_Bps)


@lru_cache(maxsize=64)
def _efficiency_in(path: str) -> float:
    try:
        value = json.loads(Path(path).read_text()).get("shared_efficiency")
    except (OSError, ValueError):
        return 1.0
    return float(value) if value else 1.0


def with_sharing(lp: LinkProfile) -> LinkProfile:
    """``lp`` with its link a :class:`SharedLink` carrying the profile file's ``shared_efficiency`` (absent or 1:
    ``lp`` itself).

    The file is the one :func:`simulator.linkprofile.read_link_profile` read, named first in ``lp.source``.
    """
    if isinstance(lp.link, SharedLink):
        return lp
    eta = _efficiency_in(lp.source.split(" (", 1)[0])
    if eta >= 1.0:
        return lp
    link = lp.link
    return replace(lp, link=SharedLink(link.latency_s, link.bandwidth_Bps, link.gap_s, shared_efficiency=eta))
