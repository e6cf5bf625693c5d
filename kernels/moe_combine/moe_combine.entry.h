// moe_combine.entry.h -- the checked entries into the MoE combine/gate family that both Python layers call:
// the pybind11 module (moe_combine.bind.cpp) and the dispatcher unit (moe_combine.torch.cpp).
//
// Role: refuse every bad dtype, size and pointer before any pointer is read (gs_checks.h), then call the
// family's entry point (moe_combine.h) and turn a launch error into std::runtime_error. Host C++ only.
#pragma once

#include <stdexcept>
#include <string>

#include "gs_checks.h"
#include "moe_combine.h"

inline void gs_throw_if_error(const char* op, const char* error) {
  if (error != nullptr) throw std::runtime_error(std::string(op) + ": launch failed: " + error);
}

inline void gs_combine_entry(const char* op, uintptr_t out, int out_code, uintptr_t expert_out, int eo_code,
                             uintptr_t weights, uintptr_t shared, int sh_code, uintptr_t gate, int64_t T, int64_t K,
                             int64_t H, int64_t out_st, int64_t eo_st, int64_t eo_sk, int64_t w_st, int64_t w_sk,
                             int64_t sh_st, int64_t gate_st, double routed_scale, uintptr_t stream, int defect) {
  // Refusals first: no pointer is read until every dtype, size and pointer has been checked.
  gs_require_f32_or_bf16(op, "expert_out", eo_code);
  gs_require_f32_or_bf16(op, "out", out_code);
  if (shared != 0) gs_require_f32_or_bf16(op, "shared", sh_code);
  if (!(T >= 0 && K >= 0 && H >= 0)) gs_require(false, op, "sizes T, K, H must be >= 0");
  gs_require_ptr(op, "out", out, T * H);
  gs_require_ptr(op, "expert_out", expert_out, T * K * H);
  gs_require_ptr(op, "weights", weights, T * K);
  if (defect != 0 && defect != 1) gs_require(false, op, "defect must be 0 (production) or 1 (truncating bf16 store)");
  CombineArgs a{reinterpret_cast<void*>(out), reinterpret_cast<const void*>(expert_out),
                reinterpret_cast<const float*>(weights), reinterpret_cast<const void*>(shared),
                reinterpret_cast<const float*>(gate), T, K, H, out_st, eo_st, eo_sk, w_st, w_sk, sh_st, gate_st,
                static_cast<float>(routed_scale), defect};
  gs_throw_if_error(op, gs_moe_combine_run(a, eo_code, sh_code, out_code, stream));
}

// moe_combine_gate: shared and the gate are required (a null shared would select plain combine silently).
inline void gs_combine_gate_entry(uintptr_t out, int out_code, uintptr_t expert_out, int eo_code, uintptr_t weights,
                                  uintptr_t shared, int sh_code, uintptr_t gate, int64_t T, int64_t K, int64_t H,
                                  int64_t out_st, int64_t eo_st, int64_t eo_sk, int64_t w_st, int64_t w_sk,
                                  int64_t sh_st, int64_t gate_st, double routed_scale, uintptr_t stream, int defect) {
  const char* op = "moe_combine_gate";
  gs_require_f32_or_bf16(op, "shared", sh_code);
  gs_require_ptr(op, "shared", shared, T * H);
  gs_require_ptr(op, "gate_logit", gate, T);
  // With T*H == 0 nothing is written; a null shared would otherwise select plain combine silently.
  gs_combine_entry(op, out, out_code, expert_out, eo_code, weights, shared, sh_code, shared ? gate : 0, T, K, H,
                   out_st, eo_st, eo_sk, w_st, w_sk, sh_st, gate_st, routed_scale, stream, defect);
}

inline void gs_shared_expert_gate_entry(uintptr_t out, int out_code, uintptr_t gate, uintptr_t shared, int sh_code,
                                        int64_t T, int64_t C, int64_t out_st, int64_t gate_st, int64_t sh_st,
                                        uintptr_t stream) {
  const char* op = "shared_expert_gate";
  gs_require_f32_or_bf16(op, "shared", sh_code);
  gs_require_f32_or_bf16(op, "out", out_code);
  if (!(T >= 0 && C >= 0)) gs_require(false, op, "sizes T, C must be >= 0");
  gs_require_ptr(op, "out", out, T * C);
  gs_require_ptr(op, "shared", shared, T * C);
  gs_require_ptr(op, "gate_logit", gate, T);
  gs_throw_if_error(op, gs_shared_expert_gate_run(reinterpret_cast<void*>(out), out_code,
                                                  reinterpret_cast<const float*>(gate),
                                                  reinterpret_cast<const void*>(shared), sh_code, T, C, out_st,
                                                  gate_st, sh_st, stream));
}

// The dispatcher unit's side (moe_combine.torch.cpp): register the family's C++ kernels at the module's
// dispatch key, the stream they launch on for a device index, and forgetting every plan (tests).
void gs_moe_combine_register_dispatch();
uintptr_t gs_moe_combine_dispatch_stream(int device_index);
void gs_moe_combine_clear_plans();
