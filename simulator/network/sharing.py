"""Links whose concurrent flows lose throughput: the shaped links of the emulated network.

A message's bytes hold its sender's send channel and its receiver's receive channel for ``g + b / B``
(:class:`sarlab.simulator.hardware.profile.Link`, :mod:`sarlab.simulator.network.network`), one message after the other.
On a rate-limited link with a short queue (``veth:rate=R``: an htb shaper and a 20 ms byte FIFO at every link end,
:mod:`sarlab.real.launch.netns`) two TCP flows that use one link end at once do not split its rate without loss: the
queue overflows, segments are dropped and retransmitted, flows back off and time out. ``python -m
sarlab.real.calibration.roundbench`` measures it with gloo ranks and no compute: one flow per link end at a time
(``ring:0``) moves 0.99-1.02 of the rate's payload, while two or more at once (``ring:1``, ``ring:2``, ``oneshot``) take
1.3-2.6x as long (N = 4 and 8, 75 and 150 mbit), with hundreds to thousands of retransmitted segments per pass; at 400
mbit, whose queue holds 1 MB, only the all-to-all loses much. What a message loses grows with its length: at 75 mbit
35-61 ms for 34 ms messages (0.3 MB) and 108 ms for 100 ms ones (0.9 MB), so the model moves a message that shares a
busy link end at a share of the
bandwidth:

.. math::
    \\text{occupancy} = g + \\frac{b}{\\eta B}, \\qquad \\eta = \\begin{cases} \\eta_{\\text{shared}} & \\text{its send
    or receive channel is busy when both ends have posted it} \\\\ 1 & \\text{otherwise} \\end{cases}

``eta_shared`` (``shared_efficiency`` of a link profile; 1 = no loss, every booking the plain one) is measured by
``roundbench`` per link rate (0.48 at 75 mbit, 0.59 at 100, 0.57 at 150, 0.93 at 400 mbit, 100 ms messages, N = 8,
on the 2-core VM under a load of 11-16).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TypeVar

from sarlab.simulator.hardware.profile import Link

#: a :class:`sarlab.simulator.network.linkprofile.LinkProfile` (a dataclass with ``link`` and ``shared_efficiency``;
#: this module
#: does not import it: :mod:`sarlab.simulator.network.linkprofile` builds its links here)
LinkProfileT = TypeVar("LinkProfileT")


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


def shared_link(link: Link, efficiency: float) -> Link:
    """``link`` as a :class:`SharedLink` of ``efficiency`` (below 1), else ``link`` itself.

    Args:
        link: a plain link.
        efficiency: ``eta_shared`` in (0, 1].
    """
    if efficiency >= 1.0 or isinstance(link, SharedLink):
        return link
    return SharedLink(link.latency_s, link.bandwidth_Bps, link.gap_s, shared_efficiency=efficiency)


def with_sharing(lp: LinkProfileT) -> LinkProfileT:
    """A link profile (:class:`sarlab.simulator.network.linkprofile.LinkProfile`) whose link carries its
    ``shared_efficiency``: ``lp`` itself when it already does or has none below 1 (as every profile
    :func:`sarlab.simulator.network.linkprofile.read_link_profile` returns; kept for callers that build link profiles by
    hand).
    """
    link = shared_link(lp.link, float(getattr(lp, "shared_efficiency", 1.0)))
    return lp if link is lp.link else replace(lp, link=link)
