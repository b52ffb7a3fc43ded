"""Tests of kernels/: fused GAT attention and CSR max (C++ and torch backends) against independent references,
and a smoke test of their benchmark (``sarlab.real.bench.kernel_bench``).

References: a dense [Nd,Ns] masked softmax written here with plain torch ops (autograd gives its
gradients) and torch.scatter_reduce('amax') for the max aggregation. The kernels' forward and backward are
wired into one autograd Function here (:class:`FusedAttention`), as the engine wires them per shard.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from sarlab import kernels
from sarlab.kernels import _loader
from sarlab.real.bench.kernel_bench import DEFAULT_OUT, build_parser

BACKENDS = ("cpp", "torch")
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-10)}
SLOPE = 0.2


# ---------------------------------------------------------------------------------------------- fixtures
def _compiler() -> str | None:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return name
    return None


@pytest.fixture(scope="session")
def cpp_built() -> bool:
    """Build the extension once per session; skip (saying why) only when no C++ compiler exists."""
    if _compiler() is None:
        reason = "no C++ compiler (c++/g++/clang++ or $CXX) on PATH: cannot build the C++ kernels"
        print(f"SKIP cpp kernel tests: {reason}", file=sys.stderr)
        pytest.skip(reason)
    kernels.build()  # a compiler is present: a failed build is a test failure, not a skip
    return True


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "cpp":
        request.getfixturevalue("cpp_built")
    return request.param


def random_graph(num_dst: int, num_src: int, p: float, seed: int, isolated: int = 2) -> torch.Tensor:
    """Boolean adjacency [Nd,Ns] (edge j->i at [i,j]); the first ``isolated`` destinations get no edge."""
    gen = torch.Generator().manual_seed(seed)
    adj = torch.rand(num_dst, num_src, generator=gen) < p
    adj[:isolated] = False
    return adj


def to_csr(adj: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    row, col = adj.nonzero(as_tuple=True)  # row-major order: sorted by destination
    rowptr = torch.zeros(adj.shape[0] + 1, dtype=torch.int64)
    rowptr[1:] = torch.cumsum(adj.sum(1), 0)
    return rowptr, col.to(torch.int64)


def random_inputs(
    num_dst: int, num_src: int, heads: int, channels: int, dtype: torch.dtype, seed: int, scale: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    s_dst = (torch.randn(num_dst, heads, generator=gen, dtype=dtype) * scale).requires_grad_(True)
    s_src = (torch.randn(num_src, heads, generator=gen, dtype=dtype) * scale).requires_grad_(True)
    z_src = torch.randn(num_src, heads, channels, generator=gen, dtype=dtype).requires_grad_(True)
    return s_dst, s_src, z_src


def dense_attention(
    adj: torch.Tensor, s_dst: torch.Tensor, s_src: torch.Tensor, z_src: torch.Tensor, slope: float
) -> torch.Tensor:
    """Reference: dense masked softmax over [Nd,Ns,H] logits; rows without edges give 0."""
    logits = torch.nn.functional.leaky_relu(s_dst[:, None, :] + s_src[None, :, :], slope)
    mask = adj[:, :, None]
    masked = torch.where(mask, logits, torch.full_like(logits, float("-inf")))
    with torch.no_grad():
        shift = masked.amax(dim=1, keepdim=True)
        shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    weights = torch.exp(masked - shift) * mask
    denom = weights.sum(dim=1, keepdim=True)
    alpha = weights / torch.where(denom > 0, denom, torch.ones_like(denom))
    return torch.einsum("ijh,jhc->ihc", alpha, z_src)


def grads(out: torch.Tensor, inputs: tuple[torch.Tensor, ...], weight: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return torch.autograd.grad((out * weight).sum(), inputs)


class FusedAttention(torch.autograd.Function):
    """The fused kernels over one whole graph: forward shard + finalize, backward shard."""

    @staticmethod
    def forward(ctx, rowptr, col, s_dst, s_src, z_src, transpose, backend):  # type: ignore[override]
        m, l, acc = kernels.gat_forward_shard(rowptr, col, s_dst, s_src, z_src, SLOPE, backend=backend)
        out = kernels.gat_finalize(m, l, acc)
        ctx.save_for_backward(rowptr, col, s_dst, s_src, z_src, m, l, out)
        ctx.transpose, ctx.backend = transpose, backend
        return out

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        rowptr, col, s_dst, s_src, z_src, m, l, out = ctx.saved_tensors
        delta = (grad_out * out).sum(-1)
        g_dst, g_src, g_z = kernels.gat_backward_shard(rowptr, col, s_dst, s_src, z_src, SLOPE, m, l, grad_out,
                                                       delta, backend=ctx.backend, transpose=ctx.transpose)
        return None, None, g_dst, g_src, g_z, None, None


def fused(rowptr, col, s_dst, s_src, z_src, transpose=None, backend=None) -> torch.Tensor:
    return FusedAttention.apply(rowptr, col, s_dst, s_src, z_src, transpose, backend)


# ---------------------------------------------------------------------------------------------- GAT
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("heads", [1, 2, 4, 8])
def test_fused_matches_dense_reference(backend: str, dtype: torch.dtype, heads: int) -> None:
    adj = random_graph(23, 31, 0.3, seed=heads)
    rowptr, col = to_csr(adj)
    inputs = random_inputs(23, 31, heads, 5, dtype, seed=10 + heads)
    weight = torch.randn(23, heads, 5, dtype=dtype, generator=torch.Generator().manual_seed(3))
    out = fused(rowptr, col, *inputs, backend=backend)
    ref = dense_attention(adj, *inputs, SLOPE)
    torch.testing.assert_close(out, ref, **TOL[dtype])
    for got, want in zip(grads(out, inputs, weight), grads(ref, inputs, weight), strict=True):
        torch.testing.assert_close(got, want, **TOL[dtype])


def _split_sources(adj: torch.Tensor, bounds: list[int]) -> list[tuple[slice, torch.Tensor, torch.Tensor]]:
    """Shards by contiguous source ranges: (source slice, rowptr, local col) each."""
    shards = []
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        rowptr, col = to_csr(adj[:, lo:hi])
        shards.append((slice(lo, hi), rowptr, col))
    return shards


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_shard_merge_equals_single_pass(backend: str, dtype: torch.dtype) -> None:
    num_dst, num_src, heads, channels = 19, 40, 4, 6
    adj = random_graph(num_dst, num_src, 0.35, seed=7)
    adj[5, 10:] = False  # a destination whose edges all live in the first shard
    adj[6, :30] = False  # ... and one whose edges all live in the last shard
    s_dst, s_src, z_src = (t.detach() for t in random_inputs(num_dst, num_src, heads, channels, dtype, seed=8))
    rowptr, col = to_csr(adj)
    full = kernels.gat_forward_shard(rowptr, col, s_dst, s_src, z_src, SLOPE, backend=backend)

    state = None
    shards = _split_sources(adj, [0, 10, 30, num_src])
    for sources, srowptr, scol in shards:
        state = kernels.gat_forward_shard(
            srowptr, scol, s_dst, s_src[sources], z_src[sources], SLOPE, state=state, backend=backend
        )
    assert state is not None
    for got, want in zip(state, full, strict=True):
        torch.testing.assert_close(got, want, **TOL[dtype])
    out = kernels.gat_finalize(*state)
    torch.testing.assert_close(out, dense_attention(adj, s_dst, s_src, z_src, SLOPE), **TOL[dtype])

    # backward per shard with the final state sums to the single-pass gradients
    m, l, _ = state
    grad_out = torch.randn(num_dst, heads, channels, dtype=dtype)
    delta = (grad_out * out).sum(-1)
    g_dst, g_src, g_z = kernels.gat_backward_shard(
        rowptr, col, s_dst, s_src, z_src, SLOPE, m, l, grad_out, delta, backend=backend
    )
    acc_dst, acc_src, acc_z = torch.zeros_like(g_dst), torch.zeros_like(g_src), torch.zeros_like(g_z)
    for sources, srowptr, scol in shards:
        d, s, z = kernels.gat_backward_shard(
            srowptr,
            scol,
            s_dst,
            s_src[sources],
            z_src[sources],
            SLOPE,
            m,
            l,
            grad_out,
            delta,
            backend=backend,
        )
        acc_dst += d
        acc_src[sources] = s
        acc_z[sources] = z
    torch.testing.assert_close(acc_dst, g_dst, **TOL[dtype])
    torch.testing.assert_close(acc_src, g_src, **TOL[dtype])
    torch.testing.assert_close(acc_z, g_z, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_backward_accumulates_destination_chunks_into_out(backend: str, dtype: torch.dtype) -> None:
    """Backward over destination-row chunks, each adding into shared ``out`` accumulators (as the unfused
    engine path does), gives the dense reference's gradients; the accumulators are the tensors returned."""
    adj = random_graph(29, 17, 0.4, seed=7)
    rowptr, col = to_csr(adj)
    inputs = random_inputs(29, 17, 3, 4, dtype, seed=8)
    ref = dense_attention(adj, *inputs, SLOPE)
    grad_out = torch.randn(29, 3, 4, dtype=dtype, generator=torch.Generator().manual_seed(9))
    want = torch.autograd.grad(ref, inputs, grad_out)
    s_dst, s_src, z_src = (t.detach() for t in inputs)
    m, l, acc = kernels.gat_forward_shard(rowptr, col, s_dst, s_src, z_src, SLOPE, backend=backend)
    delta = (grad_out * kernels.gat_finalize(m, l, acc)).sum(-1)
    out = (torch.zeros_like(s_dst), torch.zeros_like(s_src), torch.zeros_like(z_src))
    for first, end in ((0, 5), (5, 6), (6, 20), (20, 29)):
        edge_first, edge_end = int(rowptr[first]), int(rowptr[end])
        got = kernels.gat_backward_shard(
            rowptr[first:end + 1] - edge_first, col[edge_first:edge_end], s_dst[first:end], s_src, z_src, SLOPE,
            m[first:end], l[first:end], grad_out[first:end], delta[first:end], backend=backend,
            out=(out[0][first:end], out[1], out[2]))
        assert got[1] is out[1] and got[2] is out[2]
    for got_grad, want_grad in zip(out, want, strict=True):
        torch.testing.assert_close(got_grad, want_grad, **TOL[dtype])
    with pytest.raises(ValueError, match="accumulator"):
        kernels.gat_backward_shard(rowptr, col, s_dst, s_src, z_src, SLOPE, m, l, grad_out, delta, backend=backend,
                                   out=(out[0], out[1], out[2][:3]))


