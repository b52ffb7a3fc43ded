// Fused GAT attention kernels over CSR shards (OpenMP over destination or source rows).
//
// Layout conventions (row-major):
//   rowptr [Nd+1] int64, col [E] int64 (rows of the shard's source tensors),
//   s_dst [Nd,H], s_src [Ns,H], state m,l [Nd,H], acc [Nd,H,C], grad_out [Nd,H,C] (contiguous), and
//   z_src [Ns,H,C] whose rows may be strided (row j starts at j * zs, zs >= H*C: a column slice of a wider
//   row, as the engine's [z | s_src] rows are).
// Every output row is owned by one loop iteration, every partial sum by one of a fixed number of parts, and sums
// run in CSR / CSC order, so results do not depend on the number of threads.
//
// Speed, one thread first (the engine runs one per worker):
// - exp runs vectorised over blocks of edges x heads (fast_exp below, branch-free) instead of once per edge and
//   head through libm;
// - a shard whose gathered rows do not fit a cache budget is streamed in tiles of those rows (source rows in the
//   forward, destination rows in the backward), each tile over all the rows it feeds, so a gathered row comes
//   from memory about once per tile instead of once per edge (needs each row's indices ascending, as the engine's
//   shards and csr_transpose give them; other shards run in one tile);
// - the backward is one pass over the transposed shard (CSC): per edge it gathers the destination's g_i once and
//   produces the source's gradients and the destination-score gradient (scattered into one of kParts partial
//   buffers), where it used to run a second, CSR pass that gathered z_j again.
#include "kernels.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace sarlab_kernels {
namespace {

constexpr int64_t kChunk = 16;       // dynamic-schedule chunk of rows (degrees are skewed)
constexpr int64_t kAhead = 8;        // gathered rows prefetched ahead of use (in edges)
constexpr int64_t kEdgeBlock = 128;  // edges whose attention weights are computed (and exp'd) together
constexpr int64_t kParts = 4;        // fixed source ranges of the backward, each with its own grad_s_dst partial
constexpr int64_t kTileBytes = int64_t(8) << 20;  // gathered bytes per tile (a share of the last-level cache)

// An integer from the environment: $SARLAB_GAT_TILE_BYTES overrides kTileBytes (0: never tile; tests use 1).
int64_t env_int(const char* name, int64_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::atoll(value) : fallback;
}

// Tiles for gathering `rows` rows of `row_bytes` each: enough that one fits the budget (1 when it is 0).
int64_t tile_count(int64_t rows, int64_t row_bytes) {
  const int64_t budget = env_int("SARLAB_GAT_TILE_BYTES", kTileBytes);
  if (budget <= 0 || rows <= 1) return 1;
  return std::clamp<int64_t>((rows * row_bytes + budget - 1) / budget, 1, rows);
}

// f(std::integral_constant<int64_t, H>) for the common head counts 1, 2, 4, 8 up to `max_fixed` (loops over heads
// unrolled), else f(std::integral_constant<int64_t, 0>) (the head count read at run time). Measured (1 thread, 1M
// edges, 50 channels): fixed heads make the forward 1.1x faster at 2 and 4 heads but 1.7x slower at 8.
template <typename F>
void with_heads(int64_t H, int64_t max_fixed, F&& f) {
  switch (H <= max_fixed ? H : 0) {
    case 1: return f(std::integral_constant<int64_t, 1>());
    case 2: return f(std::integral_constant<int64_t, 2>());
    case 4: return f(std::integral_constant<int64_t, 4>());
    case 8: return f(std::integral_constant<int64_t, 8>());
    default: return f(std::integral_constant<int64_t, 0>());
  }
}

template <typename T>
inline T leaky(T x, T slope) {
  return x > T(0) ? x : x * slope;
}

// exp(x), branch-free so that loops over it vectorise: x = n ln2 + r, |r| <= ln2/2 (Cody-Waite, ln2 in two
// parts), exp(r) by its Taylor polynomial (degree 7 in float, 13 in double: truncation below 1e-8 / 1e-17
// relative), times 2^n built in the exponent bits. 0 below the smallest normal result (x < -87 / -708, -inf
// included); x is clamped at 88 / 709 above (the kernels pass x <= ~0).
inline float fast_exp(float x) {
  const bool under = x < -87.0f;
  const float xc = under ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest (1.5 * 2^23)
  const float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
  const float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (
      1.0f / 720 + r * (1.0f / 5040)))))));
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return under ? 0.0f : p * scale;
}

