// hip_compat.h -- the one header every kernel source (<family>/<stem>.hip) includes.
//
// Role: kernels are written against HIP's API. This header makes the same source build three ways:
//   * hipcc (AMD):       include <hip/hip_runtime.h> and nothing else of ours but the portable helpers.
//   * nvcc (NVIDIA):     map the small HIP subset the project uses onto CUDA. A project-owned shim
//                        because Debian's and AMD's HIP-on-NVIDIA headers (hip/nvidia_detail) do not
//                        compile against CUDA 13 (Debian hipcc 5.2's headers, tried with nvcc 13.0).
//   * plain g++ (host):  no runtime at all; only the portable helpers below (GS_HD, bf16 bit
//                        conversions), so CPU reference implementations round exactly like the kernels.
// No torch headers here or in any kernel source: kernels take pointers, sizes, strides and a stream.
#pragma once

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__HIPCC__) || defined(__HIP_PLATFORM_AMD__) || defined(__HIP_PLATFORM_HCC__)
// ---------------------------------------------------------------------------------------------- HIP
#define GS_BACKEND_HIP 1
#define GS_BACKEND_NAME "hip"
#include <hip/hip_runtime.h>
#include <hip/hip_bfloat16.h>  // hip_bfloat16 (ROCm 5.2 .. 7.x); kernels use gs_bf16_* below instead
// NOTE on batch-memop nodes: ROCm 7.x names hipGraphNodeTypeBatchMemOp (= 14); Debian's HIP 5.2 has no
// such enumerator, so the value is spelled numerically. Harness code compares node types against this.
#define GS_GRAPH_NODE_TYPE_BATCH_MEMOP (static_cast<hipGraphNodeType>(14))
#define GS_HD __host__ __device__

#elif defined(__CUDACC__)
// --------------------------------------------------------------------------------- HIP -> CUDA map
#define GS_BACKEND_CUDA 1
#define GS_BACKEND_NAME "cuda"
#include <cuda.h>  // driver API types for stream memops; the functions are resolved at run time (below)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

// Errors and streams.
typedef cudaError_t hipError_t;
typedef cudaStream_t hipStream_t;
typedef cudaEvent_t hipEvent_t;
#define hipSuccess cudaSuccess
#define hipErrorInvalidValue cudaErrorInvalidValue
#define hipErrorNotSupported cudaErrorNotSupported
#define hipErrorUnknown cudaErrorUnknown
#define hipGetErrorString cudaGetErrorString
#define hipGetErrorName cudaGetErrorName
#define hipGetLastError cudaGetLastError
#define hipPeekAtLastError cudaPeekAtLastError
#define hipDeviceSynchronize cudaDeviceSynchronize
#define hipStreamSynchronize cudaStreamSynchronize
#define hipStreamCreate cudaStreamCreate
#define hipStreamCreateWithFlags cudaStreamCreateWithFlags
#define hipStreamNonBlocking cudaStreamNonBlocking
#define hipStreamDestroy cudaStreamDestroy
#define hipGetDevice cudaGetDevice
#define hipSetDevice cudaSetDevice

// Launch: hipLaunchKernelGGL(kernel, grid, block, shared_bytes, stream, args...).
#define hipLaunchKernelGGL(kernel, grid, block, shmem, stream, ...) \
  kernel<<<(grid), (block), (shmem), (stream)>>>(__VA_ARGS__)

// Memory.
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipMemset cudaMemset
#define hipMemsetAsync cudaMemsetAsync
#define hipMemcpy cudaMemcpy
#define hipMemcpyAsync cudaMemcpyAsync
#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define hipMemcpyDefault cudaMemcpyDefault
#define hipHostMallocDefault cudaHostAllocDefault
#define hipHostMallocMapped cudaHostAllocMapped
#define hipHostMallocPortable cudaHostAllocPortable
#define hipHostFree cudaFreeHost
#define hipHostGetDevicePointer cudaHostGetDevicePointer
static inline hipError_t hipHostMalloc(void** ptr, size_t bytes, unsigned int flags) {
  return cudaHostAlloc(ptr, bytes, flags);
}

