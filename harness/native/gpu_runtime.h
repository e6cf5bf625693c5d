// gpu_runtime.h -- the HIP API subset the harness's own native sources use, on HIP and on CUDA.
//
// Role: harness/native/*.hip are written against HIP's API. hipcc builds them with <hip/hip_runtime.h>;
// nvcc builds them through the mapping below. A project-owned mapping because the HIP-on-NVIDIA headers
// shipped by Debian and AMD (hip/nvidia_detail) do not compile against CUDA 13. It maps only what the
// poisoning allocator, the comparison scan and graph inspection call; kernel libraries carry their own, larger header.
// These sources need a GPU runtime: there is no host-only (g++) build of them.
#pragma once

#include <stddef.h>
#include <stdint.h>

#if defined(__HIPCC__) || defined(__HIP_PLATFORM_AMD__) || defined(__HIP_PLATFORM_HCC__)
#define GS_BACKEND_HIP 1
#include <hip/hip_runtime.h>
// ROCm 7.x names hipGraphNodeTypeBatchMemOp (= 14); Debian's HIP 5.2 has no such enumerator, so the value
// is spelled numerically.
#define GS_GRAPH_NODE_TYPE_BATCH_MEMOP (static_cast<hipGraphNodeType>(14))

#elif defined(__CUDACC__)
#define GS_BACKEND_CUDA 1
#include <cuda.h>  // driver API types; driver functions are resolved at run time, never linked (-lcuda)
#include <cuda_runtime.h>

typedef cudaError_t hipError_t;
typedef cudaStream_t hipStream_t;
#define hipSuccess cudaSuccess
#define hipGetErrorString cudaGetErrorString
#define hipGetErrorName cudaGetErrorName
#define hipGetLastError cudaGetLastError

#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipMemset cudaMemset
#define hipMemsetAsync cudaMemsetAsync
#define hipMemcpyAsync cudaMemcpyAsync
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipStreamSynchronize cudaStreamSynchronize
#define hipDeviceSynchronize cudaDeviceSynchronize
#define hipGetDevice cudaGetDevice
#define hipDeviceGetAttribute cudaDeviceGetAttribute
#define hipDeviceAttributeMultiprocessorCount cudaDevAttrMultiProcessorCount
#define hipErrorInvalidValue cudaErrorInvalidValue
#define hipErrorInvalidDevice cudaErrorInvalidDevice
// Both take (void**, size_t, flags); flag 0 is the default kind of pinned memory in both runtimes.
#define hipHostMalloc cudaHostAlloc
#define hipHostMallocMapped cudaHostAllocMapped
#define hipHostGetDevicePointer cudaHostGetDevicePointer

typedef cudaGraph_t hipGraph_t;
typedef cudaGraphNode_t hipGraphNode_t;
typedef cudaGraphNodeType hipGraphNodeType;
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
// The runtime enum cudaGraphNodeType has no name for batch-memop nodes; the driver's
// CU_GRAPH_NODE_TYPE_BATCH_MEM_OP is 12 (cuda.h, CUDA 13.0).
#define GS_GRAPH_NODE_TYPE_BATCH_MEMOP (static_cast<cudaGraphNodeType>(CU_GRAPH_NODE_TYPE_BATCH_MEM_OP))

static inline hipError_t gs_cu_result_to_hip(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return cudaSuccess;
    case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
    case CUDA_ERROR_NOT_SUPPORTED: return cudaErrorNotSupported;
    default: return cudaErrorUnknown;
  }
}

#else
#error "harness/native sources need hipcc or nvcc (they call the GPU runtime)"
#endif

// Warp shuffle: HIP's __shfl_xor spans the whole wavefront by default; CUDA's needs the mask of lanes taking
// part (all of them: every caller here runs the shuffle in every lane).
#if defined(GS_BACKEND_HIP)
#define GS_SHFL_XOR(value, lane_mask) __shfl_xor((value), (lane_mask))
#else
#define GS_SHFL_XOR(value, lane_mask) __shfl_xor_sync(0xffffffffu, (value), (lane_mask))
#endif
