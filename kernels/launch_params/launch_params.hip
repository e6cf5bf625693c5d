// launch_params.hip -- small kernels whose launch carries a value a host plan may freeze into a captured graph,
// for the launch diff's controls (cases/launch_params.py) and the frozen-sampler counterexample
// (cases/counterexamples/sglang_omni_419_frozen_sampler_seed.py). Built with its pybind11 layer
// (launch_params.bind.cpp) by kernels/common/native.py; wrapped in ops.py. No torch headers.
//
// Each kernel takes the value both ways: as a plain argument (the bug: a host value read at capture is frozen
// into the graph's kernel node) and through a device pointer (the fix: the graph reads the value at replay).
// When the pointer is given the plain argument is ignored, and the caller passes a constant for it, so two
// captures of the fixed launch are identical.
//   * kv_append: a KV-cache append at a position (the issue's `_kv_append`, a Python position at capture).
//   * scale_valid_rows: a grid sized from the plan's valid-row count (kRowsPerBlock rows per block, no
//     grid-stride loop): a graph captured for fewer rows leaves the rest of a larger batch unwritten.
//   * run_plan: a host plan's work list (device table, refreshed before every replay) and its item count (a
//     kernel argument, frozen): rtp-llm #1084's stale plan metadata.
//   * apply_fixup: work the host decides to launch or not (eager launches it for some inputs, the graph only if
//     it did at capture).
//   * sample_rows: inverse-CDF sampling from uniforms drawn with Philox4x32-10 keyed on (seed, offset), or
//     read from a tensor: FlashInfer's sampling kernels before flashinfer#2132 took (seed, offset) as plain
//     values computed on the host (flashinfer/sampling.py get_seed_and_offset).
#include "hip_compat.h"
#include "launch_params.h"

#include <stdexcept>
#include <string>

// The kernels sit at file scope under the names a launch-diff finding shows (`kv_append`, ...); the
// entry points of launch_params.h, which share those names, live in gs_launch and call them as ::name.
namespace {

void check(hipError_t err, const char* what) {
  if (err != hipSuccess) {
    throw std::runtime_error(std::string(what) + " failed: " + hipGetErrorName(err) + ": " +
                             hipGetErrorString(err));
  }
}

hipStream_t as_stream(uintptr_t s) { return reinterpret_cast<hipStream_t>(s); }
template <typename T>
T* as_ptr(uintptr_t p) {
  return reinterpret_cast<T*>(p);
}

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11; the constants of
// Random123 and of curand's Philox4_32_10): counter (offset_lo, offset_hi, row, 0), key (seed_lo, seed_hi).
// The uniform is the first output word's top 24 bits over 2^24: exactly representable, in [0, 1).
GS_HD inline void philox_round(uint32_t c[4], uint32_t k[2]) {
  const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c[0];
  const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c[2];
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  const uint32_t n0 = hi1 ^ c[1] ^ k[0], n2 = hi0 ^ c[3] ^ k[1];
  c[0] = n0, c[1] = lo1, c[2] = n2, c[3] = lo0;
}

GS_HD inline float philox_draw(uint64_t seed, uint64_t offset, uint32_t row) {
  uint32_t c[4] = {static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32), row, 0u};
  uint32_t k[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  for (int round = 0; round < 10; ++round) {
    philox_round(c, k);
    k[0] += 0x9E3779B9u, k[1] += 0xBB67AE85u;
  }
  return static_cast<float>(c[0] >> 8) * (1.0f / 16777216.0f);
}

__global__ void kv_append(const float* cache, const float* new_row, float* out, int rows, int dim, int pos,
                                 const int* pos_dev) {
  const int r = blockIdx.x, t = threadIdx.x;
  if (r >= rows || t >= dim) return;
  const int p = pos_dev != nullptr ? *pos_dev : pos;
  out[r * dim + t] = r == p ? new_row[t] : cache[r * dim + t];
}

__global__ void scale_valid_rows(const float* x, float* out, int cols, const int* n_valid_dev) {
  const int n = *n_valid_dev;
  for (int i = 0; i < gs_launch::kRowsPerBlock; ++i) {
    const int r = blockIdx.x * gs_launch::kRowsPerBlock + i;
    if (r >= n) return;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) out[r * cols + c] = 2.0f * x[r * cols + c];
  }
}