// Device attributes. NOTE: warpSize is not constexpr from ROCm 7 and fails to link in CUDA host code
// (64 on CDNA, 32 on RDNA and NVIDIA): host code queries hipDeviceAttributeWarpSize instead of assuming 32.
typedef enum cudaDeviceAttr hipDeviceAttribute_t;
#define hipDeviceGetAttribute cudaDeviceGetAttribute
#define hipDeviceAttributeWarpSize cudaDevAttrWarpSize
#define hipDeviceAttributeMultiprocessorCount cudaDevAttrMultiProcessorCount
#define hipDeviceAttributeMaxThreadsPerBlock cudaDevAttrMaxThreadsPerBlock

// Events.
#define hipEventCreate cudaEventCreate
#define hipEventCreateWithFlags cudaEventCreateWithFlags
#define hipEventDisableTiming cudaEventDisableTiming
#define hipEventDestroy cudaEventDestroy
#define hipEventRecord cudaEventRecord
#define hipEventSynchronize cudaEventSynchronize
#define hipEventElapsedTime cudaEventElapsedTime
#define hipStreamWaitEvent cudaStreamWaitEvent

// Host functions: become HOST graph nodes under capture (measured on CUDA 13: node kind "host").
typedef cudaHostFn_t hipHostFn_t;
#define hipLaunchHostFunc cudaLaunchHostFunc

// Graphs.
typedef cudaGraph_t hipGraph_t;
typedef cudaGraphExec_t hipGraphExec_t;
typedef cudaGraphNode_t hipGraphNode_t;
typedef cudaGraphNodeType hipGraphNodeType;
typedef cudaStreamCaptureMode hipStreamCaptureMode;
typedef cudaStreamCaptureStatus hipStreamCaptureStatus;
#define hipStreamCaptureModeGlobal cudaStreamCaptureModeGlobal
#define hipStreamCaptureModeThreadLocal cudaStreamCaptureModeThreadLocal
#define hipStreamCaptureModeRelaxed cudaStreamCaptureModeRelaxed
#define hipStreamCaptureStatusNone cudaStreamCaptureStatusNone
#define hipStreamCaptureStatusActive cudaStreamCaptureStatusActive
#define hipStreamCaptureStatusInvalidated cudaStreamCaptureStatusInvalidated
#define hipStreamBeginCapture cudaStreamBeginCapture
#define hipStreamEndCapture cudaStreamEndCapture
#define hipStreamIsCapturing cudaStreamIsCapturing
// HIP keeps CUDA 11's five-argument hipGraphInstantiate; CUDA 12+ has only (exec, graph, flags).
static inline hipError_t hipGraphInstantiate(hipGraphExec_t* exec, hipGraph_t graph, hipGraphNode_t* error_node,
                                             char* log, size_t log_bytes) {
  if (error_node) *error_node = nullptr;
  if (log && log_bytes) log[0] = '\0';
  return cudaGraphInstantiate(exec, graph, 0);
}
#define hipGraphInstantiateWithFlags cudaGraphInstantiateWithFlags
#define hipGraphLaunch cudaGraphLaunch
#define hipGraphDestroy cudaGraphDestroy
#define hipGraphExecDestroy cudaGraphExecDestroy
#define hipGraphGetNodes cudaGraphGetNodes
#define hipGraphNodeGetType cudaGraphNodeGetType
#define hipGraphNodeTypeKernel cudaGraphNodeTypeKernel
#define hipGraphNodeTypeMemcpy cudaGraphNodeTypeMemcpy
#define hipGraphNodeTypeMemset cudaGraphNodeTypeMemset
#define hipGraphNodeTypeHost cudaGraphNodeTypeHost
#define hipGraphNodeTypeGraph cudaGraphNodeTypeGraph
#define hipGraphNodeTypeEmpty cudaGraphNodeTypeEmpty
#define hipGraphNodeTypeWaitEvent cudaGraphNodeTypeWaitEvent
#define hipGraphNodeTypeEventRecord cudaGraphNodeTypeEventRecord
// NOTE on batch-memop nodes: the runtime enum cudaGraphNodeType has no name for them; the driver's
// CU_GRAPH_NODE_TYPE_BATCH_MEM_OP is 12 (cuda.h, CUDA 13.0) and the runtime reports that value.
#define GS_GRAPH_NODE_TYPE_BATCH_MEMOP (static_cast<cudaGraphNodeType>(CU_GRAPH_NODE_TYPE_BATCH_MEM_OP))
#define hipGraphNodeTypeBatchMemOp GS_GRAPH_NODE_TYPE_BATCH_MEMOP

