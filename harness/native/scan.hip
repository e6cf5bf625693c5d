// scan.hip -- the clean-path comparison of harness/scan.py on the GPU, in one kernel launch and one read.
//
// Role: a plain C ABI (ctypes, no torch headers) built into the same shared library as the poisoning
// allocator. For two device arrays of one float type (float32, float16, bfloat16) it computes, in one pass at
// memory bandwidth, max|out - ref| and max|ref| in float32 plus a flag for any non-finite out, ref or
// difference; with ref == nullptr, max|out| (the unwritten-value count's first look). For two byte arrays it
// says whether any byte differs (the bit-exact comparison). harness/scan.py decides what the numbers mean
// (its module note says why the clean pass is exact) and runs torch's exact pass when the flag is set.
//
// Why native: the same clean pass written with torch ops is about eight launches and one host read, several
// times this call's time for small and large comparisons. Here: a batch of comparisons is one
// kernel launch per 32 comparisons, each comparison's last block writes its result into mapped host memory,
// and one stream synchronization reads the whole batch; `graphsafe_scan_run` does all of it in one call, so
// the Python side packs the batch once and makes one foreign call. On the H200 (bench/scan_variants.py,
// reports/performance.md) this call takes 25-26 us for 4096 floats (a copy of them with its synchronization
// 19 us) and 56-57 us for 64 MiB (a copy 46 us); compare() around it 34-61 us and 69-89 us, as the host's
// speed varies between runs (bench/harness_throughput.py).
//
// Arithmetic: each element is widened to float32 exactly (bf16 and f16 are subsets of float32), out - ref is
// one float32 subtraction, as in the torch path (harness/scan.py, "The arithmetic is float32"). Maxima of
// non-negative floats are kept as their bit patterns: for x, y >= 0, x < y exactly when bits(x) < bits(y),
// so an unsigned atomicMax is an exact float max (no atomic float max needed, none on AMD before gfx90a).
#include "gpu_runtime.h"

#include <mutex>

