"""Network specs: ``loopback`` (every worker on 127.0.0.1) or ``veth:rate=200mbit[,hosts=H]`` (an emulated cluster).

A spec is one string, parsed and validated like a graph spec. ``veth`` puts the workers into H emulated hosts
(network namespaces), each with one full-duplex link of ``rate`` to a switch; ``hosts`` defaults to one host per
worker, and ``N / H`` workers share a host's link. ``rate`` is the wire rate (Ethernet frames with their headers,
as a NIC's speed is quoted), so bulk TCP moves about 95 % of it as payload, as a 1 Gbit/s NIC moves ~940 Mbit/s.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from sarlab.data.validate_data import InputError

#: rate suffixes (decimal, as ``tc`` and NIC vendors count) -> bits per second
RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}
#: the shaper keeps time in whole bytes per second; above this the CPU, not the shaper, sets the pace here
MIN_RATE_BPS, MAX_RATE_BPS = 10**5, 10**11
MAX_HOSTS = 250
SPEC_HELP = ("network: loopback (default: every worker on 127.0.0.1) or veth:rate=RATE[,hosts=H] (emulated hosts "
             "in network namespaces, each with a full-duplex link of RATE, e.g. 200mbit or 1gbit; hosts=H puts "
             "N/H workers on each host; needs root, `ip` and `tc`)")


def parse_rate(text: str) -> int:
    """Bits per second of a rate such as ``200mbit``, ``1.5gbit`` or ``800kbit``."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([a-zA-Z]+)\s*", text)
    if not m or m.group(2).lower() not in RATE_UNITS:
        units = ", ".join(RATE_UNITS)
        raise InputError(f"bad rate {text!r}: write a number and one of {units} (e.g. rate=200mbit); "
                         "rates are bits per second on the wire")
    bps = round(float(m.group(1)) * RATE_UNITS[m.group(2).lower()])
    if not MIN_RATE_BPS <= bps <= MAX_RATE_BPS:
        raise InputError(f"rate {text!r} is outside {format_rate(MIN_RATE_BPS)} .. {format_rate(MAX_RATE_BPS)}")
    return bps


def format_rate(bps: int) -> str:
    """The shortest exact spelling of ``bps`` bits per second (``200mbit``)."""
    for unit, scale in sorted(RATE_UNITS.items(), key=lambda kv: -kv[1]):
        if bps % scale == 0:
            return f"{bps // scale}{unit}"
    return f"{bps}bit"


@dataclass(frozen=True)
class NetSpec:
    """A parsed network spec.

    Args:
        kind: ``loopback`` or ``veth``.
        rate_bps: link rate in bits per second (``veth``), each direction.
        hosts: number of emulated hosts; 0 means one per worker.
    """

    kind: str = "loopback"
    rate_bps: int = 0
    hosts: int = 0

    @classmethod
    def parse(cls, text: str | NetSpec | None) -> NetSpec:
        """Parse ``loopback`` or ``veth:rate=R[,hosts=H]``; raises ValueError saying what is wrong."""
        if isinstance(text, NetSpec):
            return text
        if text is None or text.strip() in ("", "loopback"):
            return cls()
        kind, _, rest = text.strip().partition(":")
        if kind != "veth":
            raise InputError(f"unknown network spec {text!r}: use loopback or veth:rate=200mbit[,hosts=H]")
        options: dict[str, str] = {}
        for item in filter(None, rest.split(",")):
            key, eq, value = item.partition("=")
            if not eq or not value:
                raise InputError(f"bad option {item!r} in {text!r}: write key=value (rate=200mbit, hosts=2)")
            if key in options:
                raise InputError(f"option {key!r} given twice in {text!r}")
            options[key.strip()] = value.strip()
        unknown = set(options) - {"rate", "hosts"}
        if unknown:
            raise InputError(f"unknown option(s) {', '.join(sorted(unknown))} in {text!r}; veth takes rate= and "
                             "hosts=")
        if "rate" not in options:
            raise InputError(f"{text!r} needs a link rate: veth:rate=200mbit[,hosts=H]")
        hosts = 0
        if "hosts" in options:
            if not options["hosts"].isdigit() or not 1 <= int(options["hosts"]) <= MAX_HOSTS:
                raise InputError(f"hosts must be a whole number from 1 to {MAX_HOSTS}, got {options['hosts']!r}")
            hosts = int(options["hosts"])
        return cls("veth", parse_rate(options["rate"]), hosts)

    @property
    def emulated(self) -> bool:
        return self.kind == "veth"

    def hosts_for(self, workers: int) -> int:
        """Hosts a run of ``workers`` uses; raises ValueError when they cannot be spread evenly."""
        if not self.emulated:
            return 1
        hosts = self.hosts or workers
        if workers % hosts:
            raise InputError(f"{workers} workers cannot be spread evenly over hosts={hosts}: use a number of hosts "
                             f"that divides {workers}")
        if hosts > MAX_HOSTS:
            raise InputError(f"{hosts} hosts: at most {MAX_HOSTS} emulated hosts (pass hosts=H to share them)")
        return hosts

    @property
    def bytes_per_s(self) -> float:
        return self.rate_bps / 8

    def __str__(self) -> str:
        if not self.emulated:
            return "loopback"
        return f"veth:rate={format_rate(self.rate_bps)}" + (f",hosts={self.hosts}" if self.hosts else "")
