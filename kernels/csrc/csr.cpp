// CSR utilities and the running-max aggregation (SAGE max/pool) over CSR shards: csr_transpose (the CSC the
// backward passes gather by), csr_max_shard (running max and tie count, in place) and csr_max_backward.
// Deterministic like the other kernels: every output row is owned by one loop iteration.
#include "kernels.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

namespace sarlab_kernels {
namespace {
constexpr int64_t kChunk = 16;  // dynamic-schedule chunk of rows (degrees are skewed)
}  // namespace

// ---------------------------------------------------------------------------------------------
// Transpose of a CSR shard (a stable counting sort by column): for every source row j, the
// destinations that have an edge from j, in increasing order.

std::vector<at::Tensor> csr_transpose(at::Tensor rowptr, at::Tensor col, int64_t num_src) {
  check_csr(rowptr, col);
  TORCH_CHECK(num_src >= 0, "num_src must be non-negative");
  const int64_t nd = rowptr.numel() - 1, ne = col.numel();
  auto t_rowptr = at::zeros({num_src + 1}, rowptr.options());
  auto t_row = at::empty({ne}, rowptr.options());
  const int64_t* rp = rowptr.data_ptr<int64_t>();
  const int64_t* cl = col.data_ptr<int64_t>();
  int64_t* trp = t_rowptr.data_ptr<int64_t>();
  int64_t* tr = t_row.data_ptr<int64_t>();
  TORCH_CHECK(rp[0] == 0 && rp[nd] == ne, "rowptr must start at 0 and end at len(col)");
  for (int64_t k = 0; k < ne; ++k) {
    const int64_t j = cl[k];
    TORCH_CHECK(j >= 0 && j < num_src, "col index ", j, " out of range [0, ", num_src, ")");
    ++trp[j + 1];
  }
  for (int64_t j = 0; j < num_src; ++j) trp[j + 1] += trp[j];
  std::vector<int64_t> fill(trp, trp + num_src);
  for (int64_t i = 0; i < nd; ++i)
    for (int64_t k = rp[i]; k < rp[i + 1]; ++k) tr[fill[cl[k]]++] = i;
  return {t_rowptr, t_row};
}

namespace {

// ---------------------------------------------------------------------------------------------
// Running per-destination max over in-edges, with the number of in-edges attaining it (int32: exact up to
// 2^31 - 1 in-edges of one node, and as small as a float32 max).
template <typename scalar_t>
void max_rows(const int64_t* __restrict__ rowptr, const int64_t* __restrict__ col,
              const scalar_t* __restrict__ x, int64_t nd, int64_t F, scalar_t* __restrict__ mx,
              int32_t* __restrict__ cnt, int nthreads) {
#pragma omp parallel num_threads(nthreads)
  {
    std::vector<scalar_t> smax(F);
    std::vector<int32_t> scnt(F);
#pragma omp for schedule(dynamic, kChunk)
    for (int64_t i = 0; i < nd; ++i) {
      const int64_t begin = rowptr[i], end = rowptr[i + 1];
      if (begin == end) continue;
      for (int64_t f = 0; f < F; ++f) {
        smax[f] = -std::numeric_limits<scalar_t>::infinity();
        scnt[f] = 0;
      }
      for (int64_t k = begin; k < end; ++k) {
        const scalar_t* xj = x + col[k] * F;
        for (int64_t f = 0; f < F; ++f) {
          const scalar_t v = xj[f];
          if (v > smax[f]) {
            smax[f] = v;
            scnt[f] = 1;
          } else if (v == smax[f]) {
            ++scnt[f];
          }
        }
      }
      scalar_t* mi = mx + i * F;
      int32_t* ci = cnt + i * F;
      for (int64_t f = 0; f < F; ++f) {
        if (smax[f] > mi[f]) {
          mi[f] = smax[f];
          ci[f] = scnt[f];
        } else if (smax[f] == mi[f]) {
          ci[f] += scnt[f];
        }
      }
    }
  }
}

}  // namespace

std::vector<at::Tensor> csr_max_shard(at::Tensor rowptr, at::Tensor col, at::Tensor x_src,
                                         at::Tensor mx, at::Tensor cnt) {
  check_csr(rowptr, col);
  TORCH_CHECK(x_src.dim() == 2 && x_src.is_contiguous(), "x_src must be a contiguous [Ns,F] tensor");
  check_dense(mx, x_src, 2, "max");
  TORCH_CHECK(cnt.dtype() == at::kInt && cnt.is_contiguous() && cnt.sizes() == mx.sizes(),
              "count must be a contiguous int32 tensor shaped like max");
  const int64_t nd = rowptr.numel() - 1, F = x_src.size(1);
  TORCH_CHECK(mx.size(0) == nd && mx.size(1) == F, "max must be [Nd,F]");
  const int nthreads = at::get_num_threads();
  AT_DISPATCH_FLOATING_TYPES(x_src.scalar_type(), "csr_max_shard", [&] {
    max_rows<scalar_t>(rowptr.data_ptr<int64_t>(), col.data_ptr<int64_t>(), x_src.data_ptr<scalar_t>(), nd, F,
                       mx.data_ptr<scalar_t>(), cnt.data_ptr<int32_t>(), nthreads);
  });
  return {mx, cnt};
}

namespace {

// Gradient of the max: each source value equal to its destination's max gets grad / count.
template <typename scalar_t>
void max_backward_rows(const int64_t* __restrict__ t_rowptr, const int64_t* __restrict__ t_row,
                       const scalar_t* __restrict__ x, const scalar_t* __restrict__ mx,
                       const int32_t* __restrict__ cnt, const scalar_t* __restrict__ g, int64_t ns, int64_t F,
                       scalar_t* __restrict__ gx, int nthreads) {
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, kChunk)
  for (int64_t j = 0; j < ns; ++j) {
    scalar_t* gj = gx + j * F;
    const scalar_t* xj = x + j * F;
    for (int64_t f = 0; f < F; ++f) gj[f] = scalar_t(0);
    for (int64_t k = t_rowptr[j]; k < t_rowptr[j + 1]; ++k) {
      const int64_t i = t_row[k];
      for (int64_t f = 0; f < F; ++f) {
        if (xj[f] == mx[i * F + f]) gj[f] += g[i * F + f] / static_cast<scalar_t>(cnt[i * F + f]);
      }
    }
  }
}

}  // namespace

