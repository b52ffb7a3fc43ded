// Prototype (phase 1 of issue 15): the fused GAT forward of gat.cpp with the heads processed in blocks.
//
// Heads are independent, so running the row loop once per block of heads is exact and gives the same
// bits as gat.cpp; each pass gathers only its block's channels of z_j, so the rows it touches fit in
// the cache when all heads' rows do not (8 heads x 50 channels x 20k nodes = 32 MB of z).
#include <torch/extension.h>

#include <ATen/Parallel.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace {

constexpr int64_t kChunk = 16;
constexpr int64_t kAhead = 2;

template <typename T>
inline void prefetch_row(const T* row, int64_t n) {
  const char* p = reinterpret_cast<const char*>(row);
  const int64_t bytes = n * static_cast<int64_t>(sizeof(T));
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off);
}

template <typename T>
inline T leaky(T x, T slope) {
  return x > T(0) ? x : x * slope;
}

template <typename scalar_t>
void forward_rows_blocked(const int64_t* __restrict__ rowptr, const int64_t* __restrict__ col,
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

std::vector<torch::Tensor> gat_forward_shard_blocked(torch::Tensor rowptr, torch::Tensor col, torch::Tensor s_dst,
                                                     torch::Tensor s_src, torch::Tensor z_src, double negative_slope,
                                                     torch::Tensor m, torch::Tensor l, torch::Tensor acc,
                                                     int64_t head_block) {
  TORCH_CHECK(rowptr.dtype() == torch::kInt64 && col.dtype() == torch::kInt64, "rowptr/col must be int64");
  TORCH_CHECK(z_src.dim() == 3 && z_src.is_contiguous(), "z_src must be a contiguous [Ns,H,C] tensor");
  for (const auto* t : {&s_dst, &s_src, &m, &l, &acc})
    TORCH_CHECK(t->is_contiguous() && t->scalar_type() == z_src.scalar_type(), "inputs must be contiguous, one dtype");
  const int64_t nd = rowptr.numel() - 1, H = z_src.size(1), C = z_src.size(2);
  TORCH_CHECK(s_dst.size(0) == nd && m.size(0) == nd && l.size(0) == nd && acc.size(0) == nd, "state must have Nd rows");
  TORCH_CHECK(head_block >= 1, "head_block must be >= 1");
  const int nthreads = at::get_num_threads();
  AT_DISPATCH_FLOATING_TYPES(z_src.scalar_type(), "gat_forward_shard_blocked", [&] {
    for (int64_t h0 = 0; h0 < H; h0 += head_block) {
      forward_rows_blocked<scalar_t>(rowptr.data_ptr<int64_t>(), col.data_ptr<int64_t>(), s_dst.data_ptr<scalar_t>(),
                                     s_src.data_ptr<scalar_t>(), z_src.data_ptr<scalar_t>(), nd, H, C,
                                     static_cast<scalar_t>(negative_slope), m.data_ptr<scalar_t>(),
                                     l.data_ptr<scalar_t>(), acc.data_ptr<scalar_t>(), h0,
                                     std::min(H, h0 + head_block), nthreads);
    }
  });
  return {m, l, acc};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, mod) {
  const auto nogil = pybind11::call_guard<pybind11::gil_scoped_release>();
  mod.def("gat_forward_shard_blocked", &gat_forward_shard_blocked,
          "update (m, l, acc) in place with one CSR shard, heads in blocks of head_block", nogil);
}