// Stream memory operations. The flag values agree between the APIs: hipStreamWaitValueGte/Eq/And/Nor =
// CU_STREAM_WAIT_VALUE_GEQ/EQ/AND/NOR = 0/1/2/3 (hip_runtime_api.h, cuda.h). HIP's wait takes an extra
// mask; CUDA compares the whole word, so only the full mask is accepted.
// NOTE on linking: the driver functions are looked up with cudaGetDriverEntryPointByVersion (CUDA 12.5+)
// instead of linking -lcuda, because build/CI machines without a driver have no libcuda.so to link
// against (this container: `ld: cannot find -lcuda`). Version 12000 selects the _v2 (64-bit) symbols.
#define hipStreamWaitValueGte CU_STREAM_WAIT_VALUE_GEQ
#define hipStreamWaitValueEq CU_STREAM_WAIT_VALUE_EQ
#define hipStreamWaitValueAnd CU_STREAM_WAIT_VALUE_AND
#define hipStreamWaitValueNor CU_STREAM_WAIT_VALUE_NOR
static inline hipError_t gs_cu_result_to_hip(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return cudaSuccess;
    case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
    case CUDA_ERROR_NOT_SUPPORTED: return cudaErrorNotSupported;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: return cudaErrorStreamCaptureUnsupported;
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: return cudaErrorStreamCaptureInvalidated;
    default: return cudaErrorUnknown;
  }
}
template <typename Fn>
static inline Fn gs_driver_fn(const char* symbol) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess)
    return nullptr;
  return reinterpret_cast<Fn>(fn);
}
#define GS_DRIVER_CALL(symbol, type, ...)                                \
  do {                                                                   \
    static const type fn = gs_driver_fn<type>(symbol);                   \
    return fn ? gs_cu_result_to_hip(fn(__VA_ARGS__)) : cudaErrorNotSupported; \
  } while (0)