at::Tensor csr_max_backward(at::Tensor t_rowptr, at::Tensor t_row, at::Tensor x_src,
                               at::Tensor mx, at::Tensor cnt, at::Tensor grad_out) {
  check_csr(t_rowptr, t_row);
  TORCH_CHECK(x_src.dim() == 2 && x_src.is_contiguous(), "x_src must be a contiguous [Ns,F] tensor");
  check_dense(mx, x_src, 2, "max");
  check_dense(grad_out, x_src, 2, "grad_out");
  TORCH_CHECK(cnt.dtype() == at::kInt && cnt.is_contiguous() && cnt.sizes() == mx.sizes(),
              "count must be a contiguous int32 tensor shaped like max");
  const int64_t ns = x_src.size(0), F = x_src.size(1);
  TORCH_CHECK(t_rowptr.numel() == ns + 1, "transpose rowptr must have Ns+1 entries");
  auto gx = at::empty_like(x_src);
  const int nthreads = at::get_num_threads();
  AT_DISPATCH_FLOATING_TYPES(x_src.scalar_type(), "csr_max_backward", [&] {
    max_backward_rows<scalar_t>(t_rowptr.data_ptr<int64_t>(), t_row.data_ptr<int64_t>(),
                                x_src.data_ptr<scalar_t>(), mx.data_ptr<scalar_t>(), cnt.data_ptr<int32_t>(),
                                grad_out.data_ptr<scalar_t>(), ns, F, gx.data_ptr<scalar_t>(), nthreads);
  });
  return gx;
}

}  // namespace sarlab_kernels
