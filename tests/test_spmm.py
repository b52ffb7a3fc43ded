"""The shard SpMM (``kernels.spmm_csr``, C++ and torch backends, and ``Shard.spmm``) against a dense numpy
product of the same 0/1 adjacency, including bitwise determinism of the C++ kernel and its bitwise equality with a
column-at-a-time sum in CSR order (the C++ kernel goes in register blocks of 8, 4, 2 and 1 cache lines, then the
last ``F mod 16`` float32 / ``F mod 8`` float64 columns in one pass; widths 8, 15, 17, 40, 47 cover that tail)."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from sarlab import kernels
from sarlab.core.shards import Shard


@pytest.fixture(scope="module")
def cpp():
    """The C++ backend (a failed build is a failure where a compiler exists, as in test_kernels.py)."""
    if not any(shutil.which(name) for name in ("c++", "g++", "clang++")):
        pytest.skip("no C++ compiler: cannot build the kernels")
    kernels.build()
    return "cpp"


@pytest.fixture(params=["cpp", "torch"])
def backend(request):
    if request.param == "cpp":
        request.getfixturevalue("cpp")
    return request.param


def _random_edges(num_dst: int, num_src: int, num_edges: int, seed: int, empty_rows: bool = True):
    """Destination-sorted edges (duplicates allowed: a multigraph counts each edge) and their dense matrix."""
    rng = np.random.default_rng(seed)
    dst = rng.integers(0, num_dst, num_edges)
    if empty_rows:  # leave about a third of the destination rows without edges, as in a remote shard
        dst = dst[dst % 3 != 1]
    src = rng.integers(0, num_src, dst.size)
    order = np.lexsort((src, dst))
    dst, src = dst[order], src[order]
    dense = np.zeros((num_dst, num_src))
    np.add.at(dense, (dst, src), 1.0)
    return dst, src, dense


def _csr(rows: np.ndarray, cols: np.ndarray, num_rows: int):
    """CSR of (rows, cols) built with numpy: rows become the row pointer, cols (in row order) the indices."""
    order = np.lexsort((cols, rows))
    rowptr = np.zeros(num_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=num_rows), out=rowptr[1:])
    return torch.from_numpy(rowptr), torch.from_numpy(cols[order].astype(np.int64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("width", [1, 7, 8, 15, 16, 17, 40, 47, 64, 100, 256, 600])
def test_forward_and_transpose_match_dense(backend, dtype, width):
    num_dst, num_src = 300, 180
    dst, src, dense = _random_edges(num_dst, num_src, 2500, seed=width)
    rng = np.random.default_rng(1)
    x, g = rng.standard_normal((num_src, width)), rng.standard_normal((num_dst, width))
    tol = 1e-10 if dtype == torch.float64 else 1e-4
    out = kernels.spmm_csr(*_csr(dst, src, num_dst), torch.from_numpy(x).to(dtype), backend=backend)
    assert out.dtype == dtype
    np.testing.assert_allclose(out.double().numpy(), dense @ x, rtol=tol, atol=tol)
    grad = kernels.spmm_csr(*_csr(src, dst, num_src), torch.from_numpy(g).to(dtype), backend=backend)
    np.testing.assert_allclose(grad.double().numpy(), dense.T @ g, rtol=tol, atol=tol)


def test_accumulates_in_place_and_keeps_rows_without_edges(backend):
    dst, src, dense = _random_edges(50, 40, 300, seed=3)
    rowptr, col = _csr(dst, src, 50)
    x = torch.randn(40, 2, 3, dtype=torch.float64)  # trailing dims are flattened
    acc = torch.randn(50, 2, 3, dtype=torch.float64)
    expected = acc.numpy().reshape(50, 6) + dense @ x.numpy().reshape(40, 6)
    res = kernels.spmm_csr(rowptr, col, x, out=acc, backend=backend)
    assert res.data_ptr() == acc.data_ptr()
    np.testing.assert_allclose(acc.numpy().reshape(50, 6), expected, rtol=1e-12, atol=1e-12)
    stale = torch.full((50, 2, 3), float("nan"), dtype=torch.float64)  # overwritten, not added to
    fresh = kernels.spmm_csr(rowptr, col, x, out=stale, accumulate=False, backend=backend)
    np.testing.assert_allclose(fresh.numpy().reshape(50, 6), dense @ x.numpy().reshape(40, 6), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("dtype", "width"), [(torch.float32, 300), (torch.float32, 47), (torch.float64, 47)])
def test_bitwise_deterministic_across_threads_and_runs(cpp, dtype, width):
    """300 float32 columns end in a 12-column tail; 47 end in 15 float32 / 7 float64 columns."""
    dst, src, _ = _random_edges(2000, 1500, 60000, seed=5, empty_rows=False)
    rowptr, col = _csr(dst, src, 2000)
    x = torch.randn(1500, width, dtype=dtype)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = kernels.spmm_csr(rowptr, col, x, backend=cpp)
        torch.set_num_threads(2)
        two = kernels.spmm_csr(rowptr, col, x, backend=cpp)
        again = kernels.spmm_csr(rowptr, col, x, backend=cpp)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two) and torch.equal(two, again)


def _edges_with_empty_rows_both_ways(num_dst: int, num_src: int, num_edges: int, seed: int):
    """As :func:`_random_edges`, with about a quarter of the source rows also without edges (rows of ``A^T``)."""
    dst, src, _ = _random_edges(num_dst, num_src, num_edges, seed=seed)
    keep = src % 4 != 1
    dst, src = dst[keep], src[keep]
    dense = np.zeros((num_dst, num_src))
    np.add.at(dense, (dst, src), 1.0)
    return dst, src, dense


def _column_sums_in_csr_order(rowptr: torch.Tensor, col: torch.Tensor, x: np.ndarray,
                              start: np.ndarray | None) -> np.ndarray:
    """The reference the C++ kernel must equal bit for bit: for every row, every column summed on its own in the
    dtype of ``x``, starting from the row's first edge and adding its later edges in CSR order, then added to
    ``start`` (accumulate) or stored (rows without edges: ``start`` kept, or 0). The loop runs over the edge position
    within a row (numpy adds elementwise, one IEEE addition per value, so each column is its own sequential sum)."""
    rowptr, col = rowptr.numpy(), col.numpy()
    begin, degree = rowptr[:-1], np.diff(rowptr)
    sums = np.zeros((len(degree), x.shape[1]), dtype=x.dtype)
    rows = np.flatnonzero(degree > 0)
    sums[rows] = x[col[begin[rows]]]
    for position in range(1, int(degree.max(initial=0))):
        rows = np.flatnonzero(degree > position)
        sums[rows] = sums[rows] + x[col[begin[rows] + position]]
    if start is None:
        return sums
    out = start.copy()
    rows = np.flatnonzero(degree > 0)
    out[rows] = start[rows] + sums[rows]
    return out


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("width", [1, 7, 8, 15, 17, 40, 47, 527])
def test_cpp_equals_column_at_a_time_sum_bitwise(cpp, dtype, width, threads):
    """Forward and transposed, fresh and accumulated into a non-zero ``out``, rows without edges on both sides:
    the same additions in the same order as one column at a time in CSR order, so the same bits."""
    num_dst, num_src = 400, 260
    dst, src, _ = _edges_with_empty_rows_both_ways(num_dst, num_src, 6000, seed=width)
    rng = np.random.default_rng(width + 100)
    np_dtype = np.float32 if dtype == torch.float32 else np.float64
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        for rows, cols, num_rows, num_cols in ((dst, src, num_dst, num_src), (src, dst, num_src, num_dst)):
            rowptr, col = _csr(rows, cols, num_rows)
            assert (np.diff(rowptr.numpy()) == 0).any()  # rows without edges are part of the check
            x = rng.standard_normal((num_cols, width)).astype(np_dtype)
            start = rng.standard_normal((num_rows, width)).astype(np_dtype)
            fresh = kernels.spmm_csr(rowptr, col, torch.from_numpy(x), backend=cpp)
            assert np.array_equal(fresh.numpy(), _column_sums_in_csr_order(rowptr, col, x, None))
            stale = torch.full((num_rows, width), float("nan"), dtype=dtype)  # overwritten, rows without edges: 0
            kernels.spmm_csr(rowptr, col, torch.from_numpy(x), out=stale, accumulate=False, backend=cpp)
            assert np.array_equal(stale.numpy(), _column_sums_in_csr_order(rowptr, col, x, None))
            acc = torch.from_numpy(start.copy())
            kernels.spmm_csr(rowptr, col, torch.from_numpy(x), out=acc, accumulate=True, backend=cpp)
            assert np.array_equal(acc.numpy(), _column_sums_in_csr_order(rowptr, col, x, start))
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("width", [8, 15, 17, 40, 47])
def test_tail_widths_accumulate_into_nonzero_out_against_dense(backend, dtype, width):
    """``out += A x`` and ``out += A^T g`` into a non-zero ``out`` at widths with a tail, against numpy's dense
    product; rows without edges keep their value exactly."""
    num_dst, num_src = 300, 180
    dst, src, dense = _edges_with_empty_rows_both_ways(num_dst, num_src, 2500, seed=width + 7)
    rng = np.random.default_rng(width)
    tol = 1e-10 if dtype == torch.float64 else 1e-4
    for rows, cols, num_rows, matrix in ((dst, src, num_dst, dense), (src, dst, num_src, dense.T)):
        rowptr, col = _csr(rows, cols, num_rows)
        x, start = rng.standard_normal((matrix.shape[1], width)), rng.standard_normal((num_rows, width))
        acc = torch.from_numpy(start).to(dtype).clone()  # from_numpy shares memory with start
        kernels.spmm_csr(rowptr, col, torch.from_numpy(x).to(dtype), out=acc, backend=backend)
        np.testing.assert_allclose(acc.double().numpy(), start + matrix @ x, rtol=tol, atol=tol)
        empty = np.diff(rowptr.numpy()) == 0
        assert empty.any() and np.array_equal(acc.numpy()[empty], torch.from_numpy(start).to(dtype).numpy()[empty])


def test_rejects_mismatched_shapes(backend):
    dst, src, _ = _random_edges(10, 8, 30, seed=7)
    rowptr, col = _csr(dst, src, 10)
    with pytest.raises(ValueError, match="one row per CSR row"):
        kernels.spmm_csr(rowptr, col, torch.randn(8, 4), out=torch.zeros(9, 4), backend=backend)
    with pytest.raises(ValueError, match="same dtype"):
        kernels.spmm_csr(rowptr, col, torch.randn(8, 4), out=torch.zeros(10, 4, dtype=torch.float64), backend=backend)


@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_shard_spmm_backends_agree_with_dense(backend, monkeypatch, transpose, dtype):
    """``Shard.spmm`` (the engine's dispatch point) in place and fresh, forward and ``A^T``, on either backend
    chosen through ``$SARLAB_KERNELS``; under autograd it stays differentiable."""
    monkeypatch.setenv("SARLAB_KERNELS", backend)
    num_dst, num_src = 70, 90
    dst, src, dense = _random_edges(num_dst, num_src, 900, seed=11)
    shard = Shard(2, torch.from_numpy(src), torch.from_numpy(dst), num_dst, num_src)
    matrix = dense.T if transpose else dense
    rng = np.random.default_rng(4)
    x = rng.standard_normal((matrix.shape[1], 4, 5))
    start = rng.standard_normal((matrix.shape[0], 20))
    tol = 1e-10 if dtype == torch.float64 else 1e-4
    want = matrix @ x.reshape(len(x), -1)
    with torch.no_grad():
        fresh = shard.spmm(torch.from_numpy(x).to(dtype), transpose=transpose)
        out = torch.from_numpy(start).to(dtype).clone()  # from_numpy shares memory with start
        same = shard.spmm(torch.from_numpy(x).to(dtype), transpose=transpose, out=out)
    assert fresh.shape == (matrix.shape[0], 4, 5) and same is out
    np.testing.assert_allclose(fresh.double().numpy().reshape(len(fresh), -1), want, rtol=tol, atol=tol)
    np.testing.assert_allclose(out.double().numpy(), start + want, rtol=tol, atol=tol)
    xt = torch.from_numpy(x).to(dtype).requires_grad_()
    got = shard.spmm(xt, transpose=transpose)
    (got * 2).sum().backward()
    np.testing.assert_allclose(xt.grad.double().numpy().reshape(len(x), -1),
                               2 * matrix.sum(0)[:, None].repeat(20, 1), rtol=tol, atol=tol)


def test_shard_spmm_cpp_is_bitwise_stable_across_threads(cpp, monkeypatch):
    monkeypatch.setenv("SARLAB_KERNELS", "cpp")
    dst, src, _ = _random_edges(3000, 2500, 50000, seed=13, empty_rows=False)
    shard = Shard(0, torch.from_numpy(src), torch.from_numpy(dst), 3000, 2500)
    x, g = torch.randn(2500, 64, dtype=torch.float64), torch.randn(3000, 64, dtype=torch.float64)
    before = torch.get_num_threads()
    results = []
    try:
        for threads in (1, 2, 1):
            torch.set_num_threads(threads)
            acc = torch.ones(3000, 64, dtype=torch.float64)
            results.append((shard.spmm(x, out=acc).clone(), shard.spmm(g, transpose=True)))
    finally:
        torch.set_num_threads(before)
    for forward, backward in results[1:]:
        assert torch.equal(forward, results[0][0]) and torch.equal(backward, results[0][1])
