// graph_nodes.hip -- counts the node kinds of a captured graph, for the gpu backend's node_kinds().
//
// Role: a pybind11 module (no torch headers, built by harness/native/build.py) with one function,
// node_kinds(graph handle) -> {kind: count}. A check reads it to see whether work became a graph node: a
// stream memory operation should be a batch-memop node, a host callback a host node. On ROCm before
// rocm-systems#8911 a stream memop issued during capture executes at once and is dropped from the graph,
// which only the node list shows.
#include "gpu_runtime.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

void check(hipError_t err, const char* what) {
  if (err != hipSuccess) {
    throw std::runtime_error(std::string(what) + " failed: " + hipGetErrorName(err) + ": " +
                             hipGetErrorString(err));
  }
}

const char* node_kind_name(hipGraphNodeType type) {
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

hipError_t node_get_type(hipGraphNode_t node, hipGraphNodeType* type) {
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
hipError_t node_get_type(hipGraphNode_t node, hipGraphNodeType* type) { return hipGraphNodeGetType(node, type); }
#endif

// Count query first (nodes == nullptr returns the count), then the nodes: cudaGraphGetNodes / hipGraphGetNodes.
std::map<std::string, int> node_kinds(uintptr_t graph_handle) {
  hipGraph_t graph = reinterpret_cast<hipGraph_t>(graph_handle);
  if (graph == nullptr) throw std::invalid_argument("node_kinds: graph handle is null");
  size_t count = 0;
  check(hipGraphGetNodes(graph, nullptr, &count), "hipGraphGetNodes(count)");
  std::vector<hipGraphNode_t> nodes(count);
  if (count > 0) check(hipGraphGetNodes(graph, nodes.data(), &count), "hipGraphGetNodes");
  std::map<std::string, int> kinds;
  for (size_t i = 0; i < count; ++i) {
    hipGraphNodeType type;
    check(node_get_type(nodes[i], &type), "graph node type (cuGraphNodeGetType / hipGraphNodeGetType)");
    const char* name = node_kind_name(type);
    kinds[name ? std::string(name) : "type_" + std::to_string(static_cast<int>(type))] += 1;
  }
  return kinds;
}

}  // namespace

PYBIND11_MODULE(GS_MODULE_NAME, m) {
  m.doc() = "graphsafe graph inspection: node kinds of a captured cudaGraph_t / hipGraph_t";
  m.def("node_kinds", &node_kinds, py::arg("graph"));
}
