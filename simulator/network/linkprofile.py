"""Link profiles: a measured network (``sarlab netbench --out PATH``) as the simulator's inter-host link.

A link profile is JSON; the reader takes what it finds and says what it assumed. The fields it reads (schema
``sarlab-link-profile/1``, :mod:`sarlab.real.bench.netbench`; every field but a bandwidth may be missing):

* ``bandwidth_bidir_Bps`` (payload bytes per second per direction with both directions busy: a ring round
  sends and receives at once), else ``bandwidth_Bps`` (one way), else ``0.95 rate_bps / 8``;
* ``latency_s``: one-way time of a small message; the link's latency ``L`` is that less the per-message gap
  ``g`` of the base profile's intra-host link (the software's part), so a lone small message still takes the
  measured time (``L + g``); ``gap_s`` if given overrides ``g``;
* ``shaping_cpu_s_per_byte``: CPU seconds the emulated path (veth pairs, bridge, htb qdiscs, in the kernel)
  costs on the machine's cores per byte a worker sends or receives, beyond loopback
  (:mod:`sarlab.real.calibration.shapebench`);
  absent: 0. On the emulated network every host's workers compute on those cores, so it is added to the base
  profile's ``p2p_cpu_s_per_byte`` (background work on the shared cores,
  :class:`sarlab.simulator.system.clock.WorkerClocks`);
* ``shared_efficiency``: the share of the bandwidth a message gets while another uses its link end
  (:mod:`sarlab.simulator.network.sharing`, measured by :mod:`sarlab.real.calibration.roundbench`); absent: 1 (no
  loss). Below 1 the link is a
  :class:`sarlab.simulator.network.sharing.SharedLink`, so every reader (replay, ``sarlab simulate --net veth --link``)
  applies it;
* ``backend``: the torch.distributed backend the bandwidths and latency were measured over (``sarlab netbench
  --backend``; absent: gloo). A run is priced with the link profile of its own backend where one is given, else with
  another backend's of the same rate, with a warning (oneCCL's OFI/tcp transport and gloo do not get the same rate
  from one link);
* ``rate_bps`` (the configured wire rate), ``net`` (the spec it measured, e.g. ``veth:rate=200mbit,hosts=2``),
  ``hosts``, ``method``, ``date``, ``cpu``: provenance, and which records a profile applies to.

A network spec ``veth:rate=R[,hosts=H]`` puts ranks ``h N/H .. (h+1) N/H - 1`` on host ``h`` (default: one host
per worker); the workers of a host share its NIC (:mod:`sarlab.simulator.network.network`). ``loopback`` is the base
profile.
"""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sarlab.simulator.hardware.backends import BASE_BACKEND, backend_of
from sarlab.simulator.hardware.profile import Link, Profile
from sarlab.simulator.network.sharing import shared_link

SCHEMA = "sarlab-link-profile/1"
_RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}
#: payload over wire rate of bulk TCP on Ethernet (headers take the rest), when a profile gives only a rate
PAYLOAD_SHARE = 0.95


@dataclass(frozen=True)
class LinkProfile:
    """A measured link and where it came from.

    Args:
        link: the inter-host :class:`Link`.
        rate_bps: configured wire rate (0 = unknown).
        source: path and provenance, for messages.
        assumed: what the reader had to assume (empty when the profile had every field).
        shaping_cpu_s_per_byte: CPU seconds of the emulated path per byte sent or received (0 = none measured).
        shared_efficiency: the profile's ``shared_efficiency`` (1 = none measured); ``link`` carries it.
        backend: the torch.distributed backend it was measured over.
    """

    link: Link
    rate_bps: int
    source: str
    assumed: tuple[str, ...] = ()
    shaping_cpu_s_per_byte: float = 0.0
    shared_efficiency: float = 1.0
    backend: str = BASE_BACKEND


