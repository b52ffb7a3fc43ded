"""The rss first-use probe's forked children (:func:`sarlab.real.calibration.memprobe.forked_first_use`): after the
re-fault of their parent's resident file pages a child starts where its parent is, and a family measured in such a
child reads what a fresh interpreter reads (results/host_model/budget/first_use_fork/README.md). Linux only (/proc);
no timing."""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys

import pytest

from sarlab.real.calibration.harness import ROOT, module_command, module_env

MIB = 1 << 20

#: a fresh interpreter sets up as the probe does, then forks a child that reads its RSS as it starts and one that
#: reads it after the re-fault (:func:`touch_pages`)
FORKS = """
import json, os
from sarlab.real.calibration import memprobe as mp
mp._setup()
runs = mp.resident_file_pages()
parent = mp.rss_bytes()
def child(touch):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        if touch:
            mp.touch_pages(runs)
        os.write(write, str(mp.rss_bytes()).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    return int(os.read(read, 64))
print(json.dumps({"parent": parent, "bare": child(False), "touched": child(True),
                  "pages": sum(count for _, count in runs)}))
"""

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/pagemap"), reason="needs Linux's /proc/PID/pagemap")


def _last_json(proc: subprocess.Popen, timeout: float) -> dict:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"{proc.args} did not finish in {timeout} s\nstderr:\n{err[-3000:]}")
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def _start(command: list[str]) -> subprocess.Popen:
    return subprocess.Popen(command, cwd=ROOT, env=module_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_a_fork_starts_without_its_parents_file_pages_and_the_retouch_brings_them_back():
    """Forked, the child lacks the file pages of torch's code its parent mapped as it imported (tens of MiB: why a
    fork measured more than a fresh process); after :func:`touch_pages` its RSS is within 3 MiB of its parent's."""
    got = _last_json(_start([sys.executable, "-c", FORKS]), timeout=180)
    assert got["pages"] * mmap.PAGESIZE > 50 * MIB  # torch's libraries: ~100 MiB resident after the set-up
    assert got["bare"] < got["parent"] - 30 * MIB
    assert abs(got["touched"] - got["parent"]) < 3 * MIB, got


def test_a_forked_probe_reads_what_a_fresh_one_reads():
    """autograd's first use (~7 MiB resident on the 2-core VM, the largest family) in a probe parent's child against
    a fresh interpreter's, at once: within 0.5 MiB (the README's sittings: 0.07-0.22 MiB apart; forked from the
    zygote without the re-fault it read 2.6 MiB more, from a probe parent without it 16.7 MiB more). Each child's
    baseline is within 4 MiB of the fresh one's (0.1-0.3 MiB apart; 92 MiB below without the re-fault)."""
    fresh = _start(module_command("memprobe", "--family", "autograd"))
    forked = _start(module_command("memprobe", "--forked", "--timeout", "120"))
    fresh_out, forked_out = _last_json(fresh, timeout=240), _last_json(forked, timeout=240)
    assert set(forked_out["first_use"]) == {"autograd", "spmm", "max_aggr", "gat_unfused", "gat_autograd",
                                            "gat_fused"}
    assert abs(forked_out["first_use"]["autograd"] - fresh_out["first_use"]["autograd"]) < 0.5 * MIB, (
        forked_out["first_use"], fresh_out["first_use"])
    for family, baseline in forked_out["baseline"].items():
        assert abs(baseline - fresh_out["baseline"]["autograd"]) < 4 * MIB, (family, baseline, fresh_out)
