// graph_platform.hip -- native helpers for the platform conformance cases (cases/platform/). Built with its
// pybind11 layer (graph_platform.bind.cpp, over the entry points of graph_platform.h) into one module by
// kernels/common/native.py; wrapped as torch custom ops in ops.py. No torch headers: pointers, sizes
// and streams travel as integers. A captured graph's node kinds come from the harness
// (graphsafe.native.graph_node_kinds), which shows whether a stream memop became a BATCH_MEM_OP node or ran
// during capture (ROCm before rocm-systems#8911 executes them at capture and records nothing).
//
// What is here and why:
//   * Slots: executor-owned state one captured graph keeps for its life (pinned mapped host buffers, a device
//     flag, a host-function call counter), as FreeToken issue #350's fix keeps "signals and immutable
//     per-slot parameter storage executor-owned". Slots are never freed: a graph may replay them until the process ends.
//   * Copy, host-function and memop sequences, each with the failure shape of a known platform bug.
//   * Isolation controls: a kernel that faults, a kernel that spins on a flag nobody sets, and abort().
#include "hip_compat.h"
#include "graph_platform.h"

#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace gs_platform {

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

// ------------------------------------------------------------------------------------------ slots
// NOTE on allocating during capture: slots and cells are created on first use, which may be inside a capture
// (one slot per captured graph). In the default "global" capture mode hipMalloc/hipHostMalloc are prohibited
// as potentially unsafe; torch's own allocator switches the thread to relaxed mode around its cudaMalloc
// during capture (CUDACachingAllocator cudaMallocMaybeCapturing) and so does this guard. No memset or memcpy
// runs here: the flag lives in mapped host memory and is initialized by a CPU store.
struct RelaxedCaptureGuard {
#if defined(GS_BACKEND_CUDA)
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  RelaxedCaptureGuard() { (void)cudaThreadExchangeStreamCaptureMode(&mode); }
  ~RelaxedCaptureGuard() { (void)cudaThreadExchangeStreamCaptureMode(&mode); }
#else
  hipStreamCaptureMode mode = hipStreamCaptureModeRelaxed;
  RelaxedCaptureGuard() { (void)hipThreadExchangeStreamCaptureMode(&mode); }
  ~RelaxedCaptureGuard() { (void)hipThreadExchangeStreamCaptureMode(&mode); }
#endif
};

// ---------------------------------------------------------------------------------------------- slots
struct Slot {
  size_t n = 0;
  float* host_in = nullptr;   // pinned, mapped: written by D2H copies, read by host functions
  float* host_out = nullptr;  // pinned, mapped: written by host functions, read by H2D copies
  int* host_flag = nullptr;   // pinned, mapped: the memop handshake word (CPU view)
  int* dev_flag = nullptr;    // device view of host_flag (mapped host memory, as HIP's memop docs ask)
  std::atomic<long long> host_calls{0};
};

uintptr_t slot_create(size_t n) {
  if (n == 0) throw std::invalid_argument("slot_create: n must be > 0");
  RelaxedCaptureGuard relaxed;
  Slot* slot = new Slot();
  slot->n = n;
  void* p = nullptr;
  check(hipHostMalloc(&p, n * sizeof(float), hipHostMallocMapped | hipHostMallocPortable), "hipHostMalloc(in)");
  slot->host_in = static_cast<float*>(p);
  check(hipHostMalloc(&p, n * sizeof(float), hipHostMallocMapped | hipHostMallocPortable), "hipHostMalloc(out)");
  slot->host_out = static_cast<float*>(p);
  for (size_t i = 0; i < n; ++i) slot->host_in[i] = slot->host_out[i] = 0.0f;  // finite: stale, not NaN
  check(hipHostMalloc(&p, 64, hipHostMallocMapped | hipHostMallocPortable), "hipHostMalloc(flag)");
  slot->host_flag = static_cast<int*>(p);
  *reinterpret_cast<volatile int*>(slot->host_flag) = 0;
  check(hipHostGetDevicePointer(&p, slot->host_flag, 0), "hipHostGetDevicePointer(flag)");
  slot->dev_flag = static_cast<int*>(p);
  return reinterpret_cast<uintptr_t>(slot);
}

Slot* as_slot(uintptr_t handle, size_t n) {
  Slot* slot = reinterpret_cast<Slot*>(handle);
  if (slot == nullptr) throw std::invalid_argument("slot handle is null");
  if (n > slot->n) throw std::invalid_argument("slot holds fewer elements than requested");
  return slot;
}