inline double fast_exp(double x) {
  const bool under = x < -708.0;
  const double xc = under ? -708.0 : (x > 709.0 ? 709.0 : x);
  const double n = (xc * 1.4426950408889634 + 6755399441055744.0) - 6755399441055744.0;  // 1.5 * 2^52
  const double r = (xc - n * 6.93147180369123816490e-01) - n * 1.90821492927058770002e-10;
  const double r2 = r * r, r4 = r2 * r2, r8 = r4 * r4;  // sum_{k<=13} r^k/k! in Estrin's scheme
  const double p = (1.0 + r) + r2 * (0.5 + r * (1.0 / 6)) + r4 * ((1.0 / 24 + r * (1.0 / 120)) + r2 * (
      1.0 / 720 + r * (1.0 / 5040))) + r8 * ((1.0 / 40320 + r * (1.0 / 362880)) + r2 * (1.0 / 3628800 + r * (
      1.0 / 39916800)) + r4 * (1.0 / 479001600 + r * (1.0 / 6227020800)));
  const int64_t bits = (static_cast<int64_t>(n) + 1023) << 52;
  double scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return under ? 0.0 : p * scale;
}

template <typename T>
inline void exp_inplace(T* __restrict__ x, int64_t n) {
#pragma omp simd
  for (int64_t t = 0; t < n; ++t) x[t] = fast_exp(x[t]);
}


// The row stride of z_src [Ns,H,C]: each row's H*C values contiguous, rows zs >= H*C apart.
int64_t z_row_stride(const at::Tensor& z) {
  TORCH_CHECK(z.dim() == 3 && z.device().is_cpu(), "z_src must be a [Ns,H,C] CPU tensor");
  const int64_t H = z.size(1), C = z.size(2);
  const bool rows_ok = (C <= 1 || z.stride(2) == 1) && (H <= 1 || z.stride(1) == C) &&
                       (z.size(0) <= 1 || z.stride(0) >= H * C);
  TORCH_CHECK(rows_ok, "z_src rows must be contiguous [H,C] blocks (stride(2) == 1, stride(1) == C)");
  return z.size(0) <= 1 ? H * C : z.stride(0);
}

// Whether every row's indices ascend (the tiled passes walk them with a cursor per row).
bool rows_sorted(const int64_t* __restrict__ ptr, const int64_t* __restrict__ idx, int64_t rows, int nthreads) {
  bool sorted = true;
#pragma omp parallel for num_threads(nthreads) schedule(static) reduction(&& : sorted)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = ptr[r] + 1; k < ptr[r + 1]; ++k) sorted = sorted && idx[k - 1] <= idx[k];
  return sorted;
}

// ---------------------------------------------------------------------------------------------
// Forward: update the running (m, l, acc) of every destination with this shard's in-edges.
// Per row: the shard max first (reads only s_src; the old state is rescaled once to the new max), then the
// edges in blocks: logits e - m of a block, exp'd together, then acc += w z_j per edge (each z_j read once).
template <typename scalar_t, int64_t HT>  // HT: the head count when fixed at compile time, else 0
struct Forward {
  const int64_t* rowptr;
  const int64_t* col;
  const scalar_t* s_dst;
  const scalar_t* s_src;
  const scalar_t* z;
  int64_t zs, nd, ns, heads, C, ahead;
  scalar_t slope;
  scalar_t* m;
  scalar_t* l;
  scalar_t* acc;

