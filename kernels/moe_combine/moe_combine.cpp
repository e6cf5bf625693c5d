// moe_combine.cpp -- CPU implementation of the MoE combine/gate family (moe_combine.hip).
//
// Role: the CPU backend and CI run the same cases as the GPU, and on a GPU this is what the kernels are
// compared with BITWISE. It is written independently of the kernel but performs the same f32 operations
// in the same order (acc = 0; acc = acc + w*x for k = 0..K-1; acc = acc * routed_scale; acc = acc + shared
// term; one rounding at the store), compiled with -ffp-contract=off so g++ fuses nothing. bf16 and the
// sigmoid come from hip_compat.h's portable helpers, shared with the kernel. OpenMP splits tokens across
// threads; every element is computed by one thread, so the thread count cannot change a bit. The entry points
// are moe_combine.h's, called by the same pybind11 layer as the kernels (moe_combine.bind.cpp), which refuses
// bad arguments before these run.
#include "gs_checks.h"
#include "hip_compat.h"
#include "moe_combine.h"

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

}  // namespace

const char* gs_moe_combine_run(const CombineArgs& a, int eo_code, int sh_code, int out_code, uintptr_t /*stream*/) {
  const float* w = a.weights;
  const float* g = a.gate;
#pragma omp parallel for schedule(static) if (a.T * a.K * a.H > (1 << 16))
  for (int64_t t = 0; t < a.T; ++t) {
    const float gate_value = g != nullptr ? gs_sigmoid(g[t * a.gate_st]) : 0.0f;
    for (int64_t h = 0; h < a.H; ++h) {
      float acc = 0.0f;
      for (int64_t k = 0; k < a.K; ++k)
        acc = acc + w[t * a.w_st + k * a.w_sk] * load(a.expert_out, eo_code, t * a.eo_st + k * a.eo_sk + h);
      acc = acc * a.routed_scale;
      if (a.shared != nullptr) {
        const float s = load(a.shared, sh_code, t * a.sh_st + h);
        acc = acc + (g != nullptr ? gs_round_through_bf16(gate_value * s) : s);
      }
      store(a.out, out_code, t * a.out_st + h, acc, a.defect);
    }
  }
  return nullptr;
}

const char* gs_shared_expert_gate_run(void* out, int out_code, const float* gate, const void* shared, int sh_code,
                                      int64_t T, int64_t C, int64_t out_st, int64_t gate_st, int64_t sh_st,
                                      uintptr_t /*stream*/) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c)
      store(out, out_code, t * out_st + c, gs_sigmoid(gate[t * gate_st]) * load(shared, sh_code, t * sh_st + c), 0);
  return nullptr;
}

const char* gs_moe_combine_backend() { return GS_BACKEND_NAME; }