long long slot_host_calls(uintptr_t handle) { return as_slot(handle, 0)->host_calls.load(); }

// Read after a synchronize: a plain load of the mapped word, no API call.
int slot_flag(uintptr_t handle) { return *reinterpret_cast<volatile int*>(as_slot(handle, 0)->host_flag); }

// ------------------------------------------------------------------------------------- copy sequences
// x (device) -> slot.host_in (pinned) -> y (device): one D2H and one H2D memcpy node per capture; the pinned
// buffer is rewritten on every replay, the shape of ROCm/hip#3902 (stale H2D-written buffer on replay).
void copy_roundtrip(uintptr_t handle, uintptr_t x, uintptr_t y, size_t n, uintptr_t stream) {
  Slot* slot = as_slot(handle, n);
  hipStream_t s = as_stream(stream);
  check(hipMemcpyAsync(slot->host_in, as_ptr<float>(x), n * sizeof(float), hipMemcpyDeviceToHost, s), "D2H");
  check(hipMemcpyAsync(as_ptr<float>(y), slot->host_in, n * sizeof(float), hipMemcpyHostToDevice, s), "H2D");
}

// Memset node: a plain hipMemsetAsync on the given stream (torch's zero_/fill_ launch kernels, not memsets).
void memset_async(uintptr_t ptr, int value, size_t bytes, uintptr_t stream) {
  check(hipMemsetAsync(as_ptr<void>(ptr), value, bytes, as_stream(stream)), "hipMemsetAsync");
}

// ------------------------------------------------------------------------------------- host functions
void host_affine_fn(void* user) {
  // Runs on the runtime's callback thread; reads its inputs now (at execution), never at enqueue time
  // (a value computed at enqueue is frozen into the graph at capture and replayed as it was). No GPU API calls allowed here.
  Slot* slot = static_cast<Slot*>(user);
  for (size_t i = 0; i < slot->n; ++i) slot->host_out[i] = slot->host_in[i] * 2.0f + 1.0f;
  slot->host_calls.fetch_add(1);
}

// D2H x -> host_in; host function host_out = 2*host_in + 1; H2D host_out -> y. Returns the error code of
// hipLaunchHostFunc (0 on success) so Python can classify a refusal under capture (ROCm/TheRock#7877).
int host_affine(uintptr_t handle, uintptr_t x, uintptr_t y, size_t n, uintptr_t stream, bool simulate_refusal) {
  Slot* slot = as_slot(handle, n);
  if (n != slot->n) throw std::invalid_argument("host_affine: slot size must equal n");
  hipStream_t s = as_stream(stream);
  check(hipMemcpyAsync(slot->host_in, as_ptr<float>(x), n * sizeof(float), hipMemcpyDeviceToHost, s), "D2H");
  hipError_t err = simulate_refusal ? hipErrorNotSupported : hipLaunchHostFunc(s, host_affine_fn, slot);
  if (err != hipSuccess) {
    (void)hipGetLastError();  // clear the non-sticky error so the process stays usable
    return static_cast<int>(err);
  }
  check(hipMemcpyAsync(as_ptr<float>(y), slot->host_out, n * sizeof(float), hipMemcpyHostToDevice, s), "H2D");
  return 0;
}

// Negative control: the CPU work runs at enqueue time, on the host. Eagerly it synchronizes first (legal
// outside capture), so eager is right; under capture nothing has run yet, so the graph carries whatever the
// slot held then: the "host-function fallback froze its values at enqueue" failure of FreeToken issue #350.
void host_affine_at_enqueue(uintptr_t handle, uintptr_t x, uintptr_t y, size_t n, uintptr_t stream,
                            bool capturing) {
  Slot* slot = as_slot(handle, n);
  hipStream_t s = as_stream(stream);
  check(hipMemcpyAsync(slot->host_in, as_ptr<float>(x), n * sizeof(float), hipMemcpyDeviceToHost, s), "D2H");
  if (!capturing) check(hipStreamSynchronize(s), "hipStreamSynchronize");
  for (size_t i = 0; i < n; ++i) slot->host_out[i] = slot->host_in[i] * 2.0f + 1.0f;
  check(hipMemcpyAsync(as_ptr<float>(y), slot->host_out, n * sizeof(float), hipMemcpyHostToDevice, s), "H2D");
}

