// Shard SpMM for 0/1 adjacencies: out[i] (+)= sum_{k in rowptr[i]..rowptr[i+1]} x[col[k]].
//
// Layout: rowptr [R+1] int64, col [E] int64 (rows of x), x [Ns,F], out [R,F], all contiguous.
// One OpenMP iteration owns each output row and adds its edges in CSR order into registers, then into out,
// so the result is the same for any number of threads and any run (no atomics). The transposed product
// A^T g is the same kernel on the shard's CSC (colptr over source rows, destination of every edge in source
// order).
#include "kernels.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <omp.h>

#include <cstring>

namespace sarlab_kernels {
namespace {

constexpr int64_t kChunk = 64;  // dynamic-schedule chunk of rows (degrees are skewed)
constexpr int64_t kAhead = 4;   // source rows prefetched ahead of use

// Sum of rows col[begin..end) of x over feature columns [f0, f0 + W), W a compile-time width so the
// accumulators live in registers; the first pass over a row (f0 == 0) prefetches whole source rows ahead.
template <typename scalar_t, int W>
inline void block_sum(const int64_t* __restrict__ col, int64_t begin, int64_t end, const scalar_t* __restrict__ x,
                      int64_t F, int64_t f0, scalar_t* __restrict__ o, bool accumulate) {
  scalar_t a[W];
  const scalar_t* __restrict__ x0 = x + col[begin] * F + f0;
#pragma omp simd
  for (int f = 0; f < W; ++f) a[f] = x0[f];
  for (int64_t k = begin + 1; k < end; ++k) {
    if (f0 == 0 && k + kAhead < end) prefetch_row(x + col[k + kAhead] * F, F);
    const scalar_t* __restrict__ xj = x + col[k] * F + f0;
#pragma omp simd
    for (int f = 0; f < W; ++f) a[f] += xj[f];
  }
  if (accumulate) {
#pragma omp simd
    for (int f = 0; f < W; ++f) o[f] += a[f];
  } else {
#pragma omp simd
    for (int f = 0; f < W; ++f) o[f] = a[f];
  }
}

// The last w < W columns [f0, f0 + w) in one pass over the row's edges, as a register block of exactly w columns
// (the compile-time width chosen by w: W - 1, W - 2, ... down to 1): the same additions in the same order as one
// column at a time, so the same bits, but the edges and their source rows are walked once rather than w times, and
// the block is vectorised as a wider one is (a loop to a run-time width compiled to scalar code: no faster at 7
// columns, slower at 4; results/kernels/spmm_tail).
template <typename scalar_t, int W>
inline void tail_block(const int64_t* __restrict__ col, int64_t begin, int64_t end, const scalar_t* __restrict__ x,
                       int64_t F, int64_t f0, int w, scalar_t* __restrict__ o, bool accumulate) {
  if constexpr (W > 0) {
    if (w == W) {
      block_sum<scalar_t, W>(col, begin, end, x, F, f0, o, accumulate);
    } else {
      tail_block<scalar_t, W - 1>(col, begin, end, x, F, f0, w, o, accumulate);
    }
  }
}

// Rows [0, R): out[i] = (accumulate ? out[i] : 0) + sum_k x[col[k]]. Rows without edges are left alone when
// accumulating and zeroed otherwise. Feature columns go in register blocks of 512, 256, 128 and 64 bytes,
// then the rest (fewer than 64 bytes) in one block of its own width: one pass over the row's edges per block
// (40 floats: two, 32 + 8; a column at a time took nine).
template <typename scalar_t>
void spmm_rows(const int64_t* __restrict__ rowptr, const int64_t* __restrict__ col, const scalar_t* __restrict__ x,
               int64_t R, int64_t F, bool accumulate, scalar_t* __restrict__ out, int nthreads) {
  constexpr int kLine = 64 / sizeof(scalar_t);  // values per cache line
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, kChunk)
  for (int64_t i = 0; i < R; ++i) {
    const int64_t begin = rowptr[i], end = rowptr[i + 1];
    scalar_t* __restrict__ oi = out + i * F;
    if (begin == end) {
      if (!accumulate) std::memset(oi, 0, sizeof(scalar_t) * F);
      continue;
    }
    int64_t f0 = 0;
    for (; f0 + 8 * kLine <= F; f0 += 8 * kLine)
      block_sum<scalar_t, 8 * kLine>(col, begin, end, x, F, f0, oi + f0, accumulate);
    if (f0 + 4 * kLine <= F) {
      block_sum<scalar_t, 4 * kLine>(col, begin, end, x, F, f0, oi + f0, accumulate);
      f0 += 4 * kLine;
    }
    if (f0 + 2 * kLine <= F) {
      block_sum<scalar_t, 2 * kLine>(col, begin, end, x, F, f0, oi + f0, accumulate);
      f0 += 2 * kLine;
    }
    if (f0 + kLine <= F) {
      block_sum<scalar_t, kLine>(col, begin, end, x, F, f0, oi + f0, accumulate);
      f0 += kLine;
    }
    if (f0 < F) tail_block<scalar_t, kLine - 1>(col, begin, end, x, F, f0, static_cast<int>(F - f0), oi + f0,
                                                accumulate);
  }
}

void check(const at::Tensor& rowptr, const at::Tensor& col, const at::Tensor& x, const at::Tensor& out) {
  TORCH_CHECK(rowptr.dtype() == at::kLong && col.dtype() == at::kLong, "rowptr/col must be int64");
  TORCH_CHECK(rowptr.dim() == 1 && rowptr.numel() >= 1 && col.dim() == 1, "rowptr [R+1] and col [E] must be 1-D");
  TORCH_CHECK(rowptr.is_contiguous() && col.is_contiguous(), "rowptr/col must be contiguous");
  TORCH_CHECK(x.dim() == 2 && out.dim() == 2 && x.is_contiguous() && out.is_contiguous(),
              "x and out must be contiguous 2-D tensors");
  TORCH_CHECK(x.scalar_type() == out.scalar_type(), "x and out must have the same dtype");
  TORCH_CHECK(x.size(1) == out.size(1), "x and out must have the same number of columns");
  TORCH_CHECK(out.size(0) == rowptr.numel() - 1, "out must have one row per CSR row");
  TORCH_CHECK(rowptr.device().is_cpu() && col.device().is_cpu() && x.device().is_cpu() && out.device().is_cpu(),
              "kernels run on CPU tensors only");
}

}  // namespace

// out (+)= A x, A the 0/1 CSR (rowptr, col); returns out. Indices are trusted (the engine built them).
at::Tensor spmm_csr(at::Tensor rowptr, at::Tensor col, at::Tensor x, at::Tensor out, bool accumulate) {
  check(rowptr, col, x, out);
  const int64_t R = out.size(0), F = out.size(1);
  if (R == 0 || F == 0) return out;
  const int nthreads = at::get_num_threads();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "spmm_csr", [&] {
    spmm_rows<scalar_t>(rowptr.data_ptr<int64_t>(), col.data_ptr<int64_t>(), x.data_ptr<scalar_t>(), R, F,
                        accumulate, out.data_ptr<scalar_t>(), nthreads);
  });
  return out;
}

}  // namespace sarlab_kernels