  // m_i := max(m_i, max over the shard's in-edges of i); l_i and acc_i rescaled to it (zeroed from -inf).
  void start_row(int64_t i, scalar_t* __restrict__ mx) const {
    const int64_t H = HT > 0 ? HT : heads;
    const scalar_t neg_inf = -std::numeric_limits<scalar_t>::infinity();
    const scalar_t* sd = s_dst + i * H;
    scalar_t* mi = m + i * H;
    for (int64_t h = 0; h < H; ++h) mx[h] = mi[h];
    for (int64_t k = rowptr[i]; k < rowptr[i + 1]; ++k) {
      const scalar_t* ss = s_src + col[k] * H;
      for (int64_t h = 0; h < H; ++h) {
        const scalar_t e = leaky(sd[h] + ss[h], slope);
        mx[h] = e > mx[h] ? e : mx[h];
      }
    }
    for (int64_t h = 0; h < H; ++h) {
      scalar_t* __restrict__ a = acc + (i * H + h) * C;
      if (mi[h] == neg_inf) {
        l[i * H + h] = scalar_t(0);
        for (int64_t c = 0; c < C; ++c) a[c] = scalar_t(0);
      } else if (mi[h] != mx[h]) {
        const scalar_t scale = std::exp(mi[h] - mx[h]);
        l[i * H + h] *= scale;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) a[c] *= scale;
      }
      mi[h] = mx[h];
    }
  }

  // Edges [kb, ke) of row i (after start_row): l_i += sum w, acc_i += sum w z_j, w = exp(e - m_i), in edge order.
  void add_edges(int64_t i, int64_t kb, int64_t ke, scalar_t* __restrict__ w) const {
    const int64_t H = HT > 0 ? HT : heads;
    const int64_t HC = H * C;
    const scalar_t* sd = s_dst + i * H;
    const scalar_t* mi = m + i * H;
    scalar_t* __restrict__ li = l + i * H;
    scalar_t* __restrict__ acc_i = acc + i * HC;
    for (int64_t b0 = kb; b0 < ke; b0 += kEdgeBlock) {
      const int64_t b1 = std::min(ke, b0 + kEdgeBlock);
      for (int64_t k = b0; k < b1; ++k) {
        if (b0 == kb && k < kb + ahead) prefetch_row(z + col[k] * zs, HC);
        const scalar_t* ss = s_src + col[k] * H;
        scalar_t* wk = w + (k - b0) * H;
        for (int64_t h = 0; h < H; ++h) wk[h] = leaky(sd[h] + ss[h], slope) - mi[h];
      }
      exp_inplace(w, (b1 - b0) * H);
      for (int64_t k = b0; k < b1; ++k) {
        if (k + ahead < ke) prefetch_row(z + col[k + ahead] * zs, HC);
        const scalar_t* __restrict__ zj = z + col[k] * zs;
        const scalar_t* wk = w + (k - b0) * H;
        for (int64_t h = 0; h < H; ++h) {
          const scalar_t wh = wk[h];
          li[h] += wh;
          scalar_t* __restrict__ a = acc_i + h * C;
          const scalar_t* __restrict__ zh = zj + h * C;
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) a[c] += wh * zh[c];
        }
      }
    }
  }

  // All rows; with tiles > 1 the edges go in `tiles` passes over source-row ranges (row indices ascending).
  void run(int64_t tiles, int nthreads) const {
    const int64_t H = HT > 0 ? HT : heads;
    std::vector<int64_t> cursor(rowptr, rowptr + (tiles > 1 ? nd : 0));  // next edge of every row
#pragma omp parallel num_threads(nthreads)
    {
      std::vector<scalar_t> mx(H), w(kEdgeBlock * H);
#pragma omp for schedule(dynamic, kChunk)
      for (int64_t i = 0; i < nd; ++i) {
        if (rowptr[i] == rowptr[i + 1]) continue;  // state untouched: no edge of this shard reaches i
        start_row(i, mx.data());
        if (tiles == 1) add_edges(i, rowptr[i], rowptr[i + 1], w.data());
      }
      for (int64_t t = 0; t < tiles && tiles > 1; ++t) {
        const int64_t j_end = (t + 1) * ns / tiles;
#pragma omp for schedule(dynamic, kChunk)
        for (int64_t i = 0; i < nd; ++i) {
          const int64_t kb = cursor[i], end = rowptr[i + 1];
          int64_t ke = kb;
          while (ke < end && col[ke] < j_end) ++ke;
          if (ke == kb) continue;
          add_edges(i, kb, ke, w.data());
          cursor[i] = ke;
        }
      }
    }
  }
};

}  // namespace

