"""Resident memory that an op family adds the first time a fresh process runs it (``python -m simulator.memprobe``).

Library code pages (MKL sparse, oneDNN, the kernels extension), allocator arenas and autograd's first-use
structures appear after the engine measures its baseline (post-setup RSS) and stay, so they show up in
every epoch's ``peak - baseline``. The probe mimics the engine's setup (one thread, glibc's mmap
threshold lowered as ``sarlab.memory.tune_malloc`` does, a gloo all-reduce, a model and its optimizer),
then runs each family once on a tiny input, forward and backward, and prints the RSS growth per family as
one JSON line.
"""

from __future__ import annotations

import ctypes
import datetime
import json
import os
import socket
import warnings

import torch


def rss_bytes() -> int:
    """Current resident set size of this process."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _setup() -> None:
    torch.set_num_threads(1)
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 17)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 1 << 17)  # M_TRIM_THRESHOLD
    except OSError:
        pass
    import torch.distributed as dist

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


def _spmm() -> None:
    n, deg = 2000, 8
    col = torch.randint(0, n, (n * deg,))
    rowptr = torch.arange(0, n * deg + 1, deg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = torch.sparse_csr_tensor(rowptr, col, torch.ones(n * deg), size=(n, n))
        x = torch.randn(n, 16)
        torch.sparse.addmm(torch.zeros(n, 16), a, x)
        a.t().to_sparse_csr() @ x


def _max_aggr() -> None:
    n, deg, f = 2000, 8, 16
    src = torch.randint(0, n, (n * deg,))
    dst = torch.repeat_interleave(torch.arange(n), deg)
    x = torch.randn(n, f, requires_grad=True)
    msg = x[src]
    out = torch.full((n, f), -torch.inf).scatter_reduce(0, dst.view(-1, 1).expand_as(msg), msg, "amax")
    torch.autograd.grad(out.sum(), x)


def _gat_unfused() -> None:
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
    import kernels

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
    "gat_fused": _gat_fused,
}


def main() -> int:
    _setup()
    result: dict[str, float] = {}
    for name, probe in PROBES.items():
        before = rss_bytes()
        try:
            probe()
        except Exception:  # noqa: BLE001 - a family that cannot run here is simply not measured
            continue
        result[name] = float(max(rss_bytes() - before, 0))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
