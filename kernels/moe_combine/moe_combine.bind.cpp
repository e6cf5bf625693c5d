// moe_combine.bind.cpp -- the Python module of the MoE combine/gate family: pybind11 entry points over
// moe_combine.h, the same for the kernels (moe_combine.hip) and the CPU twin (moe_combine.cpp).
//
// Role: refuse every bad dtype, size and pointer before any pointer is read (gs_checks.h), then call the
// family's entry point and turn a launch error into RuntimeError. Host C++ only: g++ compiles it at the same
// time as the kernels (kernels/common/native.py, "Translation units").
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "gs_checks.h"
#include "moe_combine.h"

namespace {

void gs_throw_if_error(const char* op, const char* error) {
  if (error != nullptr) throw std::runtime_error(std::string(op) + ": launch failed: " + error);
}

void combine_entry(const char* op, uintptr_t out, int out_code, uintptr_t expert_out, int eo_code,
                   uintptr_t weights, uintptr_t shared, int sh_code, uintptr_t gate, int64_t T, int64_t K,
                   int64_t H, int64_t out_st, int64_t eo_st, int64_t eo_sk, int64_t w_st, int64_t w_sk,
                   int64_t sh_st, int64_t gate_st, double routed_scale, uintptr_t stream, int defect) {
  // Refusals first: no pointer is read until every dtype, size and pointer has been checked.
  gs_require_f32_or_bf16(op, "expert_out", eo_code);
  gs_require_f32_or_bf16(op, "out", out_code);
  if (shared != 0) gs_require_f32_or_bf16(op, "shared", sh_code);
  gs_require(T >= 0 && K >= 0 && H >= 0, op, "sizes T, K, H must be >= 0");
  gs_require_ptr(op, "out", out, T * H);
  gs_require_ptr(op, "expert_out", expert_out, T * K * H);
  gs_require_ptr(op, "weights", weights, T * K);
  gs_require(defect == 0 || defect == 1, op, "defect must be 0 (production) or 1 (truncating bf16 store)");
  CombineArgs a{reinterpret_cast<void*>(out), reinterpret_cast<const void*>(expert_out),
                reinterpret_cast<const float*>(weights), reinterpret_cast<const void*>(shared),
                reinterpret_cast<const float*>(gate), T, K, H, out_st, eo_st, eo_sk, w_st, w_sk, sh_st, gate_st,
                static_cast<float>(routed_scale), defect};
  gs_throw_if_error(op, gs_moe_combine_run(a, eo_code, sh_code, out_code, stream));
}

}  // namespace

PYBIND11_MODULE(GS_MODULE_NAME, m) {
  m.doc() = "graphsafe MoE combine/gate: the kernels of moe_combine.hip or their CPU twin moe_combine.cpp";
  m.def(
      "moe_combine",
      [](uintptr_t out, int out_code, uintptr_t expert_out, int eo_code, uintptr_t weights, uintptr_t shared,
         int sh_code, int64_t T, int64_t K, int64_t H, int64_t out_st, int64_t eo_st, int64_t eo_sk, int64_t w_st,
         int64_t w_sk, int64_t sh_st, double routed_scale, uintptr_t stream, int defect) {
        combine_entry("moe_combine", out, out_code, expert_out, eo_code, weights, shared, sh_code, 0, T, K, H,
                      out_st, eo_st, eo_sk, w_st, w_sk, sh_st, 0, routed_scale, stream, defect);
      });
  m.def(
      "moe_combine_gate",
      [](uintptr_t out, int out_code, uintptr_t expert_out, int eo_code, uintptr_t weights, uintptr_t shared,
         int sh_code, uintptr_t gate, int64_t T, int64_t K, int64_t H, int64_t out_st, int64_t eo_st,
         int64_t eo_sk, int64_t w_st, int64_t w_sk, int64_t sh_st, int64_t gate_st, double routed_scale,
         uintptr_t stream, int defect) {
        const char* op = "moe_combine_gate";
        gs_require_f32_or_bf16(op, "shared", sh_code);
        gs_require_ptr(op, "shared", shared, T * H);
        gs_require_ptr(op, "gate_logit", gate, T);
        // With T*H == 0 nothing is written; a null shared would otherwise select plain combine silently.
        combine_entry(op, out, out_code, expert_out, eo_code, weights, shared, sh_code, shared ? gate : 0, T, K, H,
                      out_st, eo_st, eo_sk, w_st, w_sk, sh_st, gate_st, routed_scale, stream, defect);
      });
  m.def("shared_expert_gate",
        [](uintptr_t out, int out_code, uintptr_t gate, uintptr_t shared, int sh_code, int64_t T, int64_t C,
           int64_t out_st, int64_t gate_st, int64_t sh_st, uintptr_t stream) {
          const char* op = "shared_expert_gate";
          gs_require_f32_or_bf16(op, "shared", sh_code);
          gs_require_f32_or_bf16(op, "out", out_code);
          gs_require(T >= 0 && C >= 0, op, "sizes T, C must be >= 0");
          gs_require_ptr(op, "out", out, T * C);
          gs_require_ptr(op, "shared", shared, T * C);
          gs_require_ptr(op, "gate_logit", gate, T);
          gs_throw_if_error(op, gs_shared_expert_gate_run(
                                    reinterpret_cast<void*>(out), out_code, reinterpret_cast<const float*>(gate),
                                    reinterpret_cast<const void*>(shared), sh_code, T, C, out_st, gate_st, sh_st,
                                    stream));
        });
  m.attr("backend") = gs_moe_combine_backend();
}
