// scan.hip -- the clean-path comparison of harness/scan.py on the GPU, in one kernel launch and one read.
//
// Role: a plain C ABI (ctypes, no torch headers) built into the same shared library as the poisoning
// allocator. For two device arrays of one float type (float32, float16, bfloat16) it computes, in one pass at
// memory bandwidth, max|out - ref| and max|ref| in float32 plus a flag for any non-finite out, ref or
// difference; with ref == nullptr, max|out| (the unwritten-value count's first look). For two byte arrays it
// says whether any byte differs (the bit-exact comparison). harness/scan.py decides what the numbers mean
// (its module note says why the clean pass is exact) and runs torch's exact pass when the flag is set.
//
// Why native: the same clean pass written with torch ops is about eight launches and one host read; on the
// H200 a 4096-float comparison cost 0.2 ms and a 64 MiB one read at 0.17 of the device's copy bandwidth
// (reports/measurements/h200-2026-12-01-final, run1_throughput.log). Here: one memset, one kernel, one
// 16-byte copy to pinned memory, one stream synchronization.
//
// Arithmetic: each element is widened to float32 exactly (bf16 and f16 are subsets of float32), out - ref is
// one float32 subtraction, as in the torch path (harness/scan.py, "The arithmetic is float32"). Maxima of
// non-negative floats are kept as their bit patterns: for x, y >= 0, x < y exactly when bits(x) < bits(y),
// so an unsigned atomicMax is an exact float max (no atomic float max needed, none on AMD before gfx90a).
#include "gpu_runtime.h"

#include <mutex>

namespace {

constexpr int kThreads = 256;
constexpr unsigned kMaxBlocks = 4096;  // enough resident blocks to keep an H200's 132 SMs reading (16/SM)

__device__ inline float bits_to_float(unsigned u) { return __uint_as_float(u); }

// IEEE half -> float, exact, without the fp16 headers (their HIP and CUDA spellings differ).
__device__ inline float half_to_float(unsigned short h) {
  unsigned sign = static_cast<unsigned>(h & 0x8000u) << 16;
  unsigned exponent = (h >> 10) & 0x1Fu;
  unsigned mantissa = h & 0x3FFu;
  if (exponent == 0x1Fu) return bits_to_float(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24 is exact in float32
    float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  return bits_to_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

__device__ inline bool is_finite(float x) { return (__float_as_uint(x) & 0x7F800000u) != 0x7F800000u; }

template <int KIND>
__device__ inline float load(const void* base, long long i) {
  if (KIND == 0) return static_cast<const float*>(base)[i];
  unsigned short h = static_cast<const unsigned short*>(base)[i];
  if (KIND == 1) return half_to_float(h);
  return bits_to_float(static_cast<unsigned>(h) << 16);  // bfloat16
}

// acc[0] = bits of max|out - ref|, acc[1] = bits of max|ref|, acc[2] = 1 if anything was not finite.
template <int KIND>
__global__ void __launch_bounds__(kThreads) scan_kernel(const void* out, const void* ref, long long n, unsigned* acc) {
  __shared__ unsigned block_acc[3];
  if (threadIdx.x < 3) block_acc[threadIdx.x] = 0;
  __syncthreads();
  unsigned max_diff = 0, max_ref = 0, bad = 0;
  const long long stride = static_cast<long long>(gridDim.x) * kThreads;
  long long i = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x;
  // Two independent elements per iteration keep two loads of each array in flight per thread.
  for (; i + stride < n; i += 2 * stride) {
    float o0 = load<KIND>(out, i), o1 = load<KIND>(out, i + stride);
    float r0 = ref ? load<KIND>(ref, i) : 0.0f, r1 = ref ? load<KIND>(ref, i + stride) : 0.0f;
    float d0 = fabsf(o0 - r0), d1 = fabsf(o1 - r1);
    bad |= !(is_finite(o0) && is_finite(r0) && is_finite(d0) && is_finite(o1) && is_finite(r1) && is_finite(d1));
    max_diff = max(max_diff, max(__float_as_uint(d0), __float_as_uint(d1)));
    max_ref = max(max_ref, max(__float_as_uint(fabsf(r0)), __float_as_uint(fabsf(r1))));
  }
  if (i < n) {
    float o = load<KIND>(out, i), r = ref ? load<KIND>(ref, i) : 0.0f;
    float d = fabsf(o - r);
    bad |= !(is_finite(o) && is_finite(r) && is_finite(d));
    max_diff = max(max_diff, __float_as_uint(d));
    max_ref = max(max_ref, __float_as_uint(fabsf(r)));
  }
  if (bad) max_diff = max_ref = 0;  // a NaN's bits would order above every finite value; the flag says it
  atomicMax(&block_acc[0], max_diff);
  atomicMax(&block_acc[1], max_ref);
  if (bad) atomicOr(&block_acc[2], 1u);
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicMax(&acc[0], block_acc[0]);
    atomicMax(&acc[1], block_acc[1]);
    if (block_acc[2]) atomicOr(&acc[2], 1u);
  }
}

template <int KIND>
__device__ inline float lane(const uint4& v, int j) {
  const unsigned words[4] = {v.x, v.y, v.z, v.w};
  if (KIND == 0) return bits_to_float(words[j]);
  unsigned short h = static_cast<unsigned short>(words[j / 2] >> (16 * (j % 2)));  // little-endian pairs
  if (KIND == 1) return half_to_float(h);
  return bits_to_float(static_cast<unsigned>(h) << 16);
}

// The same scan over 16-byte words (4 floats or 8 halves per load) for arrays that start 16-byte aligned:
// fewer, wider loads keep more bytes in flight per thread (64 MiB float32 on the H200: 0.46 of copy
// bandwidth with one element per load, reports/measurements/h200-2026-12-01-session2). Elements past the
// last whole word go through the scalar loop.
template <int KIND>
__global__ void __launch_bounds__(kThreads) scan_words_kernel(const void* out, const void* ref, long long n,
                                                              unsigned* acc) {
  constexpr int kPerWord = KIND == 0 ? 4 : 8;
  __shared__ unsigned block_acc[3];
  if (threadIdx.x < 3) block_acc[threadIdx.x] = 0;
  __syncthreads();
  unsigned max_diff = 0, max_ref = 0, bad = 0;
  const long long stride = static_cast<long long>(gridDim.x) * kThreads;
  const long long first = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x;
  const long long words = n / kPerWord;
  const uint4* out4 = static_cast<const uint4*>(out);
  const uint4* ref4 = static_cast<const uint4*>(ref);
  // kUnroll words per thread are loaded before any is used, so that many 16-byte loads of each array are in
  // flight per thread instead of one.
  constexpr int kUnroll = 4;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (long long base = first; base < words; base += kUnroll * stride) {
    uint4 a[kUnroll], b[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      long long w = base + u * stride;
      a[u] = w < words ? out4[w] : zero;
      b[u] = (w < words && ref4) ? ref4[w] : zero;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int j = 0; j < kPerWord; ++j) {
        float o = lane<KIND>(a[u], j), r = lane<KIND>(b[u], j);
        float d = fabsf(o - r);
        bad |= !(is_finite(o) && is_finite(r) && is_finite(d));
        max_diff = max(max_diff, __float_as_uint(d));
        max_ref = max(max_ref, __float_as_uint(fabsf(r)));
      }
    }
  }
  for (long long i = words * kPerWord + first; i < n; i += stride) {
    float o = load<KIND>(out, i), r = ref ? load<KIND>(ref, i) : 0.0f;
    float d = fabsf(o - r);
    bad |= !(is_finite(o) && is_finite(r) && is_finite(d));
    max_diff = max(max_diff, __float_as_uint(d));
    max_ref = max(max_ref, __float_as_uint(fabsf(r)));
  }
  if (bad) max_diff = max_ref = 0;
  atomicMax(&block_acc[0], max_diff);
  atomicMax(&block_acc[1], max_ref);
  if (bad) atomicOr(&block_acc[2], 1u);
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicMax(&acc[0], block_acc[0]);
    atomicMax(&acc[1], block_acc[1]);
    if (block_acc[2]) atomicOr(&acc[2], 1u);
  }
}

