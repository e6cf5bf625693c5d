// moe_combine.torch.cpp -- the MoE combine/gate family's C++ kernels at torch's dispatch key: an eager call from
// the dispatcher to the launch without Python (kernels/common/gs_torch.h says how, and what it saves).
//
// Role: per call, the argument signature, the plan of that signature (a signature not seen yet is checked by
// kernels/moe_combine/ops.py's planner ops, graphsafe::_moe_combine_plan and graphsafe::_shared_expert_gate_plan,
// before any pointer is read), a copy of an input whose last dimension is strided (the kernels take row strides
// but need unit stride in the last dimension), the output from torch.empty (gs_empty) and the launch on torch's current
// stream. Ops: moe_combine, moe_combine_gate, moe_combine_negative_control (a kernel defect switched on at run
// time, cases/counterexamples only) and shared_expert_gate.
#include "gs_torch.h"

#include <array>

#include "moe_combine.entry.h"

namespace {

// [out dtype code, expert_out / shared dtype code, shared dtype code (combine) or 0, gate row stride]: a fixed
// array, so that a cache hit copies it without an allocation.
using GsCombinePlan = std::array<int64_t, 4>;

GsCombinePlan gs_combine_plan_of(const std::vector<int64_t>& checked) {  // gs_ask_planner checked the length
  return {checked[0], checked[1], checked[2], checked[3]};
}

GsPlanCache<GsCombinePlan>& gs_combine_plans() {
  static GsPlanCache<GsCombinePlan> plans;
  return plans;
}

uintptr_t gs_ptr(const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); }

at::Tensor gs_inner_contiguous(const at::Tensor& t) {
  return t.size(-1) <= 1 || t.stride(-1) == 1 ? t : t.contiguous();
}

at::ScalarType gs_storage_dtype(int64_t code) { return code == GS_BF16 ? at::kBFloat16 : at::kFloat; }

void gs_signature_add_dtype(GsSignature& sig, std::optional<at::ScalarType> dtype) {
  sig.push_back(dtype ? static_cast<int64_t>(*dtype) : -1);
}

// moe_combine (gate absent), moe_combine_gate and the negative control (defect 1).
at::Tensor gs_combine(const at::Tensor& expert_out, const at::Tensor& weights, const std::optional<at::Tensor>& shared,
                      const std::optional<at::Tensor>& gate, double routed_scale,
                      std::optional<at::ScalarType> out_dtype, int64_t defect) {
  GsSignature sig;
  sig.reserve(48);
  sig.push_back(0);  // the combine ops' signatures (shared_expert_gate's start with 1)
  gs_signature_add(sig, expert_out);
  gs_signature_add(sig, weights);
  gs_signature_add(sig, shared);
  gs_signature_add(sig, gate);
  gs_signature_add_dtype(sig, out_dtype);
  sig.push_back(defect);
  GsCombinePlan plan;
  if (!gs_combine_plans().find(sig, &plan)) {
    plan = gs_combine_plan_of(gs_ask_planner("graphsafe::_moe_combine_plan",
                                             {expert_out, weights, shared, gate, out_dtype, defect}, 4));  // ValueError
    gs_combine_plans().put(sig, plan);
  }
  const at::Tensor eo = gs_inner_contiguous(expert_out);
  const at::Tensor sh = shared ? gs_inner_contiguous(*shared) : at::Tensor();
  const int64_t T = eo.size(0), K = eo.size(1), H = eo.size(2);
  at::Tensor out = gs_empty({T, H}, gs_storage_dtype(plan[0]), eo.device());
  const uintptr_t stream = gs_current_stream(eo.device());
  const int out_code = static_cast<int>(plan[0]), eo_code = static_cast<int>(plan[1]);
  const int sh_code = static_cast<int>(plan[2]);
  const uintptr_t sh_ptr = sh.defined() ? gs_ptr(sh) : 0;
  const int64_t sh_st = sh.defined() ? sh.stride(0) : 0;
  gs_value_errors([&] {
    if (gate) {
      gs_combine_gate_entry(gs_ptr(out), out_code, gs_ptr(eo), eo_code, gs_ptr(weights), sh_ptr, sh_code,
                            gs_ptr(*gate), T, K, H, out.stride(0), eo.stride(0), eo.stride(1), weights.stride(0),
                            weights.stride(1), sh_st, plan[3], routed_scale, stream, static_cast<int>(defect));
    } else {
      gs_combine_entry(defect ? "moe_combine_negative_control" : "moe_combine", gs_ptr(out), out_code, gs_ptr(eo),
                       eo_code, gs_ptr(weights), sh_ptr, sh_code, 0, T, K, H, out.stride(0), eo.stride(0),
                       eo.stride(1), weights.stride(0), weights.stride(1), sh_st, 0, routed_scale, stream,
                       static_cast<int>(defect));
    }
    return 0;
  });
  return out;
}

