// Fused GAT attention kernels over CSR shards (OpenMP over destination or source rows).
//
// Layout conventions (all contiguous, row-major):
//   rowptr [Nd+1] int64, col [E] int64 (rows of the shard's source tensors),
//   s_dst [Nd,H], s_src [Ns,H], z_src [Ns,H,C], state m,l [Nd,H], acc [Nd,H,C].
// Every output row is owned by exactly one loop iteration, so no atomics are needed and the
// results do not depend on the number of threads (sums run in CSR order).
#include "kernels.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

namespace sarlab_kernels {
namespace {

constexpr int64_t kChunk = 16;  // dynamic-schedule chunk of rows (degrees are skewed)
constexpr int64_t kAhead = 2;   // gathered rows prefetched ahead of use

// Prefetch a whole feature row (every cache line) of a gathered source/destination.
template <typename T>
inline void prefetch_row(const T* row, int64_t n) {
  const char* p = reinterpret_cast<const char*>(row);
  const int64_t bytes = n * static_cast<int64_t>(sizeof(T));
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off);
}

// Heads per pass over the edges: all of them unless $SARLAB_GAT_HEAD_BLOCK asks for fewer. A pass over a block of
// heads gathers only that block's slice of each row (z_j, or g_i in the source pass), which keeps a big shard's
// gathers in cache, but every pass re-reads the CSR and the scores: measured in one process, alternating (1M edges,
// 20k rows, 50 channels, 1 thread), blocks sized to fit 8 MiB took 1.25-1.7x the CPU time of one pass at 4 and
// 8 heads. Heads are independent and keep their own sums in edge order: results do not depend on the block.
int64_t head_block(int64_t H) {
  if (const char* env = std::getenv("SARLAB_GAT_HEAD_BLOCK")) return std::clamp<int64_t>(std::atoll(env), 1, H);
  return std::max<int64_t>(H, 1);
}

template <typename T>
inline T leaky(T x, T slope) {
  return x > T(0) ? x : x * slope;
}

void check_csr(const at::Tensor& rowptr, const at::Tensor& col) {
  TORCH_CHECK(rowptr.dtype() == at::kLong && col.dtype() == at::kLong, "rowptr/col must be int64");
  TORCH_CHECK(rowptr.dim() == 1 && rowptr.numel() >= 1, "rowptr must be 1-D with Nd+1 entries");
  TORCH_CHECK(col.dim() == 1, "col must be 1-D");
  TORCH_CHECK(rowptr.is_contiguous() && col.is_contiguous(), "rowptr/col must be contiguous");
  TORCH_CHECK(rowptr.device().is_cpu() && col.device().is_cpu(), "kernels run on CPU tensors only");
}

void check_dense(const at::Tensor& t, const at::Tensor& like, int64_t dim, const char* name) {
  TORCH_CHECK(t.dim() == dim, name, " must have ", dim, " dimensions");
  TORCH_CHECK(t.scalar_type() == like.scalar_type(), name, " must have the same dtype as z_src");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
  TORCH_CHECK(t.device().is_cpu(), name, " must be a CPU tensor");
}

// ---------------------------------------------------------------------------------------------
// Forward: update the running (m, l, acc) of every destination with this shard's in-edges.
// Per row: pass 1 finds the shard max (reads only s_src), the old state is rescaled once, and
// pass 2 accumulates exp(e - m_new) z_j, so each z_j row is read once per edge.
template <typename scalar_t>
void forward_rows(const int64_t* __restrict__ rowptr, const int64_t* __restrict__ col,
                  const scalar_t* __restrict__ s_dst, const scalar_t* __restrict__ s_src,
                  const scalar_t* __restrict__ z, int64_t nd, int64_t H, int64_t C, scalar_t slope,
                  scalar_t* __restrict__ m, scalar_t* __restrict__ l, scalar_t* __restrict__ acc,
                  int64_t h0, int64_t h1, int nthreads) {
  const int64_t HC = H * C;
  const scalar_t neg_inf = -std::numeric_limits<scalar_t>::infinity();
#pragma omp parallel num_threads(nthreads)
  {
    std::vector<scalar_t> sd(H), mx(H), lsum(H);
#pragma omp for schedule(dynamic, kChunk)
    for (int64_t i = 0; i < nd; ++i) {
      const int64_t begin = rowptr[i], end = rowptr[i + 1];
      if (begin == end) continue;  // state untouched: no edge of this shard reaches i
      scalar_t* __restrict__ acc_i = acc + i * HC;
      for (int64_t h = h0; h < h1; ++h) {
        sd[h] = s_dst[i * H + h];
        mx[h] = m[i * H + h];
      }
      for (int64_t k = begin; k < end; ++k) {
        const scalar_t* ss = s_src + col[k] * H;
        for (int64_t h = h0; h < h1; ++h) {
          const scalar_t e = leaky(sd[h] + ss[h], slope);
          mx[h] = e > mx[h] ? e : mx[h];
        }
      }
      for (int64_t h = h0; h < h1; ++h) {
        const scalar_t m_old = m[i * H + h];
        scalar_t* __restrict__ a = acc_i + h * C;
        if (m_old == neg_inf) {
          lsum[h] = scalar_t(0);
          for (int64_t c = 0; c < C; ++c) a[c] = scalar_t(0);
        } else if (m_old != mx[h]) {
          const scalar_t scale = std::exp(m_old - mx[h]);
          lsum[h] = l[i * H + h] * scale;
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) a[c] *= scale;
        } else {
          lsum[h] = l[i * H + h];
        }
      }
      for (int64_t k = begin; k < end; ++k) {
        const int64_t j = col[k];
        if (k + kAhead < end) prefetch_row(z + col[k + kAhead] * HC + h0 * C, (h1 - h0) * C);
        const scalar_t* ss = s_src + j * H;
        const scalar_t* __restrict__ zj = z + j * HC;
        for (int64_t h = h0; h < h1; ++h) {
          const scalar_t w = std::exp(leaky(sd[h] + ss[h], slope) - mx[h]);
          lsum[h] += w;
          scalar_t* __restrict__ a = acc_i + h * C;
          const scalar_t* __restrict__ zh = zj + h * C;
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) a[c] += w * zh[c];
        }
      }
      for (int64_t h = h0; h < h1; ++h) {
        m[i * H + h] = mx[h];
        l[i * H + h] = lsum[h];
      }
    }
  }
}

}  // namespace

