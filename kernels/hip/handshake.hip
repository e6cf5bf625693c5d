// handshake.hip -- the GPU half of the CPU/hybrid MoE handshake (seed 000, FreeToken #350 and its fix).
//
// One decode step, enqueued on the caller's stream (and so recorded into a graph under capture):
//   D2H copies: hidden, expert ids, router weights -> the slot's mapped pinned host buffers
//   memop mode: write req := 1; wait done == 1; write done := 0   (32-bit words in mapped host memory)
//   hostfn mode: one host-function node running the CPU layer on the slot (userData = the Slot*)
//   H2D copy: the slot's output -> the graph-owned output
// The compare values are constants (1, 1, 0), so freezing them at capture is harmless: the CPU service
// clears req and sets done, the graph consumes done itself (PITFALLS, "Stream memory operations").
//
// Explicit nodes (FLAG_EXPLICIT_NODES, always under HIP): ROCm releases before rocm-systems#8911 execute
// stream memops during capture without recording them, so the three memops are added as batch-memop nodes
// (hipGraphAddBatchMemOpNode / cuGraphAddBatchMemOpNode) on the capture graph and spliced into the stream's
// dependency set (hip/cudaStreamGetCaptureInfo + UpdateCaptureDependencies, "set" mode).
// FLAG_INJECT_UNRECORDED (fault injection) issues the memops on a private non-capturing stream instead: they
// run once during capture and never on replay, the ROCm failure shape, reproduced on CUDA.
#include "hip_compat.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

constexpr int kModeMemop = 0, kModeHostFn = 1;
constexpr int kFlagExplicitNodes = 1, kFlagInjectUnrecorded = 2;

void check(hipError_t err, const char* what) {
  if (err != hipSuccess) {
    (void)hipGetLastError();  // clear it: torch's next launch check must not blame its own kernel for ours
    throw std::runtime_error(std::string(what) + " failed: " + hipGetErrorName(err) + ": " + hipGetErrorString(err));
  }
}

#if defined(GS_BACKEND_CUDA)
#define gs_exchange_capture_mode cudaThreadExchangeStreamCaptureMode
#else
#define gs_exchange_capture_mode hipThreadExchangeStreamCaptureMode
#endif

hipStream_t as_stream(uintptr_t s) { return reinterpret_cast<hipStream_t>(s); }
void* as_ptr(uintptr_t p) { return reinterpret_cast<void*>(p); }

// ---------------------------------------------------------------------------------- explicit memop nodes
#if defined(GS_BACKEND_CUDA)
typedef CUresult (*gs_add_batch_memop_fn)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t,
                                          const CUDA_BATCH_MEM_OP_NODE_PARAMS*);
typedef CUresult (*gs_ctx_get_current_fn)(CUcontext*);