namespace {

constexpr int kThreads = 256;
// Blocks per multiprocessor at most: 4 x 256 threads, each with 8 16-byte loads in flight, keep 128 KB in
// flight per SM (an H200 needs about 36 KB: 4.8 TB/s x 1 us / 132 SMs). Every block ends with four atomics
// on one comparison's slot, so blocks past that only add same-address atomics (4096 blocks: 16K of them).
// GS_SCAN_BLOCKS_PER_SM and GS_SCAN_UNROLL exist for bench/scan_variants.py, which builds this file with
// other values and times them against a device copy; the harness's build never sets them.
#ifndef GS_SCAN_BLOCKS_PER_SM
#define GS_SCAN_BLOCKS_PER_SM 4
#endif
#ifndef GS_SCAN_UNROLL
#define GS_SCAN_UNROLL 4
#endif
constexpr unsigned kBlocksPerSM = GS_SCAN_BLOCKS_PER_SM;
// 16-byte words each thread loads from each array before using any (scan_words_body).
constexpr int kUnroll = GS_SCAN_UNROLL;

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

// One test instead of three per element: |out - ref| is finite exactly when out, ref and their difference all
// are (inf - x and x - inf are inf, NaN - x is NaN, inf - inf is NaN, an overflow is inf), and the bits of a
// non-negative float are >= those of +inf exactly when it is inf or NaN (fabsf clears a NaN's sign). So the
// running maximum of |out - ref|'s bits is >= kInfBits exactly when some element was not finite; with
// ref == nullptr, |out - 0| is |out|.
constexpr unsigned kInfBits = 0x7F800000u;

template <int KIND>
__device__ inline float load(const void* base, long long i) {
  if (KIND == 0) return static_cast<const float*>(base)[i];
  unsigned short h = static_cast<const unsigned short*>(base)[i];
  if (KIND == 1) return half_to_float(h);
  return bits_to_float(static_cast<unsigned>(h) << 16);  // bfloat16
}

// Every comparison below accumulates into one slot: acc[0] = bits of max|out - ref| (or 1 if any byte differs),
// acc[1] = bits of max|ref|, acc[2] = 1 if anything was not finite, acc[3] = blocks finished. The block that
// finishes last (CUDA's threadFenceReduction sample) publishes the slot into mapped host memory and zeroes it
// for the next use: no memset before a launch, no copy after it, the host only waits for the stream.
struct Slot {
  unsigned* acc;            // device, 4 words, zero between uses
  volatile unsigned* host;  // mapped pinned host memory, 4 words: [0..2] as acc, [3] = 1 once published
};

__device__ inline void block_publish(Slot slot, unsigned a0, unsigned a1, unsigned a2) {
  // Called by every thread of the block after its own reduction: thread 0 adds the block's values.
  __syncthreads();
  if (threadIdx.x == 0) {
    if (a0) atomicMax(&slot.acc[0], a0);
    if (a1) atomicMax(&slot.acc[1], a1);
    if (a2) atomicOr(&slot.acc[2], 1u);
    __threadfence();  // this block's maxima are visible device-wide before it counts itself done
    if (atomicAdd(&slot.acc[3], 1u) == gridDim.x - 1) {
      slot.host[0] = atomicExch(&slot.acc[0], 0u);
      slot.host[1] = atomicExch(&slot.acc[1], 0u);
      slot.host[2] = atomicExch(&slot.acc[2], 0u);
      slot.acc[3] = 0;
      __threadfence_system();
      slot.host[3] = 1u;
    }
  }
}

// The largest value of `v` over the calling warp (every lane gets it): one shared-memory atomic per warp
// instead of one per thread on the same address. warpSize is 32 on NVIDIA and gfx11/gfx12, 64 on gfx9.
__device__ inline unsigned warp_max(unsigned v) {
  for (int offset = warpSize / 2; offset > 0; offset /= 2) v = max(v, GS_SHFL_XOR(v, offset));
  return v;
}

// Adds one thread's maxima and non-finite flag to the block's, a warp at a time.
__device__ inline void block_accumulate(unsigned* block_acc, unsigned max_diff, unsigned max_ref, unsigned bad) {
  max_diff = warp_max(max_diff);
  max_ref = warp_max(max_ref);
  bad = warp_max(bad);
  if (threadIdx.x % warpSize == 0) {
    atomicMax(&block_acc[0], max_diff);
    atomicMax(&block_acc[1], max_ref);
    if (bad) atomicOr(&block_acc[2], 1u);
  }
}

template <int KIND>
__device__ void scan_body(const void* out, const void* ref, long long n, Slot slot) {
  __shared__ unsigned block_acc[3];
  if (threadIdx.x < 3) block_acc[threadIdx.x] = 0;
  __syncthreads();
  unsigned max_diff = 0, max_ref = 0;
  const long long stride = static_cast<long long>(gridDim.x) * kThreads;
  long long i = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x;
  // Two independent elements per iteration keep two loads of each array in flight per thread.
  for (; i + stride < n; i += 2 * stride) {
    float o0 = load<KIND>(out, i), o1 = load<KIND>(out, i + stride);
    float r0 = ref ? load<KIND>(ref, i) : 0.0f, r1 = ref ? load<KIND>(ref, i + stride) : 0.0f;
    max_diff = max(max_diff, max(__float_as_uint(fabsf(o0 - r0)), __float_as_uint(fabsf(o1 - r1))));
    max_ref = max(max_ref, max(__float_as_uint(fabsf(r0)), __float_as_uint(fabsf(r1))));
  }
  if (i < n) {
    float o = load<KIND>(out, i), r = ref ? load<KIND>(ref, i) : 0.0f;
    max_diff = max(max_diff, __float_as_uint(fabsf(o - r)));
    max_ref = max(max_ref, __float_as_uint(fabsf(r)));
  }
  const unsigned bad = max_diff >= kInfBits;  // see kInfBits
  if (bad) max_diff = max_ref = 0;  // a NaN's bits would order above every finite value; the flag says it
  block_accumulate(block_acc, max_diff, max_ref, bad);
  __syncthreads();
  block_publish(slot, block_acc[0], block_acc[1], block_acc[2]);
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
// fewer, wider loads keep more bytes in flight per thread (64 MiB float32 on the H200: 0.83 of a copy's
// speed, reports/performance.md). Elements past the last whole word go through the scalar loop.
template <int KIND>
__device__ void scan_words_body(const void* out, const void* ref, long long n, Slot slot) {
  constexpr int kPerWord = KIND == 0 ? 4 : 8;
  __shared__ unsigned block_acc[3];
  if (threadIdx.x < 3) block_acc[threadIdx.x] = 0;
  __syncthreads();
  unsigned max_diff = 0, max_ref = 0;
  const long long stride = static_cast<long long>(gridDim.x) * kThreads;
  const long long first = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x;
  const long long words = n / kPerWord;
  const uint4* out4 = static_cast<const uint4*>(out);
  const uint4* ref4 = static_cast<const uint4*>(ref);
  // kUnroll words per thread are loaded before any is used, so that many 16-byte loads of each array are in
  // flight per thread instead of one.
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
        max_diff = max(max_diff, __float_as_uint(fabsf(o - r)));
        max_ref = max(max_ref, __float_as_uint(fabsf(r)));
      }
    }
  }
  for (long long i = words * kPerWord + first; i < n; i += stride) {
    float o = load<KIND>(out, i), r = ref ? load<KIND>(ref, i) : 0.0f;
    max_diff = max(max_diff, __float_as_uint(fabsf(o - r)));
    max_ref = max(max_ref, __float_as_uint(fabsf(r)));
  }
  const unsigned bad = max_diff >= kInfBits;  // see kInfBits
  if (bad) max_diff = max_ref = 0;
  block_accumulate(block_acc, max_diff, max_ref, bad);
  __syncthreads();
  block_publish(slot, block_acc[0], block_acc[1], block_acc[2]);
}

