// The extension's entry points, one translation unit each (bindings.cpp exposes them to Python).
//
// gat.cpp: fused GAT attention; csr.cpp: CSR transpose and the running max (SAGE max/pool); spmm.cpp: 0/1 shard
// SpMM; alloc.cpp: the counting (optionally caching) CPU allocator. All kernels are deterministic: every output row is owned by one loop
// iteration (or scattered partial sums by one of a fixed number of parts) and summed in index order, so results do
// not depend on the thread count.
#pragma once

// The tensor type and the three factories the kernels call, not all of ATen (ATen/ATen.h): each translation unit
// parses a fifth of the headers (the build is mostly header parsing).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>

#include <cstdint>
#include <vector>

namespace sarlab_kernels {

// Prefetch every cache line of a gathered row of n values (the kernels gather whole feature rows by index).
template <typename T>
inline void prefetch_row(const T* row, int64_t n) {
  const char* p = reinterpret_cast<const char*>(row);
  const int64_t bytes = n * static_cast<int64_t>(sizeof(T));
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off);
}

// Argument checks shared by the kernels: int64 contiguous CPU CSR arrays; a dense CPU tensor of ``dim`` dimensions,
// contiguous, of the dtype of ``like``.
inline void check_csr(const at::Tensor& rowptr, const at::Tensor& col) {
  TORCH_CHECK(rowptr.dtype() == at::kLong && col.dtype() == at::kLong, "rowptr/col must be int64");
  TORCH_CHECK(rowptr.dim() == 1 && rowptr.numel() >= 1, "rowptr must be 1-D with Nd+1 entries");
  TORCH_CHECK(col.dim() == 1, "col must be 1-D");
  TORCH_CHECK(rowptr.is_contiguous() && col.is_contiguous(), "rowptr/col must be contiguous");
  TORCH_CHECK(rowptr.device().is_cpu() && col.device().is_cpu(), "kernels run on CPU tensors only");
}

inline void check_dense(const at::Tensor& t, const at::Tensor& like, int64_t dim, const char* name) {
  TORCH_CHECK(t.dim() == dim, name, " must have ", dim, " dimensions");
  TORCH_CHECK(t.scalar_type() == like.scalar_type(), name, " must have the dtype of the kernel's input rows");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
  TORCH_CHECK(t.device().is_cpu(), name, " must be a CPU tensor");
}

// gat.cpp
std::vector<at::Tensor> gat_forward_shard(at::Tensor rowptr, at::Tensor col, at::Tensor s_dst, at::Tensor s_src,
                                          at::Tensor z_src, double negative_slope, at::Tensor m, at::Tensor l,
                                          at::Tensor acc);
std::vector<at::Tensor> gat_backward_shard(at::Tensor rowptr, at::Tensor col, at::Tensor t_rowptr, at::Tensor t_row,
                                           at::Tensor s_dst, at::Tensor s_src, at::Tensor z_src,
                                           double negative_slope, at::Tensor m, at::Tensor l, at::Tensor grad_out,
                                           at::Tensor delta);

// csr.cpp
std::vector<at::Tensor> csr_transpose(at::Tensor rowptr, at::Tensor col, int64_t num_src);
std::vector<at::Tensor> csr_max_shard(at::Tensor rowptr, at::Tensor col, at::Tensor x_src, at::Tensor mx,
                                      at::Tensor cnt);
at::Tensor csr_max_backward(at::Tensor t_rowptr, at::Tensor t_row, at::Tensor x_src, at::Tensor mx, at::Tensor cnt,
                            at::Tensor grad_out);

// spmm.cpp
at::Tensor spmm_csr(at::Tensor rowptr, at::Tensor col, at::Tensor x, at::Tensor out, bool accumulate);

// alloc.cpp
struct AllocStats {
  int64_t live, peak, high_water, cached, allocations, cache_hits, cache_misses, evictions;
};
bool alloc_install(bool cache);
bool alloc_installed();
AllocStats alloc_stats();
void alloc_reset_peak(bool high_water);
void alloc_empty_cache();

}  // namespace sarlab_kernels
