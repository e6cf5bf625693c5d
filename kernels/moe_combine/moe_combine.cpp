// moe_combine.cpp -- CPU implementation of the MoE combine/gate family (moe_combine.hip).
//
// Role: the CPU backend and CI run the same cases as the GPU, and on a GPU this is what the kernels are
// compared with BITWISE. It is written independently of the kernel but performs the same f32 operations
// in the same order (acc = 0; acc = acc + w*x for k = 0..K-1; acc = acc * routed_scale; acc = acc + shared
// term; one rounding at the store), compiled with -ffp-contract=off so g++ fuses nothing. bf16 and the
// sigmoid come from hip_compat.h's portable helpers, shared with the kernel. OpenMP splits tokens across
// threads; every element is computed by one thread, so the thread count cannot change a bit.
#include <pybind11/pybind11.h>

#include <string>

#include "gs_checks.h"
#include "hip_compat.h"

namespace {

inline float load(const void* base, int code, int64_t i) {
  return code == GS_BF16 ? gs_bf16_to_float(static_cast<const uint16_t*>(base)[i])
                         : static_cast<const float*>(base)[i];
}

inline void store(void* base, int code, int64_t i, float v, int defect) {
  if (code == GS_F32) {
    static_cast<float*>(base)[i] = v;
  } else if (defect & 1) {  // negative control: truncating bf16 store, mirrors the kernel's defect bit 1
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    static_cast<uint16_t*>(base)[i] = static_cast<uint16_t>(u >> 16);
  } else {
    static_cast<uint16_t*>(base)[i] = gs_float_to_bf16(v);
  }
}

void combine(const char* op, uintptr_t out, int out_code, uintptr_t expert_out, int eo_code, uintptr_t weights,
             uintptr_t shared, int sh_code, uintptr_t gate, int64_t T, int64_t K, int64_t H, int64_t out_st,
             int64_t eo_st, int64_t eo_sk, int64_t w_st, int64_t w_sk, int64_t sh_st, int64_t gate_st,
             double routed_scale, int defect) {
  // Refusals first, before any pointer is read (same checks and messages as the GPU entry points).
  gs_require_f32_or_bf16(op, "expert_out", eo_code);
  gs_require_f32_or_bf16(op, "out", out_code);
  if (shared != 0) gs_require_f32_or_bf16(op, "shared", sh_code);
  gs_require(T >= 0 && K >= 0 && H >= 0, op, "sizes T, K, H must be >= 0");
  gs_require_ptr(op, "out", out, T * H);
  gs_require_ptr(op, "expert_out", expert_out, T * K * H);
  gs_require_ptr(op, "weights", weights, T * K);
  gs_require(defect == 0 || defect == 1, op, "defect must be 0 (production) or 1 (truncating bf16 store)");
  const void* eo = reinterpret_cast<const void*>(expert_out);
  const float* w = reinterpret_cast<const float*>(weights);
  const void* sh = reinterpret_cast<const void*>(shared);
  const float* g = reinterpret_cast<const float*>(gate);
  void* o = reinterpret_cast<void*>(out);
  const float scale = static_cast<float>(routed_scale);
#pragma omp parallel for schedule(static) if (T * K * H > (1 << 16))
  for (int64_t t = 0; t < T; ++t) {
    const float gate_value = g != nullptr ? gs_sigmoid(g[t * gate_st]) : 0.0f;
    for (int64_t h = 0; h < H; ++h) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) acc = acc + w[t * w_st + k * w_sk] * load(eo, eo_code, t * eo_st + k * eo_sk + h);
      acc = acc * scale;
      if (sh != nullptr) {
        const float s = load(sh, sh_code, t * sh_st + h);
        acc = acc + (g != nullptr ? gs_round_through_bf16(gate_value * s) : s);
      }
      store(o, out_code, t * out_st + h, acc, defect);
    }
  }
}

}  // namespace

PYBIND11_MODULE(GS_MODULE_NAME, m) {
  m.doc() = "graphsafe MoE combine/gate, CPU implementation (bit-exact twin of moe_combine.hip)";
  m.def("moe_combine", [](uintptr_t out, int out_code, uintptr_t expert_out, int eo_code, uintptr_t weights,
                          uintptr_t shared, int sh_code, int64_t T, int64_t K, int64_t H, int64_t out_st,
                          int64_t eo_st, int64_t eo_sk, int64_t w_st, int64_t w_sk, int64_t sh_st,
                          double routed_scale, uintptr_t /*stream*/, int defect) {
    combine("moe_combine", out, out_code, expert_out, eo_code, weights, shared, sh_code, 0, T, K, H, out_st, eo_st,
            eo_sk, w_st, w_sk, sh_st, 0, routed_scale, defect);
  });
  m.def("moe_combine_gate", [](uintptr_t out, int out_code, uintptr_t expert_out, int eo_code, uintptr_t weights,
                               uintptr_t shared, int sh_code, uintptr_t gate, int64_t T, int64_t K, int64_t H,
                               int64_t out_st, int64_t eo_st, int64_t eo_sk, int64_t w_st, int64_t w_sk,
                               int64_t sh_st, int64_t gate_st, double routed_scale, uintptr_t /*stream*/,
                               int defect) {
    const char* op = "moe_combine_gate";
    gs_require_f32_or_bf16(op, "shared", sh_code);
    gs_require_ptr(op, "shared", shared, T * H);
    gs_require_ptr(op, "gate_logit", gate, T);
    combine(op, out, out_code, expert_out, eo_code, weights, shared, sh_code, shared ? gate : 0, T, K, H, out_st,
            eo_st, eo_sk, w_st, w_sk, sh_st, gate_st, routed_scale, defect);
  });
  m.def("shared_expert_gate", [](uintptr_t out, int out_code, uintptr_t gate, uintptr_t shared, int sh_code,
                                 int64_t T, int64_t C, int64_t out_st, int64_t gate_st, int64_t sh_st,
                                 uintptr_t /*stream*/) {
    const char* op = "shared_expert_gate";
    gs_require_f32_or_bf16(op, "shared", sh_code);
    gs_require_f32_or_bf16(op, "out", out_code);
    gs_require(T >= 0 && C >= 0, op, "sizes T, C must be >= 0");
    gs_require_ptr(op, "out", out, T * C);
    gs_require_ptr(op, "shared", shared, T * C);
    gs_require_ptr(op, "gate_logit", gate, T);
    const float* g = reinterpret_cast<const float*>(gate);
    const void* sh = reinterpret_cast<const void*>(shared);
    void* o = reinterpret_cast<void*>(out);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c)
        store(o, out_code, t * out_st + c, gs_sigmoid(g[t * gate_st]) * load(sh, sh_code, t * sh_st + c), 0);
  });
  m.attr("backend") = GS_BACKEND_NAME;
}
