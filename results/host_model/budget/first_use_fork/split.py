"""A family's first use in a fresh probe and in a probe parent's child, split into RssAnon and RssFile growth (KiB).

    python split.py fresh|scan|fork [FAMILY]

``fresh``: set up, measure FAMILY (what ``--family`` does); ``scan``: the same after :func:`resident_file_pages` in
the process itself (the scan's own allocations, no fork); ``fork``: every family (FAMILY ignored), each in a child of
one set-up parent after the re-fault, one child after another. One JSON line per family."""
import json
import os
import sys

from sarlab.real.calibration import memprobe as mp


def status() -> dict[str, int]:
    with open("/proc/self/status") as f:
        return {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in f)
                if k in ("VmRSS", "RssAnon", "RssFile", "RssShmem")}


def measure(family: str) -> dict[str, int]:
    if family != "autograd":
        mp._autograd()
    before = status()
    mp.PROBES[family]()
    after = status()
    return {k: after[k] - before[k] for k in before} | {"baseline_kib": before["VmRSS"]}


mode, family = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "autograd")
mp._setup()
if mode == "fresh":
    out = measure(family)
elif mode == "scan":
    mp.resident_file_pages()
    out = measure(family)
else:
    runs = mp.resident_file_pages()
    for family in mp.PROBES:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            mp.touch_pages(runs)
            os.write(write, json.dumps(measure(family)).encode())
            os._exit(0)
        os.close(write)
        os.waitpid(pid, 0)
        print(json.dumps({"mode": mode, "family": family, **json.loads(os.read(read, 4096))}), flush=True)
if mode != "fork":
    print(json.dumps({"mode": mode, "family": family, **out}))