std::vector<at::Tensor> gat_forward_shard(at::Tensor rowptr, at::Tensor col, at::Tensor s_dst,
                                             at::Tensor s_src, at::Tensor z_src, double negative_slope,
                                             at::Tensor m, at::Tensor l, at::Tensor acc) {
  check_csr(rowptr, col);
  TORCH_CHECK(z_src.dim() == 3 && z_src.is_contiguous(), "z_src must be a contiguous [Ns,H,C] tensor");
  check_dense(s_dst, z_src, 2, "s_dst");
  check_dense(s_src, z_src, 2, "s_src");
  check_dense(m, z_src, 2, "m");
  check_dense(l, z_src, 2, "l");
  check_dense(acc, z_src, 3, "acc");
  const int64_t nd = rowptr.numel() - 1, H = z_src.size(1), C = z_src.size(2);
  TORCH_CHECK(s_dst.size(0) == nd && s_dst.size(1) == H, "s_dst must be [Nd,H]");
  TORCH_CHECK(s_src.size(0) == z_src.size(0) && s_src.size(1) == H, "s_src must be [Ns,H]");
  TORCH_CHECK(m.size(0) == nd && l.size(0) == nd && acc.size(0) == nd && acc.size(2) == C,
              "state must be m,l [Nd,H] and acc [Nd,H,C]");
  const int nthreads = at::get_num_threads();
  AT_DISPATCH_FLOATING_TYPES(z_src.scalar_type(), "gat_forward_shard", [&] {
    const int64_t block = head_block(H);
    for (int64_t h0 = 0; h0 < H; h0 += block)
      forward_rows<scalar_t>(rowptr.data_ptr<int64_t>(), col.data_ptr<int64_t>(), s_dst.data_ptr<scalar_t>(),
                             s_src.data_ptr<scalar_t>(), z_src.data_ptr<scalar_t>(), nd, H, C,
                             static_cast<scalar_t>(negative_slope), m.data_ptr<scalar_t>(), l.data_ptr<scalar_t>(),
                             acc.data_ptr<scalar_t>(), h0, std::min(H, h0 + block), nthreads);
  });
  return {m, l, acc};
}