std::vector<at::Tensor> gat_forward_shard(at::Tensor rowptr, at::Tensor col, at::Tensor s_dst,
                                          at::Tensor s_src, at::Tensor z_src, double negative_slope,
                                          at::Tensor m, at::Tensor l, at::Tensor acc) {
  check_csr(rowptr, col);
  const int64_t zs = z_row_stride(z_src);
  check_dense(s_dst, z_src, 2, "s_dst");
  check_dense(s_src, z_src, 2, "s_src");
  check_dense(m, z_src, 2, "m");
  check_dense(l, z_src, 2, "l");
  check_dense(acc, z_src, 3, "acc");
  const int64_t nd = rowptr.numel() - 1, ns = z_src.size(0), H = z_src.size(1), C = z_src.size(2);
  TORCH_CHECK(s_dst.size(0) == nd && s_dst.size(1) == H, "s_dst must be [Nd,H]");
  TORCH_CHECK(s_src.size(0) == ns && s_src.size(1) == H, "s_src must be [Ns,H]");
  TORCH_CHECK(m.size(0) == nd && l.size(0) == nd && acc.size(0) == nd && acc.size(2) == C,
              "state must be m,l [Nd,H] and acc [Nd,H,C]");
  const int nthreads = at::get_num_threads();
  AT_DISPATCH_FLOATING_TYPES(z_src.scalar_type(), "gat_forward_shard", [&] {
    int64_t tiles = tile_count(ns, (H * C + H) * static_cast<int64_t>(sizeof(scalar_t)));
    if (tiles > 1 && !rows_sorted(rowptr.data_ptr<int64_t>(), col.data_ptr<int64_t>(), nd, nthreads)) tiles = 1;
    with_heads(H, 4, [&](auto fixed) {
      const Forward<scalar_t, decltype(fixed)::value> pass{
          rowptr.data_ptr<int64_t>(), col.data_ptr<int64_t>(), s_dst.data_ptr<scalar_t>(), s_src.data_ptr<scalar_t>(),
          z_src.data_ptr<scalar_t>(), zs, nd, ns, H, C, kAhead,
          static_cast<scalar_t>(negative_slope), m.data_ptr<scalar_t>(), l.data_ptr<scalar_t>(),
          acc.data_ptr<scalar_t>()};
      pass.run(tiles, nthreads);
    });
  });
  return {m, l, acc};
}

namespace {

// ---------------------------------------------------------------------------------------------
// Backward, one pass over the transposed shard (CSC: per source j, its destinations i ascending):
//   alpha_ij = exp(e_ij - m_i) / l_i,  de_ij = alpha_ij (g_i . z_j - delta_i),  d_ij = de_ij lrelu'(p_ij),
//   grad_z[j] = sum_i alpha_ij g_i,  grad_s_src[j] = sum_i d_ij,  grad_s_dst[i] = sum_j d_ij.
// grad_s_dst is scattered: sources fall in kParts fixed ranges (equal edge counts), each adding into its own
// [Nd,H] partial in source order; the partials are summed in part order at the end. Per-destination values
// the pass gathers are packed so that one edge reads one small row: packed[i][h] = {s_dst, m, 1/l, delta}.
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

// Sum of N values by halving (pairs w, w + N/2): a fixed order that vectorises into register shuffles.
template <typename T, int64_t N>
inline T tree_sum(const T* p) {
  if constexpr (N == 1) {
    return p[0];
  } else {
    T half[N / 2];
    for (int64_t w = 0; w < N / 2; ++w) half[w] = p[w] + p[w + N / 2];
    return tree_sum<T, N / 2>(half);
  }
}

// Returns g . z over C values and adds a g into dz. The dot product keeps one partial sum per lane of a 64-byte
// vector (fixed by the type, not the instruction set) over whole vectors and one for the tail, so the compiler
// vectorises it without reassociating (`omp simd reduction` ends in a slow lane-by-lane sum through memory).
template <typename T>
inline T dot_axpy(const T* __restrict__ g, const T* __restrict__ z, T* __restrict__ dz, T a, int64_t C) {
  constexpr int64_t W = 64 / sizeof(T);
  T part[W] = {};
  int64_t c = 0;
  for (; c + W <= C; c += W) {
#pragma omp simd
    for (int64_t w = 0; w < W; ++w) {
      part[w] += g[c + w] * z[c + w];
      dz[c + w] += a * g[c + w];
    }
  }
  T tail = T(0);
  for (; c < C; ++c) {
    tail += g[c] * z[c];
    dz[c] += a * g[c];
  }
  return tree_sum<T, W>(part) + tail;
}

template <typename scalar_t, int64_t HT>
struct Backward {
  const int64_t* t_rowptr;
  const int64_t* t_row;
  const scalar_t* packed;
  const scalar_t* s_src;
  const scalar_t* z;
  const scalar_t* g;
  int64_t zs, nd, ns, heads, C, ahead;
  scalar_t slope;
  scalar_t* grad_s_src;
  scalar_t* grad_z;