// Add one memop node after the capture's current dependencies and make it the only dependency.
void splice_memop(hipStream_t stream, bool is_wait, void* addr, uint32_t value) {
  cudaStreamCaptureStatus status;
  unsigned long long id = 0;
  cudaGraph_t graph = nullptr;
  const cudaGraphNode_t* deps = nullptr;
  const cudaGraphEdgeData* edges = nullptr;  // default edges only: the handshake follows plain copies
  size_t num_deps = 0;
  // CUDA 13 signature (cuda_runtime_api.h): the edge-data array parallels the dependencies. The legacy
  // cuGraphAddBatchMemOpNode takes no edge data, so any non-default edge (a programmatic port) is refused
  // by name instead of being silently turned into a full dependency.
  check(cudaStreamGetCaptureInfo(stream, &status, &id, &graph, &deps, &edges, &num_deps), "cudaStreamGetCaptureInfo");
  if (status != cudaStreamCaptureStatusActive) throw std::runtime_error("explicit memop node outside capture");
  for (size_t i = 0; edges && i < num_deps; ++i) {
    if (edges[i].from_port || edges[i].to_port || edges[i].type) {
      throw std::runtime_error("explicit memop node: the capture's dependency " + std::to_string(i) +
                               " has non-default edge data, which cuGraphAddBatchMemOpNode cannot express");
    }
  }
  static const gs_add_batch_memop_fn add = gs_driver_fn<gs_add_batch_memop_fn>("cuGraphAddBatchMemOpNode");
  static const gs_ctx_get_current_fn get_ctx = gs_driver_fn<gs_ctx_get_current_fn>("cuCtxGetCurrent");
  if (!add || !get_ctx) check(cudaErrorNotSupported, "cuGraphAddBatchMemOpNode entry point");
  CUstreamBatchMemOpParams op;
  memset(&op, 0, sizeof op);
  if (is_wait) {
    op.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    op.waitValue.address = reinterpret_cast<CUdeviceptr>(addr);
    op.waitValue.value = value;
    op.waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
  } else {
    op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    op.writeValue.address = reinterpret_cast<CUdeviceptr>(addr);
    op.writeValue.value = value;
    op.writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT;  // default: a memory fence precedes the write
  }
  CUDA_BATCH_MEM_OP_NODE_PARAMS params;
  memset(&params, 0, sizeof params);
  check(gs_cu_result_to_hip(get_ctx(&params.ctx)), "cuCtxGetCurrent");
  params.count = 1;
  params.paramArray = &op;
  params.flags = 0;
  CUgraphNode node = nullptr;
  check(gs_cu_result_to_hip(add(&node, reinterpret_cast<CUgraph>(graph), reinterpret_cast<const CUgraphNode*>(deps),
                                num_deps, &params)),
        "cuGraphAddBatchMemOpNode");
  cudaGraphNode_t as_runtime = reinterpret_cast<cudaGraphNode_t>(node);
  check(cudaStreamUpdateCaptureDependencies(stream, &as_runtime, nullptr, 1, cudaStreamSetCaptureDependencies),
        "cudaStreamUpdateCaptureDependencies");
}
#elif defined(GS_BACKEND_HIP) && defined(HIP_VERSION) && HIP_VERSION >= 60400000
// hipGraphAddBatchMemOpNode and hipBatchMemOpNodeParams exist from HIP 6.4 (hip-tests gate on it).
void splice_memop(hipStream_t stream, bool is_wait, void* addr, uint32_t value) {
  hipStreamCaptureStatus status;
  unsigned long long id = 0;
  hipGraph_t graph = nullptr;
  const hipGraphNode_t* deps = nullptr;
  size_t num_deps = 0;
  check(hipStreamGetCaptureInfo_v2(stream, &status, &id, &graph, &deps, &num_deps), "hipStreamGetCaptureInfo_v2");
  if (status != hipStreamCaptureStatusActive) throw std::runtime_error("explicit memop node outside capture");
  hipStreamBatchMemOpParams op;
  memset(&op, 0, sizeof op);
  if (is_wait) {
    op.waitValue.operation = hipStreamMemOpWaitValue32;
    op.waitValue.address = reinterpret_cast<hipDeviceptr_t>(addr);
    op.waitValue.value = value;
    op.waitValue.flags = hipStreamWaitValueEq;
  } else {
    op.writeValue.operation = hipStreamMemOpWriteValue32;
    op.writeValue.address = reinterpret_cast<hipDeviceptr_t>(addr);
    op.writeValue.value = value;
    op.writeValue.flags = 0;
  }
  hipBatchMemOpNodeParams params;
  memset(&params, 0, sizeof params);
  check(hipCtxGetCurrent(&params.ctx), "hipCtxGetCurrent");
  params.count = 1;
  params.paramArray = &op;
  params.flags = 0;
  hipGraphNode_t node = nullptr;
  check(hipGraphAddBatchMemOpNode(&node, graph, deps, num_deps, &params), "hipGraphAddBatchMemOpNode");
  check(hipStreamUpdateCaptureDependencies(stream, &node, 1, hipStreamSetCaptureDependencies),
        "hipStreamUpdateCaptureDependencies");
}
#else
// Older HIP (Debian's 5.2, the CI compile check) has no batch-memop node API: capture fails by name, so the
// probe reports "unsafe" and graphs stay off (fail closed), never a silently unrecorded handshake.
void splice_memop(hipStream_t, bool, void*, uint32_t) {
  throw std::runtime_error("explicit batch-memop nodes need HIP >= 6.4 (hipGraphAddBatchMemOpNode)");
}
#endif

