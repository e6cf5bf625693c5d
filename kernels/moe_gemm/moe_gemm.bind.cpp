// moe_gemm.bind.cpp -- the Python module of the grouped quantized MoE GEMM: pybind11 entry points over
// moe_gemm.entry.h, the same for the kernels (moe_gemm.hip, nvcc/hipcc) and the CPU twin (moe_gemm.cpp, g++).
//
// Role: the raw entry (every size, stride and pointer as a number: the tests' way in), the kernel choice and
// workspace size for a call's arguments, one chunk's decode, and the switch that registers the op's C++ kernel
// (moe_gemm.torch.cpp; eager calls of torch.ops.graphsafe.moe_gemm go there, not through this module). Host
// C++ only: g++ compiles it at the same time as the kernels (kernels/common/native.py, "Translation units").
#include <pybind11/pybind11.h>

#include "moe_gemm.entry.h"

// kernel_path and workspace_bytes take the arguments up to block_m; moe_gemm adds zero_unwritten, the
// workspace and the stream.
#define GS_MOE_GEMM_PATHARGS                                                                                    \
  int fmt, uintptr_t x, int64_t x_sr, int64_t R, int64_t K, int64_t N, int64_t E, uintptr_t w, int64_t w_se,    \
      int64_t w_sk, int64_t w_sn, uintptr_t s, int64_t s_se, int64_t s_sk, int64_t s_sn, int64_t s_kblk,          \
      int64_t s_nblk, uintptr_t g, int64_t g_se, uintptr_t map, int64_t S, uintptr_t out, int64_t block_m
#define GS_MOE_GEMM_PYARGS \
  GS_MOE_GEMM_PATHARGS, int zero_unwritten, uintptr_t workspace, int64_t workspace_bytes, uintptr_t stream
#define GS_MOE_GEMM_MAKE_ARGS \
  gs_moe_make_args(fmt, x, x_sr, R, K, N, E, w, w_se, w_sk, w_sn, s, s_se, s_sk, s_sn, s_kblk, s_nblk, g, g_se, map, S, out)

PYBIND11_MODULE(GS_MODULE_NAME, m) {
  m.doc() = "graphsafe grouped quantized MoE GEMM: the kernels of moe_gemm.hip or their CPU twin moe_gemm.cpp";
  m.def("moe_gemm", [](GS_MOE_GEMM_PYARGS) {
    GsMoeArgs a = GS_MOE_GEMM_MAKE_ARGS;
    gs_moe_gemm_entry(a, block_m, zero_unwritten, workspace, workspace_bytes,
                      gs_moe_gemm_workspace(a, static_cast<int>(block_m)), stream);
  });
  // "cuda_core" on the CPU: the CPU twin is the reference order the CUDA-core kernel matches.
  m.def("kernel_path", [](GS_MOE_GEMM_PATHARGS) {
    return std::string(gs_moe_gemm_tensor_core(GS_MOE_GEMM_MAKE_ARGS, static_cast<int>(block_m)) ? "tensor_core"
                                                                                                  : "cuda_core");
  });
  m.def("workspace_bytes", [](GS_MOE_GEMM_PATHARGS) {
    return gs_moe_gemm_workspace(GS_MOE_GEMM_MAKE_ARGS, static_cast<int>(block_m));
  });
  m.def("register_dispatch", &gs_moe_gemm_register_dispatch);
  m.def("dispatch_stream", &gs_moe_gemm_dispatch_stream);
  m.def("clear_plans", &gs_moe_gemm_clear_plans);
  // One chunk's decode as the GEMM runs it (the portable decode the GPU's CUDA-core kernel shares): 16 little-
  // endian words in, 32 f32 weights out. tests/test_moe_gemm_ops.py checks every fp8 byte against torch.
  m.def("decode_chunk", [](int fmt, uintptr_t words, uintptr_t out) {
    gs_require(fmt >= GS_FMT_BF16 && fmt <= GS_FMT_Q4_0, "decode_chunk",
               "fmt is " + std::to_string(fmt) + "; allowed: " GS_FORMAT_NAMES);
    gs_require_ptr("decode_chunk", "words", words, 16);
    gs_require_ptr("decode_chunk", "out", out, kChunk);
    gs_decode_chunk(fmt, reinterpret_cast<const uint32_t*>(words), reinterpret_cast<float*>(out));
  });
}