namespace {

// ---------------------------------------------------------------------------------------------
// Per-destination quantities the backward gathers, packed so one edge touches one cache line:
// packed[i][h] = {s_dst, m, 1/l, delta}.
constexpr int64_t kPack = 4;

template <typename scalar_t>
void pack_destinations(const scalar_t* __restrict__ s_dst, const scalar_t* __restrict__ m,
                       const scalar_t* __restrict__ l, const scalar_t* __restrict__ delta, int64_t n,
                       scalar_t* __restrict__ packed, int nthreads) {
#pragma omp parallel for num_threads(nthreads) schedule(static)
  for (int64_t k = 0; k < n; ++k) {
    scalar_t* p = packed + k * kPack;
    p[0] = s_dst[k];
    p[1] = m[k];
    p[2] = l[k] > scalar_t(0) ? scalar_t(1) / l[k] : scalar_t(0);
    p[3] = delta[k];
  }
}

// Backward, destination side (CSR): grad_s_dst[i] = sum_j de_ij * leaky'(pre_ij).
template <typename scalar_t>
void backward_dst_rows(const int64_t* __restrict__ rowptr, const int64_t* __restrict__ col,
                       const scalar_t* __restrict__ packed, const scalar_t* __restrict__ s_src,
                       const scalar_t* __restrict__ z, const scalar_t* __restrict__ g, int64_t nd, int64_t H,
                       int64_t C, scalar_t slope, scalar_t* __restrict__ grad_s_dst, int64_t h0, int64_t h1,
                       int nthreads) {
  const int64_t HC = H * C;
#pragma omp parallel num_threads(nthreads)
  {
    std::vector<scalar_t> gs(H);
#pragma omp for schedule(dynamic, kChunk)
    for (int64_t i = 0; i < nd; ++i) {
      const int64_t begin = rowptr[i], end = rowptr[i + 1];
      const scalar_t* __restrict__ pi = packed + i * H * kPack;
      const scalar_t* __restrict__ gi = g + i * HC;
      for (int64_t h = h0; h < h1; ++h) gs[h] = scalar_t(0);
      for (int64_t k = begin; k < end; ++k) {
        const int64_t j = col[k];
        if (k + kAhead < end) prefetch_row(z + col[k + kAhead] * HC + h0 * C, (h1 - h0) * C);
        const scalar_t* ss = s_src + j * H;
        const scalar_t* __restrict__ zj = z + j * HC;
        for (int64_t h = h0; h < h1; ++h) {
          const scalar_t* ph = pi + h * kPack;
          const scalar_t pre = ph[0] + ss[h];
          const scalar_t alpha = std::exp(leaky(pre, slope) - ph[1]) * ph[2];
          const scalar_t* __restrict__ gh = gi + h * C;
          const scalar_t* __restrict__ zh = zj + h * C;
          scalar_t dot = scalar_t(0);
#pragma omp simd reduction(+ : dot)
          for (int64_t c = 0; c < C; ++c) dot += gh[c] * zh[c];
          const scalar_t de = alpha * (dot - ph[3]);
          gs[h] += pre > scalar_t(0) ? de : de * slope;
        }
      }
      for (int64_t h = h0; h < h1; ++h) grad_s_dst[i * H + h] = gs[h];
    }
  }
}

// Backward, source side (CSC = transposed shard): grad_z[j] = sum_i alpha_ij g_i and
// grad_s_src[j] = sum_i de_ij * leaky'(pre_ij), over the destinations i that j points to.
template <typename scalar_t>
void backward_src_rows(const int64_t* __restrict__ t_rowptr, const int64_t* __restrict__ t_row,
                       const scalar_t* __restrict__ packed, const scalar_t* __restrict__ s_src,
                       const scalar_t* __restrict__ z, const scalar_t* __restrict__ g, int64_t ns, int64_t H,
                       int64_t C, scalar_t slope, scalar_t* __restrict__ grad_s_src, scalar_t* __restrict__ grad_z,
                       int64_t h0, int64_t h1, int nthreads) {
  const int64_t HC = H * C;
#pragma omp parallel num_threads(nthreads)
  {
    std::vector<scalar_t> ssj(H), gs(H);
#pragma omp for schedule(dynamic, kChunk)
    for (int64_t j = 0; j < ns; ++j) {
      const int64_t begin = t_rowptr[j], end = t_rowptr[j + 1];
      scalar_t* __restrict__ dz = grad_z + j * HC;
      for (int64_t c = h0 * C; c < h1 * C; ++c) dz[c] = scalar_t(0);
      for (int64_t h = h0; h < h1; ++h) {
        ssj[h] = s_src[j * H + h];
        gs[h] = scalar_t(0);
      }
      const scalar_t* __restrict__ zj = z + j * HC;
      for (int64_t k = begin; k < end; ++k) {
        const int64_t i = t_row[k];
        if (k + kAhead < end) {
          prefetch_row(g + t_row[k + kAhead] * HC + h0 * C, (h1 - h0) * C);
          prefetch_row(packed + (t_row[k + kAhead] * H + h0) * kPack, (h1 - h0) * kPack);
        }
        const scalar_t* __restrict__ gi = g + i * HC;
        const scalar_t* __restrict__ pi = packed + i * H * kPack;
        for (int64_t h = h0; h < h1; ++h) {
          const scalar_t* ph = pi + h * kPack;
          const scalar_t pre = ph[0] + ssj[h];
          const scalar_t alpha = std::exp(leaky(pre, slope) - ph[1]) * ph[2];
          const scalar_t* __restrict__ gh = gi + h * C;
          const scalar_t* __restrict__ zh = zj + h * C;
          scalar_t* __restrict__ dzh = dz + h * C;
          scalar_t dot = scalar_t(0);
#pragma omp simd reduction(+ : dot)
          for (int64_t c = 0; c < C; ++c) {
            dot += gh[c] * zh[c];
            dzh[c] += alpha * gh[c];
          }
          const scalar_t de = alpha * (dot - ph[3]);
          gs[h] += pre > scalar_t(0) ? de : de * slope;
        }
      }
      for (int64_t h = h0; h < h1; ++h) grad_s_src[j * H + h] = gs[h];
    }
  }
}

}  // namespace

