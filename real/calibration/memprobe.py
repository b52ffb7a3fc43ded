"""Resident memory that an op family adds the first time a fresh process runs it (``python -m
sarlab.real.calibration.memprobe``).

Library code pages (oneDNN, OpenMP's runtime, torch's index kernels), allocator arenas and autograd's
first-use structures appear after the engine measures its baseline (post-setup RSS) and stay, so they show up
in every epoch's ``peak - baseline``. The probe mimics the engine's setup (one thread, glibc's mmap
threshold lowered by ``sarlab.core.memory.tune_malloc``, the kernels extension loaded, a gloo all-reduce, shards,
a model and its optimizer), then runs one family once on a tiny input, forward and backward, the way the engine
runs it (sum and mean: the C++ shard SpMM; max: the C++ running max), and records its RSS growth; each family
in a fresh interpreter (``--family``), after an autograd step, so that pages families share count for each; the
families' processes run at once (:func:`run_probe`: each one's RSS is its own).

Fresh interpreters, not forks of the zygote as the calibration's other processes are: what this measures is resident
growth, and that depends on how the process started. A fork's page tables begin without the file pages (torch's
code) the zygote mapped as it imported, which fault in again as the child uses them, so a forked probe would count
pages a fresh one counts in its baseline: forked, autograd's first use measured 9.6 MiB against 7.0 fresh and
gat_autograd's 5.5 against 4.3 (results/host_model/budget/README.md). Under ``live`` (tensor bytes, the same either
way: 0 for every family) the one process is forked.
``--memory live`` measures the same under the counting allocator the workers use by default
(:func:`sarlab.core.memory.use_method`), where a run's peak counts tensor bytes: what a family adds there is the
tensor bytes it leaves live (code pages and arenas are not tensors: 0 for every family on the 2-core EPYC VM,
2026-11-28, against 0.7-7 MiB of resident bytes), every family in one process; without it, ``rss``.
It also measures what the C++ shard SpMM allocates beyond its output (:func:`kernel_transients`), a check of
the memory model's claim that it allocates nothing else (expected 0; ``--transients``). Prints one JSON line
``{"first_use": {...}, "transients": {...}}``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import socket
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


def probe_commands(memory: str = "rss", transients: bool = True) -> list[list[str]]:
    """The processes one probe under ``memory`` runs, all at once (each one's RSS is its own): under ``rss`` one per
    family (``--family``: pages several families share count for each of them, as a model running one family sees
    them) and, with ``transients``, one for the sparse kernels' temporaries (``--transients``); under ``live`` one for
    every family (tensor bytes: no pages to share)."""
    def command(*args: str) -> list[str]:
        return module_command("memprobe", *args)

    if memory == "live":
        return [command("--memory", "live")]
    return [*(command("--family", family, "--memory", memory) for family in PROBES),
            *([command("--transients")] if transients else [])]


def merge(outputs: list[str]) -> dict[str, dict[str, float]]:
    """``{"first_use": {...}, "transients": {...}}`` from the last JSON line of each of :func:`probe_commands`'
    outputs (a process that printed nothing measured nothing)."""
    result: dict[str, dict[str, float]] = {"first_use": {}, "transients": {}}
    for text in outputs:
        lines = text.strip().splitlines()
        if lines:
            for key, values in json.loads(lines[-1]).items():
                result[key].update(values)
    return result


#: the sparse kernels' temporaries are measured in a process forked from the zygote (after the fresh family probes):
#: each is a peak beyond the resident bytes just before a call that already ran once, so the pages a fork faults in
#: again are not in it; a fresh interpreter cost one more torch import among the probe's (2-3 s of a calibration)
TRANSIENTS_FORKED = True


def run_probe(memory: str = "rss", fresh: bool = True, timeout_s: float = 600.0) -> dict[str, dict[str, float]]:
    """Run :func:`probe_commands` at once and :func:`merge` their outputs; ``fresh``: each a fresh interpreter,
    else forked from the zygote (:func:`sarlab.real.calibration.ranks.run_group`). Under ``rss`` with ``fresh`` the
    transients' process follows, forked (:data:`TRANSIENTS_FORKED`)."""
    from sarlab.real.calibration.ranks import run_group

    apart = memory == "rss" and fresh and TRANSIENTS_FORKED
    commands = probe_commands(memory, transients=not apart)
    env = module_env()
    outputs = run_group(commands, [env] * len(commands), f"memprobe ({memory})", timeout_s, fork=not fresh)
    if apart:
        outputs += run_group([module_command("memprobe", "--transients")], [env], "memprobe (transients)", timeout_s)
    return merge(outputs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", choices=sorted(PROBES), help="measure one family in this process and exit")
    parser.add_argument("--memory", choices=METHODS, default="rss",
                        help="the memory method to measure under (default rss: resident bytes)")
    parser.add_argument("--transients", action="store_true",
                        help="measure the sparse kernels' temporaries in this process and exit")
    args = parser.parse_args(argv)
    if args.family:
        measured: dict[str, float] = {}
        if use_method(args.memory) == args.memory:  # not live without the C++ kernels: nothing to measure under it
            _setup()
            try:
                measured[args.family] = first_use(args.family)
            except (RuntimeError, OSError, ImportError):  # a family this build cannot run: not measured
                pass
        print(json.dumps({"first_use": measured}), flush=True)
        return 0
    if args.transients:  # the sparse kernels' temporaries are resident bytes (VmHWM)
        transients: dict[str, float] = {}
        try:
            _setup()
            transients = kernel_transients()
        except (OSError, RuntimeError):  # VmHWM cannot be reset here, or no C++ kernels: not measured
            pass
        print(json.dumps({"transients": transients}), flush=True)
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
