// gs_torch.h -- what a family's dispatcher unit (<stem>.torch.cpp) shares: an eager call from torch's
// dispatcher to the launch without Python.
//
// Role: the op is defined (schema, fake implementation) in Python, kernels/common/custom_ops.py; the dispatcher
// unit registers the C++ kernel at the device key (GS_TORCH_DISPATCH_KEY: CPU or CUDA) when Python asks
// (`register_dispatch` of the family's module, once per process). Each call builds the argument signature
// (gs_signature_add: every tensor's sizes, strides, dtype, device and 16-byte alignment, and the non-tensor
// arguments the plan depends on) and looks up the plan. A signature not seen yet goes to the family's Python
// planner op `graphsafe::_<op>_plan` through the dispatcher: Python refuses bad arguments (ValueError naming
// the argument and the allowed values, the same checks the fake implementation makes) and returns the plan as
// a list of ints, which this cache keeps. In Python the key, the output's allocation and the dispatch made
// most of an eager call's host time; through these kernels a one-launch moe_gemm call takes 8.1-14.7 us on
// the H200 host (bench/moe_gemm.py's host_us, reports/performance.md).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty_ops.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/library.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <vector>

using GsSignature = std::vector<int64_t>;

inline void gs_signature_add(GsSignature& sig, const at::Tensor& t) {
  const int64_t dim = t.dim();
  sig.push_back(dim);
  for (int64_t i = 0; i < dim; ++i) sig.push_back(t.size(i));
  for (int64_t i = 0; i < dim; ++i) sig.push_back(t.stride(i));
  sig.push_back(static_cast<int64_t>(t.scalar_type()));
  sig.push_back(static_cast<int64_t>(t.device().type()) * 256 + t.device().index());
  // Where the plan picks a kernel by alignment (moe_gemm's vector loads), the signature must tell them apart.
  sig.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.data_ptr()) & 15));
}
inline void gs_signature_add(GsSignature& sig, c10::string_view text) {
  sig.push_back(static_cast<int64_t>(text.size()));
  for (char c : text) sig.push_back(c);
}
inline void gs_signature_add(GsSignature& sig, const std::optional<at::Tensor>& t) {
  if (t.has_value()) {
    gs_signature_add(sig, *t);
  } else {
    sig.push_back(-1);
  }
}

struct GsSignatureHash {
  size_t operator()(const GsSignature& sig) const noexcept {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
    for (int64_t v : sig) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

// Plans by signature, for every thread (a mutex: the dispatcher calls kernels without the GIL). Bounded like
// a Python cache would be: a server whose token count changes every step meets a few thousand signatures.
template <class Plan>
class GsPlanCache {
 public:
  bool find(const GsSignature& sig, Plan* plan) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = plans_.find(sig);
    if (it == plans_.end()) return false;
    *plan = it->second;
    return true;
  }
  void put(const GsSignature& sig, const Plan& plan) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (plans_.size() >= kLimit) plans_.clear();
    plans_[sig] = plan;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    plans_.clear();
  }

 private:
  static constexpr size_t kLimit = 4096;
  std::mutex mutex_;
  std::unordered_map<GsSignature, Plan, GsSignatureHash> plans_;
};

// torch.empty through the dispatcher, as at::empty makes it (so the harness's poisoning, torch's NaN fill of
// uninitialized memory under deterministic mode and a capture's private pool all apply), declared by
// ATen/ops/empty_ops.h: at::empty's header costs seconds more g++ per unit.
inline at::Tensor gs_empty(std::initializer_list<int64_t> sizes, at::ScalarType dtype, const c10::Device& device) {
  TORCH_CHECK(sizes.size() <= 2, "gs_empty: at most 2 dimensions, got ", sizes.size());
  c10::SymInt symbolic[2] = {0, 0};
  size_t n = 0;
  for (int64_t size : sizes) symbolic[n++] = c10::SymInt(size);
  return at::_ops::empty_memory_format::call(c10::SymIntArrayRef(symbolic, n), dtype, at::kStrided, device,
                                             std::nullopt, std::nullopt);
}

// Scratch bytes from the device's allocator (c10::GetAllocator: the one torch.empty takes them from, so a
// capture's private pool and the harness's pools route them alike) without a tensor around them: for a buffer
// the call's own kernels write before they read it, where nothing needs poisoning or a NaN fill. Freed to the
// allocator when the DataPtr goes, in the order of the stream current at allocation.
inline c10::DataPtr gs_scratch(int64_t bytes, const c10::Device& device) {
  c10::DeviceGuard guard(device);
  return c10::GetAllocator(device.type())->allocate(static_cast<size_t>(bytes));
}

// The stream torch's current-stream state names for the device (0 on the CPU), through the device guard
// interface libc10 holds (torch registers its CUDA / ROCm implementation at import): no link to libc10_cuda.
inline uintptr_t gs_current_stream(const c10::Device& device) {
  if (device.is_cpu()) return 0;
  c10::impl::VirtualGuardImpl guard(device.type());
  return reinterpret_cast<uintptr_t>(guard.getStream(device).native_handle());
}

// The stream a family's kernels launch on for a CUDA device index (-1: the CPU, 0): the family module's
// dispatch_stream, which the Python loader compares with torch's current stream before registering.
inline uintptr_t gs_current_stream_of(int device_index) {
  if (device_index < 0) return 0;
  return gs_current_stream(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_index)));
}

// A check of the C++ layer (gs_checks.h throws std::invalid_argument) reaches Python as ValueError, as it does
// through pybind11; a launch error stays RuntimeError.
template <class F>
auto gs_value_errors(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK_VALUE(false, e.what());
  }
}

// Asks a planner op (through the dispatcher, so Python's ValueError reaches the caller as it is) and returns
// its list of ints; `args` are the planner's arguments in its schema's order. Boxed, so that one helper serves
// every planner without a function type per op.
inline std::vector<int64_t> gs_ask_planner(const char* planner, torch::jit::Stack args, size_t expect) {
  const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(planner, "");
  op.callBoxed(args);
  std::vector<int64_t> plan = args.at(0).toIntVector();
  TORCH_CHECK(plan.size() == expect, planner, " returned ", plan.size(), " values; expected ", expect);
  return plan;
}

// The registration, held by the module for the process's life (Python's loader asks once per device kind).
// static, not inline: g++ makes a function-local static of an inline function one object per process
// (STB_GNU_UNIQUE), which the CPU and the device module would share, and the second module would add its
// kernels to the first one's dispatch key.
static std::unique_ptr<torch::Library>& gs_dispatch_library() {
  static std::unique_ptr<torch::Library> library;
  return library;
}
static torch::Library& gs_open_dispatch_library() {
  auto& library = gs_dispatch_library();
  if (!library)
    library = std::make_unique<torch::Library>(torch::Library::IMPL, "graphsafe",
                                               c10::DispatchKey::GS_TORCH_DISPATCH_KEY, __FILE__, __LINE__);
  return *library;
}