def parse_rate(text: str) -> int:
    """Bits per second of ``200mbit``, ``1gbit``, ... (decimal units, as ``tc`` counts)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([a-zA-Z]+)\s*", str(text))
    if not m or m.group(2).lower() not in _RATE_UNITS:
        raise ValueError(f"bad rate {text!r}: write a number and one of {', '.join(_RATE_UNITS)}")
    return round(float(m.group(1)) * _RATE_UNITS[m.group(2).lower()])


def parse_net(spec: Any) -> tuple[str, int, int]:
    """``(kind, rate_bps, hosts)`` of ``loopback`` or ``veth:rate=R[,hosts=H]`` (hosts 0: one per worker);
    an empty or missing spec is ``loopback``."""
    text = "" if spec is None or (isinstance(spec, float) and spec != spec) else str(spec).strip()
    if text in ("", "loopback"):
        return "loopback", 0, 0
    kind, _, rest = text.partition(":")
    if kind != "veth":
        raise ValueError(f"network spec {text!r}: expected loopback or veth:rate=R[,hosts=H]")
    fields = dict(item.split("=", 1) for item in rest.split(",") if "=" in item)
    if "rate" not in fields:
        raise ValueError(f"network spec {text!r} has no rate=")
    return "veth", parse_rate(fields["rate"]), int(fields.get("hosts", 0))


def read_link_profile(path: str | Path, base: Profile) -> LinkProfile:
    """The inter-host link a link profile describes (see the module docstring); ``base`` gives the gap."""
    d = json.loads(Path(path).read_text())
    assumed = []
    if d.get("schema") not in (None, SCHEMA):
        assumed.append(f"schema {d.get('schema')!r} read as {SCHEMA}")
    rate = int(d.get("rate_bps") or 0)
    if not rate and d.get("net"):
        rate = parse_net(d["net"])[1]
    if d.get("bandwidth_bidir_Bps"):
        bandwidth = float(d["bandwidth_bidir_Bps"])
    elif d.get("bandwidth_Bps"):
        bandwidth = float(d["bandwidth_Bps"])
        assumed.append("no bandwidth_bidir_Bps: the one-way bandwidth for both directions at once")
    elif rate:
        bandwidth = PAYLOAD_SHARE * rate / 8.0
        assumed.append(f"no measured bandwidth: {PAYLOAD_SHARE:g} of the wire rate")
    else:
        raise ValueError(f"{path}: a link profile needs bandwidth_bidir_Bps, bandwidth_Bps or rate_bps")
    gap = float(d["gap_s"]) if "gap_s" in d else base.intra_host.gap_s
    if "latency_s" in d:
        latency = max(float(d["latency_s"]) - gap, 0.0)
    else:
        latency = base.intra_host.latency_s
        assumed.append("no latency_s: the base profile's intra-host latency")
    where = ", ".join(str(d.get(k, "?")) for k in ("net", "method", "date", "cpu"))
    where = f"{path} ({where})"
    shaping = float(d.get("shaping_cpu_s_per_byte") or 0.0)
    eta = float(d.get("shared_efficiency") or 1.0)
    link = shared_link(Link(latency, bandwidth, gap), eta)
    backend = str(d.get("backend") or BASE_BACKEND)
    return LinkProfile(link, rate, where, tuple(assumed), shaping, eta, backend)


def for_network(profile: Profile, links: list[LinkProfile], net: Any, workers: int) -> tuple[Profile, int | None]:
    """The profile and workers per host of a run on network ``net`` (a spec; see the module docstring).

    ``loopback``: the profile as it is (``None``: its placement). ``veth``: the link profile of the same rate
    (the only one, when one is given without a rate) becomes the inter-host link (with its ``shared_efficiency``),
    its shaping CPU is added to the CPU per point-to-point byte; ``N / H`` workers per host. Of those, the one
    measured over the backend ``profile`` prices (:func:`sarlab.simulator.hardware.backends.backend_of`) is taken;
    without one, another backend's, with a warning.
    """
    kind, rate, hosts = parse_net(net)
    if kind == "loopback":
        return profile, None
    match = [lp for lp in links if lp.rate_bps == rate] or [lp for lp in links if not lp.rate_bps]
    if not match:
        have = ", ".join(f"{lp.rate_bps / 1e6:g} mbit ({lp.backend})" for lp in links) or "none"
        raise ValueError(f"records on {net!r} need a link profile of {rate / 1e6:g} mbit (--link); given: {have}")
    backend = backend_of(profile)
    own = [lp for lp in match if lp.backend == backend]
    if not own:
        warnings.warn(f"no {backend} link profile of {net!r}: priced with {match[0].backend}'s ({match[0].source}); "
                      f"measure it with `sarlab netbench --net {net} --backend {backend} --out LINK.json`",
                      stacklevel=2)
    match = own or match
    hosts = hosts or workers
    if workers % hosts:
        raise ValueError(f"{net!r}: {workers} workers do not divide over {hosts} hosts")
    shaping = match[0].shaping_cpu_s_per_byte  # every byte a host sends or receives, however many ranks it runs
    crowded = {k: v + shaping if k == "p2p_cpu_s_per_byte" else v for k, v in profile.crowded_cpu.items()}
    return replace(profile, inter_host=match[0].link, p2p_cpu_s_per_byte=profile.p2p_cpu_s_per_byte + shaping,
                   crowded_cpu=crowded), workers // hosts