bool capturing(hipStream_t stream) {
  hipStreamCaptureStatus status = hipStreamCaptureStatusNone;
  check(hipStreamIsCapturing(stream, &status), "hipStreamIsCapturing");
  return status == hipStreamCaptureStatusActive;
}

void memops_on(hipStream_t s, void* req, void* done) {
  check(hipStreamWriteValue32(s, req, 1u, 0), "hipStreamWriteValue32(req := 1)");
  check(hipStreamWaitValue32(s, done, 1u, hipStreamWaitValueEq, 0xFFFFFFFFu), "hipStreamWaitValue32(done == 1)");
  check(hipStreamWriteValue32(s, done, 0u, 0), "hipStreamWriteValue32(done := 0)");
}

// Relaxed capture mode for this thread for one scope, restored on every exit path (also when a check
// throws): a thread left in relaxed mode would let later unsafe calls slip into other captures unnoticed.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { check(gs_exchange_capture_mode(&mode_), "ExchangeStreamCaptureMode(relaxed)"); }
  ~RelaxedCaptureMode() { gs_exchange_capture_mode(&mode_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  hipStreamCaptureMode mode_ = hipStreamCaptureModeRelaxed;
};

// A non-blocking stream destroyed on every exit path.
class SideStream {
 public:
  SideStream() { check(hipStreamCreateWithFlags(&s_, hipStreamNonBlocking), "hipStreamCreateWithFlags"); }
  ~SideStream() { hipStreamDestroy(s_); }
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;
  hipStream_t get() const { return s_; }

 private:
  hipStream_t s_ = nullptr;
};

void enqueue_memops(hipStream_t stream, int flags, void* req, void* done) {
  const bool under_capture = capturing(stream);
  if ((flags & kFlagInjectUnrecorded) && under_capture) {
    // Fault: the memops run now, on a stream the capture does not see, and never on replay. Relaxed mode
    // lets this thread create and synchronize another stream while its (global-mode) capture is open.
    // The synchronize blocks until the CPU service answers (it computes from whatever the slot holds).
    RelaxedCaptureMode relaxed;
    SideStream side;
    memops_on(side.get(), req, done);
    check(hipStreamSynchronize(side.get()), "hipStreamSynchronize(side)");
    return;
  }
#if defined(GS_BACKEND_HIP)
  const bool explicit_nodes = under_capture;  // ROCm may drop captured memops: always splice nodes
#else
  const bool explicit_nodes = under_capture && (flags & kFlagExplicitNodes);
#endif
  if (explicit_nodes) {
    splice_memop(stream, false, req, 1u);
    splice_memop(stream, true, done, 1u);
    splice_memop(stream, false, done, 0u);
    return;
  }
  memops_on(stream, req, done);
}

// One handshake on `stream`. Pointers: d_* device tensors, h_* the slot's mapped pinned host buffers,
// req/done device-visible addresses of the slot's signal words.
void enqueue(uintptr_t stream_handle, int mode, int flags, uintptr_t d_hidden, uintptr_t d_ids, uintptr_t d_weights,
             uintptr_t d_out, uintptr_t h_hidden, uintptr_t h_ids, uintptr_t h_weights, uintptr_t h_out,
             size_t n_hidden, size_t n_ids, size_t n_weights, size_t n_out, uintptr_t req, uintptr_t done,
             uintptr_t host_fn, uintptr_t slot) {
  if (mode != kModeMemop && mode != kModeHostFn) {
    throw std::invalid_argument("mode " + std::to_string(mode) + " not supported: allowed 0 (memop), 1 (hostfn)");
  }
  if (!d_hidden || !d_ids || !d_weights || !d_out || !h_hidden || !h_ids || !h_weights || !h_out) {
    throw std::invalid_argument("enqueue: a buffer pointer is null");
  }
  hipStream_t s = as_stream(stream_handle);
  check(hipMemcpyAsync(as_ptr(h_hidden), as_ptr(d_hidden), n_hidden, hipMemcpyDeviceToHost, s), "D2H hidden");
  check(hipMemcpyAsync(as_ptr(h_ids), as_ptr(d_ids), n_ids, hipMemcpyDeviceToHost, s), "D2H expert ids");
  check(hipMemcpyAsync(as_ptr(h_weights), as_ptr(d_weights), n_weights, hipMemcpyDeviceToHost, s), "D2H weights");
  if (mode == kModeMemop) {
    if (!req || !done) throw std::invalid_argument("enqueue: memop mode needs signal addresses");
    enqueue_memops(s, flags, as_ptr(req), as_ptr(done));
  } else {
    if (!host_fn || !slot) throw std::invalid_argument("enqueue: hostfn mode needs a host function and a slot");
    check(hipLaunchHostFunc(s, reinterpret_cast<hipHostFn_t>(host_fn), as_ptr(slot)), "hipLaunchHostFunc");
  }
  check(hipMemcpyAsync(as_ptr(d_out), as_ptr(h_out), n_out, hipMemcpyHostToDevice, s), "H2D output");
}

// Host function for mark_done: publishes "everything enqueued before me on this stream has finished" in a
// host word, so a watchdog thread can poll completion without calling the GPU runtime (an event query from
// another thread while a global-mode capture is open would invalidate that capture).
void mark_word(void* word) { __atomic_store_n(static_cast<uint32_t*>(word), 1u, __ATOMIC_RELEASE); }

py::tuple alloc_mapped(size_t bytes) {
  if (bytes == 0) throw std::invalid_argument("alloc_mapped: bytes must be > 0");
  void* host = nullptr;
  check(hipHostMalloc(&host, bytes, hipHostMallocMapped | hipHostMallocPortable), "hipHostMalloc(mapped)");
  memset(host, 0, bytes);
  void* dev = nullptr;
  check(hipHostGetDevicePointer(&dev, host, 0), "hipHostGetDevicePointer");
  return py::make_tuple(reinterpret_cast<uintptr_t>(host), reinterpret_cast<uintptr_t>(dev));
}

const char* node_kind_name(hipGraphNodeType type) {
  if (type == hipGraphNodeTypeKernel) return "kernel";
  if (type == hipGraphNodeTypeMemcpy) return "memcpy";
  if (type == hipGraphNodeTypeMemset) return "memset";
  if (type == hipGraphNodeTypeHost) return "host";
  if (type == hipGraphNodeTypeEmpty) return "empty";
  if (type == hipGraphNodeTypeWaitEvent) return "event_wait";
  if (type == hipGraphNodeTypeEventRecord) return "event_record";
  if (type == GS_GRAPH_NODE_TYPE_BATCH_MEMOP) return "batch_mem_op";
  return nullptr;
}

// NOTE on CUDA: the runtime's cudaGraphNodeGetType fails (cudaErrorUnknown) on a batch-memop node, measured on
// an H200 with CUDA 13 (kernels/hip/graph_platform.hip): cudaGraphNodeType has no enumerator for the driver's
// CU_GRAPH_NODE_TYPE_BATCH_MEM_OP (12). The driver's cuGraphNodeGetType knows every kind and numbers the
// shared ones as the runtime does; resolved through the driver entry point like the memops (no -lcuda).
#if defined(GS_BACKEND_CUDA)
typedef CUresult (*gs_node_get_type_fn)(CUgraphNode, CUgraphNodeType*);

hipError_t node_get_type(hipGraphNode_t node, hipGraphNodeType* type) {
  static const gs_node_get_type_fn fn = gs_driver_fn<gs_node_get_type_fn>("cuGraphNodeGetType");
  if (fn == nullptr) return hipGraphNodeGetType(node, type);  // no driver entry point: the runtime's answer
  CUgraphNodeType cu_type = CU_GRAPH_NODE_TYPE_EMPTY;
  const CUresult r = fn(reinterpret_cast<CUgraphNode>(node), &cu_type);
  if (r != CUDA_SUCCESS) return gs_cu_result_to_hip(r);
  *type = static_cast<hipGraphNodeType>(static_cast<int>(cu_type));
  return hipSuccess;
}
#else
hipError_t node_get_type(hipGraphNode_t node, hipGraphNodeType* type) { return hipGraphNodeGetType(node, type); }
#endif

std::map<std::string, int> graph_node_kinds(uintptr_t graph_handle) {
  hipGraph_t graph = reinterpret_cast<hipGraph_t>(graph_handle);
  if (!graph) throw std::invalid_argument("graph_node_kinds: graph handle is null");
  size_t count = 0;
  check(hipGraphGetNodes(graph, nullptr, &count), "hipGraphGetNodes(count)");
  std::vector<hipGraphNode_t> nodes(count);
  if (count) check(hipGraphGetNodes(graph, nodes.data(), &count), "hipGraphGetNodes");
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
  m.doc() = "graphsafe CPU MoE handshake: GPU side (copies, memops or host function, node inspection)";
  m.attr("MODE_MEMOP") = kModeMemop;
  m.attr("MODE_HOSTFN") = kModeHostFn;
  m.attr("FLAG_EXPLICIT_NODES") = kFlagExplicitNodes;
  m.attr("FLAG_INJECT_UNRECORDED") = kFlagInjectUnrecorded;
  // Integers only, so the GIL is released: the unrecorded-memop fault synchronizes a side stream until the CPU
  // service answers, and a Python watchdog thread must be able to run meanwhile (cpu_moe.wait_guard).
  m.def("enqueue", &enqueue, py::call_guard<py::gil_scoped_release>());
  m.def("alloc_mapped", &alloc_mapped, py::arg("bytes"));
  m.def("free_mapped", [](uintptr_t host) { check(hipHostFree(as_ptr(host)), "hipHostFree"); });
  m.def("copy", [](uintptr_t dst, uintptr_t src, size_t bytes, uintptr_t stream) {
    check(hipMemcpyAsync(as_ptr(dst), as_ptr(src), bytes, hipMemcpyDefault, as_stream(stream)), "hipMemcpyAsync");
  });
  m.def("sync", [](uintptr_t stream) {
    py::gil_scoped_release nogil;  // the hostfn mode's callback may need the GIL-free executor meanwhile
    check(hipStreamSynchronize(as_stream(stream)), "hipStreamSynchronize");
  });
  m.def("graph_node_kinds", &graph_node_kinds, py::arg("graph"));
  m.def(
      "mark_done",
      [](uintptr_t stream, uintptr_t word) {
        if (!word) throw std::invalid_argument("mark_done: word pointer is null");
        check(hipLaunchHostFunc(as_stream(stream), reinterpret_cast<hipHostFn_t>(&mark_word), as_ptr(word)),
              "hipLaunchHostFunc(mark_done)");
      },
      py::arg("stream"), py::arg("word"),
      "Enqueue a host function that stores 1 into the host word `word` once the stream's prior work is done.");
  m.def("is_capturing", [](uintptr_t stream) { return capturing(as_stream(stream)); });
}
