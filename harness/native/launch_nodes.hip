// launch_nodes.hip -- what each node of a captured graph launches, for the launch diff (harness/launch_diff.py).
//
// Role: a pybind11 module (no torch headers, built by harness/native/build.py) with one function,
// launch_nodes(graph handle) -> [node, ...] in the order the graph API lists the nodes. A node is a dict:
//   kind            "kernel", "memcpy", "memset", ... (graph_node_type.h)
// and for a kernel node:
//   name            the kernel's (mangled) name, "" when the runtime cannot say
//   function        the kernel's handle as an integer (CUfunction / hipFunction_t), 0 when unknown
//   grid, block     (x, y, z)
//   shared_bytes    dynamic shared memory per block
//   params          [(offset, size), ...] of each parameter in the argument buffer, or None without a layout
//   data            the argument buffer (bytes): each parameter's bytes at its offset
//   pointers        [(byte offset in data, value, allocation base, allocation size), ...]: every 8-byte
//                   aligned word inside a parameter whose value lies in a device allocation
//   error           "" or what could not be read, as "<call> failed: <error>"; the rest of the node may be
//                   partial then, and the Python side says what it could not compare.
// Nothing here throws for a node it cannot read: the launch diff is an explanation, and a missing piece of
// it is reported as such, never as a failure of the check.
//
// Sources of the API facts used below:
//   * CUDA: cuGraphKernelNodeGetParams returns CUDA_KERNEL_NODE_PARAMS_v2 (cuda.h, CUDA 13.0): `func`, or
//     `kern` (a CUkernel, "will only be referenced if func is NULL"); kernelParams or extra, owned by the node.
//     cuFuncGetParamInfo (CUDA 12.4) gives each parameter's offset and size in the device-side layout;
//     cuFuncGetName (CUDA 12.3) the kernel's name; cuMemGetAddressRange the allocation holding a pointer.
//     All are driver calls, reached through cudaGetDriverEntryPointByVersion as graph_node_type.h reaches
//     cuGraphNodeGetType (no -lcuda: build machines without a driver have no libcuda.so to link).
//   * HIP: hipGraphKernelNodeGetParams returns the host stub in `func` (hip_runtime_api.h);
//     hipGetFuncBySymbol maps it to a hipFunction_t and hipKernelGetParamInfo gives the layout (ROCm clr,
//     hipamd/src/hip_library.cpp: it casts the hipKernel_t to a hipFunction_t). Debian's HIP 5.2 headers
//     declare neither, so both are looked up at run time (dlsym); without them the node has no layout.
#include "gpu_runtime.h"
#include "graph_node_type.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#if defined(GS_BACKEND_HIP)
#include <dlfcn.h>
#endif

namespace py = pybind11;

namespace {

// Upper bounds that keep a corrupt node from making this loop forever or copy gigabytes: CUDA allows 32764
// bytes of kernel parameters (CUDA 12.1+), so no kernel has more parameters than that.
constexpr size_t kMaxParams = 32764;
constexpr size_t kMaxParamBytes = 32764;

std::string error_text(const char* call, const std::string& why) { return std::string(call) + " failed: " + why; }

std::string hip_error_text(const char* call, hipError_t err) {
  return error_text(call, std::string(hipGetErrorName(err)) + ": " + hipGetErrorString(err));
}

// One kernel node as read from the runtime; turned into a Python dict by `to_dict`.
struct Kernel {
  std::string name;
  uintptr_t function = 0;
  unsigned grid[3] = {0, 0, 0};
  unsigned block[3] = {0, 0, 0};
  unsigned shared_bytes = 0;
  bool has_layout = false;
  std::vector<std::pair<size_t, size_t>> params;  // (offset, size)
  std::string data;
  std::vector<std::tuple<size_t, uint64_t, uint64_t, uint64_t>> pointers;
  std::string error;

