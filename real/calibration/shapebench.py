"""CPU seconds per byte the emulated network's kernel path costs beyond loopback (``python -m
sarlab.real.calibration.shapebench``).

An emulated host's link (:mod:`sarlab.real.launch.netns`) is a veth pair into a bridge with an htb shaper on the
host's end and on the bridge's port; every TCP segment crosses two veth pairs, the bridge and two qdiscs, in the kernel,
mostly in softirq, on the machine's cores, where the workers of all hosts compute. Loopback has none of it, and the
simulator's loopback price of moving bytes (``p2p_cpu_s_per_byte``: a process's own CPU while it exchanges big
buffers, :mod:`sarlab.real.calibration.netbench`) does not contain it. This probe measures it: two gloo ranks
exchange the same bytes in both directions at once (as a ring round does), once inside two emulated hosts of the given
rate and once on loopback, in alternating rounds; over every transfer it reads the machine's busy CPU time
(``/proc/stat``: all states but idle and iowait, so softirq and kernel threads count whoever they were charged to) and
subtracts the busy rate of a quiet second just before it times the transfer's length::

    shaping_cpu_s_per_byte = median_rounds(busy_veth - busy_loopback) / bytes

``bytes`` is what each rank sends plus what it receives, summed over both ranks, so that the simulator charges
a worker ``shaping_cpu_s_per_byte`` for every byte it sends or receives (as it charges ``p2p_cpu_s_per_byte``).
A calibration of the machine and its kernel, not of any engine run; it needs root (namespaces, ``tc``) and a
machine that is otherwise quiet (a saturated machine shows no extra busy time: such rounds are flagged).

``--link-in A.json --out B.json`` writes the link profile ``A`` with the result added
(``shaping_cpu_s_per_byte`` and ``shaping``: the samples and the method), which
:func:`sarlab.simulator.network.linkprofile.read_link_profile` reads.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sarlab.common.paths import package_parent

#: /proc/stat cpu columns that are not busy time (idle, iowait)
_IDLE_COLUMNS = (3, 4)
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
ROOT = package_parent()  # the directory holding the sarlab package


def busy_seconds() -> float:
    """The machine's busy CPU seconds so far, summed over its cores (``/proc/stat``, every state but idle
    and iowait; guest time is inside user time there, so it is left out)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:9]]
    return sum(v for i, v in enumerate(fields) if i not in _IDLE_COLUMNS) * _TICK_S


def softirq_seconds() -> float:
    """CPU seconds the machine has spent in softirq context so far, whichever task it interrupted
    (``/proc/stat``: the softirq column), plus the ``ksoftirqd`` threads' own time."""
    with open("/proc/stat") as f:
        ticks = int(f.readline().split()[7])
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        if "(ksoftirqd/" in text:
            fields = text.rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks * _TICK_S


def _child(nbytes: int, repeats: int, out: str) -> None:
    """One rank (env:// rendezvous): ``repeats`` timed bidirectional exchanges; rank 0 writes the samples."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    peer = 1 - rank
    send = torch.ones(nbytes // 4)
    samples = []
    for i in range(repeats + 1):  # the first transfer warms the connection and is not kept
        dist.barrier()
        b0, t0 = busy_seconds(), time.monotonic()
        time.sleep(1.0)  # a quiet second: the machine's busy rate without the transfer
        b1, t1 = busy_seconds(), time.monotonic()
        dist.barrier()
        recv = torch.empty(nbytes // 4)
        b2, t2, s2, p2 = busy_seconds(), time.monotonic(), softirq_seconds(), time.process_time()
        works = dist.batch_isend_irecv([dist.P2POp(dist.irecv, recv, peer), dist.P2POp(dist.isend, send, peer)])
        for work in works:
            work.wait()
        own = torch.tensor([time.process_time() - p2], dtype=torch.float64)
        dist.all_reduce(own)  # both ranks' process CPU (all threads, user + system) over the transfer
        b3, t3, s3 = busy_seconds(), time.monotonic(), softirq_seconds()
        if i and rank == 0:
            rate = (b1 - b0) / (t1 - t0)
            samples.append({"busy_s": b3 - b2, "wall_s": t3 - t2, "background_cores": rate,
                            "extra_busy_s": (b3 - b2) - rate * (t3 - t2), "process_cpu_s": float(own[0]),
                            "softirq_s": s3 - s2, "accounted_s": float(own[0]) + s3 - s2})
        del recv
    dist.destroy_process_group()
    if rank == 0:
        Path(out).write_text(json.dumps(samples))


def _run_pair(prefixes: list[list[str]], env_of, nbytes: int, repeats: int, timeout_s: float) -> list[dict]:
    """Start the two ranks (``prefixes[r]`` before the interpreter, ``env_of(r)`` added to the environment),
    wait for them and return rank 0's samples."""
    out = tempfile.mktemp(prefix="shapebench-", suffix=".json")
    procs = []
    try:
        for rank in range(2):
            cmd = [*prefixes[rank], sys.executable, "-m", "sarlab.real.calibration.shapebench", "--child",
                   "--bytes", str(nbytes),
                   "--repeats", str(repeats), "--samples", out]
            procs.append(subprocess.Popen(cmd, env=env_of(rank), cwd=ROOT))
        for proc in procs:
            if proc.wait(timeout=timeout_s) != 0:
                raise RuntimeError(f"shapebench rank exited with {proc.returncode}")
        return json.loads(Path(out).read_text())
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if os.path.exists(out):
            os.remove(out)