// ---------------------------------------------------------------------------------------------- memops
// NOTE on linking: under nvcc the memops come from the driver through cudaGetDriverEntryPointByVersion
// (CUDA 12.5+) rather than hip_compat.h's cuStream* wrappers, so this module needs no -lcuda: the CI
// container has nvcc but no driver library, and the driver's libcuda.so.1 is what the entry point returns.
#if defined(GS_BACKEND_CUDA)
typedef CUresult (*gs_write_value32_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
typedef CUresult (*gs_wait_value32_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

template <typename Fn>
Fn driver_entry(const char* symbol) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status;
  // 12000: the CUDA 12 ABI of the symbol (the _v2 memops), which CUDA 13 drivers still export.
  check(cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &status), symbol);
  if (status != cudaDriverEntryPointSuccess || fn == nullptr) {
    throw std::runtime_error(std::string("driver entry point not found: ") + symbol);
  }
  return reinterpret_cast<Fn>(fn);
}

hipError_t gs_write_value32(hipStream_t s, int* ptr, uint32_t value) {
  static gs_write_value32_fn fn = driver_entry<gs_write_value32_fn>("cuStreamWriteValue32");
  return gs_cu_result_to_hip(fn(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(ptr), value, 0));
}
hipError_t gs_wait_value32_eq(hipStream_t s, int* ptr, uint32_t value) {
  static gs_wait_value32_fn fn = driver_entry<gs_wait_value32_fn>("cuStreamWaitValue32");
  return gs_cu_result_to_hip(
      fn(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(ptr), value, CU_STREAM_WAIT_VALUE_EQ));
}
#else
hipError_t gs_write_value32(hipStream_t s, int* ptr, uint32_t value) {
  return hipStreamWriteValue32(s, ptr, value, 0);
}
hipError_t gs_wait_value32_eq(hipStream_t s, int* ptr, uint32_t value) {
  return hipStreamWaitValue32(s, ptr, value, hipStreamWaitValueEq, 0xFFFFFFFFu);
}
#endif

__global__ void affine_plus_flag_kernel(const float* x, float* y, size_t n, const int* flag) {
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * 2.0f + static_cast<float>(*reinterpret_cast<const volatile int*>(flag));
}

// Handshake: write flag=1, wait flag==1, y = 2x + flag, write flag=0 (the token is consumed inside the
// graph, so a wait on a stale token cannot pass by accident: a captured memop's compare value is frozen at capture).
// memop_stream == stream: every memop is captured as a BATCH_MEM_OP node. memop_stream != stream (the negative
// control): the memops run on a non-capturing stream during capture and are not recorded, which is what ROCm
// releases before rocm-systems#8911 do; replay then reads flag 0 and returns 2x: finite and stale.
// Returns 0 or the first memop error code.
int memop_affine(uintptr_t handle, uintptr_t x, uintptr_t y, size_t n, uintptr_t stream, uintptr_t memop_stream) {
  Slot* slot = as_slot(handle, 0);
  hipStream_t s = as_stream(stream);
  hipStream_t m = as_stream(memop_stream);
  hipError_t err = gs_write_value32(m, slot->dev_flag, 1u);
  if (err == hipSuccess) err = gs_wait_value32_eq(m, slot->dev_flag, 1u);
  if (err != hipSuccess) {
    (void)hipGetLastError();
    return static_cast<int>(err);
  }
  if (n > 0) {
    unsigned blocks = static_cast<unsigned>((n + 255) / 256);
    hipLaunchKernelGGL(affine_plus_flag_kernel, dim3(blocks), dim3(256), 0, s, as_ptr<const float>(x),
                       as_ptr<float>(y), n, slot->dev_flag);
    check(hipGetLastError(), "affine_plus_flag_kernel launch");
  }
  err = gs_write_value32(m, slot->dev_flag, 0u);
  if (err != hipSuccess) {
    (void)hipGetLastError();
    return static_cast<int>(err);
  }
  return 0;
}

// ------------------------------------------------------------------------------- parameter cells (live graphs)
// A cell is a pointer-sized word in pinned mapped host memory that a kernel reads its source pointer from:
// the "immutable per-slot parameter storage" a graph executor keeps per captured graph. Cells come in pages.
struct CellPage {
  const float** host = nullptr;
  const float** dev = nullptr;
};
std::vector<CellPage> g_cell_pages;
constexpr size_t kCellsPerPage = 512;