// acc[0] = 1 if any 16-byte word (or tail byte) of a and b differs.
__global__ void __launch_bounds__(kThreads) differ_kernel(const uint4* a, const uint4* b, long long words,
                                                           const unsigned char* a_tail,
                                                           const unsigned char* b_tail, int tail_bytes,
                                                           unsigned* acc) {
  unsigned differ = 0;
  const long long stride = static_cast<long long>(gridDim.x) * kThreads;
  for (long long i = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x; i < words; i += stride) {
    uint4 x = a[i], y = b[i];
    differ |= (x.x != y.x) | (x.y != y.y) | (x.z != y.z) | (x.w != y.w);
  }
  if (blockIdx.x == 0 && static_cast<int>(threadIdx.x) < tail_bytes) {
    differ |= a_tail[threadIdx.x] != b_tail[threadIdx.x];
  }
  if (differ) atomicOr(&acc[0], 1u);
}

struct Scratch {
  unsigned* device = nullptr;  // 4 accumulators, zeroed before each launch
  unsigned* host = nullptr;    // pinned: the one device-to-host read lands here
};

std::mutex g_lock;
Scratch g_scratch[64];  // per device index; allocated on first use, kept for the process's life

hipError_t scratch_for_current_device(Scratch** out) {
  int device = 0;
  hipError_t err = hipGetDevice(&device);
  if (err != hipSuccess) return err;
  if (device < 0 || device >= 64) return hipErrorInvalidDevice;
  Scratch& s = g_scratch[device];
  if (s.device == nullptr) {
    err = hipMalloc(reinterpret_cast<void**>(&s.device), 4 * sizeof(unsigned));
    if (err != hipSuccess) return err;
    err = hipHostMalloc(reinterpret_cast<void**>(&s.host), 4 * sizeof(unsigned), 0);
    if (err != hipSuccess) {
      (void)hipFree(s.device);
      s.device = nullptr;
      return err;
    }
  }
  *out = &s;
  return hipSuccess;
}

