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
#include "gpu_runtime.h"

#include <sys/types.h>

#include <atomic>
#include <cstdio>

namespace {
std::atomic<int> g_pattern{0xFF};
std::atomic<long long> g_live_bytes{0};
std::atomic<long long> g_mallocs{0};
std::atomic<int> g_last_error{0};
}  // namespace

extern "C" {

// Byte written into fresh blocks: 0xFF (NaN for fp32/fp16/bf16/fp8, -1 for int32) or 0x7F (huge finite).
void graphsafe_set_pattern(int byte) { g_pattern.store(byte & 0xFF); }

int graphsafe_get_pattern(void) { return g_pattern.load(); }

// Bytes handed out and not yet freed (diagnostics; torch's reserved-bytes statistics already count them).
long long graphsafe_poison_live_bytes(void) { return g_live_bytes.load(); }

long long graphsafe_poison_malloc_count(void) { return g_mallocs.load(); }

// Last HIP/CUDA error code seen by malloc/free (0 = none); malloc returns nullptr on failure, which torch
// reports as an out-of-memory error.
int graphsafe_poison_last_error(void) { return g_last_error.load(); }

void* graphsafe_poison_malloc(ssize_t size, int device, hipStream_t stream) {
  (void)device;  // torch sets the current device before calling; hipMalloc allocates there
  void* ptr = nullptr;
  if (size <= 0) return nullptr;
  hipError_t err = hipMalloc(&ptr, static_cast<size_t>(size));
  if (err != hipSuccess) {
    g_last_error.store(static_cast<int>(err));
    return nullptr;
  }
  err = hipMemsetAsync(ptr, g_pattern.load(), static_cast<size_t>(size), stream);
  if (err != hipSuccess) {
    g_last_error.store(static_cast<int>(err));
    (void)hipFree(ptr);
    return nullptr;
  }
  g_live_bytes.fetch_add(size);
  g_mallocs.fetch_add(1);
  return ptr;
}

void graphsafe_poison_free(void* ptr, size_t size, int device, hipStream_t stream) {
  (void)device;
  (void)stream;
  if (ptr == nullptr) return;
  hipError_t err = hipFree(ptr);
  if (err != hipSuccess) g_last_error.store(static_cast<int>(err));
  g_live_bytes.fetch_sub(static_cast<long long>(size));
}

}  // extern "C"