std::vector<at::Tensor> gat_backward_shard(at::Tensor rowptr, at::Tensor col, at::Tensor t_rowptr,
                                              at::Tensor t_row, at::Tensor s_dst, at::Tensor s_src,
                                              at::Tensor z_src, double negative_slope, at::Tensor m,
                                              at::Tensor l, at::Tensor grad_out, at::Tensor delta) {
  check_csr(rowptr, col);
  check_csr(t_rowptr, t_row);
  TORCH_CHECK(z_src.dim() == 3 && z_src.is_contiguous(), "z_src must be a contiguous [Ns,H,C] tensor");
  check_dense(s_dst, z_src, 2, "s_dst");
  check_dense(s_src, z_src, 2, "s_src");
  check_dense(m, z_src, 2, "m");
  check_dense(l, z_src, 2, "l");
  check_dense(grad_out, z_src, 3, "grad_out");
  check_dense(delta, z_src, 2, "delta");
  const int64_t nd = rowptr.numel() - 1, ns = z_src.size(0), H = z_src.size(1), C = z_src.size(2);
  TORCH_CHECK(t_rowptr.numel() == ns + 1, "transpose rowptr must have Ns+1 entries");
  TORCH_CHECK(t_row.numel() == col.numel(), "transpose must have as many edges as the shard");
  TORCH_CHECK(s_dst.size(0) == nd && m.size(0) == nd && l.size(0) == nd && grad_out.size(0) == nd &&
                  delta.size(0) == nd,
              "s_dst, m, l, grad_out, delta must have Nd rows");
  TORCH_CHECK(grad_out.size(1) == H && grad_out.size(2) == C, "grad_out must be [Nd,H,C]");
  auto grad_s_dst = at::empty({nd, H}, z_src.options());
  auto grad_s_src = at::empty({ns, H}, z_src.options());
  auto grad_z = at::empty({ns, H, C}, z_src.options());
  const int nthreads = at::get_num_threads();
  AT_DISPATCH_FLOATING_TYPES(z_src.scalar_type(), "gat_backward_shard", [&] {
    const auto slope = static_cast<scalar_t>(negative_slope);
    auto packed = at::empty({nd, H, kPack}, z_src.options());
    scalar_t* pk = packed.data_ptr<scalar_t>();
    pack_destinations<scalar_t>(s_dst.data_ptr<scalar_t>(), m.data_ptr<scalar_t>(), l.data_ptr<scalar_t>(),
                                delta.data_ptr<scalar_t>(), nd * H, pk, nthreads);
    const scalar_t* ss = s_src.data_ptr<scalar_t>();
    const scalar_t* z = z_src.data_ptr<scalar_t>();
    const scalar_t* g = grad_out.data_ptr<scalar_t>();
    const int64_t dst_block = head_block(H);  // the destination pass gathers z_j
    for (int64_t h0 = 0; h0 < H; h0 += dst_block)
      backward_dst_rows<scalar_t>(rowptr.data_ptr<int64_t>(), col.data_ptr<int64_t>(), pk, ss, z, g, nd, H, C, slope,
                                  grad_s_dst.data_ptr<scalar_t>(), h0, std::min(H, h0 + dst_block), nthreads);
    const int64_t src_block = head_block(H);  // the source pass gathers g_i
    for (int64_t h0 = 0; h0 < H; h0 += src_block)
      backward_src_rows<scalar_t>(t_rowptr.data_ptr<int64_t>(), t_row.data_ptr<int64_t>(), pk, ss, z, g, ns, H, C,
                                  slope, grad_s_src.data_ptr<scalar_t>(), grad_z.data_ptr<scalar_t>(), h0,
                                  std::min(H, h0 + src_block), nthreads);
  });
  return {grad_s_dst, grad_s_src, grad_z};
}

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