def test_state_is_not_modified_unless_inplace(backend: str) -> None:
    adj = random_graph(8, 9, 0.5, seed=1)
    rowptr, col = to_csr(adj)
    s_dst, s_src, z_src = (t.detach() for t in random_inputs(8, 9, 2, 3, torch.float64, seed=2))
    first = kernels.gat_forward_shard(rowptr, col, s_dst, s_src, z_src, SLOPE, backend=backend)
    kept = tuple(t.clone() for t in first)
    second = kernels.gat_forward_shard(rowptr, col, s_dst, s_src, z_src, SLOPE, state=first, backend=backend)
    for a, b in zip(first, kept, strict=True):
        assert torch.equal(a, b)
    third = kernels.gat_forward_shard(
        rowptr, col, s_dst, s_src, z_src, SLOPE, state=first, backend=backend, inplace=True
    )
    assert third[2].data_ptr() == first[2].data_ptr()
    torch.testing.assert_close(third[2], second[2])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_large_logits_are_stable(backend: str, dtype: torch.dtype) -> None:
    adj = random_graph(15, 20, 0.4, seed=11)
    rowptr, col = to_csr(adj)
    inputs = random_inputs(15, 20, 2, 4, dtype, seed=12, scale=1e4)
    out = fused(rowptr, col, *inputs, backend=backend)
    weight = torch.randn(15, 2, 4, dtype=dtype)
    got = grads(out, inputs, weight)
    assert torch.isfinite(out).all() and all(torch.isfinite(g).all() for g in got)
    ref_inputs = tuple(t.detach().double().requires_grad_(True) for t in inputs)
    ref = dense_attention(adj, *ref_inputs, SLOPE)
    want = grads(ref, ref_inputs, weight.double())
    # logits ~1e4: fp32 rounding of s_dst + s_src alone is ~1e-3 absolute, so compare loosely in fp32
    tol = dict(rtol=1e-10, atol=1e-8) if dtype == torch.float64 else dict(rtol=1e-3, atol=1e-2)
    torch.testing.assert_close(out.double(), ref, **tol)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.double(), w, **tol)