  void note(const std::string& why) {
    if (error.empty()) error = why;
  }
};

// The argument buffer from a launch's kernelParams (one pointer per parameter, each read with its size) or
// from its `extra` array (one packed buffer, already laid out): both need the layout to be read safely.
void copy_arguments(Kernel& k, void** kernel_params, void** extra, void* buffer_pointer_key, void* buffer_size_key,
                    void* end_key) {
  size_t total = 0;
  for (const auto& p : k.params) total = std::max(total, p.first + p.second);
  if (total > kMaxParamBytes) {
    k.note("argument buffer of " + std::to_string(total) + " bytes is larger than any kernel's");
    return;
  }
  k.data.assign(total, '\0');
  if (kernel_params != nullptr) {
    for (size_t i = 0; i < k.params.size(); ++i) {
      if (kernel_params[i] == nullptr) {
        k.note("argument " + std::to_string(i) + " has no value in the node's kernelParams");
        continue;
      }
      std::memcpy(&k.data[k.params[i].first], kernel_params[i], k.params[i].second);
    }
    return;
  }
  if (extra != nullptr) {
    void* buffer = nullptr;
    size_t size = 0;
    for (size_t i = 0; i < 16 && extra[i] != end_key; i += 2) {
      if (extra[i] == buffer_pointer_key) buffer = extra[i + 1];
      if (extra[i] == buffer_size_key && extra[i + 1] != nullptr) size = *static_cast<size_t*>(extra[i + 1]);
    }
    if (buffer == nullptr) {
      k.note("the node's extra array holds no argument buffer");
      return;
    }
    std::memcpy(&k.data[0], buffer, std::min(size == 0 ? total : size, total));
    return;
  }
  if (total > 0) k.note("the node has neither kernelParams nor extra");
}

// Each 8-byte aligned word of a parameter of at least 8 bytes whose value lies in a device allocation.
template <typename RangeFn>
void find_pointers(Kernel& k, RangeFn range_of) {
  for (const auto& p : k.params) {
    if (p.second < 8) continue;
    for (size_t at = (p.first + 7) / 8 * 8; at + 8 <= p.first + p.second && at + 8 <= k.data.size(); at += 8) {
      uint64_t value = 0;
      std::memcpy(&value, &k.data[at], 8);
      if (value == 0) continue;
      uint64_t base = 0, size = 0;
      if (range_of(value, &base, &size)) k.pointers.emplace_back(at, value, base, size);
    }
  }
}

#if defined(GS_BACKEND_CUDA)
// ------------------------------------------------------------------------------------------------- CUDA
template <typename Fn>
Fn driver_entry(const char* symbol, int version) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(symbol, &p, version, cudaEnableDefault, &status) != cudaSuccess ||
      status != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<Fn>(p);
}

typedef CUresult (*kernel_node_params_fn)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS*);
typedef CUresult (*func_name_fn)(const char**, CUfunction);
typedef CUresult (*func_param_info_fn)(CUfunction, size_t, size_t*, size_t*);
typedef CUresult (*kernel_function_fn)(CUfunction*, CUkernel);
typedef CUresult (*address_range_fn)(CUdeviceptr*, size_t*, CUdeviceptr);
typedef CUresult (*error_name_fn)(CUresult, const char**);

struct Driver {
  kernel_node_params_fn node_params = driver_entry<kernel_node_params_fn>("cuGraphKernelNodeGetParams", 12000);
  func_name_fn func_name = driver_entry<func_name_fn>("cuFuncGetName", 12030);
  func_param_info_fn param_info = driver_entry<func_param_info_fn>("cuFuncGetParamInfo", 12040);
  kernel_function_fn kernel_function = driver_entry<kernel_function_fn>("cuKernelGetFunction", 12000);
  address_range_fn address_range = driver_entry<address_range_fn>("cuMemGetAddressRange", 12000);
  error_name_fn error_name = driver_entry<error_name_fn>("cuGetErrorName", 12000);

  std::string text(const char* call, CUresult r) const {
    const char* name = nullptr;
    if (error_name == nullptr || error_name(r, &name) != CUDA_SUCCESS || name == nullptr) {
      return error_text(call, "CUresult " + std::to_string(static_cast<int>(r)));
    }
    return error_text(call, name);
  }
};

const Driver& driver() {
  static const Driver d;
  return d;
}