  // Out-edges [kb, ke) of source j: add into grad_z[j], grad_s_src[j] and the part's grad_s_dst partial `gsd`.
  void add_edges(int64_t j, int64_t kb, int64_t ke, scalar_t* __restrict__ gsd, scalar_t* __restrict__ alpha,
                 scalar_t* __restrict__ pre) const {
    const int64_t H = HT > 0 ? HT : heads;
    const int64_t HC = H * C;
    const scalar_t* ssj = s_src + j * H;
    const scalar_t* __restrict__ zj = z + j * zs;
    scalar_t* __restrict__ dz = grad_z + j * HC;
    scalar_t* __restrict__ gss = grad_s_src + j * H;
    for (int64_t b0 = kb; b0 < ke; b0 += kEdgeBlock) {
      const int64_t b1 = std::min(ke, b0 + kEdgeBlock);
      for (int64_t k = b0; k < b1; ++k) {
        if (b0 == kb && k < kb + ahead) prefetch_row(g + t_row[k] * HC, HC);
        const scalar_t* pi = packed + t_row[k] * H * kPack;
        scalar_t* ak = alpha + (k - b0) * H;
        scalar_t* pk = pre + (k - b0) * H;
        for (int64_t h = 0; h < H; ++h) {
          const scalar_t p = pi[h * kPack] + ssj[h];
          pk[h] = p;
          ak[h] = leaky(p, slope) - pi[h * kPack + 1];
        }
      }
      exp_inplace(alpha, (b1 - b0) * H);
      for (int64_t k = b0; k < b1; ++k) {
        if (k + ahead < ke) {
          prefetch_row(g + t_row[k + ahead] * HC, HC);
          prefetch_row(packed + t_row[k + ahead] * H * kPack, H * kPack);
        }
        const int64_t i = t_row[k];
        const scalar_t* __restrict__ gi = g + i * HC;
        const scalar_t* pi = packed + i * H * kPack;
        const scalar_t* ak = alpha + (k - b0) * H;
        const scalar_t* pk = pre + (k - b0) * H;
        for (int64_t h = 0; h < H; ++h) {
          const scalar_t a_ij = ak[h] * pi[h * kPack + 2];
          const scalar_t* __restrict__ gh = gi + h * C;
          const scalar_t* __restrict__ zh = zj + h * C;
          scalar_t* __restrict__ dzh = dz + h * C;
          const scalar_t de = a_ij * (dot_axpy(gh, zh, dzh, a_ij, C) - pi[h * kPack + 3]);
          const scalar_t d = pk[h] > scalar_t(0) ? de : de * slope;
          gss[h] += d;
          gsd[i * H + h] += d;
        }
      }
    }
  }

  // Every source row, in kParts fixed source ranges (`part_begin`, kParts + 1 entries) that threads take whole;
  // with tiles > 1 in `tiles` passes over destination-row ranges (each source's destinations ascending).
  // Part p adds its grad_s_dst into partial[p] ([Nd,H] each, zeroed).
  void run(int64_t tiles, const int64_t* part_begin, const std::vector<scalar_t*>& partial, int nthreads) const {
    const int64_t H = HT > 0 ? HT : heads;
    const int64_t HC = H * C;
    std::vector<int64_t> cursor(t_rowptr, t_rowptr + ns);
#pragma omp parallel num_threads(nthreads)
    {
      std::vector<scalar_t> alpha(kEdgeBlock * H), pre(kEdgeBlock * H);
      for (int64_t t = 0; t < tiles; ++t) {
        const int64_t i_end = (t + 1) * nd / tiles;
#pragma omp for schedule(dynamic, 1)
        for (int64_t p = 0; p < kParts; ++p) {
          for (int64_t j = part_begin[p]; j < part_begin[p + 1]; ++j) {
            if (t == 0) {
              std::fill(grad_z + j * HC, grad_z + (j + 1) * HC, scalar_t(0));
              std::fill(grad_s_src + j * H, grad_s_src + (j + 1) * H, scalar_t(0));
            }
            const int64_t kb = cursor[j], end = t_rowptr[j + 1];
            int64_t ke = tiles == 1 ? end : kb;
            while (ke < end && t_row[ke] < i_end) ++ke;
            if (ke == kb) continue;
            add_edges(j, kb, ke, partial[p], alpha.data(), pre.data());
            cursor[j] = ke;
          }
        }
      }
    }
  }
};

// partial[0] += partial[1] + ... in part order (n values each).
template <typename scalar_t>
void add_partials(const std::vector<scalar_t*>& partial, int64_t n, int nthreads) {
  scalar_t* __restrict__ sum = partial[0];
#pragma omp parallel for num_threads(nthreads) schedule(static)
  for (int64_t x = 0; x < n; ++x)
    for (size_t p = 1; p < partial.size(); ++p) sum[x] += partial[p][x];
}

}  // namespace