at::Tensor gs_moe_combine_op(const at::Tensor& expert_out, const at::Tensor& weights,
                             const std::optional<at::Tensor>& shared, double routed_scale,
                             std::optional<at::ScalarType> out_dtype) {
  return gs_combine(expert_out, weights, shared, std::nullopt, routed_scale, out_dtype, 0);
}

at::Tensor gs_moe_combine_gate_op(const at::Tensor& expert_out, const at::Tensor& weights, const at::Tensor& shared,
                                  const at::Tensor& gate_logit, double routed_scale,
                                  std::optional<at::ScalarType> out_dtype) {
  return gs_combine(expert_out, weights, shared, gate_logit, routed_scale, out_dtype, 0);
}

at::Tensor gs_negative_control_op(const at::Tensor& expert_out, const at::Tensor& weights,
                                  const std::optional<at::Tensor>& shared, double routed_scale,
                                  std::optional<at::ScalarType> out_dtype, int64_t defect) {
  return gs_combine(expert_out, weights, shared, std::nullopt, routed_scale, out_dtype, defect);
}

at::Tensor gs_shared_expert_gate_op(const at::Tensor& gate_logit, const at::Tensor& shared,
                                    std::optional<at::ScalarType> out_dtype) {
  GsSignature sig;
  sig.reserve(24);
  sig.push_back(1);
  gs_signature_add(sig, gate_logit);
  gs_signature_add(sig, shared);
  gs_signature_add_dtype(sig, out_dtype);
  GsCombinePlan plan;  // [out dtype code, shared dtype code, 0, gate row stride]
  if (!gs_combine_plans().find(sig, &plan)) {
    plan = gs_combine_plan_of(
        gs_ask_planner("graphsafe::_shared_expert_gate_plan", {gate_logit, shared, out_dtype}, 4));
    gs_combine_plans().put(sig, plan);
  }
  const at::Tensor sh = gs_inner_contiguous(shared);
  const int64_t T = sh.size(0), C = sh.size(1);
  at::Tensor out = gs_empty({T, C}, gs_storage_dtype(plan[0]), sh.device());
  gs_value_errors([&] {
    gs_shared_expert_gate_entry(gs_ptr(out), static_cast<int>(plan[0]), gs_ptr(gate_logit), gs_ptr(sh),
                                static_cast<int>(plan[1]), T, C, out.stride(0), plan[3], sh.stride(0),
                                gs_current_stream(sh.device()));
    return 0;
  });
  return out;
}

}  // namespace

void gs_moe_combine_register_dispatch() {
  static std::once_flag once;
  std::call_once(once, [] {
    torch::Library& library = gs_open_dispatch_library();
    library.impl("moe_combine", TORCH_FN(gs_moe_combine_op));
    library.impl("moe_combine_gate", TORCH_FN(gs_moe_combine_gate_op));
    library.impl("moe_combine_negative_control", TORCH_FN(gs_negative_control_op));
    library.impl("shared_expert_gate", TORCH_FN(gs_shared_expert_gate_op));
  });
}

uintptr_t gs_moe_combine_dispatch_stream(int device_index) { return gs_current_stream_of(device_index); }

void gs_moe_combine_clear_plans() { gs_combine_plans().clear(); }