// Slot word 0 = 1 if any 16-byte word (or tail byte) of a and b differs.
__device__ void differ_body(const uint4* a, const uint4* b, long long words, const unsigned char* a_tail,
                            const unsigned char* b_tail, int tail_bytes, Slot slot) {
  unsigned differ = 0;
  const long long stride = static_cast<long long>(gridDim.x) * kThreads;
  for (long long i = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x; i < words; i += stride) {
    uint4 x = a[i], y = b[i];
    differ |= (x.x != y.x) | (x.y != y.y) | (x.z != y.z) | (x.w != y.w);
  }
  if (blockIdx.x == 0 && static_cast<int>(threadIdx.x) < tail_bytes) {
    differ |= a_tail[threadIdx.x] != b_tail[threadIdx.x];
  }
  const unsigned any = __syncthreads_or(static_cast<int>(differ)) ? 1u : 0u;
  block_publish(slot, any, 0u, 0u);
}

// One comparison of a batch. kind: 0/1/2 float32/float16/bfloat16 over 16-byte words (both arrays aligned),
// 3/4/5 the same element by element (unaligned), 6 bytes differ (n = 16-byte words, the rest in the tail).
struct Job {
  const void* a;
  const void* b;
  long long n;
  const unsigned char* a_tail;
  const unsigned char* b_tail;
  int tail_bytes;
  int kind;
  Slot slot;
};

// A batch travels as the kernel's argument: 32 jobs of 56 bytes stay inside the 4 KB a kernel's arguments
// may take on HIP (CUDA allows more). Larger batches are several launches.
constexpr int kBatchJobs = 32;
struct Batch {
  Job jobs[kBatchJobs];
};