std::vector<at::Tensor> gat_backward_shard(at::Tensor rowptr, at::Tensor col, at::Tensor t_rowptr,
                                           at::Tensor t_row, at::Tensor s_dst, at::Tensor s_src,
                                           at::Tensor z_src, double negative_slope, at::Tensor m,
                                           at::Tensor l, at::Tensor grad_out, at::Tensor delta) {
  check_csr(rowptr, col);
  check_csr(t_rowptr, t_row);
  const int64_t zs = z_row_stride(z_src);
  check_dense(s_dst, z_src, 2, "s_dst");
  check_dense(s_src, z_src, 2, "s_src");
  check_dense(m, z_src, 2, "m");
  check_dense(l, z_src, 2, "l");
  check_dense(grad_out, z_src, 3, "grad_out");
  check_dense(delta, z_src, 2, "delta");
  const int64_t nd = rowptr.numel() - 1, ns = z_src.size(0), H = z_src.size(1), C = z_src.size(2);
  const int64_t ne = col.numel();
  TORCH_CHECK(t_rowptr.numel() == ns + 1, "transpose rowptr must have Ns+1 entries");
  TORCH_CHECK(t_row.numel() == ne, "transpose must have as many edges as the shard");
  TORCH_CHECK(s_dst.size(0) == nd && m.size(0) == nd && l.size(0) == nd && grad_out.size(0) == nd &&
                  delta.size(0) == nd,
              "s_dst, m, l, grad_out, delta must have Nd rows");
  TORCH_CHECK(grad_out.size(1) == H && grad_out.size(2) == C, "grad_out must be [Nd,H,C]");
  TORCH_CHECK(s_src.size(0) == ns && s_src.size(1) == H, "s_src must be [Ns,H]");
  const int64_t* trp = t_rowptr.data_ptr<int64_t>();
  TORCH_CHECK(trp[0] == 0 && trp[ns] == ne, "transpose rowptr must start at 0 and end at the edge count");
  auto grad_s_dst = at::zeros({nd, H}, z_src.options());
  auto grad_s_src = at::empty({ns, H}, z_src.options());
  auto grad_z = at::empty({ns, H, C}, z_src.options());
  auto partials = at::zeros({kParts - 1, nd, H}, z_src.options());
  // Part p: the sources from the first whose out-edges start at or after p/kParts of all edges.
  std::vector<int64_t> part_begin(kParts + 1, ns);
  for (int64_t p = 0; p < kParts; ++p)
    part_begin[p] = std::lower_bound(trp, trp + ns, (p * ne + kParts - 1) / kParts) - trp;
  part_begin[0] = 0;
  const int nthreads = at::get_num_threads();
  AT_DISPATCH_FLOATING_TYPES(z_src.scalar_type(), "gat_backward_shard", [&] {
    auto packed = at::empty({nd, H, kPack}, z_src.options());
    scalar_t* pk = packed.data_ptr<scalar_t>();
    pack_destinations<scalar_t>(s_dst.data_ptr<scalar_t>(), m.data_ptr<scalar_t>(), l.data_ptr<scalar_t>(),
                                delta.data_ptr<scalar_t>(), nd * H, pk, nthreads);
    int64_t tiles = tile_count(nd, (H * C + H * kPack) * static_cast<int64_t>(sizeof(scalar_t)));
    if (tiles > 1 && !rows_sorted(trp, t_row.data_ptr<int64_t>(), ns, nthreads)) tiles = 1;
    std::vector<scalar_t*> partial(kParts);
    partial[0] = grad_s_dst.data_ptr<scalar_t>();
    for (int64_t p = 1; p < kParts; ++p) partial[p] = partials.data_ptr<scalar_t>() + (p - 1) * nd * H;
    with_heads(H, 8, [&](auto fixed) {
      const Backward<scalar_t, decltype(fixed)::value> pass{
          trp, t_row.data_ptr<int64_t>(), pk, s_src.data_ptr<scalar_t>(), z_src.data_ptr<scalar_t>(),
          grad_out.data_ptr<scalar_t>(), zs, nd, ns, H, C, kAhead,
          static_cast<scalar_t>(negative_slope), grad_s_src.data_ptr<scalar_t>(), grad_z.data_ptr<scalar_t>()};
      pass.run(tiles, part_begin.data(), partial, nthreads);
    });
    add_partials(partial, nd * H, nthreads);
  });
  return {grad_s_dst, grad_s_src, grad_z};
}

}  // namespace sarlab_kernels
