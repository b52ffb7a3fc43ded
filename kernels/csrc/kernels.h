// The extension's entry points, one translation unit each (bindings.cpp exposes them to Python).
//
// gat.cpp: fused GAT attention and the CSR running max; spmm.cpp: 0/1 shard SpMM; alloc.cpp: the counting
// (optionally caching) CPU allocator. All kernels are deterministic: every output row is owned by one loop
// iteration and summed in index order, so results do not depend on the thread count.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace sarlab_kernels {

// gat.cpp
std::vector<at::Tensor> gat_forward_shard(at::Tensor rowptr, at::Tensor col, at::Tensor s_dst, at::Tensor s_src,
                                          at::Tensor z_src, double negative_slope, at::Tensor m, at::Tensor l,
                                          at::Tensor acc);
std::vector<at::Tensor> gat_backward_shard(at::Tensor rowptr, at::Tensor col, at::Tensor t_rowptr, at::Tensor t_row,
                                           at::Tensor s_dst, at::Tensor s_src, at::Tensor z_src,
                                           double negative_slope, at::Tensor m, at::Tensor l, at::Tensor grad_out,
                                           at::Tensor delta);
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
