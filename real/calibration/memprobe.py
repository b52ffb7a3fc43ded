"""Resident memory that an op family adds the first time a process set up as an engine worker runs it
(``python -m sarlab.real.calibration.memprobe``).

Library code pages (oneDNN, OpenMP's runtime, torch's index kernels), allocator arenas and autograd's
first-use structures appear after the engine measures its baseline (post-setup RSS) and stay, so they show up
in every epoch's ``peak - baseline``. The probe mimics the engine's setup (one thread, glibc's mmap
threshold lowered by ``sarlab.core.memory.tune_malloc``, the kernels extension loaded, a gloo all-reduce, shards,
a model and its optimizer), then runs one family once on a tiny input, forward and backward, the way the engine
runs it (sum and mean: the C++ shard SpMM; max: the C++ running max), and records its RSS growth; each family
in a process of its own, after an autograd step, so that pages families share count for each.

How the families' processes start (:func:`run_probe`'s ``start``). By default (``parent``) one fresh interpreter
sets up once and forks a child per family, all at once (:func:`forked_first_use`); each child first reads one byte of
every page of a file mapping that was resident in its parent (:func:`resident_file_pages`: ``/proc/self/pagemap``,
bit 63; :func:`touch_pages`). Without that a fork measures too much: ``fork(2)`` copies no page-table entries of
file mappings without anonymous pages (torch's code and read-only data), so a child starts some 100 MiB below its
parent and re-faults those pages as a family runs (forked from the zygote, autograd measured 9.6 MiB against 7.0
fresh, gat_autograd 5.5 against 4.3). Re-faulted, the child holds what its parent holds (to the page), which is what a
fresh interpreter holds after the same set-up (+0.05-0.3 MiB: the page list), its families' file-page growth equals a
fresh process's within 48 KiB, and their first-use bytes lie within 0.25 MiB of fresh runs' (autograd 0.1-0.2 MiB
less, gat_fused up to 0.15 more: anonymous memory, the allocator's state), in a third to a fifth of the wall time (one
torch and dynamo import instead of six; results/host_model/budget/first_use_fork/README.md). The child never uses the
parent's gloo group: its all-reduce put gloo's code and buffers in the parent, and so in the child's baseline.
``fresh``: a fresh interpreter per family (``--family``), for comparison.
``--memory live`` measures the same under the counting allocator the workers use by default
(:func:`sarlab.core.memory.use_method`), where a run's peak counts tensor bytes: what a family adds there is the
tensor bytes it leaves live (code pages and arenas are not tensors: 0 for every family on the 2-core EPYC VM,
2026-11-28, against 0.7-7 MiB of resident bytes), every family in one process forked from the zygote; without it,
``rss``. It also measures what the C++ shard SpMM allocates beyond its output (:func:`kernel_transients`), a check of
the memory model's claim that it allocates nothing else (expected 0; ``--transients``). Prints one JSON line
``{"first_use": {...}, "transients": {...}, ...}``.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import mmap
import os
import re
import signal
import socket
import sys
import time
import traceback
from functools import partial

import torch
import torch.distributed as dist

from sarlab import kernels
from sarlab.core.memory import METHODS, method, peak_bytes, reset_peak, rss_bytes, tune_malloc, use_method
from sarlab.real.calibration.harness import module_command, module_env


def _setup() -> None:
    """The engine worker's state before its baseline (``sarlab.real.launch.worker.run``): one thread, its malloc
    settings, the kernels extension loaded, a gloo group, shards built as ``sarlab.core.shards.Shard`` builds them
    (edges sorted by destination, row pointers from counts), a model and its optimizer."""
    torch.set_num_threads(1)
    tune_malloc(threshold=1 << 17)
    kernels.backend("auto")
    n = 2000
    src, dst = torch.randint(0, n, (8 * n,)), torch.randint(0, n, (8 * n,))
    order = torch.argsort(dst * n + src)
    src, dst = src[order].contiguous(), dst[order].contiguous()
    rowptr = torch.zeros(n + 1, dtype=torch.long)
    torch.cumsum(torch.bincount(dst, minlength=n), 0, out=rowptr[1:])

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1, timeout=datetime.timedelta(seconds=30)
    )
    dist.all_reduce(torch.zeros(4, dtype=torch.float64))
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    torch.optim.Adam(model.parameters())


def _autograd() -> None:
    x = torch.randn(512, 32)
    lin = torch.nn.Linear(32, 32)
    opt = torch.optim.Adam(lin.parameters())
    loss = torch.nn.functional.cross_entropy(lin(x).relu(), torch.zeros(512, dtype=torch.long))
    grads = torch.autograd.grad(loss, list(lin.parameters()))
    for p, g in zip(lin.parameters(), grads, strict=True):
        p.grad = g
    opt.step()


def _shard(n: int, deg: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A CSR shard of ``n`` rows and ``deg`` random in-edges each: (rowptr, col), int64."""
    col = torch.randint(0, n, (n * deg,)).view(n, deg).sort(1).values.reshape(-1)
    return torch.arange(0, n * deg + 1, deg), col


