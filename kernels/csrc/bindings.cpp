// The Python module of the extension: the kernels (GIL released while they run) and the allocator.
// pybind11 with torch's tensor casters, not torch/extension.h (the whole C++ frontend: a third of the build).
#include <torch/csrc/utils/pybind.h>

#include "kernels.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, mod) {
  namespace py = pybind11;
  namespace k = sarlab_kernels;
  const auto nogil = py::call_guard<py::gil_scoped_release>();
  mod.def("gat_forward_shard", &k::gat_forward_shard, "update (m, l, acc) in place with one CSR shard", nogil);
  mod.def("gat_backward_shard", &k::gat_backward_shard, "gradients of one CSR shard", nogil);
  mod.def("csr_transpose", &k::csr_transpose, "transpose a CSR shard", nogil);
  mod.def("csr_max_shard", &k::csr_max_shard, "update (max, count) in place with one CSR shard", nogil);
  mod.def("csr_max_backward", &k::csr_max_backward, "gradient of the running max", nogil);
  mod.def("spmm_csr", &k::spmm_csr, "out (+)= A x for a 0/1 CSR A (row-parallel, deterministic)", nogil);

  mod.def("alloc_install", &k::alloc_install, "install the counting CPU allocator (cache: keep large freed blocks)",
          py::arg("cache"));
  mod.def("alloc_installed", &k::alloc_installed, "whether the counting allocator is torch's CPU allocator");
  mod.def("alloc_reset_peak", &k::alloc_reset_peak, "peak := live (and the high-water mark too)",
          py::arg("high_water") = false);
  mod.def("alloc_empty_cache", &k::alloc_empty_cache, "free every cached block");
  mod.def("alloc_stats", [] {
    const k::AllocStats s = k::alloc_stats();
    py::dict out;
    out["live"] = s.live;
    out["peak"] = s.peak;
    out["high_water"] = s.high_water;
    out["cached"] = s.cached;
    out["allocations"] = s.allocations;
    out["cache_hits"] = s.cache_hits;
    out["cache_misses"] = s.cache_misses;
    out["evictions"] = s.evictions;
    return out;
  }, "counters of the counting allocator (bytes and counts since installation; peak since the last reset)");
}