__global__ void run_plan(const float* x, float* out, int cols, const int* plan_rows, int work_items,
                                const int* work_items_dev) {
  const int count = work_items_dev != nullptr ? *work_items_dev : work_items;
  const int item = blockIdx.x;
  if (item >= count) return;
  const int r = plan_rows[item];
  for (int c = threadIdx.x; c < cols; c += blockDim.x) out[r * cols + c] = 3.0f * x[r * cols + c];
}

__global__ void apply_fixup(float* out, int cols, const int* needed_dev) {
  if (needed_dev != nullptr && *needed_dev == 0) return;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) out[blockIdx.x * cols + c] += 1.0f;
}

__global__ void sample_rows(const float* probs, int64_t* out, int rows, int vocab, const float* uniforms,
                                   uint64_t seed, uint64_t offset) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* p = probs + static_cast<size_t>(r) * vocab;
  float total = 0.0f;
  for (int i = 0; i < vocab; ++i) total += p[i];
  const float u = (uniforms != nullptr ? uniforms[r] : philox_draw(seed, offset, static_cast<uint32_t>(r))) * total;
  float cum = 0.0f;
  int64_t chosen = -1;
  for (int i = 0; i < vocab; ++i) {
    if (p[i] <= 0.0f) continue;
    chosen = i;  // the last token with mass, should rounding leave u past the sum
    cum += p[i];
    if (cum > u) break;
  }
  out[r] = chosen;
}

void check_launch(const char* what) { check(hipGetLastError(), what); }

}  // namespace

namespace gs_launch {

float philox_uniform(uint64_t seed, uint64_t offset, uint32_t row) { return philox_draw(seed, offset, row); }

void kv_append(uintptr_t cache, uintptr_t new_row, uintptr_t out, int rows, int dim, int pos, uintptr_t pos_dev,
               uintptr_t stream) {
  if (rows <= 0 || dim <= 0 || dim > 1024) throw std::invalid_argument("kv_append: rows > 0 and 0 < dim <= 1024");
  hipLaunchKernelGGL(::kv_append, dim3(rows), dim3(dim), 0, as_stream(stream), as_ptr<const float>(cache),
                     as_ptr<const float>(new_row), as_ptr<float>(out), rows, dim, pos, as_ptr<const int>(pos_dev));
  check_launch("kv_append");
}

void scale_valid_rows(uintptr_t x, uintptr_t out, int cols, uintptr_t n_valid_dev, int grid, uintptr_t stream) {
  if (grid <= 0 || cols <= 0) throw std::invalid_argument("scale_valid_rows: grid and cols must be > 0");
  hipLaunchKernelGGL(::scale_valid_rows, dim3(grid), dim3(128), 0, as_stream(stream), as_ptr<const float>(x),
                     as_ptr<float>(out), cols, as_ptr<const int>(n_valid_dev));
  check_launch("scale_valid_rows");
}

void run_plan(uintptr_t x, uintptr_t out, int cols, uintptr_t plan_rows, int work_items, uintptr_t work_items_dev,
              int grid, uintptr_t stream) {
  if (grid <= 0 || cols <= 0) throw std::invalid_argument("run_plan: grid and cols must be > 0");
  hipLaunchKernelGGL(::run_plan, dim3(grid), dim3(128), 0, as_stream(stream), as_ptr<const float>(x),
                     as_ptr<float>(out), cols, as_ptr<const int>(plan_rows), work_items,
                     as_ptr<const int>(work_items_dev));
  check_launch("run_plan");
}

void apply_fixup(uintptr_t out, int rows, int cols, uintptr_t needed_dev, uintptr_t stream) {
  if (rows <= 0 || cols <= 0) throw std::invalid_argument("apply_fixup: rows and cols must be > 0");
  hipLaunchKernelGGL(::apply_fixup, dim3(rows), dim3(128), 0, as_stream(stream), as_ptr<float>(out), cols,
                     as_ptr<const int>(needed_dev));
  check_launch("apply_fixup");
}

void sample_rows(uintptr_t probs, uintptr_t out, int rows, int vocab, uintptr_t uniforms, uint64_t seed,
                 uint64_t offset, uintptr_t stream) {
  if (rows <= 0 || vocab <= 0) throw std::invalid_argument("sample_rows: rows and vocab must be > 0");
  const int threads = rows < 128 ? rows : 128;
  hipLaunchKernelGGL(::sample_rows, dim3((rows + threads - 1) / threads), dim3(threads), 0, as_stream(stream),
                     as_ptr<const float>(probs), as_ptr<int64_t>(out), rows, vocab, as_ptr<const float>(uniforms),
                     seed, offset);
  check_launch("sample_rows");
}

}  // namespace gs_launch