// Every comparison of a batch in one launch: blockIdx.y picks the job, and the job's blocks stride over it
// with the grid's width, as a launch of its own would. One launch instead of one per comparison: a replay's
// batch is up to 9 comparisons of a few KB, each a few microseconds to launch and run alone.
__global__ void __launch_bounds__(kThreads) batch_kernel(Batch batch) {
  const Job& job = batch.jobs[blockIdx.y];
  switch (job.kind) {
    case 0: scan_words_body<0>(job.a, job.b, job.n, job.slot); break;
    case 1: scan_words_body<1>(job.a, job.b, job.n, job.slot); break;
    case 2: scan_words_body<2>(job.a, job.b, job.n, job.slot); break;
    case 3: scan_body<0>(job.a, job.b, job.n, job.slot); break;
    case 4: scan_body<1>(job.a, job.b, job.n, job.slot); break;
    case 5: scan_body<2>(job.a, job.b, job.n, job.slot); break;
    default:
      differ_body(static_cast<const uint4*>(job.a), static_cast<const uint4*>(job.b), job.n, job.a_tail,
                  job.b_tail, job.tail_bytes, job.slot);
  }
}

// Per device: kSlots slots, so one batch of comparisons (harness/scan.py _NativeBatch) is launched and read
// with one stream synchronization. A batch needs one slot per comparison; a check's largest batch is the
// comparisons of one replay (4 per output) and its check of the inputs (2 per input).
constexpr int kSlots = 1024;

struct Scratch {
  unsigned* acc = nullptr;         // device: kSlots x 4 words, zero between uses
  volatile unsigned* host = nullptr;  // mapped pinned host: kSlots x 4 words
  unsigned* host_device = nullptr; // the same host words as the device addresses them
  unsigned max_blocks = 0;         // kBlocksPerSM x the device's multiprocessors
};

std::mutex g_lock;
Scratch g_scratch[64];  // per device index; allocated on first use, kept for the process's life

hipError_t scratch_for_current_device(Scratch** out) {
  int device = 0;
  hipError_t err = hipGetDevice(&device);
  if (err != hipSuccess) return err;
  if (device < 0 || device >= 64) return hipErrorInvalidDevice;
  std::lock_guard<std::mutex> guard(g_lock);
  Scratch& s = g_scratch[device];
  if (s.acc == nullptr) {
    int sms = 0;
    err = hipDeviceGetAttribute(&sms, hipDeviceAttributeMultiprocessorCount, device);
    if (err != hipSuccess) return err;
    const size_t bytes = 4 * sizeof(unsigned) * kSlots;
    unsigned* acc = nullptr;
    err = hipMalloc(reinterpret_cast<void**>(&acc), bytes);
    if (err != hipSuccess) return err;
    err = hipMemset(acc, 0, bytes);  // once: afterwards each slot's last block leaves it zeroed
    void* host = nullptr;
    if (err == hipSuccess) err = hipHostMalloc(&host, bytes, hipHostMallocMapped);
    if (err == hipSuccess) err = hipHostGetDevicePointer(reinterpret_cast<void**>(&s.host_device), host, 0);
    if (err != hipSuccess) {
      (void)hipFree(acc);
      return err;
    }
    s.max_blocks = kBlocksPerSM * static_cast<unsigned>(sms > 0 ? sms : 1);
    s.host = static_cast<volatile unsigned*>(host);
    s.acc = acc;
  }
  *out = &s;
  return hipSuccess;
}

unsigned blocks_for(long long items, unsigned max_blocks) {
  long long blocks = (items + kThreads - 1) / kThreads;
  if (blocks < 1) blocks = 1;
  return blocks > max_blocks ? max_blocks : static_cast<unsigned>(blocks);
}

// The slot's device accumulators and host record; the record's "published" word is cleared for this launch.
Slot take_slot(Scratch* s, int slot) {
  s->host[4 * slot + 3] = 0;
  return Slot{s->acc + 4 * slot, s->host_device + 4 * slot};
}