// Returns (host address, device address) of a fresh cell; cells are never reused or freed.
std::pair<uintptr_t, uintptr_t> cell_create() {
  static size_t used = kCellsPerPage;
  if (used == kCellsPerPage) {
    RelaxedCaptureGuard relaxed;
    void* p = nullptr;
    check(hipHostMalloc(&p, kCellsPerPage * sizeof(void*), hipHostMallocMapped | hipHostMallocPortable),
          "hipHostMalloc(cells)");
    void* d = nullptr;
    check(hipHostGetDevicePointer(&d, p, 0), "hipHostGetDevicePointer(cells)");
    g_cell_pages.push_back({static_cast<const float**>(p), static_cast<const float**>(d)});
    used = 0;
  }
  CellPage& page = g_cell_pages.back();
  size_t i = used++;
  page.host[i] = nullptr;
  return {reinterpret_cast<uintptr_t>(&page.host[i]), reinterpret_cast<uintptr_t>(&page.dev[i])};
}

void cell_set(uintptr_t host_cell, uintptr_t value) {
  *reinterpret_cast<volatile uintptr_t*>(host_cell) = value;  // plain CPU store: no API call, legal in capture
}

__global__ void affine_indirect_kernel(const float* const* cell, float* y, size_t n) {
  const float* x = *reinterpret_cast<const float* const volatile*>(cell);
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * 2.0f + 1.0f;
}

void affine_indirect(uintptr_t dev_cell, uintptr_t y, size_t n, uintptr_t stream) {
  if (n == 0) return;
  unsigned blocks = static_cast<unsigned>((n + 255) / 256);
  hipLaunchKernelGGL(affine_indirect_kernel, dim3(blocks), dim3(256), 0, as_stream(stream),
                     as_ptr<const float* const>(dev_cell), as_ptr<float>(y), n);
  check(hipGetLastError(), "affine_indirect_kernel launch");
}

// ---------------------------------------------------------------------------------- isolation controls
__global__ void illegal_address_kernel(int* base) {
  // base is a small non-null address no allocation covers: the store faults (cudaErrorIllegalAddress /
  // hipErrorIllegalAddress), a sticky error that makes the context unusable for the rest of the process.
  *reinterpret_cast<volatile int*>(base) = 1;
}

void illegal_address(uintptr_t stream) {
  hipLaunchKernelGGL(illegal_address_kernel, dim3(1), dim3(1), 0, as_stream(stream),
                     reinterpret_cast<int*>(static_cast<uintptr_t>(0x10)));
  check(hipGetLastError(), "illegal_address_kernel launch");
}

__device__ inline unsigned long long gs_ticks() {
#if defined(GS_BACKEND_CUDA)
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));  // nanoseconds
  return t;
#else
  // Shader-clock cycles at hipDeviceAttributeClockRate kHz; DVFS can stretch the limit up to ~2x, which is
  // fine for a watchdog. (hipDeviceAttributeWallClockRate would be exact but Debian's HIP 5.2 lacks it.)
  return clock64();
#endif
}

__global__ void spin_kernel(const int* flag, unsigned long long limit_ticks, int* timed_out) {
  unsigned long long start = gs_ticks();
  while (*reinterpret_cast<const volatile int*>(flag) == 0) {
    if (gs_ticks() - start > limit_ticks) {  // watchdog: a wait nobody answers would hang the queue for good
      *timed_out = 1;
      return;
    }
  }
}

// Spins until *flag != 0 (nobody sets it) or limit_s seconds pass. The runner's per-case deadline must fire
// first; the watchdog only keeps a broken runner from wedging the GPU for good.
void spin_until_flag(uintptr_t flag, double limit_s, uintptr_t timed_out, uintptr_t stream) {
#if defined(GS_BACKEND_CUDA)
  double ticks_per_s = 1e9;
#else
  int device = 0, khz = 0;
  check(hipGetDevice(&device), "hipGetDevice");
  check(hipDeviceGetAttribute(&khz, hipDeviceAttributeClockRate, device), "ClockRate");
  double ticks_per_s = static_cast<double>(khz) * 1e3;
#endif
  unsigned long long limit = static_cast<unsigned long long>(limit_s * ticks_per_s);
  hipLaunchKernelGGL(spin_kernel, dim3(1), dim3(1), 0, as_stream(stream), as_ptr<const int>(flag), limit,
                     as_ptr<int>(timed_out));
  check(hipGetLastError(), "spin_kernel launch");
}

[[noreturn]] void hard_abort() { std::abort(); }

std::string error_name(int code) { return hipGetErrorName(static_cast<hipError_t>(code)); }
std::string error_string(int code) { return hipGetErrorString(static_cast<hipError_t>(code)); }

}  // namespace gs_platform
