// A counting CPU allocator for torch, with an optional bounded cache of large freed blocks.
//
// Counting: every block torch allocates on the CPU adds its usable size to `live` (and `peak`, the maximum
// of live since the last reset; `high_water`, its maximum since installation); its free subtracts it. Two
// atomic adds per allocation: peak live bytes cost nothing to measure, unlike a resident-set high-water
// mark, which needs every freed block returned to the kernel and every new one faulted in afresh.
//
// Caching: blocks of at least kMinCached bytes are kept on free, by (rounded) size, and handed to the next
// allocation that fits (best fit: the smallest cached block at most 1/kFitSlack larger than the request, which
// then counts the block's whole size as live), so an epoch that repeats the last one's shapes, or a ring round
// whose peer's rows are a little fewer than another's, reuses resident pages instead of page-faulting and
// zeroing new ones. The cache is bounded: live + cached bytes never exceed
// `high_water` (an allocation that misses first frees cached blocks, the smallest one that covers the excess
// if there is one, else the largest ones), so the resident set never holds more than the run's peak of
// live bytes. Cached bytes are not live.
//
// Every block carries its counted size in a 64-byte header in front of the data (the data stays 64-byte
// aligned). The state is allocated once and never destroyed: tensors freed during interpreter teardown
// still find it.
#include "kernels.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <iterator>
#include <map>
#include <mutex>

namespace sarlab_kernels {
namespace {

constexpr size_t kMinCached = size_t(1) << 17;  // glibc's mmap threshold as sarlab.memory.tune_malloc sets it
constexpr size_t kHeader = 64;                   // keeps the data 64-byte aligned, as c10's own allocations
constexpr size_t kSmallRound = size_t(1) << 12;  // sizes below 1 MiB round to pages, larger ones to 64 KiB
constexpr size_t kLargeRound = size_t(1) << 16;
constexpr size_t kFitSlack = 8;  // a cached block serves a request up to 1/8 (12.5 %) smaller than itself

struct State {
  std::atomic<int64_t> live{0}, peak{0}, high_water{0}, allocations{0}, hits{0}, misses{0}, evictions{0};
  std::mutex mu;                       // guards the cache
  std::multimap<size_t, char*> cache;  // block size -> base of a free block (its header)
  int64_t cached = 0;
  bool caching = false;
};

State& state() {
  static State* s = new State();  // never destroyed (see the file comment)
  return *s;
}

void raise_max(std::atomic<int64_t>& target, int64_t value) {
  int64_t seen = target.load(std::memory_order_relaxed);
  while (value > seen && !target.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

void add_live(State& s, int64_t bytes) {
  const int64_t now = s.live.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  raise_max(s.peak, now);
  raise_max(s.high_water, now);
}

size_t rounded(size_t n) {
  const size_t unit = n < (size_t(1) << 20) ? kSmallRound : kLargeRound;
  return (n + unit - 1) / unit * unit;
}

// The header in front of every block: its counted size, and whether it may go to the cache.
struct Header {
  size_t size;
  bool cacheable;
};
static_assert(sizeof(Header) <= kHeader, "the header must fit in front of the data");

Header* header_of(void* data) { return reinterpret_cast<Header*>(static_cast<char*>(data) - kHeader); }

void free_block(void* data) {
  if (data == nullptr) return;
  State& s = state();
  Header* head = header_of(data);
  s.live.fetch_sub(static_cast<int64_t>(head->size), std::memory_order_relaxed);
  if (head->cacheable) {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.caching) {
      s.cache.emplace(head->size, reinterpret_cast<char*>(head));
      s.cached += static_cast<int64_t>(head->size);
      return;
    }
  }
  c10::free_cpu(head);
}

// With s.mu held: free cached blocks until live + cached + `incoming` fits under the high-water mark.
void evict_for(State& s, int64_t incoming) {
  const int64_t live_after = s.live.load(std::memory_order_relaxed) + incoming;
  const int64_t bound = std::max(s.high_water.load(std::memory_order_relaxed), live_after);
  while (!s.cache.empty() && live_after + s.cached > bound) {
    const int64_t excess = live_after + s.cached - bound;
    auto it = s.cache.lower_bound(static_cast<size_t>(excess));  // smallest block that covers the excess
    if (it == s.cache.end()) it = std::prev(s.cache.end());      // none: the largest, then look again
    s.cached -= static_cast<int64_t>(it->first);
    c10::free_cpu(it->second);
    s.cache.erase(it);
    s.evictions.fetch_add(1, std::memory_order_relaxed);
  }
}

struct CountingAllocator final : at::Allocator {
  at::DataPtr allocate(size_t n) override {
    if (n == 0) return {nullptr, nullptr, &free_block, at::Device(at::DeviceType::CPU)};
    State& s = state();
    s.allocations.fetch_add(1, std::memory_order_relaxed);
    char* base = nullptr;
    size_t size = n;
    const bool cacheable = n >= kMinCached;
    if (cacheable) {
      size = rounded(n);
      std::lock_guard<std::mutex> lock(s.mu);
      auto it = s.cache.lower_bound(size);  // the smallest cached block that holds n, if not too much larger
      if (it != s.cache.end() && it->first - size <= size / kFitSlack) {
        base = it->second;
        size = it->first;  // the block keeps (and counts) its own size
        s.cache.erase(it);
        s.cached -= static_cast<int64_t>(size);
        s.hits.fetch_add(1, std::memory_order_relaxed);
      } else {
        evict_for(s, static_cast<int64_t>(size));
        s.misses.fetch_add(1, std::memory_order_relaxed);
      }
    }
    if (base == nullptr) {
      base = static_cast<char*>(c10::alloc_cpu(size + kHeader));
      if (!cacheable) size = malloc_usable_size(base) - kHeader;  // what the heap really holds for it
      *reinterpret_cast<Header*>(base) = Header{size, cacheable};
    }
    add_live(s, static_cast<int64_t>(size));
    char* data = base + kHeader;
    return {data, data, &free_block, at::Device(at::DeviceType::CPU)};
  }

  at::DeleterFnPtr raw_deleter() const override { return &free_block; }

  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
};

CountingAllocator* allocator() {
  static CountingAllocator* a = new CountingAllocator();  // never destroyed, as the state
  return a;
}

}  // namespace

// Make this the CPU allocator of torch (blocks allocated before keep their own deleter); `cache` turns the
// bounded cache on or off (off also empties it). True once installed.
bool alloc_install(bool cache) {
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.caching = cache;
  }
  if (!cache) alloc_empty_cache();
  if (c10::GetCPUAllocator() != allocator()) c10::SetCPUAllocator(allocator(), /*priority=*/100);
  return alloc_installed();
}

bool alloc_installed() { return c10::GetCPUAllocator() == allocator(); }

AllocStats alloc_stats() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return {s.live.load(), s.peak.load(), s.high_water.load(), s.cached, s.allocations.load(), s.hits.load(),
          s.misses.load(), s.evictions.load()};
}

void alloc_reset_peak(bool high_water) {
  State& s = state();
  s.peak.store(s.live.load());
  if (high_water) s.high_water.store(s.live.load());
}

void alloc_empty_cache() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  for (auto& entry : s.cache) c10::free_cpu(entry.second);
  s.cache.clear();
  s.cached = 0;
}

}  // namespace sarlab_kernels