Kernel read_kernel(hipGraphNode_t node) {
  const Driver& d = driver();
  Kernel k;
  if (d.node_params == nullptr) {
    k.note("cuGraphKernelNodeGetParams is not available from this driver");
    return k;
  }
  CUDA_KERNEL_NODE_PARAMS p;
  std::memset(&p, 0, sizeof(p));
  CUresult r = d.node_params(reinterpret_cast<CUgraphNode>(node), &p);
  if (r != CUDA_SUCCESS) {
    k.note(d.text("cuGraphKernelNodeGetParams", r));
    return k;
  }
  k.grid[0] = p.gridDimX, k.grid[1] = p.gridDimY, k.grid[2] = p.gridDimZ;
  k.block[0] = p.blockDimX, k.block[1] = p.blockDimY, k.block[2] = p.blockDimZ;
  k.shared_bytes = p.sharedMemBytes;
  CUfunction func = p.func;
  if (func == nullptr && p.kern != nullptr) {
    if (d.kernel_function == nullptr) {
      k.note("cuKernelGetFunction is not available from this driver");
    } else if ((r = d.kernel_function(&func, p.kern)) != CUDA_SUCCESS) {
      k.note(d.text("cuKernelGetFunction", r));
      func = nullptr;
    }
  }
  k.function = reinterpret_cast<uintptr_t>(func);
  if (func == nullptr) {
    k.note("the node names no kernel function");
    return k;
  }
  const char* name = nullptr;
  if (d.func_name == nullptr) {
    k.note("cuFuncGetName is not available from this driver (CUDA 12.3+)");
  } else if ((r = d.func_name(&name, func)) != CUDA_SUCCESS) {
    k.note(d.text("cuFuncGetName", r));
  } else if (name != nullptr) {
    k.name = name;
  }
  if (d.param_info == nullptr) {
    k.note("cuFuncGetParamInfo is not available from this driver (CUDA 12.4+)");
    return k;
  }
  for (size_t i = 0; i < kMaxParams; ++i) {
    size_t offset = 0, size = 0;
    r = d.param_info(func, i, &offset, &size);
    if (r == CUDA_ERROR_INVALID_VALUE) break;  // past the last parameter
    if (r != CUDA_SUCCESS) {
      k.note(d.text("cuFuncGetParamInfo", r));
      return k;
    }
    k.params.emplace_back(offset, size);
  }
  k.has_layout = true;
  copy_arguments(k, p.kernelParams, p.extra, CU_LAUNCH_PARAM_BUFFER_POINTER, CU_LAUNCH_PARAM_BUFFER_SIZE,
                 CU_LAUNCH_PARAM_END);
  if (d.address_range == nullptr) {
    k.note("cuMemGetAddressRange is not available from this driver");
    return k;
  }
  find_pointers(k, [&d](uint64_t value, uint64_t* base, uint64_t* size) {
    CUdeviceptr b = 0;
    size_t s = 0;
    if (d.address_range(&b, &s, static_cast<CUdeviceptr>(value)) != CUDA_SUCCESS) return false;
    *base = static_cast<uint64_t>(b), *size = static_cast<uint64_t>(s);
    return true;
  });
  return k;
}

#else
// -------------------------------------------------------------------------------------------------- HIP
typedef hipError_t (*func_by_symbol_fn)(hipFunction_t*, const void*);
typedef hipError_t (*kernel_param_info_fn)(void*, size_t, size_t*, size_t*);

