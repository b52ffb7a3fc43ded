"""Microbenchmarks of GAT attention over one shard, in the engine's three forms: the fused C++ kernels, the
streamed torch kernels of ``sar`` (no-grad forward, a backward that recomputes the attention) and the
edge-wise formulation under torch autograd (``sa``, ``oneshot``, one worker). Work unit: edge*head*channel.
"""

from __future__ import annotations

import warnings

import torch

from simulator.calibration import Calibration, Findings
from simulator.fitting import fit_op
from simulator.harness import time_call
from simulator.opbench import parallel_eff, random_csr
from simulator.profile import OpCost


def gat_shapes(cal: Calibration) -> list[tuple[int, int, int, int]]:
    """(nodes, degree, heads, channels)."""
    tiny = [(64, 2, 1, 8)]  # pins the per-call overhead
    if cal.quick:
        return [(2000, 4, 2, 16), (2000, 16, 2, 16), (6000, 4, 1, 16)] + tiny
    shapes = [(20000, 4, 4, 32), (20000, 16, 4, 32), (40000, 8, 1, 32), (10000, 32, 2, 32), (40000, 2, 4, 16)]
    return shapes + tiny


def gat_inputs(n: int, deg: int, heads: int, ch: int, gen: torch.Generator, grad: bool) -> tuple:
    rowptr, col = random_csr(n, n, deg, gen)
    z = torch.randn(n, heads, ch, generator=gen).requires_grad_(grad)
    s_src = torch.randn(n, heads, generator=gen).requires_grad_(grad)
    s_dst = torch.randn(n, heads, generator=gen).requires_grad_(grad)
    return rowptr, col, s_dst, s_src, z


def gat_autograd_shard(
    dst: torch.Tensor, col: torch.Tensor, s_dst: torch.Tensor, s_src: torch.Tensor, z: torch.Tensor
) -> torch.Tensor:
    """One shard of unfused GAT under autograd, as the engine's ``_accumulate_autograd`` runs it (online
    softmax: running max, rescaled normaliser and numerator), from an empty state."""
    n, heads, ch = s_dst.shape[0], s_dst.shape[1], z.shape[2]
    m_old = torch.full((n, heads), -torch.inf)
    l_old, acc_old = torch.zeros(n, heads), torch.zeros(n, heads, ch)
    e = torch.nn.functional.leaky_relu(s_dst[dst] + s_src[col], 0.2)
    idx = dst.view(-1, 1).expand_as(e)
    m_new = torch.maximum(m_old, torch.full_like(m_old, -torch.inf).scatter_reduce(0, idx, e.detach(), "amax"))
    scale = torch.where(torch.isinf(m_old), torch.zeros_like(m_old), torch.exp(m_old - m_new))
    p = torch.exp(e - m_new[dst])
    l_new = l_old * scale + torch.zeros_like(l_old).index_add(0, dst, p)
    acc = acc_old * scale.unsqueeze(-1) + torch.zeros_like(acc_old).index_add(0, dst, p.unsqueeze(-1) * z[col])
    return acc / torch.where(l_new > 0, l_new, torch.ones_like(l_new)).unsqueeze(-1)


def bench_gat_autograd(cal: Calibration, found: Findings, cores: int, gen: torch.Generator) -> OpCost:
    """Unfused GAT under torch autograd (``sa``/``oneshot``/one worker): forward with the graph recorded,
    then ``autograd.grad`` through it."""
    rows, fwd, bwd = [], [], []
    last = None
    for n, deg, heads, ch in gat_shapes(cal):
        rowptr, col, s_dst, s_src, z = gat_inputs(n, deg, heads, ch, gen, grad=True)
        dst = torch.repeat_interleave(torch.arange(n), deg)
        args = (dst, col, s_dst, s_src, z)
        tf = time_call(lambda a=args: gat_autograd_shard(*a), cal.repeats)

        def backward(a=args) -> None:
            out = gat_autograd_shard(*a)
            torch.autograd.grad(out, a[2:], torch.ones_like(out))

        tb = time_call(backward, cal.repeats)
        rows.append([1.0, n * deg * heads * ch, n * heads * ch])
        fwd.append(tf)
        bwd.append(max(tb - tf, 0.1 * tf))  # backward() ran the forward too
        if last is None or tf > last[0]:
            last = (tf, args)
    eff = parallel_eff(cal, found, cores, lambda: gat_autograd_shard(*last[1]), "gat_autograd")
    rate, overhead, row_rate, ratio = fit_op(rows, fwd, bwd, 5e7)
    found.raw["gat_autograd"] = {"shapes": gat_shapes(cal), "fwd": fwd, "bwd": bwd}
    return OpCost(rate=rate, overhead_s=overhead, bwd_ratio=ratio, parallel_eff=eff, row_rate=row_rate)


