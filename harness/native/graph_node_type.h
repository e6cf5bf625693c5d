// graph_node_type.h -- the kind of a captured graph's node, by name, on CUDA and HIP.
//
// Role: shared by graph_nodes.hip (node counts per kind) and launch_nodes.hip (the launch diff's node list),
// so both name a node's kind the same way. Include after gpu_runtime.h.
#pragma once

#include <string>

static inline const char* node_kind_name(hipGraphNodeType type) {
  if (type == hipGraphNodeTypeKernel) return "kernel";
  if (type == hipGraphNodeTypeMemcpy) return "memcpy";
  if (type == hipGraphNodeTypeMemset) return "memset";
  if (type == hipGraphNodeTypeHost) return "host";
  if (type == hipGraphNodeTypeGraph) return "graph";
  if (type == hipGraphNodeTypeEmpty) return "empty";
  if (type == hipGraphNodeTypeWaitEvent) return "event_wait";
  if (type == hipGraphNodeTypeEventRecord) return "event_record";
  if (type == GS_GRAPH_NODE_TYPE_BATCH_MEMOP) return "batch_mem_op";
  // Values shared by CUDA (driver_types.h) and HIP (hip_runtime_api.h): 8/9 external semaphores,
  // 10/11 memory alloc/free nodes. Spelled numerically because gpu_runtime.h maps only what it must.
  switch (static_cast<int>(type)) {
    case 8: return "ext_semaphore_signal";
    case 9: return "ext_semaphore_wait";
    case 10: return "mem_alloc";
    case 11: return "mem_free";
#if defined(GS_BACKEND_CUDA)
    case 13: return "conditional";  // cudaGraphNodeTypeConditional (CUDA 12.3+)
#else
    case 12: return "memcpy_from_symbol";
    case 13: return "memcpy_to_symbol";
#endif
    default: return nullptr;
  }
}

// NOTE on CUDA: the runtime's cudaGraphNodeGetType fails with cudaErrorUnknown on a batch-memop node (measured
// on an H200, CUDA 13 driver 580): cudaGraphNodeType has no enumerator for the driver's
// CU_GRAPH_NODE_TYPE_BATCH_MEM_OP (= 12; the runtime enum jumps from 0x0b to 0x0d, driver_types.h), so the
// runtime cannot translate it. The driver's cuGraphNodeGetType knows every kind; its numbering is the
// runtime's plus the value 12, which node_kind_name reads as GS_GRAPH_NODE_TYPE_BATCH_MEMOP. It is resolved through the driver entry point
// (no -lcuda: build machines without a driver have no libcuda.so to link). CUgraphNode and cudaGraphNode_t
// are the same handle (CUgraphNode_st*).
#if defined(GS_BACKEND_CUDA)
typedef CUresult (*gs_node_get_type_fn)(CUgraphNode, CUgraphNodeType*);

static inline hipError_t node_get_type(hipGraphNode_t node, hipGraphNodeType* type) {
  static gs_node_get_type_fn fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuGraphNodeGetType", &p, 12000, cudaEnableDefault, &status) !=
            cudaSuccess ||
        status != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return static_cast<gs_node_get_type_fn>(nullptr);
    }
    return reinterpret_cast<gs_node_get_type_fn>(p);
  }();
  if (fn == nullptr) return hipGraphNodeGetType(node, type);  // no driver entry: the runtime's answer
  CUgraphNodeType cu_type = CU_GRAPH_NODE_TYPE_EMPTY;
  CUresult r = fn(reinterpret_cast<CUgraphNode>(node), &cu_type);
  if (r != CUDA_SUCCESS) return gs_cu_result_to_hip(r);
  *type = static_cast<hipGraphNodeType>(static_cast<int>(cu_type));
  return hipSuccess;
}
#else
static inline hipError_t node_get_type(hipGraphNode_t node, hipGraphNodeType* type) { return hipGraphNodeGetType(node, type); }
#endif
