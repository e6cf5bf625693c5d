// moe_gemm.entry.h -- the checked entry into moe_gemm's launcher that both Python layers call: the pybind11
// module (moe_gemm.bind.cpp) and the dispatcher unit (moe_gemm.torch.cpp).
//
// Role: refuse every bad format, size, pointer, alignment and workspace before any pointer is read
// (gs_checks.h), keep a checked call's arguments as a plan (GsMoePlan) for the calls of the same signature,
// and turn a launch error into std::runtime_error. Host C++ only; it includes moe_gemm.hip as plain C++, which
// gives it the argument struct and the portable decode (the kernels sit under !GS_BACKEND_HOST).
#pragma once

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

// One checked argument signature: the arguments of the call that gs_moe_make_args checked, its block_m and
// workspace size. gs_moe_plan_args puts a later call's pointers in and refuses what the first call's checks
// would refuse for them: a null pointer that has elements, or x / w off the 16-byte alignment the first call's
// kernel choice used (the signature holds both alignments).
struct GsMoePlan {
  GsMoeArgs a;
  int64_t block_m;
  int64_t workspace_bytes;
};
inline GsMoePlan gs_moe_make_plan(const GsMoeArgs& a, int64_t block_m) {
  return GsMoePlan{a, block_m, gs_moe_gemm_workspace(a, static_cast<int>(block_m))};
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

// The dispatcher unit's side (moe_gemm.torch.cpp): register graphsafe::moe_gemm's C++ kernel at the module's
// dispatch key, the stream that kernel launches on for a device index (the loader compares it with torch's
// current stream once), and forgetting every plan (tests: the next call of each signature is checked again).
void gs_moe_gemm_register_dispatch();
uintptr_t gs_moe_gemm_dispatch_stream(int device_index);
void gs_moe_gemm_clear_plans();
