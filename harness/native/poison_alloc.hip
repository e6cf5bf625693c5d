// poison_alloc.hip -- the NaN-poisoning allocator behind the gpu backend's torch.cuda.MemPool.
//
// Role: a plain shared library (no torch headers, built by harness/native/build.py build_shared_library)
// whose malloc fills every fresh block with the current byte pattern. The gpu backend loads it with
// torch.cuda.memory.CUDAPluggableAllocator and wraps it in a MemPool, so memory an op reads before anything
// wrote it holds NaN (0xFF) or a huge finite value (0x7F) instead of whatever the last user left there.
// Signatures follow torch's pluggable-allocator contract (torch/cuda/memory.py; pytorch test_cuda.py
// dummy_alloc/dummy_free): alloc(ssize_t size, int device, stream), free(ptr, size_t size, int device, stream).
//
// NOTE on capture: torch calls the pool allocator during graph capture with the capturing stream current
// (CUDACachingAllocator cudaMallocMaybeCapturing switches to relaxed capture mode first). The memset below is
// then recorded as a memset node, so a graph segment is re-poisoned at the start of every replay; outside
// capture it runs once, in stream order before any use of the block.
//
// NOTE on reuse: the gpu backend makes fresh pools for every scope and capture (four per check of a small
// op) and destroys them after, so without a cache every check paid hipMalloc and hipFree (an implicit device
// synchronization) for each. Freed segments are kept here, up to
// kCacheBytes per process, and handed out again for a request of the same size and device. A reused segment
// is filled with the current pattern exactly like a fresh one, so what an op sees is the same. free()
// synchronizes the device first, as hipFree does implicitly: torch releases a segment assuming nothing still
// uses it after the free returns, and the next owner's memset may run on another stream.
#include "gpu_runtime.h"

#include <sys/types.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <vector>

namespace {
std::atomic<int> g_pattern{0xFF};
std::atomic<long long> g_live_bytes{0};
std::atomic<long long> g_mallocs{0};
std::atomic<long long> g_reuses{0};
std::atomic<int> g_last_error{0};

// 128 MiB: a small op's check uses four segments of 2 MiB (torch's small-block segment, kSmallBuffer in
// CUDACachingAllocator), larger cases reuse what fits, and a segment that does not fit goes to hipFree.
constexpr size_t kCacheBytes = size_t{128} << 20;

struct Segment {
  void* ptr;
  size_t size;
  int device;
};
std::mutex g_cache_lock;
std::vector<Segment> g_cache;
size_t g_cached_bytes = 0;

void* take_cached(size_t size, int device) {
  std::lock_guard<std::mutex> guard(g_cache_lock);
  for (size_t i = g_cache.size(); i-- > 0;) {  // the most recently freed first: likely still in L2
    if (g_cache[i].size == size && g_cache[i].device == device) {
      void* ptr = g_cache[i].ptr;
      g_cache.erase(g_cache.begin() + static_cast<long>(i));
      g_cached_bytes -= size;
      return ptr;
    }
  }
  return nullptr;
}

bool keep_cached(void* ptr, size_t size, int device) {
  std::lock_guard<std::mutex> guard(g_cache_lock);
  if (g_cached_bytes + size > kCacheBytes) return false;
  g_cache.push_back(Segment{ptr, size, device});
  g_cached_bytes += size;
  return true;
}
}  // namespace

extern "C" {

// Byte written into fresh blocks: 0xFF (NaN for fp32/fp16/bf16/fp8, -1 for int32) or 0x7F (huge finite).
void graphsafe_set_pattern(int byte) { g_pattern.store(byte & 0xFF); }

int graphsafe_get_pattern(void) { return g_pattern.load(); }

// Bytes handed out and not yet freed (diagnostics; torch's reserved-bytes statistics already count them).
long long graphsafe_poison_live_bytes(void) { return g_live_bytes.load(); }

long long graphsafe_poison_malloc_count(void) { return g_mallocs.load(); }

// Mallocs served from the segment cache (a subset of graphsafe_poison_malloc_count).
long long graphsafe_poison_reuse_count(void) { return g_reuses.load(); }

// Last HIP/CUDA error code seen by malloc/free (0 = none); malloc returns nullptr on failure, which torch
// reports as an out-of-memory error.
int graphsafe_poison_last_error(void) { return g_last_error.load(); }

void* graphsafe_poison_malloc(ssize_t size, int device, hipStream_t stream) {
  // torch sets the current device (`device`) before calling; hipMalloc allocates there.
  if (size <= 0) return nullptr;
  void* ptr = take_cached(static_cast<size_t>(size), device);
  const bool reused = ptr != nullptr;
  if (!reused) {
    hipError_t err = hipMalloc(&ptr, static_cast<size_t>(size));
    if (err != hipSuccess) {
      g_last_error.store(static_cast<int>(err));
      return nullptr;
    }
  }
  hipError_t err = hipMemsetAsync(ptr, g_pattern.load(), static_cast<size_t>(size), stream);
  if (err != hipSuccess) {
    g_last_error.store(static_cast<int>(err));
    (void)hipFree(ptr);
    return nullptr;
  }
  g_live_bytes.fetch_add(size);
  g_mallocs.fetch_add(1);
  if (reused) g_reuses.fetch_add(1);
  return ptr;
}

void graphsafe_poison_free(void* ptr, size_t size, int device, hipStream_t stream) {
  (void)stream;
  if (ptr == nullptr) return;
  g_live_bytes.fetch_sub(static_cast<long long>(size));
  hipError_t err = hipDeviceSynchronize();  // what hipFree would have waited for (note on reuse)
  if (err == hipSuccess && keep_cached(ptr, size, device)) return;
  if (err != hipSuccess) g_last_error.store(static_cast<int>(err));
  err = hipFree(ptr);
  if (err != hipSuccess) g_last_error.store(static_cast<int>(err));
}

}  // extern "C"