typedef CUresult (*gs_write32_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
typedef CUresult (*gs_write64_fn)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
static inline hipError_t hipStreamWriteValue32(hipStream_t s, void* ptr, uint32_t value, unsigned int flags) {
  GS_DRIVER_CALL("cuStreamWriteValue32", gs_write32_fn, (CUstream)s, (CUdeviceptr)ptr, value, flags);
}
static inline hipError_t hipStreamWriteValue64(hipStream_t s, void* ptr, uint64_t value, unsigned int flags) {
  GS_DRIVER_CALL("cuStreamWriteValue64", gs_write64_fn, (CUstream)s, (CUdeviceptr)ptr, value, flags);
}
static inline hipError_t hipStreamWaitValue32(hipStream_t s, void* ptr, uint32_t value, unsigned int flags,
                                              uint32_t mask = 0xFFFFFFFFu) {
  if (mask != 0xFFFFFFFFu) return cudaErrorNotSupported;
  GS_DRIVER_CALL("cuStreamWaitValue32", gs_write32_fn, (CUstream)s, (CUdeviceptr)ptr, value, flags);
}
static inline hipError_t hipStreamWaitValue64(hipStream_t s, void* ptr, uint64_t value, unsigned int flags,
                                              uint64_t mask = 0xFFFFFFFFFFFFFFFFull) {
  if (mask != 0xFFFFFFFFFFFFFFFFull) return cudaErrorNotSupported;
  GS_DRIVER_CALL("cuStreamWaitValue64", gs_write64_fn, (CUstream)s, (CUdeviceptr)ptr, value, flags);
}

// bf16: HIP's hip_bfloat16 is a struct with float conversions; __nv_bfloat16 is the CUDA equivalent.
typedef __nv_bfloat16 hip_bfloat16;

// Warp shuffles: CUDA 9+ removed the unsynchronized forms for sm_70+; HIP's __shfl_xor is the
// whole-wavefront form, i.e. a full mask. Width defaults to the warp (32 on NVIDIA).
template <typename T>
__device__ __forceinline__ T gs_shfl_xor(T var, int lane_mask, int width = 32) {
  return __shfl_xor_sync(0xFFFFFFFFu, var, lane_mask, width);
}
#define __shfl_xor gs_shfl_xor
#define GS_HD __host__ __device__

#else
// ------------------------------------------------------------------------------ host-only (g++)
#define GS_BACKEND_HOST 1
#define GS_BACKEND_NAME "host"
#define GS_HD
#endif

// ---------------------------------------------------------------------------- portable helpers
// bf16 <-> f32 by bit manipulation, identical on every compiler, so a CPU implementation and a kernel
// that both use these round identically (round-to-nearest-even, as torch, __float2bfloat16 and
// hip_bfloat16 do; NaN stays NaN with the quiet bit set instead of rounding into Inf).
GS_HD inline float gs_bf16_to_float(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
GS_HD inline uint16_t gs_float_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN
  u += 0x7FFFu + ((u >> 16) & 1u);  // round half to even on the 16 dropped bits
  return static_cast<uint16_t>(u >> 16);
}
// float -> bf16 -> float: the double round the donor's MoeCombineGate applies to the shared term.
GS_HD inline float gs_round_through_bf16(float f) { return gs_bf16_to_float(gs_float_to_bf16(f)); }

// Portable expf / sigmoid for ops whose CPU implementation and kernel must agree bitwise. The libraries
// differ (CUDA expf is within 2 ulp, glibc's and torch's Sleef exp within 1 ulp, each rounding its own
// way), so both sides use this one: Cody-Waite reduction x = n*ln2 + r with |r| <= ln2/2, a degree-7
// Taylor polynomial (truncation error 0.3466^8/8! = 5e-9, below half an f32 ulp), 2^n by exponent bits.
// Only +, *, floorf and one IEEE division (nvcc's default -prec-div=true; HIP-Clang's default
// -fhip-fp32-correctly-rounded-divide-sqrt), compiled without contraction (build.py): same bits on every
// target. Accuracy against correctly rounded expf is within a few ulp (tests/test_moe_combine_ops.py).
GS_HD inline float gs_pow2i(int n) {  // 2^n for -126 <= n <= 127
  uint32_t u = static_cast<uint32_t>(n + 127) << 23;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
GS_HD inline float gs_expf(float x) {
  if (x != x) return x;                        // NaN propagates
  if (x > 88.72283935546875f) {  // above log(FLT_MAX): +inf, as expf
    const uint32_t inf = 0x7F800000u;
    memcpy(&x, &inf, sizeof x);
    return x;
  }
  if (x < -103.97208404541016f) return 0.0f;  // below log(smallest subnormal / 2): 0
  const float n = floorf(x * 1.44269502162933349609375f + 0.5f);  // round(x / ln2)
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187045e-06f;  // ln2 = hi + lo, hi exact
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int e = static_cast<int>(n);  // -150 <= e <= 128: split in two factors that are both normal
  const int e1 = e / 2;
  return p * gs_pow2i(e1) * gs_pow2i(e - e1);
}
GS_HD inline float gs_sigmoid(float x) { return 1.0f / (1.0f + gs_expf(-x)); }