unsigned blocks_for(long long items) {
  long long blocks = (items + kThreads - 1) / kThreads;
  if (blocks < 1) blocks = 1;
  return blocks > kMaxBlocks ? kMaxBlocks : static_cast<unsigned>(blocks);
}

hipError_t finish(Scratch* s, hipStream_t stream) {
  hipError_t err = hipGetLastError();  // the launch's own error
  if (err != hipSuccess) return err;
  err = hipMemcpyAsync(s->host, s->device, 4 * sizeof(unsigned), hipMemcpyDeviceToHost, stream);
  if (err != hipSuccess) return err;
  return hipStreamSynchronize(stream);
}

}  // namespace

extern "C" {

// kind: 0 float32, 1 float16, 2 bfloat16. ref may be null (then max|out| and the flag). result[0] = max|out -
// ref|, result[1] = max|ref|, result[2] = 1.0 if any value or difference was not finite (maxima then 0).
// Returns the runtime's error code (0 on success). The current device must be the arrays' device.
int graphsafe_scan_floats(const void* out, const void* ref, long long n, int kind, void* stream_handle,
                          float* result) {
  if (n <= 0 || kind < 0 || kind > 2) return static_cast<int>(hipErrorInvalidValue);
  std::lock_guard<std::mutex> guard(g_lock);
  Scratch* s = nullptr;
  hipError_t err = scratch_for_current_device(&s);
  if (err != hipSuccess) return static_cast<int>(err);
  hipStream_t stream = static_cast<hipStream_t>(stream_handle);
  err = hipMemsetAsync(s->device, 0, 4 * sizeof(unsigned), stream);
  if (err != hipSuccess) return static_cast<int>(err);
  const bool aligned = ((reinterpret_cast<uintptr_t>(out) | reinterpret_cast<uintptr_t>(ref)) % 16) == 0;
  if (aligned) {
    unsigned blocks = blocks_for(n / (kind == 0 ? 16 : 32) + 1);  // 4 words of 4 or 8 elements per thread
    if (kind == 0) scan_words_kernel<0><<<blocks, kThreads, 0, stream>>>(out, ref, n, s->device);
    if (kind == 1) scan_words_kernel<1><<<blocks, kThreads, 0, stream>>>(out, ref, n, s->device);
    if (kind == 2) scan_words_kernel<2><<<blocks, kThreads, 0, stream>>>(out, ref, n, s->device);
  } else {
    unsigned blocks = blocks_for((n + 1) / 2);
    if (kind == 0) scan_kernel<0><<<blocks, kThreads, 0, stream>>>(out, ref, n, s->device);
    if (kind == 1) scan_kernel<1><<<blocks, kThreads, 0, stream>>>(out, ref, n, s->device);
    if (kind == 2) scan_kernel<2><<<blocks, kThreads, 0, stream>>>(out, ref, n, s->device);
  }
  err = finish(s, stream);
  if (err != hipSuccess) return static_cast<int>(err);
  union { unsigned u; float f; } max_diff{s->host[0]}, max_ref{s->host[1]};
  result[0] = max_diff.f;
  result[1] = max_ref.f;
  result[2] = s->host[2] ? 1.0f : 0.0f;
  return 0;
}

// *differ = 1 if any of the nbytes bytes of a and b differ, else 0. Both must be 16-byte aligned.
int graphsafe_scan_bytes_differ(const void* a, const void* b, long long nbytes, void* stream_handle, int* differ) {
  if (nbytes <= 0) return static_cast<int>(hipErrorInvalidValue);
  if ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b)) % 16 != 0) {
    return static_cast<int>(hipErrorInvalidValue);
  }
  std::lock_guard<std::mutex> guard(g_lock);
  Scratch* s = nullptr;
  hipError_t err = scratch_for_current_device(&s);
  if (err != hipSuccess) return static_cast<int>(err);
  hipStream_t stream = static_cast<hipStream_t>(stream_handle);
  err = hipMemsetAsync(s->device, 0, 4 * sizeof(unsigned), stream);
  if (err != hipSuccess) return static_cast<int>(err);
  long long words = nbytes / 16;
  int tail = static_cast<int>(nbytes % 16);
  const unsigned char* a_tail = static_cast<const unsigned char*>(a) + words * 16;
  const unsigned char* b_tail = static_cast<const unsigned char*>(b) + words * 16;
  differ_kernel<<<blocks_for(words > 0 ? words : 1), kThreads, 0, stream>>>(
      static_cast<const uint4*>(a), static_cast<const uint4*>(b), words, a_tail, b_tail, tail, s->device);
  err = finish(s, stream);
  if (err != hipSuccess) return static_cast<int>(err);
  *differ = s->host[0] ? 1 : 0;
  return 0;
}

}  // extern "C"
