// moe_combine.h -- the entry points of the MoE combine/gate family, between its pybind11 layer and its math.
//
// Role: moe_combine.bind.cpp (the Python module, host C++ built by g++) calls these; moe_combine.hip defines
// them as kernel launches (nvcc, hipcc) and moe_combine.cpp as the CPU twin (g++). Plain types only, so the
// binding layer needs no GPU runtime header and is one translation unit for every backend; it compiles beside
// the kernels instead of inside nvcc's pass (kernels/common/native.py, "Translation units"). Dtype codes:
// gs_checks.h. The binding layer refuses every bad code, size and pointer before calling these.
#pragma once

#include <stdint.h>

struct CombineArgs {
  void* out;
  const void* expert_out;
  const float* weights;
  const void* shared;  // null: no shared term
  const float* gate;   // null: moe_combine; else moe_combine_gate
  int64_t T, K, H;
  int64_t out_st, eo_st, eo_sk, w_st, w_sk, sh_st, gate_st;  // strides in elements; inner stride is 1
  float routed_scale;
  int defect;
};

// Each returns null when the work was enqueued on `stream` (a hipStream_t / cudaStream_t; the CPU twin ignores
// it and computes before returning), else the runtime's error text.
const char* gs_moe_combine_run(const CombineArgs& a, int eo_code, int sh_code, int out_code, uintptr_t stream);
const char* gs_shared_expert_gate_run(void* out, int out_code, const float* gate, const void* shared, int sh_code,
                                      int64_t T, int64_t C, int64_t out_st, int64_t gate_st, int64_t sh_st,
                                      uintptr_t stream);
// "cuda", "hip" or "host": hip_compat.h's GS_BACKEND_NAME as the math's translation unit saw it.
const char* gs_moe_combine_backend();