def bench_gat_unfused(cal: Calibration, found: Findings, cores: int, gen: torch.Generator) -> OpCost:
    """Unfused GAT as ``sar`` streams it: the kernels' torch forward (no autograd) and their torch backward,
    which recomputes the attention of the shard first. Without the kernels package the autograd
    formulation stands in."""
    try:  # imported when timed, not at module import: loading kernels may build its C++ extension
        import kernels

        fwd_fn, bwd_fn = kernels.gat_forward_shard, kernels.gat_backward_shard
    except Exception as err:  # noqa: BLE001
        found.notes.append(f"gat_unfused: import kernels failed ({type(err).__name__}); timed the autograd form")
        return bench_gat_autograd(cal, found, cores, gen)
    rows, fwd, bwd = [], [], []
    last = None
    for n, deg, heads, ch in gat_shapes(cal):
        rowptr, col, s_dst, s_src, z = gat_inputs(n, deg, heads, ch, gen, grad=False)
        args = (rowptr, col, s_dst, s_src, z, 0.2)
        tf = time_call(lambda a=args: fwd_fn(*a, backend="torch"), cal.repeats)
        m, l, acc = fwd_fn(*args, backend="torch")
        out = acc / torch.where(l > 0, l, torch.ones_like(l))[..., None]
        g = torch.randn_like(out)
        state = (m, l, g, (g * out).sum(-1))
        tb = time_call(lambda a=args, st=state: bwd_fn(*a, *st, backend="torch"), cal.repeats)
        rows.append([1.0, n * deg * heads * ch, n * heads * ch])
        fwd.append(tf)
        bwd.append(tb)
        if last is None or tf > last[0]:
            last = (tf, args)
    eff = parallel_eff(cal, found, cores, lambda: fwd_fn(*last[1], backend="torch"), "gat_unfused")
    rate, overhead, row_rate, ratio = fit_op(rows, fwd, bwd, 5e7)
    found.raw["gat_unfused"] = {"shapes": gat_shapes(cal), "fwd": fwd, "bwd": bwd}
    return OpCost(rate=rate, overhead_s=overhead, bwd_ratio=ratio, parallel_eff=eff, row_rate=row_rate)


def bench_gat_fused(cal: Calibration, found: Findings, cores: int, gen: torch.Generator) -> OpCost | None:
    """``kernels.gat_forward_shard`` / ``gat_backward_shard`` when ``import kernels`` provides them."""
    try:  # imported when timed (see bench_gat_unfused)
        import kernels
    except Exception as err:  # noqa: BLE001 - any import failure means "not available"
        found.notes.append(f"fused GAT not measured: import kernels failed ({type(err).__name__}: {err})")
        return None
    fwd_fn = getattr(kernels, "gat_forward_shard", None)
    bwd_fn = getattr(kernels, "gat_backward_shard", None)
    if fwd_fn is None or bwd_fn is None:
        found.notes.append("fused GAT not measured: kernels lacks gat_forward_shard/gat_backward_shard")
        return None
    backend = "torch"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            backend = kernels.backend() if hasattr(kernels, "backend") else "unknown"
    except Exception as err:  # noqa: BLE001
        found.notes.append(f"kernels.backend() failed ({err}); timing whatever gat_forward_shard runs")
    rows, fwd, bwd = [], [], []
    last = None
    try:
        for n, deg, heads, ch in gat_shapes(cal):
            rowptr, col, s_dst, s_src, z = gat_inputs(n, deg, heads, ch, gen, grad=False)
            transpose = kernels.csr_transpose(rowptr, col, n) if hasattr(kernels, "csr_transpose") else None
            tf = time_call(lambda a=(rowptr, col, s_dst, s_src, z): fwd_fn(*a, 0.2), cal.repeats)
            m, l, acc = fwd_fn(rowptr, col, s_dst, s_src, z, 0.2)
            out = acc / torch.where(l > 0, l, torch.ones_like(l))[..., None]
            g = torch.randn_like(out)
            delta = (g * out).sum(-1)
            args = (rowptr, col, s_dst, s_src, z, 0.2, m, l, g, delta)
            tb = time_call(lambda a=args, t=transpose: bwd_fn(*a, transpose=t), cal.repeats)
            rows.append([1.0, n * deg * heads * ch, n * heads * ch])
            fwd.append(tf)
            bwd.append(tb)
            if last is None or tf > last[0]:
                last = (tf, (rowptr, col, s_dst, s_src, z))
        eff = parallel_eff(cal, found, cores, lambda: fwd_fn(*last[1], 0.2), "gat_fused")
    except Exception as err:  # noqa: BLE001 - an API mismatch must not sink the whole calibration
        found.notes.append(f"fused GAT not measured: calling the kernels failed ({type(err).__name__}: {err})")
        return None
    found.notes.append(f"fused GAT measured with kernels backend {backend!r}")
    rate, overhead, row_rate, ratio = fit_op(rows, fwd, bwd, 2e8)
    found.raw["gat_fused"] = {"shapes": gat_shapes(cal), "fwd": fwd, "bwd": bwd, "backend": backend}
    return OpCost(rate=rate, overhead_s=overhead, bwd_ratio=ratio, parallel_eff=eff, row_rate=row_rate)