// Launch `count` comparisons (at most kBatchJobs) in one kernel on `stream`, without waiting; comparison j
// publishes into slot first_slot + j. Each job is 4 words: a, b, n, kind. kind 0 float32, 1 float16,
// 2 bfloat16: max|a - b|, max|b| and the non-finite flag over n elements (b may be 0: max|a|); kind 3: whether
// any of n bytes of a and b differs (both 16-byte aligned). Returns the runtime's error code (0 on success).
hipError_t launch(Scratch* s, int count, const long long* jobs, hipStream_t stream, int first_slot) {
  if (count <= 0 || count > kBatchJobs || first_slot < 0 || first_slot + count > kSlots) {
    return hipErrorInvalidValue;
  }
  Batch batch = {};
  unsigned blocks = 1;
  for (int j = 0; j < count; ++j) {
    const void* a = reinterpret_cast<const void*>(static_cast<uintptr_t>(jobs[4 * j]));
    const void* b = reinterpret_cast<const void*>(static_cast<uintptr_t>(jobs[4 * j + 1]));
    const long long n = jobs[4 * j + 2];
    const long long kind = jobs[4 * j + 3];
    if (n <= 0 || kind < 0 || kind > 3 || a == nullptr) return hipErrorInvalidValue;
    Job& job = batch.jobs[j];
    job.slot = take_slot(s, first_slot + j);
    job.a = a;
    job.b = b;
    const bool aligned = ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b)) % 16) == 0;
    unsigned job_blocks = 1;
    if (kind == 3) {
      if (!aligned || b == nullptr) return hipErrorInvalidValue;
      const long long words = n / 16;
      job.kind = 6;
      job.n = words;
      job.tail_bytes = static_cast<int>(n % 16);
      job.a_tail = static_cast<const unsigned char*>(a) + words * 16;
      job.b_tail = static_cast<const unsigned char*>(b) + words * 16;
      job_blocks = blocks_for(words > 0 ? words : 1, s->max_blocks);
    } else if (aligned) {
      job.kind = static_cast<int>(kind);
      job.n = n;
      job_blocks = blocks_for(n / ((kind == 0 ? 4 : 8) * kUnroll) + 1, s->max_blocks);  // kUnroll words per thread
    } else {
      job.kind = 3 + static_cast<int>(kind);
      job.n = n;
      job_blocks = blocks_for((n + 1) / 2, s->max_blocks);
    }
    if (job_blocks > blocks) blocks = job_blocks;
  }
  batch_kernel<<<dim3(blocks, static_cast<unsigned>(count)), kThreads, 0, stream>>>(batch);
  return hipGetLastError();
}

}  // namespace

extern "C" {

// The most comparisons one graphsafe_scan_run takes.
int graphsafe_scan_slots(void) { return kSlots; }

// Run `count` comparisons (at most graphsafe_scan_slots()) on `stream` and wait for them: one kernel launch
// per kBatchJobs comparisons, one stream synchronization. `jobs`: 4 words per comparison (a, b, n, kind, as
// for `launch` above). `records`: 4 words per comparison: max|a - b| and max|b| as float bits (or word 0 = 1
// when bytes differ), the non-finite flag, and 1 once published. Returns the runtime's error code (0 on
// success); a comparison whose record was not published after the wait (a launch that failed or never
// ran) is an error, never a silent zero. The current device must be the arrays' device; callers serialize
// runs on one device (the slots are the process's).
int graphsafe_scan_run(int count, const long long* jobs, void* stream_handle, unsigned* records) {
  if (count < 0 || count > kSlots) return static_cast<int>(hipErrorInvalidValue);
  Scratch* s = nullptr;
  hipError_t err = scratch_for_current_device(&s);
  if (err != hipSuccess) return static_cast<int>(err);
  hipStream_t stream = static_cast<hipStream_t>(stream_handle);
  hipError_t launch_error = hipSuccess;
  for (int first = 0; first < count && launch_error == hipSuccess; first += kBatchJobs) {
    const int jobs_now = count - first < kBatchJobs ? count - first : kBatchJobs;
    launch_error = launch(s, jobs_now, jobs + 4 * first, stream, first);
  }
  // Always wait for what was launched: a slot still in flight must not be handed out again.
  err = hipStreamSynchronize(stream);
  if (launch_error != hipSuccess) return static_cast<int>(launch_error);
  if (err != hipSuccess) return static_cast<int>(err);
  for (int i = 0; i < 4 * count; ++i) records[i] = s->host[i];
  for (int i = 0; i < count; ++i) {
    if (records[4 * i + 3] != 1u) return static_cast<int>(hipErrorInvalidValue);
  }
  return 0;
}

}  // extern "C"
