// moe_gemm.bind.cpp -- the Python module of the grouped quantized MoE GEMM: pybind11 entry points over the
// entry points of moe_gemm.hip, the same for the kernels (moe_gemm.hip, nvcc/hipcc) and the CPU twin
// (moe_gemm.cpp, g++).
//
// Role: refuse every bad format, size, pointer, alignment and workspace before any pointer is read
// (gs_checks.h), keep the per-signature plan (GsMoePlan) ops.py calls `run` with, and turn a launch error into
// RuntimeError. Host C++ only: g++ compiles it at the same time as the kernels, which take ~30 s of nvcc
// (kernels/common/native.py, "Translation units"). It includes moe_gemm.hip as plain C++, which gives it the
// argument struct and the portable decode (the kernels sit under !GS_BACKEND_HOST).
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "gs_checks.h"
#include "moe_gemm.hip"

// Validate everything before any pointer is read; shared by the CPU and GPU modules.
inline GsMoeArgs gs_moe_make_args(int fmt, uintptr_t x, int64_t x_sr, int64_t R, int64_t K, int64_t N, int64_t E,
                                  uintptr_t w, int64_t w_se, int64_t w_sk, int64_t w_sn, uintptr_t s, int64_t s_se,
                                  int64_t s_sk, int64_t s_sn, int64_t s_kblk, int64_t s_nblk, uintptr_t g,
                                  int64_t g_se, uintptr_t map, int64_t S, uintptr_t out) {
  const char* op = "moe_gemm";
  gs_require(fmt >= GS_FMT_BF16 && fmt <= GS_FMT_Q4_0, op,
             "fmt is " + std::to_string(fmt) + "; allowed: " GS_FORMAT_NAMES);
  gs_require(R >= 0 && N >= 0 && E >= 1 && S >= 0, op, "sizes must satisfy R >= 0, N >= 0, E >= 1, S >= 0");
  gs_require(K > 0 && K % kChunk == 0, op, "K is " + std::to_string(K) + "; allowed: a positive multiple of 32");
  gs_require_ptr(op, "x", x, R * K);
  gs_require_ptr(op, "w", w, N * K);
  gs_require_ptr(op, "block_map", map, S * 3);
  gs_require_ptr(op, "out", out, R * N);
  if (fmt != GS_FMT_BF16) gs_require_ptr(op, "w_scale", s, N * K);
  if (fmt == GS_FMT_NVFP4) gs_require_ptr(op, "w_global_scale", g, E);
  gs_require(fmt == GS_FMT_BF16 || fmt == GS_FMT_FP8_FNUZ ||
                 (s_kblk == gs_scale_k_block(fmt) && s_nblk == gs_scale_n_block(fmt)),
             op, "scale block sizes are " + std::to_string(s_kblk) + " x " + std::to_string(s_nblk) +
                     " (K x N); allowed for this format: " + std::to_string(gs_scale_k_block(fmt)) + " x " +
                     std::to_string(gs_scale_n_block(fmt)));
  GsMoeArgs a{fmt,  reinterpret_cast<const uint16_t*>(x), x_sr, R, K, N, E, reinterpret_cast<const uint8_t*>(w),
              w_se, w_sk, w_sn, reinterpret_cast<const uint8_t*>(s), s_se, s_sk, s_sn, s_kblk > 0 ? s_kblk : 1,
              s_nblk > 0 ? s_nblk : 1, reinterpret_cast<const float*>(g), g_se, reinterpret_cast<const int32_t*>(map),
              S, reinterpret_cast<uint16_t*>(out), 0, 0};
  const int64_t eb = gs_elem_bytes(fmt);
  a.vec_w = w_sk == 1 && (w % 16) == 0 && ((w_sn * eb) % 16) == 0 && ((w_se * eb) % 16) == 0;
  a.vec_x = (x % 16) == 0 && ((x_sr * 2) % 16) == 0;
  return a;
}

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