def _transpose(rowptr: torch.Tensor, col: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(column pointers, destinations in source order), as ``Shard.transpose_index`` builds them."""
    dst = torch.repeat_interleave(torch.arange(n), rowptr.diff())
    perm = torch.argsort(col * n + dst)
    colptr = torch.zeros(n + 1, dtype=torch.long)
    torch.cumsum(torch.bincount(col, minlength=n), 0, out=colptr[1:])
    return colptr, dst[perm].contiguous()


def _spmm() -> None:
    n, deg = 2000, 8
    rowptr, col = _shard(n, deg)
    x, state = torch.randn(n, 16), torch.zeros(n, 16)
    kernels.spmm_csr(rowptr, col, x, out=state, backend="cpp")  # forward: added into the state in place
    colptr, rows = _transpose(rowptr, col, n)
    kernels.spmm_csr(colptr, rows, x, backend="cpp")  # backward: A^T g, a fresh output


def _max_aggr() -> None:
    n, deg, f = 2000, 8, 16
    rowptr, col = _shard(n, deg)
    x = torch.randn(n, f)
    best, count = kernels.csr_max_shard(rowptr, col, x, backend="cpp")
    transpose = kernels.csr_transpose(rowptr, col, n, backend="cpp")
    kernels.csr_max_backward(rowptr, col, x, best, count, torch.randn(n, f), backend="cpp", transpose=transpose)


def _gat_unfused() -> None:
    from sarlab import kernels

    n, deg, heads, ch = 2000, 8, 2, 8
    col = torch.randint(0, n, (n * deg,)).view(n, deg).sort(1).values.reshape(-1)
    rowptr = torch.arange(0, n * deg + 1, deg)
    z, s_src, s_dst = torch.randn(n, heads, ch), torch.randn(n, heads), torch.randn(n, heads)
    m, l, acc = kernels.gat_forward_shard(rowptr, col, s_dst, s_src, z, 0.2, backend="torch")
    out = acc / l[..., None]
    g = torch.randn_like(out)
    kernels.gat_backward_shard(rowptr, col, s_dst, s_src, z, 0.2, m, l, g, (g * out).sum(-1), backend="torch")


def _gat_autograd() -> None:
    n, deg, heads, ch = 2000, 8, 2, 8
    src = torch.randint(0, n, (n * deg,))
    dst = torch.repeat_interleave(torch.arange(n), deg)
    z = torch.randn(n, heads, ch, requires_grad=True)
    s = torch.randn(n, heads, requires_grad=True)
    e = torch.nn.functional.leaky_relu(s[dst] + s[src], 0.2)
    w = torch.exp(e - e.max())
    denom = torch.zeros(n, heads).index_add(0, dst, w)
    out = torch.zeros(n, heads, ch).index_add(0, dst, (w / denom[dst])[..., None] * z[src])
    torch.autograd.grad(out.sum(), [z, s])


def _gat_fused() -> None:
    from sarlab import kernels

    n, deg, heads, ch = 2000, 8, 2, 8
    col = torch.randint(0, n, (n * deg,)).view(n, deg).sort(1).values.reshape(-1)
    rowptr = torch.arange(0, n * deg + 1, deg)
    z, s_src, s_dst = torch.randn(n, heads, ch), torch.randn(n, heads), torch.randn(n, heads)
    m, l, acc = kernels.gat_forward_shard(rowptr, col, s_dst, s_src, z, 0.2)
    out = acc / l[..., None]
    g = torch.randn_like(out)
    kernels.gat_backward_shard(rowptr, col, s_dst, s_src, z, 0.2, m, l, g, (g * out).sum(-1))


PROBES = {
    "autograd": _autograd,
    "spmm": _spmm,
    "max_aggr": _max_aggr,
    "gat_unfused": _gat_unfused,
    "gat_autograd": _gat_autograd,
    "gat_fused": _gat_fused,
}


def _peak_beyond(fn, out_bytes: int) -> float:
    """Peak resident growth while ``fn()`` runs, beyond the ``out_bytes`` of its result (VmHWM reset).
    Raises OSError where VmHWM cannot be reset."""
    fn()  # first call: lazy initialisation, code pages
    extras = []
    for _ in range(2):
        before = rss_bytes()
        if not reset_peak():
            raise OSError("VmHWM cannot be reset (/proc/self/clear_refs)")
        result = fn()
        extras.append(peak_bytes() - before - out_bytes)
        del result
    return float(min(extras))


def kernel_transients() -> dict[str, float]:
    """What the C++ shard SpMM the engine's linear aggregations run allocates beyond its output, a check of the
    memory model, which books the output alone (expected 0; a profile keeps it, the model does not price it).

    Forward ``kernels.spmm_csr(..., out=state)`` (in place) and backward ``A^T g`` (a fresh output) on shapes that
    vary the output size and the edge count, fitted (non-negative least squares) to ``extra = a * output_bytes +
    c * edges``. Keys: ``spmm_fwd_out``, ``spmm_fwd_edge``, ``spmm_bwd_out``, ``spmm_bwd_edge`` (profiles before
    the C++ kernels measured torch.sparse's MKL products under the same keys).
    """
    import numpy as np  # imported here, after the first-use probes, so their RSS growth does not include them
    from scipy.optimize import nnls

    rows, fwd, bwd = [], [], []
    for n, deg, f in ((40000, 8, 64), (40000, 32, 64), (40000, 8, 256), (20000, 32, 16)):
        rowptr, col = _shard(n, deg)
        colptr, dst = _transpose(rowptr, col, n)
        x, state, out = torch.randn(n, f), torch.zeros(n, f), n * f * 4
        fwd.append(_peak_beyond(partial(kernels.spmm_csr, rowptr, col, x, out=state, backend="cpp"), 0))
        bwd.append(_peak_beyond(partial(kernels.spmm_csr, colptr, dst, x, backend="cpp"), out))
        rows.append([float(out), float(n * deg)])
    design = np.array(rows)
    weights = 1.0 / design.sum(axis=1)  # relative residuals
    coef_f, _ = nnls(design * weights[:, None], np.maximum(fwd, 0.0) * weights)
    coef_b, _ = nnls(design * weights[:, None], np.maximum(bwd, 0.0) * weights)
    return {
        "spmm_fwd_out": float(coef_f[0]),
        "spmm_fwd_edge": float(coef_f[1]),
        "spmm_bwd_out": float(coef_b[0]),
        "spmm_bwd_edge": float(coef_b[1]),
    }


#: the size of a page as /proc/PID/pagemap counts them (one 8-byte entry each)
PAGE = mmap.PAGESIZE
#: the top byte of a little-endian pagemap entry -> 1 where bit 63 (present in the page table) is set, else 0
_PRESENT = bytes(1 if byte & 0x80 else 0 for byte in range(256))


def resident_file_pages(pid: int | str = "self") -> list[tuple[int, int]]:
    """``(address, pages)`` runs of the pages of ``pid``'s readable file-backed mappings (``/proc/PID/maps`` lines
    with an inode) that are present in its page table (bit 63 of their ``/proc/PID/pagemap`` entries).

    After ``fork(2)`` a child's page tables hold none of these where the mapping has no anonymous pages (torch's
    code and read-only data): the addresses are the same in the child (the layout is inherited), so reading a byte of
    each (:func:`touch_pages`) maps them again. Raises OSError where ``/proc`` cannot be read."""
    runs: list[tuple[int, int]] = []
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/pagemap", "rb", buffering=0) as pagemap:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) < 6 or fields[4] == "0" or not fields[1].startswith("r"):
                continue  # anonymous (heap, stacks, [vdso]), or not readable (a library's guard gap)
            low, high = (int(v, 16) for v in fields[0].split("-"))
            pagemap.seek(low // PAGE * 8)
            entries = pagemap.read((high - low) // PAGE * 8)
            present = entries[7::8].translate(_PRESENT)
            runs.extend((low + m.start() * PAGE, m.end() - m.start()) for m in re.finditer(b"\x01+", present))
    return runs


def touch_pages(runs: list[tuple[int, int]]) -> int:
    """Read one byte of every page of ``runs`` (:func:`resident_file_pages`), which maps each into this process's
    page table (a minor fault from the page cache); the number of pages read."""
    pages = 0
    for address, count in runs:
        for i in range(count):
            ctypes.string_at(address + i * PAGE, 1)
        pages += count
    return pages


def _die_with_parent(parent: int) -> None:
    """SIGKILL this process when ``parent`` dies (a probe parent killed at its deadline leaves no child behind)."""
    pr_set_pdeathsig = 1  # <linux/prctl.h>
    ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def _forked_child(family: str, runs: list[tuple[int, int]], parent: int, write_fd: int) -> None:
    """A probe parent's child for ``family``: re-fault the parent's resident file pages (``runs``), then
    :func:`first_use`; writes ``{"first_use": ..., "baseline": ...}`` to ``write_fd`` and exits (never returns)."""
    code = 1
    try:
        _die_with_parent(parent)
        start = time.perf_counter()
        pages = touch_pages(runs)
        touch_s = time.perf_counter() - start
        baseline = rss_bytes()
        measured: dict[str, float] = {}
        try:
            measured[family] = first_use(family)
        except (RuntimeError, OSError, ImportError):  # a family this build cannot run: not measured
            pass
        text = json.dumps({"first_use": measured, "baseline": {family: float(baseline)},
                           "touched": {family: {"pages": pages, "seconds": round(touch_s, 4)}}})
        os.write(write_fd, text.encode())
        code = 0
    except BaseException:  # noqa: BLE001 - told on stderr; the parent reports the family as not measured
        traceback.print_exc()
    finally:
        sys.stderr.flush()
        os._exit(code)


def forked_first_use(families: list[str], timeout_s: float = 300.0) -> dict[str, dict]:
    """Every family's :func:`first_use` under ``rss`` in a child forked from this process after one :func:`_setup`
    (call in a fresh interpreter: it is the baseline's origin), all children at once; each re-faults the file
    pages resident here before its baseline (:func:`resident_file_pages`, :func:`touch_pages`), so that it starts
    with what a fresh interpreter holds after the same set-up. A child still running after ``timeout_s`` is
    killed and its family left out. Returns ``{"first_use": ..., "baseline": ..., "touched": ..., "parent": ...}``
    (``baseline``: each child's RSS after the re-touch; ``parent``: this process's RSS and its resident file
    pages as the children were forked)."""
    _setup()
    runs = resident_file_pages()
    parent = {"rss": float(rss_bytes()), "file_pages": float(sum(count for _, count in runs))}
    children: dict[int, int] = {}
    me = os.getpid()
    for family in families:
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_fd)
            _forked_child(family, runs, me, write_fd)
        os.close(write_fd)
        children[pid] = read_fd
    result: dict[str, dict] = {"first_use": {}, "baseline": {}, "touched": {}, "parent": parent}
    deadline = time.monotonic() + timeout_s
    running = set(children)
    while running and time.monotonic() < deadline:
        for pid in list(running):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                running.discard(pid)
        if running:
            time.sleep(0.005)
    for pid in running:  # past the deadline: killed, its family not measured
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    for pid, read_fd in children.items():
        with os.fdopen(read_fd, "rb") as pipe:
            text = pipe.read().decode()
        if pid not in running and text:
            for key, values in json.loads(text).items():
                result[key].update(values)
    return result


def held_bytes() -> int:
    """What the process's memory method counts now: live tensor bytes under ``live``, resident bytes under ``rss``."""
    return kernels.alloc.live_bytes() if method() == "live" else rss_bytes()


def first_use(family: str) -> float:
    """Bytes ``family`` adds the first time this process runs it, as its memory method counts them
    (:func:`held_bytes`; call once, after :func:`_setup`).

    Every family but ``autograd`` runs after an (unmeasured) autograd step, since the simulator adds ``autograd``'s
    own first use to every model's: what is left is the family's own code and structures."""
    if family != "autograd":
        _autograd()
    before = held_bytes()
    PROBES[family]()
    return float(max(held_bytes() - before, 0))


#: how :func:`run_probe` starts the processes of an ``rss`` probe: ``parent``, one fresh interpreter that sets up
#: once and forks a child per family (:func:`forked_first_use`); ``fresh``, a fresh interpreter per family;
#: ``zygote``, forked from the calibration's zygote (no re-fault: more than a fresh process counts, see above)
STARTS = ("parent", "fresh", "zygote")


def probe_commands(memory: str = "rss", transients: bool = True, start: str = "fresh") -> list[list[str]]:
    """The processes one probe under ``memory`` runs, all at once (each one's RSS is its own): under ``rss`` one per
    family (``--family``: pages several families share count for each of them, as a model running one family sees
    them) and, with ``transients``, one for the sparse kernels' temporaries (``--transients``), or with ``start``
    ``parent`` one probe parent for all of them (``--forked``); under ``live`` one for every family (tensor bytes:
    no pages to share)."""
    def command(*args: str) -> list[str]:
        return module_command("memprobe", *args)

    if memory == "live":
        return [command("--memory", "live")]
    if start == "parent":
        return [command("--forked", *(["--transients"] if transients else []))]
    return [*(command("--family", family, "--memory", memory) for family in PROBES),
            *([command("--transients")] if transients else [])]


def merge(outputs: list[str]) -> dict[str, dict]:
    """``{"first_use": {...}, "transients": {...}}`` from the last JSON line of each of :func:`probe_commands`'
    outputs (a process that printed nothing measured nothing), with any other keys they print (``baseline``: each
    family's RSS before it ran; a probe parent's ``touched`` and ``parent``)."""
    result: dict[str, dict] = {"first_use": {}, "transients": {}}
    for text in outputs:
        lines = text.strip().splitlines()
        if lines:
            for key, values in json.loads(lines[-1]).items():
                result.setdefault(key, {}).update(values)
    return result


#: the sparse kernels' temporaries are measured in a process forked from the zygote (after the fresh family probes):
#: each is a peak beyond the resident bytes just before a call that already ran once, so the pages a fork faults in
#: again are not in it; a fresh interpreter cost one more torch import among the probe's (2-3 s of a calibration).
#: A probe parent (``start="parent"``) measures them itself once its children are done.
TRANSIENTS_FORKED = True


def run_probe(memory: str = "rss", timeout_s: float = 600.0, start: str | None = None) -> dict[str, dict]:
    """Run :func:`probe_commands` at once and :func:`merge` their outputs. ``start`` (:data:`STARTS`; by default
    ``fresh`` under ``rss``, ``zygote`` under ``live``): ``parent``, one fresh interpreter whose forks measure
    the families and which then measures the transients; ``fresh``, a fresh interpreter per family, the transients'
    process following, forked (:data:`TRANSIENTS_FORKED`); ``zygote``, every process forked from the zygote
    (:func:`sarlab.real.calibration.ranks.run_group`)."""
    from sarlab.real.calibration.ranks import run_group

    if start is None:
        start = "fresh" if memory == "rss" else "zygote"
    if start not in STARTS:
        raise ValueError(f"start must be one of {', '.join(STARTS)}, not {start!r}")
    apart = memory == "rss" and start == "fresh" and TRANSIENTS_FORKED
    commands = probe_commands(memory, transients=not apart, start=start)
    env = module_env()
    outputs = run_group(commands, [env] * len(commands), f"memprobe ({memory}, {start})", timeout_s,
                        fork=start == "zygote")
    if apart:
        outputs += run_group([module_command("memprobe", "--transients")], [env], "memprobe (transients)", timeout_s)
    return merge(outputs)


def _measure_transients(setup: bool = False) -> dict[str, float]:
    """:func:`kernel_transients` (after :func:`_setup` with ``setup``: a process that has not set up yet), or
    nothing where VmHWM cannot be reset or the C++ kernels are missing."""
    try:
        if setup:
            _setup()
        return kernel_transients()
    except (OSError, RuntimeError):
        return {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", choices=sorted(PROBES), help="measure one family in this process and exit")
    parser.add_argument("--memory", choices=METHODS, default="rss",
                        help="the memory method to measure under (default rss: resident bytes)")
    parser.add_argument("--transients", action="store_true",
                        help="measure the sparse kernels' temporaries in this process and exit")
    parser.add_argument("--forked", action="store_true",
                        help="rss: set up once, measure every family in a child forked from this process (its "
                             "resident file pages re-faulted first), then the transients with --transients")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="--forked: seconds before the children still running are killed (default 300)")
    args = parser.parse_args(argv)
    if args.forked:
        use_method("rss")  # as --family does: its malloc settings before anything else
        result = forked_first_use(list(PROBES), args.timeout)
        if args.transients:
            result["transients"] = _measure_transients()
        print(json.dumps(result), flush=True)
        return 0
    if args.family:
        measured: dict[str, float] = {}
        baseline: dict[str, float] = {}
        if use_method(args.memory) == args.memory:  # not live without the C++ kernels: nothing to measure under it
            _setup()
            baseline[args.family] = float(rss_bytes())
            try:
                measured[args.family] = first_use(args.family)
            except (RuntimeError, OSError, ImportError):  # a family this build cannot run: not measured
                pass
        print(json.dumps({"first_use": measured, "baseline": baseline}), flush=True)
        return 0
    if args.transients:  # the sparse kernels' temporaries are resident bytes (VmHWM)
        print(json.dumps({"transients": _measure_transients(setup=True)}), flush=True)
        return 0
    if args.memory == "live":  # tensor bytes: no code pages shared between families, so one process runs them all
        live = use_method("live") == "live"  # not without the C++ kernels: nothing measured then
        if live:
            _setup()
        measured = {name: first_use(name) for name in PROBES} if live else {}
        print(json.dumps({"first_use": measured}), flush=True)
        return 0
    print(json.dumps(run_probe(args.memory)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
