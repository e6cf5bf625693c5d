// moe_gemm.torch.cpp -- graphsafe::moe_gemm's C++ kernel at torch's dispatch key: an eager call from the
// dispatcher to the launch without Python (kernels/common/gs_torch.h says how, and what it saves).
//
// Role: per call, the argument signature, the plan of that signature (a signature not seen yet is checked by
// kernels/moe_gemm/ops.py's planner op, graphsafe::_moe_gemm_plan, before any pointer is read), the output from
// torch.empty (gs_empty), the workspace the fp8 / MXFP4 tensor-core paths need and the launch on torch's current
// stream.
//
// The workspace rule: every call allocates its own workspace from torch's allocator (gs_scratch) while the
// stream it launches on is current. An eager call's buffer goes back to torch's caching allocator when the call
// returns and is reused only in that stream's order; a call under graph capture takes it from the graph's
// private pool, where it lives as long as the graph, so a replay never shares scratch with an eager call or
// another graph. Every byte the GEMM reads from it is written by the same call's first kernel (moe_gemm.hip,
// gs_moe_prepare_rows).
#include "gs_torch.h"

#include "moe_gemm.entry.h"

namespace {

GsPlanCache<GsMoePlan>& gs_moe_plans() {
  static GsPlanCache<GsMoePlan> plans;
  return plans;
}

// What ops.py's planner op concluded for a new signature ([format code, scale K block, scale N block]) and the
// tensors of this call, checked again by gs_moe_make_args (gs_checks.h) before any pointer is read.
GsMoePlan gs_moe_new_plan(const std::vector<int64_t>& checked, const at::Tensor& x, const at::Tensor& w,
                          const std::optional<at::Tensor>& w_scale, const std::optional<at::Tensor>& w_global,
                          const at::Tensor& map, const at::Tensor& out, int64_t block_m) {
  const auto ptr = [](const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); };
  const bool has_s = w_scale.has_value(), has_g = w_global.has_value();
  const GsMoeArgs a = gs_value_errors([&] {
    return gs_moe_make_args(static_cast<int>(checked[0]), ptr(x), x.stride(0), x.size(0), x.size(1), w.size(2),
                            w.size(0), ptr(w), w.stride(0), w.stride(1), w.stride(2), has_s ? ptr(*w_scale) : 0,
                            has_s ? w_scale->stride(0) : 0, has_s ? w_scale->stride(1) : 0,
                            has_s ? w_scale->stride(2) : 0, checked[1], checked[2], has_g ? ptr(*w_global) : 0,
                            has_g ? w_global->stride(0) : 0, ptr(map), map.size(0), ptr(out));
  });
  return gs_moe_make_plan(a, block_m);
}

at::Tensor gs_moe_gemm_op(const at::Tensor& x, const at::Tensor& w, const std::optional<at::Tensor>& w_scale,
                          const std::optional<at::Tensor>& w_global, const at::Tensor& block_map,
                          c10::string_view fmt, int64_t block_m, bool zero_unwritten) {
  GsSignature sig;
  sig.reserve(64);
  gs_signature_add(sig, x);
  gs_signature_add(sig, w);
  gs_signature_add(sig, w_scale);
  gs_signature_add(sig, w_global);
  gs_signature_add(sig, block_map);
  gs_signature_add(sig, fmt);
  sig.push_back(block_m);
  GsMoePlan plan;
  const bool known = gs_moe_plans().find(sig, &plan);
  std::vector<int64_t> checked;
  if (!known) {
    checked = gs_ask_planner("graphsafe::_moe_gemm_plan",
                             {x, w, w_scale, w_global, block_map, std::string(fmt), block_m}, 3);  // ValueError
  }
  const at::Tensor map = block_map.contiguous();  // [S, 3] int32: a few hundred bytes when it is a view
  at::Tensor out = gs_empty({x.size(0), w.size(2)}, at::kBFloat16, x.device());
  if (!known) {
    plan = gs_moe_new_plan(checked, x, w, w_scale, w_global, map, out, block_m);
    gs_moe_plans().put(sig, plan);
  }
  const auto ptr = [](const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); };
  c10::DataPtr workspace;
  if (plan.workspace_bytes > 0) workspace = gs_scratch(plan.workspace_bytes, x.device());
  gs_value_errors([&] {
    const GsMoeArgs a = gs_moe_plan_args(plan, ptr(x), ptr(w), w_scale ? ptr(*w_scale) : 0,
                                         w_global ? ptr(*w_global) : 0, ptr(map), ptr(out));
    gs_moe_gemm_entry(a, plan.block_m, zero_unwritten ? 1 : 0, reinterpret_cast<uintptr_t>(workspace.get()),
                      plan.workspace_bytes, plan.workspace_bytes, gs_current_stream(x.device()));
    return 0;
  });
  return out;
}

}  // namespace

void gs_moe_gemm_register_dispatch() {
  static std::once_flag once;
  std::call_once(once, [] { gs_open_dispatch_library().impl("moe_gemm", TORCH_FN(gs_moe_gemm_op)); });
}

uintptr_t gs_moe_gemm_dispatch_stream(int device_index) { return gs_current_stream_of(device_index); }

void gs_moe_gemm_clear_plans() { gs_moe_plans().clear(); }