// One checked argument signature (kernels/moe_gemm/ops.py keeps one per signature and calls `run` with it):
// the arguments of the probe call that `plan` checked, its block_m and workspace size. An eager call then
// hands over 10 values instead of 27 (pybind converts each one). gs_moe_plan_args puts a call's pointers in
// and refuses what the probe's checks would refuse for them: a null pointer that has elements, or x / w off
// the 16-byte alignment the probe's kernel choice used (ops.py's key holds both alignments).
// Python holds a plan as a capsule named kGsMoePlanName that owns it: a pybind11 class for it took 15% more
// g++ time for this unit (4.6 against 3.9 s on the 2-core box), and this unit is the moe_gemm family's
// longest on the H200 (reports/measurements/h200-2026-12-02-session12, "Builds").
struct GsMoePlan {
  GsMoeArgs a;
  int64_t block_m;
  int64_t workspace_bytes;
};
constexpr const char* kGsMoePlanName = "graphsafe.moe_gemm.plan";
inline const GsMoePlan& gs_moe_plan_of(pybind11::handle plan) {
  void* p = PyCapsule_IsValid(plan.ptr(), kGsMoePlanName) ? PyCapsule_GetPointer(plan.ptr(), kGsMoePlanName) : nullptr;
  if (p == nullptr) {
    PyErr_Clear();
    gs_require(false, "moe_gemm", "plan must be the first item of what plan() returned");
  }
  return *static_cast<const GsMoePlan*>(p);
}
// Per eager call: the conditions are tested before any message is formed (gs_require's message argument is a
// std::string built at the call, a heap allocation each for these lengths), so a call that passes makes none.
inline GsMoeArgs gs_moe_plan_args(const GsMoePlan& p, uintptr_t x, uintptr_t w, uintptr_t s, uintptr_t g,
                                  uintptr_t map, uintptr_t out) {
  const char* op = "moe_gemm";
  GsMoeArgs a = p.a;
  if (x == 0) gs_require_ptr(op, "x", x, a.R * a.K);
  if (w == 0) gs_require_ptr(op, "w", w, a.N * a.K);
  if (map == 0) gs_require_ptr(op, "block_map", map, a.S * 3);
  if (out == 0) gs_require_ptr(op, "out", out, a.R * a.N);
  if (s == 0 && a.fmt != GS_FMT_BF16) gs_require_ptr(op, "w_scale", s, a.N * a.K);
  if (g == 0 && a.fmt == GS_FMT_NVFP4) gs_require_ptr(op, "w_global_scale", g, a.E);
  if ((a.vec_x && x % 16 != 0) || (a.vec_w && w % 16 != 0))
    gs_require(false, op, "x and w must keep the 16-byte alignment of the call the plan was made for");
  a.x = reinterpret_cast<const uint16_t*>(x);
  a.w = reinterpret_cast<const uint8_t*>(w);
  a.s = reinterpret_cast<const uint8_t*>(s);
  a.g = reinterpret_cast<const float*>(g);
  a.map = reinterpret_cast<const int32_t*>(map);
  a.out = reinterpret_cast<uint16_t*>(out);
  return a;
}
#define GS_MOE_GEMM_RUNARGS                                                                                  \
  pybind11::handle plan, uintptr_t x, uintptr_t w, uintptr_t s, uintptr_t g, uintptr_t map, uintptr_t out, \
      int zero_unwritten, uintptr_t workspace, uintptr_t stream

// The entry's checks of zero_unwritten and the workspace, then the GEMM.
inline void gs_moe_gemm_entry(GsMoeArgs a, int64_t block_m, int zero_unwritten, uintptr_t workspace,
                              int64_t workspace_bytes, int64_t need, uintptr_t stream) {
  if (zero_unwritten != 0 && zero_unwritten != 1) gs_require(false, "moe_gemm", "zero_unwritten must be 0 or 1");
  if (workspace_bytes < need || (need > 0 && (workspace == 0 || workspace % 16 != 0)))
    gs_require(false, "moe_gemm",
               "workspace is " + std::to_string(workspace_bytes) + " bytes; allowed: a 16-byte-aligned buffer of "
               "at least workspace_bytes() = " + std::to_string(need));
  if (need > 0) {
    a.xh = reinterpret_cast<uint16_t*>(workspace);
    a.x_rs = reinterpret_cast<float*>(workspace + static_cast<uintptr_t>(a.R * a.K * 2));
  }
  const char* error = gs_moe_gemm_run(a, static_cast<int>(block_m), zero_unwritten, stream);
  if (error != nullptr) throw std::runtime_error(std::string("moe_gemm: launch failed: ") + error);
}

PYBIND11_MODULE(GS_MODULE_NAME, m) {
  m.doc() = "graphsafe grouped quantized MoE GEMM: the kernels of moe_gemm.hip or their CPU twin moe_gemm.cpp";
  m.def("moe_gemm", [](GS_MOE_GEMM_PYARGS) {
    GsMoeArgs a = GS_MOE_GEMM_MAKE_ARGS;
    gs_moe_gemm_entry(a, block_m, zero_unwritten, workspace, workspace_bytes,
                      gs_moe_gemm_workspace(a, static_cast<int>(block_m)), stream);
  });
  // (plan, workspace bytes its calls need).
  m.def("plan", [](GS_MOE_GEMM_PATHARGS) {
    GsMoeArgs a = GS_MOE_GEMM_MAKE_ARGS;
    auto* plan = new GsMoePlan{a, block_m, gs_moe_gemm_workspace(a, static_cast<int>(block_m))};
    pybind11::capsule owner(plan, kGsMoePlanName, [](void* p) { delete static_cast<GsMoePlan*>(p); });
    return pybind11::make_tuple(owner, plan->workspace_bytes);
  });
  // The plan's workspace size is the one the plan call asked for; a buffer of that size is required.
  m.def("run", [](GS_MOE_GEMM_RUNARGS) {
    const GsMoePlan& p = gs_moe_plan_of(plan);
    gs_moe_gemm_entry(gs_moe_plan_args(p, x, w, s, g, map, out), p.block_m, zero_unwritten, workspace,
                      p.workspace_bytes, p.workspace_bytes, stream);
  });
  // "cuda_core" on the CPU: the CPU twin is the reference order the CUDA-core kernel matches.
  m.def("kernel_path", [](GS_MOE_GEMM_PATHARGS) {
    return std::string(gs_moe_gemm_tensor_core(GS_MOE_GEMM_MAKE_ARGS, static_cast<int>(block_m)) ? "tensor_core"
                                                                                                  : "cuda_core");
  });
  // Whether the stream is capturing a graph: kernels/moe_gemm/ops.py's workspace rule (False on the CPU).
  m.def("capturing", [](uintptr_t stream) { return gs_moe_gemm_capturing(stream); });
  m.def("workspace_bytes", [](GS_MOE_GEMM_PATHARGS) {
    return gs_moe_gemm_workspace(GS_MOE_GEMM_MAKE_ARGS, static_cast<int>(block_m));
  });
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
