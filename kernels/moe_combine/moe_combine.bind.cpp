// moe_combine.bind.cpp -- the Python module of the MoE combine/gate family: pybind11 entry points over
// moe_combine.entry.h, the same for the kernels (moe_combine.hip) and the CPU twin (moe_combine.cpp).
//
// Role: the raw entries (every size, stride and pointer as a number: the tests' way in) and the switch that
// registers the family's C++ kernels (moe_combine.torch.cpp; eager calls of the torch ops go there, not
// through this module). Host C++ only: g++ compiles it at the same time as the kernels
// (kernels/common/native.py, "Translation units").
#include <pybind11/pybind11.h>

#include "moe_combine.entry.h"

PYBIND11_MODULE(GS_MODULE_NAME, m) {
  m.doc() = "graphsafe MoE combine/gate: the kernels of moe_combine.hip or their CPU twin moe_combine.cpp";
  m.def(
      "moe_combine",
      [](uintptr_t out, int out_code, uintptr_t expert_out, int eo_code, uintptr_t weights, uintptr_t shared,
         int sh_code, int64_t T, int64_t K, int64_t H, int64_t out_st, int64_t eo_st, int64_t eo_sk, int64_t w_st,
         int64_t w_sk, int64_t sh_st, double routed_scale, uintptr_t stream, int defect) {
        gs_combine_entry("moe_combine", out, out_code, expert_out, eo_code, weights, shared, sh_code, 0, T, K, H,
                         out_st, eo_st, eo_sk, w_st, w_sk, sh_st, 0, routed_scale, stream, defect);
      });
  m.def("moe_combine_gate", &gs_combine_gate_entry);
  m.def("shared_expert_gate", &gs_shared_expert_gate_entry);
  m.def("register_dispatch", &gs_moe_combine_register_dispatch);
  m.def("dispatch_stream", &gs_moe_combine_dispatch_stream);
  m.def("clear_plans", &gs_moe_combine_clear_plans);
  m.attr("backend") = gs_moe_combine_backend();
}
