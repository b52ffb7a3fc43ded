"""``sarlab netbench``: measure the links of an emulated cluster network and write them as a link profile.

Builds the network of ``--net veth:rate=R[,hosts=H]`` (H hosts, default 2), starts one
:mod:`sarlab.real.bench.netprobe` process per host and reports per-link bandwidth, one way and both directions at
once, and small-message latency, over the torch.distributed backend of ``--backend`` (gloo by default; ``ccl``
measures what oneCCL's OFI/tcp transport gets from the same link). Payload rates: a link of rate R carries about
0.95 R of payload in bulk TCP (Ethernet, IP and TCP headers take the rest).

Link profile (``--out PATH``, JSON; the simulator reads link parameters from it)::

    schema          "sarlab-link-profile/1"
    net             the network spec measured, e.g. "veth:rate=200mbit"
    backend         the torch.distributed backend measured ("gloo" or "ccl"; absent in older profiles: gloo)
    rate_bps        the configured wire rate, bits per second, each direction
    bandwidth_Bps   payload bytes per second one way (median over repeats)
    bandwidth_bidir_Bps   payload bytes per second per direction, both directions at once (median)
    latency_s       one-way latency of a 4-byte message (median of half round trips)
    tcp_bandwidth_Bps, tcp_bandwidth_bidir_Bps   the link itself: plain TCP, one connection per direction,
                    one way and both ways at once (median); the backend's rates above may fall below these when
                    its protocol stalls a direction (see real/bench/netprobe.py)
    efficiency      bandwidth_Bps / (rate_bps / 8)
    method          how it was measured (text); bytes, repeats: transfer size and count
    samples         every timed sample, seconds, per pattern (see real/bench/netprobe.py)
    date, cpu, cores, torch     where and when
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import torch

from sarlab.common.machine import cpu_model, today, usable_cores
from sarlab.core.comm import check_backend
from sarlab.real.commands.options import progress, write_json
from sarlab.real.launch import netns, outputs
from sarlab.real.launch.launcher import stop_workers, worker_env
from sarlab.real.launch.lifecycle import interruptible, signals_deferred, signals_raise
from sarlab.real.launch.netspec import SPEC_HELP, NetSpec

SCHEMA = "sarlab-link-profile/1"


def measure_links(net: NetSpec | str, seconds: float = 2.0, repeats: int = 3, timeout_s: float = 120.0,
                  log=progress, backend: str = "gloo") -> dict:
    """Build ``net``, time ``backend`` transfers of about ``seconds`` at the link rate between its hosts; returns the
    link profile (the module docstring lists its fields). RuntimeError (one line) when ``backend`` cannot run here."""
    spec = NetSpec.parse(net)
    if not spec.emulated:
        raise ValueError("netbench measures an emulated network: pass --net veth:rate=RATE[,hosts=H]")
    hosts = spec.hosts or 2
    if hosts < 2:
        raise ValueError("netbench needs at least 2 hosts (hosts=2 or more)")
    spec = NetSpec(spec.kind, spec.rate_bps, hosts)
    nbytes = max(1 << 20, int(spec.bytes_per_s * seconds))
    check_backend(backend)  # ccl: built here once, before any namespace exists
    netns.check_host()
    netns.remove_leftovers(log)
    network = netns.EmulatedNetwork(spec, hosts)
    rundir = tempfile.mkdtemp(prefix=f"{netns.PREFIX}-run-{os.getpid()}-")
    out = os.path.join(rundir, "samples.json")
    procs: list[subprocess.Popen] = []
    try:
        with signals_raise():
            network.create()
            log(f"netbench: {network.describe()}; {backend}, {nbytes / 1e6:.1f} MB per transfer, {repeats} repeats")
            for rank in range(hosts):
                env = {**worker_env(rank, hosts, network.address(0), netns.MASTER_PORT), **network.env(rank)}
                cmd = [*network.command(rank), sys.executable, "-m", "sarlab.real.bench.netprobe", out, str(nbytes),
                       str(repeats), str(timeout_s), backend]
                procs.append(subprocess.Popen(cmd, env=env, start_new_session=True))
            deadline = time.monotonic() + timeout_s + 60 * repeats
            while any(p.poll() is None for p in procs):
                if any(p.returncode not in (None, 0) for p in procs) or time.monotonic() > deadline:
                    codes = {r: p.returncode for r, p in enumerate(procs)}
                    raise RuntimeError(f"netbench probes failed or timed out (exit codes {codes})")
                time.sleep(0.05)
            if any(p.returncode for p in procs) or not os.path.exists(out):
                raise RuntimeError(f"netbench probes failed (exit codes {[p.returncode for p in procs]})")
            with open(out) as f:
                samples = json.load(f)
    finally:
        with signals_deferred():
            try:
                stop_workers(procs, 5.0)
            finally:
                network.destroy()
                shutil.rmtree(rundir, ignore_errors=True)
    return profile(spec, samples, nbytes, repeats, backend)


def profile(spec: NetSpec, samples: dict[str, list[float]], nbytes: int, repeats: int, backend: str = "gloo") -> dict:
    """The link profile of measured ``samples`` (seconds per transfer of ``nbytes``; latency in seconds)."""
    rates = {name: [nbytes / t for t in ts] for name, ts in samples.items() if name != "latency"}
    bandwidth = statistics.median(rates["oneway"])
    return {
        "schema": SCHEMA, "net": str(spec), "backend": backend, "rate_bps": spec.rate_bps,
        "bandwidth_Bps": bandwidth,
        "bandwidth_bidir_Bps": statistics.median(rates["bidir"]),
        "bandwidth_bidir_send_first_Bps": statistics.median(rates["bidir_send_first"]),
        **({"bandwidth_ring_Bps": statistics.median(rates["ring"])} if "ring" in rates else {}),
        **({"tcp_bandwidth_Bps": statistics.median(rates["tcp_oneway"]),
            "tcp_bandwidth_bidir_Bps": statistics.median(rates["tcp_bidir"])} if "tcp_bidir" in rates else {}),
        "latency_s": statistics.median(samples["latency"]),
        "efficiency": bandwidth / spec.bytes_per_s,
        "method": (f"{backend} send/recv between emulated hosts (one process per host), each transfer timed from "
                   "barrier to barrier, median over repeats; latency: half the median round trip of a 4-byte "
                   "ping-pong; tcp_*: plain TCP sockets, one connection per direction, timed the same way"),
        "bytes": nbytes, "repeats": repeats, "samples": samples,
        "date": today(), "cpu": cpu_model(), "cores": usable_cores(), "torch": torch.__version__,
    }


def format_profile(p: dict) -> str:
    rate = p["rate_bps"] / 8
    b = p.get("backend", "gloo")
    lines = [f"link {p['net']}: configured {rate / 1e6:.2f} MB/s each way"]
    for key, name in (("tcp_bandwidth_Bps", "TCP, one way"),
                      ("tcp_bandwidth_bidir_Bps", "TCP, both ways (per direction)"),
                      ("bandwidth_Bps", f"{b}, one way"),
                      ("bandwidth_bidir_Bps", f"{b}, both ways at once (per direction)"),
                      ("bandwidth_bidir_send_first_Bps", f"{b}, both ways, sends posted first"),
                      ("bandwidth_ring_Bps", f"{b}, ring (every host sends and receives)")):
        if key in p:
            lines.append(f"  {name:<38} {p[key] / 1e6:8.2f} MB/s  ({p[key] / rate:6.1%} of the rate)")
    lines.append(f"  {'latency (4 bytes, one way)':<38} {p['latency_s'] * 1e6:8.0f} us")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sarlab netbench", description=(
        "Measure the links of an emulated cluster network (bandwidth one way and both ways at once, small-message "
        "latency; gloo or ccl between network namespaces) and optionally write them as a link profile for the "
        "simulator."))
    p.add_argument("--net", required=True, help=SPEC_HELP + "; hosts defaults to 2 here")
    p.add_argument("--seconds", type=float, default=2.0, help="length of one transfer at the link rate "
                   "(default %(default)s)")
    p.add_argument("--repeats", type=int, default=3, help="transfers per pattern (default %(default)s)")
    p.add_argument("--timeout", type=float, default=120.0, help="bound on any wait of a probe (s)")
    p.add_argument("--backend", default="gloo", choices=("gloo", "ccl"),
                   help="torch.distributed backend whose transfers are timed (default %(default)s); the simulator "
                   "prices runs of a backend with the link profile measured over it")
    p.add_argument("--out", help="write the link profile (JSON) here")
    p.add_argument("--json", help="same as --out (every command's machine-readable output)")
    p.add_argument("--force", action="store_true", help="replace --out / --json when they exist and this command did "
                   "not write them")
    return p


@interruptible
def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    if a.seconds <= 0 or a.repeats < 1:
        print("error: --seconds must be > 0 and --repeats >= 1", file=sys.stderr)
        return 2
    for option, path in (("--out", a.out), ("--json", a.json)):  # before any network is built
        if path:
            outputs.check_file(path, option, a.force)
    try:
        result = measure_links(a.net, a.seconds, a.repeats, a.timeout, backend=a.backend)
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(format_profile(result))
    for path in filter(None, {a.out, a.json}):
        write_json(path, result)
        progress(f"link profile: {os.path.abspath(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