def measure(rate: str, nbytes: int, repeats: int, rounds: int, timeout_s: float = 300.0) -> dict:
    """Alternating veth / loopback rounds (see the module docstring); returns the result dict."""
    from sarlab.real.launch import netns
    from sarlab.real.launch.launcher import worker_env
    from sarlab.real.launch.netspec import NetSpec

    spec = NetSpec.parse(f"veth:rate={rate},hosts=2")
    netns.check_host()
    network = netns.EmulatedNetwork(spec, 2)
    veth, loop = [], []

    def on_veth(rank: int) -> dict[str, str]:
        return {**worker_env(rank, 2, network.address(0), netns.MASTER_PORT), **network.env(rank)}

    def on_loopback(rank: int) -> dict[str, str]:
        return worker_env(rank, 2, "127.0.0.1", port)

    try:
        network.create()
        for _ in range(rounds):
            veth += _run_pair([network.command(r) for r in range(2)], on_veth, nbytes, repeats, timeout_s)
            with socket.socket() as sock:  # a free loopback port for this pair's rendezvous
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            loop += _run_pair([[], []], on_loopback, nbytes, repeats, timeout_s)
    finally:
        network.destroy()
    moved = 4.0 * nbytes  # each of 2 ranks sends and receives nbytes
    saturated = [s for s in veth + loop if s["background_cores"] > 0.9 * (os.cpu_count() or 1)]
    # on a quiet machine the busy time less the background; on a busy one (others' work fills the cores, so that
    # the busy time cannot grow) what the accounting charges to the ranks and to softirq
    key = "accounted_s" if len(saturated) > (len(veth) + len(loop)) // 2 else "extra_busy_s"
    per_byte_veth = statistics.median(s[key] for s in veth) / moved
    per_byte_loop = statistics.median(s[key] for s in loop) / moved
    return {
        "shaping_cpu_s_per_byte": max(per_byte_veth - per_byte_loop, 0.0),
        "shaping": {
            "method": "CPU over bidirectional gloo exchanges between 2 emulated hosts minus the same on loopback, "
                      "per byte sent or received, summed over both ranks (sarlab.real.calibration.shapebench): "
                      + ("the ranks' process CPU plus softirq and ksoftirqd time (the machine was saturated)"
                         if key == "accounted_s" else "machine busy CPU (/proc/stat) less the busy rate of a quiet "
                         "second before each transfer"),
            "measure": key,
            "net": str(spec), "bytes_each_way": nbytes, "rounds": rounds, "repeats": repeats,
            "veth_cpu_s_per_byte": per_byte_veth, "loopback_cpu_s_per_byte": per_byte_loop,
            "saturated_samples": len(saturated), "samples": {"veth": veth, "loopback": loop},
            "date": datetime.date.today().isoformat(),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", default="400mbit", help="link rate of the emulated hosts (default 400mbit)")
    parser.add_argument("--bytes", type=int, default=32 << 20, help="bytes each rank sends per transfer")
    parser.add_argument("--repeats", type=int, default=3, help="timed transfers per process pair")
    parser.add_argument("--rounds", type=int, default=3, help="alternating veth / loopback rounds")
    parser.add_argument("--link-in", help="a link profile to add the result to")
    parser.add_argument("--out", help="write the result (or the link profile with it) here as JSON")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--samples", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.bytes, args.repeats, args.samples)
        return 0
    result = measure(args.rate, args.bytes, args.repeats, args.rounds)
    print(f"shaping CPU {result['shaping_cpu_s_per_byte'] * 1e9:.2f} ns per byte sent or received "
          f"(veth {result['shaping']['veth_cpu_s_per_byte'] * 1e9:.2f}, loopback "
          f"{result['shaping']['loopback_cpu_s_per_byte'] * 1e9:.2f})", flush=True)
    if args.link_in:
        result = {**json.loads(Path(args.link_in).read_text()), **result}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
