// handshake.hip -- the GPU half of the CPU/hybrid MoE handshake (FreeToken issue #350 and its fix).
//
// One decode step, enqueued on the caller's stream (and so recorded into a graph under capture), in two halves:
//   notify: D2H copies (hidden, expert ids, router weights -> the slot's mapped pinned host buffers), then
//           memop mode:  write req := 1                          (32-bit words in mapped host memory)
//           hostfn mode: a host function that stores req := 1   (the CPU service thread computes)
//   wait:   memop mode:  wait done == 1; write done := 0
//           hostfn mode: a host function that spins until done == 1, then stores done := 0
//           then the H2D copy: the slot's output -> the caller's output
// `enqueue_notify` and `enqueue_wait` are the halves: the hybrid layer with overlap on enqueues its GPU part
// (torch kernels) between them on the same stream, so those kernels run while the CPU computes
// (kernels/cpu_moe/executor.py, note on the hybrid layer). `enqueue` is both in one call (overlap off), and its
// hostfn mode stays one host-function node that runs the CPU layer itself (userData = the Slot*): a host node
// blocks its stream until it returns, so only the split hostfn form leaves a gap for GPU work.
// The compare values are constants (1, 1, 0), so freezing them at capture is harmless: the CPU service
// clears req and sets done, the graph consumes done itself (a captured wait-value compares with the value it
// had at capture, so a changing token would be frozen wrong). A wait
// the CPU never answers is released by the Python watchdog storing done := 1 (kernels/cpu_moe/watchdog.py Watchdog,
// wait_guard): the memop wait-value and the hostfn spin both read that word, so one release covers either.
//
// Explicit nodes (FLAG_EXPLICIT_NODES, always under HIP): ROCm releases before rocm-systems#8911 execute
// stream memops during capture without recording them, so the memops are added as batch-memop nodes
// (hipGraphAddBatchMemOpNode / cuGraphAddBatchMemOpNode) on the capture graph and spliced into the stream's
// dependency set (hip/cudaStreamGetCaptureInfo + UpdateCaptureDependencies, "set" mode), per half: work the
// caller captures between the halves depends on the notify node, and the wait node depends on that work.
// FLAG_INJECT_UNRECORDED (fault injection) issues the memops on a private non-capturing stream instead: they
// run once during capture and never on replay, the ROCm failure shape, reproduced on CUDA.
//
// The Python module is this file and its pybind11 layer handshake.bind.cpp (over the entry points of
// handshake.h), built into one module by kernels/common/native.py.
#include "hip_compat.h"
#include "handshake.h"

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace gs_handshake {

// Which halves of the memop handshake to enqueue (enqueue: both; enqueue_notify / enqueue_wait: one).
constexpr int kPartNotify = 1, kPartWait = 2;

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

void memops_on(hipStream_t s, int parts, void* req, void* done) {
  if (parts & kPartNotify) check(hipStreamWriteValue32(s, req, 1u, 0), "hipStreamWriteValue32(req := 1)");
  if (parts & kPartWait) {
    check(hipStreamWaitValue32(s, done, 1u, hipStreamWaitValueEq, 0xFFFFFFFFu), "hipStreamWaitValue32(done == 1)");
    check(hipStreamWriteValue32(s, done, 0u, 0), "hipStreamWriteValue32(done := 0)");
  }
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

// `parts`: kPartNotify (write req := 1), kPartWait (wait done == 1, write done := 0), or both.
void enqueue_memops(hipStream_t stream, int flags, int parts, void* req, void* done) {
  const bool under_capture = capturing(stream);
  if ((flags & kFlagInjectUnrecorded) && under_capture) {
    // Fault: the memops run now, on a stream the capture does not see, and never on replay. Relaxed mode
    // lets this thread create and synchronize another stream while its (global-mode) capture is open.
    // The synchronize of a wait blocks until the CPU service answers (it computes from whatever the slot
    // holds: the capture's own copies are recorded, not run).
    RelaxedCaptureMode relaxed;
    SideStream side;
    memops_on(side.get(), parts, req, done);
    check(hipStreamSynchronize(side.get()), "hipStreamSynchronize(side)");
    return;
  }
#if defined(GS_BACKEND_HIP)
  const bool explicit_nodes = under_capture;  // ROCm may drop captured memops: always splice nodes
#else
  const bool explicit_nodes = under_capture && (flags & kFlagExplicitNodes);
#endif
  if (explicit_nodes) {
    if (parts & kPartNotify) splice_memop(stream, false, req, 1u);
    if (parts & kPartWait) {
      splice_memop(stream, true, done, 1u);
      splice_memop(stream, false, done, 0u);
    }
    return;
  }
  memops_on(stream, parts, req, done);
}

// Host functions of the split hostfn handshake; userData is the host address of the slot's req or done word
// (mapped pinned memory, stable for the executor's life, so the value frozen in a graph stays valid). They
// call no GPU API (host functions may not).
//   post_req: the D2H copies before it in stream order have completed when it runs; the release store
//             publishes them to the service thread, which loads req with acquire (cpu_moe.cpp).
//   await_done: blocks the stream until the service thread or the watchdog stores done := 1, then consumes
//             the token. Host functions run one at a time (one callback thread per device: a blocking wait
//             inside a host function serializes all callbacks), as the fused hostfn node's inline CPU layer already does. No
//             timeout, as a wait-value has none: a spin that gave up would let the H2D copy publish a stale
//             slot. Backoff as cpu_moe.cpp notify_wait's: ~2000 polls, then 20 us sleeps.
void post_req(void* req) { __atomic_store_n(static_cast<uint32_t*>(req), 1u, __ATOMIC_RELEASE); }

void await_done(void* done) {
  uint32_t* word = static_cast<uint32_t*>(done);
  int64_t spins = 0;
  while (__atomic_load_n(word, __ATOMIC_ACQUIRE) != 1u) {
    if (++spins > 2000) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  __atomic_store_n(word, 0u, __ATOMIC_RELEASE);
}

void check_mode(int mode) {
  if (mode != kModeMemop && mode != kModeHostFn) {
    throw std::invalid_argument("mode " + std::to_string(mode) + " not supported: allowed 0 (memop), 1 (hostfn)");
  }
}

void copies_in(hipStream_t s, uintptr_t d_hidden, uintptr_t d_ids, uintptr_t d_weights, uintptr_t h_hidden,
               uintptr_t h_ids, uintptr_t h_weights, size_t n_hidden, size_t n_ids, size_t n_weights) {
  if (!d_hidden || !d_ids || !d_weights || !h_hidden || !h_ids || !h_weights) {
    throw std::invalid_argument("enqueue: an input buffer pointer is null");
  }
  check(hipMemcpyAsync(as_ptr(h_hidden), as_ptr(d_hidden), n_hidden, hipMemcpyDeviceToHost, s), "D2H hidden");
  check(hipMemcpyAsync(as_ptr(h_ids), as_ptr(d_ids), n_ids, hipMemcpyDeviceToHost, s), "D2H expert ids");
  check(hipMemcpyAsync(as_ptr(h_weights), as_ptr(d_weights), n_weights, hipMemcpyDeviceToHost, s), "D2H weights");
}

void copy_out(hipStream_t s, uintptr_t d_out, uintptr_t h_out, size_t n_out) {
  check(hipMemcpyAsync(as_ptr(d_out), as_ptr(h_out), n_out, hipMemcpyHostToDevice, s), "H2D output");
}

// One handshake on `stream` (overlap off). Pointers: d_* device tensors, h_* the slot's mapped pinned host
// buffers, req/done device-visible addresses of the slot's signal words.
void enqueue(uintptr_t stream_handle, int mode, int flags, uintptr_t d_hidden, uintptr_t d_ids, uintptr_t d_weights,
             uintptr_t d_out, uintptr_t h_hidden, uintptr_t h_ids, uintptr_t h_weights, uintptr_t h_out,
             size_t n_hidden, size_t n_ids, size_t n_weights, size_t n_out, uintptr_t req, uintptr_t done,
             uintptr_t host_fn, uintptr_t slot) {
  check_mode(mode);
  if (!d_out || !h_out) throw std::invalid_argument("enqueue: an output buffer pointer is null");
  if (mode == kModeMemop && (!req || !done)) throw std::invalid_argument("enqueue: memop mode needs signal addresses");
  if (mode == kModeHostFn && (!host_fn || !slot)) {
    throw std::invalid_argument("enqueue: hostfn mode needs a host function and a slot");
  }
  hipStream_t s = as_stream(stream_handle);
  copies_in(s, d_hidden, d_ids, d_weights, h_hidden, h_ids, h_weights, n_hidden, n_ids, n_weights);
  if (mode == kModeMemop) {
    enqueue_memops(s, flags, kPartNotify | kPartWait, as_ptr(req), as_ptr(done));
  } else {
    check(hipLaunchHostFunc(s, reinterpret_cast<hipHostFn_t>(host_fn), as_ptr(slot)), "hipLaunchHostFunc");
  }
  copy_out(s, d_out, h_out, n_out);
}

// The first half (overlap on): the D2H copies and the notify. memop mode: `req` is the device-visible
// address of the slot's req word; hostfn mode: `req_host` is its host address.
void enqueue_notify(uintptr_t stream_handle, int mode, int flags, uintptr_t d_hidden, uintptr_t d_ids,
                    uintptr_t d_weights, uintptr_t h_hidden, uintptr_t h_ids, uintptr_t h_weights, size_t n_hidden,
                    size_t n_ids, size_t n_weights, uintptr_t req, uintptr_t req_host) {
  check_mode(mode);
  if (mode == kModeMemop && !req) throw std::invalid_argument("enqueue_notify: memop mode needs the req address");
  if (mode == kModeHostFn && !req_host) {
    throw std::invalid_argument("enqueue_notify: hostfn mode needs the req word's host address");
  }
  hipStream_t s = as_stream(stream_handle);
  copies_in(s, d_hidden, d_ids, d_weights, h_hidden, h_ids, h_weights, n_hidden, n_ids, n_weights);
  if (mode == kModeMemop) {
    enqueue_memops(s, flags, kPartNotify, as_ptr(req), nullptr);
  } else {
    check(hipLaunchHostFunc(s, reinterpret_cast<hipHostFn_t>(&post_req), as_ptr(req_host)),
          "hipLaunchHostFunc(post_req)");
  }
}

// The second half (overlap on): the wait, then the H2D copy of the slot's output. memop mode: `done` is the
// device-visible address of the slot's done word; hostfn mode: `done_host` is its host address.
void enqueue_wait(uintptr_t stream_handle, int mode, int flags, uintptr_t d_out, uintptr_t h_out, size_t n_out,
                  uintptr_t done, uintptr_t done_host) {
  check_mode(mode);
  if (!d_out || !h_out) throw std::invalid_argument("enqueue_wait: an output buffer pointer is null");
  if (mode == kModeMemop && !done) throw std::invalid_argument("enqueue_wait: memop mode needs the done address");
  if (mode == kModeHostFn && !done_host) {
    throw std::invalid_argument("enqueue_wait: hostfn mode needs the done word's host address");
  }
  hipStream_t s = as_stream(stream_handle);
  if (mode == kModeMemop) {
    enqueue_memops(s, flags, kPartWait, nullptr, as_ptr(done));
  } else {
    check(hipLaunchHostFunc(s, reinterpret_cast<hipHostFn_t>(&await_done), as_ptr(done_host)),
          "hipLaunchHostFunc(await_done)");
  }
  copy_out(s, d_out, h_out, n_out);
}

// Host function for mark_done: publishes "everything enqueued before me on this stream has finished" in a
// host word, so a watchdog thread can poll completion without calling the GPU runtime (an event query from
// another thread while a global-mode capture is open would invalidate that capture).
void mark_word(void* word) { __atomic_store_n(static_cast<uint32_t*>(word), 1u, __ATOMIC_RELEASE); }

std::pair<uintptr_t, uintptr_t> alloc_mapped(size_t bytes) {
  if (bytes == 0) throw std::invalid_argument("alloc_mapped: bytes must be > 0");
  void* host = nullptr;
  check(hipHostMalloc(&host, bytes, hipHostMallocMapped | hipHostMallocPortable), "hipHostMalloc(mapped)");
  memset(host, 0, bytes);
  void* dev = nullptr;
  check(hipHostGetDevicePointer(&dev, host, 0), "hipHostGetDevicePointer");
  return {reinterpret_cast<uintptr_t>(host), reinterpret_cast<uintptr_t>(dev)};
}

std::map<std::string, uintptr_t> host_fns() {
  return {{"post_req", reinterpret_cast<uintptr_t>(&post_req)}, {"await_done", reinterpret_cast<uintptr_t>(&await_done)}};
}

void free_mapped(uintptr_t host) { check(hipHostFree(as_ptr(host)), "hipHostFree"); }

void copy(uintptr_t dst, uintptr_t src, size_t bytes, uintptr_t stream) {
  check(hipMemcpyAsync(as_ptr(dst), as_ptr(src), bytes, hipMemcpyDefault, as_stream(stream)), "hipMemcpyAsync");
}

void sync(uintptr_t stream) { check(hipStreamSynchronize(as_stream(stream)), "hipStreamSynchronize"); }

void mark_done(uintptr_t stream, uintptr_t word) {
  if (!word) throw std::invalid_argument("mark_done: word pointer is null");
  check(hipLaunchHostFunc(as_stream(stream), reinterpret_cast<hipHostFn_t>(&mark_word), as_ptr(word)),
        "hipLaunchHostFunc(mark_done)");
}

bool is_capturing(uintptr_t stream) { return capturing(as_stream(stream)); }

}  // namespace gs_handshake