def test_isolated_destinations_give_zero(backend: str) -> None:
    adj = random_graph(10, 6, 0.5, seed=13, isolated=4)
    rowptr, col = to_csr(adj)
    inputs = random_inputs(10, 6, 2, 3, torch.float64, seed=14)
    out = fused(rowptr, col, *inputs, backend=backend)
    assert torch.equal(out[:4], torch.zeros_like(out[:4]))
    g_dst, g_src, g_z = grads(out, inputs, torch.ones_like(out))
    assert torch.equal(g_dst[:4], torch.zeros_like(g_dst[:4]))
    assert all(torch.isfinite(g).all() for g in (g_dst, g_src, g_z))
    # a graph with no edge at all
    empty = torch.zeros(10, 6, dtype=torch.bool)
    rowptr0, col0 = to_csr(empty)
    out0 = fused(rowptr0, col0, *inputs, backend=backend)
    assert torch.equal(out0, torch.zeros_like(out0))


def test_gradcheck_fp64(backend: str) -> None:
    adj = random_graph(7, 6, 0.5, seed=15, isolated=1)
    rowptr, col = to_csr(adj)
    inputs = random_inputs(7, 6, 2, 3, torch.float64, seed=16)
    assert torch.autograd.gradcheck(
        lambda a, b, c: fused(rowptr, col, a, b, c, backend=backend), inputs
    )