template <typename Fn>
Fn runtime_symbol(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

Kernel read_kernel(hipGraphNode_t node) {
  static const func_by_symbol_fn func_by_symbol = runtime_symbol<func_by_symbol_fn>("hipGetFuncBySymbol");
  static const kernel_param_info_fn param_info = runtime_symbol<kernel_param_info_fn>("hipKernelGetParamInfo");
  Kernel k;
  hipKernelNodeParams p;
  std::memset(&p, 0, sizeof(p));
  hipError_t err = hipGraphKernelNodeGetParams(node, &p);
  if (err != hipSuccess) {
    k.note(hip_error_text("hipGraphKernelNodeGetParams", err));
    return k;
  }
  k.grid[0] = p.gridDim.x, k.grid[1] = p.gridDim.y, k.grid[2] = p.gridDim.z;
  k.block[0] = p.blockDim.x, k.block[1] = p.blockDim.y, k.block[2] = p.blockDim.z;
  k.shared_bytes = p.sharedMemBytes;
  k.function = reinterpret_cast<uintptr_t>(p.func);
  const char* name = hipKernelNameRefByPtr(p.func, nullptr);
  if (name != nullptr) k.name = name;
  if (func_by_symbol == nullptr || param_info == nullptr) {
    k.note("hipGetFuncBySymbol / hipKernelGetParamInfo are not in this HIP runtime (ROCm 7+)");
    return k;
  }
  hipFunction_t func = nullptr;
  if ((err = func_by_symbol(&func, p.func)) != hipSuccess || func == nullptr) {
    k.note(hip_error_text("hipGetFuncBySymbol", err));
    return k;
  }
  k.function = reinterpret_cast<uintptr_t>(func);
  if (k.name.empty()) {
    const char* by_function = hipKernelNameRef(func);
    if (by_function != nullptr) k.name = by_function;
  }
  for (size_t i = 0; i < kMaxParams; ++i) {
    size_t offset = 0, size = 0;
    err = param_info(reinterpret_cast<void*>(func), i, &offset, &size);
    if (err == hipErrorInvalidValue) break;  // past the last parameter
    if (err != hipSuccess) {
      k.note(hip_error_text("hipKernelGetParamInfo", err));
      return k;
    }
    k.params.emplace_back(offset, size);
  }
  k.has_layout = true;
  copy_arguments(k, p.kernelParams, p.extra, HIP_LAUNCH_PARAM_BUFFER_POINTER, HIP_LAUNCH_PARAM_BUFFER_SIZE,
                 HIP_LAUNCH_PARAM_END);
  find_pointers(k, [](uint64_t value, uint64_t* base, uint64_t* size) {
    hipDeviceptr_t b = nullptr;
    size_t s = 0;
    if (hipMemGetAddressRange(&b, &s, reinterpret_cast<hipDeviceptr_t>(value)) != hipSuccess) {
      (void)hipGetLastError();  // HIP keeps the failure as the thread's last error: not ours to leave behind
      return false;
    }
    *base = reinterpret_cast<uint64_t>(b), *size = static_cast<uint64_t>(s);
    return true;
  });
  return k;
}
#endif

py::dict to_dict(const Kernel& k) {
  py::dict d;
  d["kind"] = "kernel";
  d["name"] = k.name;
  d["function"] = k.function;
  d["grid"] = py::make_tuple(k.grid[0], k.grid[1], k.grid[2]);
  d["block"] = py::make_tuple(k.block[0], k.block[1], k.block[2]);
  d["shared_bytes"] = k.shared_bytes;
  if (k.has_layout) {
    py::list params;
    for (const auto& p : k.params) params.append(py::make_tuple(p.first, p.second));
    d["params"] = params;
  } else {
    d["params"] = py::none();
  }
  d["data"] = py::bytes(k.data);
  py::list pointers;
  for (const auto& p : k.pointers) {
    pointers.append(py::make_tuple(std::get<0>(p), std::get<1>(p), std::get<2>(p), std::get<3>(p)));
  }
  d["pointers"] = pointers;
  d["error"] = k.error;
  return d;
}

py::list launch_nodes(uintptr_t graph_handle) {
  hipGraph_t graph = reinterpret_cast<hipGraph_t>(graph_handle);
  if (graph == nullptr) throw std::invalid_argument("launch_nodes: graph handle is null");
  size_t count = 0;
  hipError_t err = hipGraphGetNodes(graph, nullptr, &count);
  if (err != hipSuccess) throw std::runtime_error(hip_error_text("hipGraphGetNodes(count)", err));
  std::vector<hipGraphNode_t> nodes(count);
  if (count > 0 && (err = hipGraphGetNodes(graph, nodes.data(), &count)) != hipSuccess) {
    throw std::runtime_error(hip_error_text("hipGraphGetNodes", err));
  }
  py::list out;
  for (size_t i = 0; i < count; ++i) {
    hipGraphNodeType type;
    err = node_get_type(nodes[i], &type);
    if (err != hipSuccess) {
      py::dict d;
      d["kind"] = "unknown";
      d["error"] = hip_error_text("graph node type (cuGraphNodeGetType / hipGraphNodeGetType)", err);
      out.append(d);
      continue;
    }
    if (type == hipGraphNodeTypeKernel) {
      out.append(to_dict(read_kernel(nodes[i])));
      continue;
    }
    const char* name = node_kind_name(type);
    py::dict d;
    d["kind"] = name ? std::string(name) : "type_" + std::to_string(static_cast<int>(type));
    d["error"] = "";
    out.append(d);
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(GS_MODULE_NAME, m) {
  m.doc() = "graphsafe launch diff: the kernel launches of a captured cudaGraph_t / hipGraph_t, node by node";
  m.def("launch_nodes", &launch_nodes, py::arg("graph"));
}
