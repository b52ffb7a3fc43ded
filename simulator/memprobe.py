"""Resident memory that an op family adds the first time a fresh process runs it (``python -m simulator.memprobe``).

Library code pages (MKL sparse, oneDNN, the kernels extension), allocator arenas and autograd's first-use
structures appear after the engine measures its baseline (post-setup RSS) and stay, so they show up in
every epoch's ``peak - baseline``. The probe mimics the engine's setup (one thread, glibc's mmap
threshold lowered by ``sarlab.memory.tune_malloc``, a gloo all-reduce, a model and its optimizer),
then runs each family once on a tiny input, forward and backward, and records the RSS growth per family.
It also measures the temporaries of the sparse CSR products beyond their output
(:func:`sparse_transients`), which MKL allocates out of sight of the code. Prints one JSON line
``{"first_use": {...}, "transients": {...}}``.
"""

from __future__ import annotations

import datetime
import json
import socket
import warnings

import torch
import torch.distributed as dist

from sarlab.memory import peak_bytes, reset_peak, rss_bytes, tune_malloc


def _setup() -> None:
    """The engine worker's state before its baseline: one thread, its malloc settings, a gloo group, a
    model and its optimizer."""
    torch.set_num_threads(1)
    tune_malloc(threshold=1 << 17)

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
    import kernels

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


def sparse_transients() -> dict[str, float]:
    """Temporaries of the sparse CSR products the engine's linear aggregations run, beyond their output.

    Forward ``state.addmm_(A, X)`` (in place) and backward ``A^T @ G`` on shapes that vary the output
    size and the edge count, fitted (non-negative least squares) to ``extra = a * output_bytes + c * edges``
    (e.g. MKL's int32 copies of the index arrays per call, a dense temporary of the output). Keys:
    ``spmm_fwd_out``, ``spmm_fwd_edge``, ``spmm_bwd_out``, ``spmm_bwd_edge``.
    """
    import numpy as np  # imported here, after the first-use probes, so their RSS growth does not include them
    from scipy.optimize import nnls

    rows, fwd, bwd = [], [], []
    for n, deg, f in ((40000, 8, 64), (40000, 32, 64), (40000, 8, 256), (20000, 32, 16)):
        col = torch.randint(0, n, (n * deg,)).view(n, deg).sort(1).values.reshape(-1)
        rowptr = torch.arange(0, n * deg + 1, deg)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            a = torch.sparse_csr_tensor(rowptr, col, torch.ones(col.numel()), size=(n, n))
            at = a.t().to_sparse_csr()
            x, state = torch.randn(n, f), torch.zeros(n, f)
            out = n * f * 4
            # the engine adds each shard's product into its running state in place (Shard.spmm(out=...))
            fwd.append(_peak_beyond(lambda a=a, x=x, s=state: s.addmm_(a, x), 0))
            bwd.append(_peak_beyond(lambda at=at, x=x: at @ x, out))
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
    transients: dict[str, float] = {}
    try:
        transients = sparse_transients()
    except OSError:  # VmHWM cannot be reset here (no /proc/self/clear_refs): not measured
        pass
    print(json.dumps({"first_use": result, "transients": transients}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