def test_backends_agree_and_cpp_is_deterministic(cpp_built: bool) -> None:
    adj = random_graph(60, 50, 0.2, seed=17)
    rowptr, col = to_csr(adj)
    s_dst, s_src, z_src = (t.detach() for t in random_inputs(60, 50, 4, 16, torch.float32, seed=18))
    runs = {}
    threads = torch.get_num_threads()
    try:
        for name, backend, nthreads in (("cpp1", "cpp", 1), ("cpp2", "cpp", 2), ("torch", "torch", threads)):
            torch.set_num_threads(nthreads)
            m, l, acc = kernels.gat_forward_shard(rowptr, col, s_dst, s_src, z_src, SLOPE, backend=backend)
            out = kernels.gat_finalize(m, l, acc)
            g = torch.linspace(-1, 1, out.numel()).view_as(out)
            delta = (g * out).sum(-1)
            runs[name] = (
                out,
                *kernels.gat_backward_shard(rowptr, col, s_dst, s_src, z_src, SLOPE, m, l, g, delta, backend=backend),
            )
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(runs["cpp1"], runs["cpp2"], strict=True):
        assert torch.equal(a, b)  # same sums in the same order whatever the thread count
    for a, b in zip(runs["cpp1"], runs["torch"], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_csr_transpose_and_precomputed_transpose(backend: str) -> None:
    adj = random_graph(12, 9, 0.4, seed=19)
    rowptr, col = to_csr(adj)
    t_rowptr, t_row = kernels.csr_transpose(rowptr, col, 9, backend=backend)
    want_rowptr, want_row = to_csr(adj.T)
    assert torch.equal(t_rowptr, want_rowptr) and torch.equal(t_row, want_row)
    inputs = random_inputs(12, 9, 2, 3, torch.float64, seed=20)
    weight = torch.randn(12, 2, 3, dtype=torch.float64)
    with_t = grads(fused(rowptr, col, *inputs, (t_rowptr, t_row), backend), inputs, weight)
    without = grads(fused(rowptr, col, *inputs, backend=backend), inputs, weight)
    for a, b in zip(with_t, without, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------------ validation, backend
def test_bad_inputs_raise_clear_errors() -> None:
    adj = random_graph(5, 4, 0.5, seed=23, isolated=0)
    rowptr, col = to_csr(adj)
    s_dst, s_src, z_src = (t.detach() for t in random_inputs(5, 4, 2, 3, torch.float32, seed=24))
    with pytest.raises(TypeError, match="int64"):
        kernels.gat_forward_shard(rowptr.int(), col, s_dst, s_src, z_src, SLOPE, backend="torch")
    with pytest.raises(IndexError, match="source rows"):
        kernels.gat_forward_shard(rowptr, col + 10, s_dst, s_src, z_src, SLOPE, backend="torch")
    with pytest.raises(ValueError, match="s_dst"):
        kernels.gat_forward_shard(rowptr, col, s_dst[:, :1], s_src, z_src, SLOPE, backend="torch")
    with pytest.raises(TypeError, match="dtype"):
        kernels.gat_forward_shard(rowptr, col, s_dst.double(), s_src, z_src, SLOPE, backend="torch")
    with pytest.raises(ValueError, match="unknown kernel backend"):
        kernels.gat_forward_shard(rowptr, col, s_dst, s_src, z_src, SLOPE, backend="cuda")


def test_backend_selection_from_environment(monkeypatch: pytest.MonkeyPatch, cpp_built: bool) -> None:
    monkeypatch.setenv("SARLAB_KERNELS", "torch")
    assert kernels.backend() == "torch"
    monkeypatch.setenv("SARLAB_KERNELS", "cpp")
    assert kernels.backend() == "cpp"
    monkeypatch.setenv("SARLAB_KERNELS", "auto")
    assert kernels.backend() == "cpp"
    monkeypatch.setenv("SARLAB_KERNELS", "fortran")
    with pytest.raises(ValueError, match="SARLAB_KERNELS"):
        kernels.backend()


def test_auto_falls_back_to_torch_with_one_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_loader, "_ext", None)
    monkeypatch.setattr(_loader, "_ext_error", RuntimeError("no compiler here\nsecond line"))
    monkeypatch.setattr(_loader, "_warned", False)
    monkeypatch.setenv("SARLAB_KERNELS", "auto")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert kernels.backend() == "torch"
        assert kernels.backend() == "torch"
    assert len(caught) == 1 and "no compiler here" in str(caught[0].message)
    assert "second line" not in str(caught[0].message)
    monkeypatch.setenv("SARLAB_KERNELS", "cpp")
    with pytest.raises(RuntimeError, match="SARLAB_KERNELS=torch"):
        kernels.backend()


# ---------------------------------------------------------------------------------------------- max
def scatter_amax(adj: torch.Tensor, x_src: torch.Tensor) -> torch.Tensor:
    """Reference max over in-edges with torch.scatter_reduce (include_self=False); 0 for no edge."""
    row, col = adj.nonzero(as_tuple=True)
    out = torch.zeros(adj.shape[0], x_src.shape[1], dtype=x_src.dtype)
    index = row[:, None].expand(-1, x_src.shape[1])
    return out.scatter_reduce(0, index, x_src[col], "amax", include_self=False)


def kernel_max(rowptr, col, x, weight, backend) -> tuple[torch.Tensor, torch.Tensor]:
    """Output of the max kernels (0 where no in-edge) and the gradient of ``sum(out * weight)`` wrt x."""
    best, count = kernels.csr_max_shard(rowptr, col, x, backend=backend)
    out = torch.where(count > 0, best, torch.zeros_like(best))
    return out, kernels.csr_max_backward(rowptr, col, x, best, count, weight, backend=backend)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_csr_max_matches_scatter_reduce_with_ties(backend: str, dtype: torch.dtype) -> None:
    adj = random_graph(14, 25, 0.3, seed=25)
    rowptr, col = to_csr(adj)
    gen = torch.Generator().manual_seed(26)
    x = torch.randint(-3, 4, (25, 6), generator=gen).to(dtype).requires_grad_(True)  # many ties
    weight = torch.randn(14, 6, dtype=dtype, generator=gen)
    ours, g_ours = kernel_max(rowptr, col, x.detach(), weight, backend)
    ref = scatter_amax(adj, x)
    torch.testing.assert_close(ours, ref.detach(), **TOL[dtype])
    (g_ref,) = torch.autograd.grad((ref * weight).sum(), x)
    torch.testing.assert_close(g_ours, g_ref, **TOL[dtype])


def test_csr_max_shards_merge(backend: str) -> None:
    adj = random_graph(11, 30, 0.3, seed=27)
    x = torch.randint(-2, 3, (30, 4), generator=torch.Generator().manual_seed(28)).double()
    rowptr, col = to_csr(adj)
    full_max, full_count = kernels.csr_max_shard(rowptr, col, x, backend=backend)
    assert full_count.dtype == kernels.COUNT_DTYPE == torch.int32
    state = None
    shards = _split_sources(adj, [0, 12, 30])
    for sources, srowptr, scol in shards:
        state = kernels.csr_max_shard(srowptr, scol, x[sources], state=state, backend=backend)
    assert state is not None
    assert torch.equal(state[0], full_max) and torch.equal(state[1], full_count)
    assert torch.isinf(full_max[:2]).all() and (full_count[:2] == 0).all()  # isolated: -inf, count 0
    g = torch.randn(11, 4, dtype=torch.float64)
    full_grad = kernels.csr_max_backward(rowptr, col, x, full_max, full_count, g, backend=backend)
    pieces = [kernels.csr_max_backward(r, c, x[s], full_max, full_count, g, backend=backend) for s, r, c in shards]
    torch.testing.assert_close(torch.cat(pieces), full_grad, rtol=1e-12, atol=1e-12)


def test_csr_max_backends_agree_and_cpp_is_deterministic(cpp_built: bool) -> None:
    """Both backends give the same max and count (-inf inputs included: a row whose in-edges are all -inf
    has max -inf attained by all of them) and the C++ result does not depend on the thread count."""
    adj = random_graph(40, 50, 0.2, seed=29)
    rowptr, col = to_csr(adj)
    x = torch.randint(-2, 3, (50, 7), generator=torch.Generator().manual_seed(30)).float()
    x[:, 0] = float("-inf")
    g = torch.linspace(-1, 1, 40 * 7).view(40, 7)
    runs = {}
    threads = torch.get_num_threads()
    try:
        for name, backend, nthreads in (("cpp1", "cpp", 1), ("cpp2", "cpp", 2), ("torch", "torch", threads)):
            torch.set_num_threads(nthreads)
            best, count = kernels.csr_max_shard(rowptr, col, x, backend=backend)
            runs[name] = (best, count, kernels.csr_max_backward(rowptr, col, x, best, count, g, backend=backend))
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(runs["cpp1"], runs["cpp2"], strict=True):
        assert torch.equal(a, b)
    for a, b in zip(runs["cpp1"], runs["torch"], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    degree = rowptr.diff()
    assert torch.equal(runs["cpp1"][1][:, 0], degree.to(torch.int32))  # every -inf edge attains the -inf max


def test_csr_max_bad_inputs_raise_clear_errors() -> None:
    adj = random_graph(5, 4, 0.5, seed=31, isolated=0)
    rowptr, col = to_csr(adj)
    x = torch.randn(4, 3)
    best, count = kernels.csr_max_shard(rowptr, col, x, backend="torch")
    with pytest.raises(TypeError, match="int32"):
        kernels.csr_max_backward(rowptr, col, x, best, count.long(), torch.ones_like(best), backend="torch")
    with pytest.raises(TypeError, match="float32 and float64"):
        kernels.csr_max_shard(rowptr, col, x.half(), backend="torch")
    with pytest.raises(ValueError, match=r"\[Nd,F\]"):
        kernels.csr_max_shard(rowptr, col, x, state=(best[:2], count[:2]), backend="torch")


# ---------------------------------------------------------------------------------------------- bench
def test_kernel_bench_quick_writes_outputs(tmp_path, cpp_built: bool) -> None:
    """``sarlab bench kernels --quick`` runs (its own process: it tunes malloc for memory readings), times the
    engine's GATConv fused and unfused against PyG's, and writes the CSV, figure and JSON asked for."""
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}
    json_path = tmp_path / "k.json"
    command = [sys.executable, "-m", "sarlab", "bench", "kernels", "--quick", "--out", str(tmp_path),
               "--json", str(json_path)]
    try:
        done = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"sarlab bench kernels --quick did not finish in 300 s\n{err.stdout}\n{err.stderr}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "heads=2" in done.stderr  # progress lines
    rows = list(csv.DictReader(open(tmp_path / "kernels.csv")))
    assert {"fused", "unfused", "pyg"} <= {r["impl"] for r in rows}
    assert {r["phase"] for r in rows} == {"forward", "backward", "fwd+bwd"}
    assert all(float(r["time_s"]) > 0 for r in rows)
    assert (tmp_path / "kernels.png").stat().st_size > 0
    result = json.loads(json_path.read_text())
    assert result["stream"]["triad_GBps"] > 0
    for impl in ("fused", "unfused"):  # the engine's layer computes what PyG's does
        assert max(result["agreement"][heads][impl] for heads in result["agreement"]) < 1e-4


def test_kernel_bench_default_output_is_not_committed_results() -> None:
    from pathlib import Path

    from sarlab.common.paths import cache_dir

    assert build_parser().parse_args([]).out == DEFAULT_OUT
    assert Path(DEFAULT_OUT).is_relative_to(cache_dir()) and "results" not in Path(DEFAULT_OUT).parts[-2:]


def test_stale_torch_build_marker_is_removed_not_waited_on(tmp_path):
    """A ``lock`` file left by a build killed mid-compile made every later process wait forever in torch's loader;
    holding the directory's flock, the loader knows it is stale and removes it (with a warning)."""
    (tmp_path / "lock").write_text("")
    with pytest.warns(UserWarning, match="did not finish"):
        with _loader._build_turn(tmp_path):
            assert not (tmp_path / "lock").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with _loader._build_turn(tmp_path):  # nothing stale the second time: no warning
            pass


def test_builders_take_turns(tmp_path):
    """A second process waits for the first's build turn (flock) and enters only after the first left it."""
    code = ("import sys, time; sys.path.insert(0, sys.argv[2]); from pathlib import Path; from kernels import _loader\n"
            "with _loader._build_turn(Path(sys.argv[1])):\n"
            "    print('in', time.time(), flush=True); time.sleep(float(sys.argv[3])); print('out', time.time())\n")
    root = str(Path(_loader.__file__).resolve().parent.parent)
    first = subprocess.Popen([sys.executable, "-c", code, str(tmp_path), root, "2"], stdout=subprocess.PIPE, text=True)
    assert first.stdout.readline().split()[0] == "in"
    second = subprocess.run([sys.executable, "-c", code, str(tmp_path), root, "0"], capture_output=True, text=True,
                            timeout=120)
    first_out = float(first.communicate(timeout=120)[0].split()[1])
    assert second.returncode == 0, second.stderr
    assert float(second.stdout.split()[1]) >= first_out  # it could not enter while the first held the turn
