// graph_nodes.hip -- counts the node kinds of a captured graph, for the gpu backend's node_kinds().
//
// Role: a pybind11 module (no torch headers, built by harness/native/build.py) with one function,
// node_kinds(graph handle) -> {kind: count}. A check reads it to see whether work became a graph node: a
// stream memory operation should be a batch-memop node, a host callback a host node. On ROCm before
// rocm-systems#8911 a stream memop issued during capture executes at once and is dropped from the graph,
// which only the node list shows.
#include "gpu_runtime.h"
#include "graph_node_type.h"

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
