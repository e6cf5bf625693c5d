// moe_gemm.cpp -- CPU implementation of the grouped quantized MoE GEMM (g++ pybind11 module).
//
// Role: the "cpu" impl of graphsafe::moe_gemm and the bitwise twin of moe_gemm.hip. It
// includes the .hip file's host-device part (format decoders, chunk dot product, lane tree, argument
// checks), so the two cannot drift apart: same decode, same per-lane chunk order (lane l owns chunks
// l, l+32, ...), same fmaf sequence, same tree, same single bf16 rounding. The build cache turns contraction
// off in both compilers. kernels/common/native.py hashes every source of this folder into a define, so
// editing the .hip rebuilds this module too (the cache itself hashes only headers besides the sources).
#include <stdint.h>

#include <vector>

#include "moe_gemm.hip"

namespace {

void moe_gemm_cpu(const GsMoeArgs& a, int zero_unwritten) {
  // Zero exactly the rows no valid slot covers (foreign experts, -1 padding): aiter#5831 defect 1.
  if (zero_unwritten) {
    std::vector<char> covered(static_cast<size_t>(a.R), 0);
    for (int64_t s = 0; s < a.S; ++s) {
      const int32_t e = a.map[s * 3], r0 = a.map[s * 3 + 1], cnt = a.map[s * 3 + 2];
      if (e < 0 || e >= a.E) continue;
      for (int64_t r = r0; r < r0 + cnt && r < a.R; ++r)
        if (r >= 0) covered[r] = 1;
    }
    for (int64_t r = 0; r < a.R; ++r)
      if (!covered[r])
        for (int64_t n = 0; n < a.N; ++n) a.out[r * a.N + n] = 0;
  }
  const int64_t nchunks = a.K / kChunk;
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t slot = 0; slot < a.S; ++slot) {
    for (int64_t n = 0; n < a.N; ++n) {
      const int32_t expert = a.map[slot * 3];
      if (expert < 0 || expert >= a.E) continue;  // surplus slot stamped -1
      const int64_t row0 = a.map[slot * 3 + 1], rows = a.map[slot * 3 + 2];
      std::vector<float> lanes(static_cast<size_t>(rows) * kLanes, 0.0f);
      for (int64_t chunk = 0; chunk < nchunks; ++chunk) {
        const int lane = static_cast<int>(chunk % kLanes);
        uint32_t words[16];
        float w[kChunk], xf[kChunk];
        gs_load_chunk_strided(a, expert, chunk, n, words);
        gs_decode_chunk(a.fmt, words, w);
        const float s0 = gs_k_scale(a, expert, chunk * kChunk, n);
        const float s1 = a.fmt == GS_FMT_NVFP4 ? gs_k_scale(a, expert, chunk * kChunk + 16, n) : 0.0f;
        for (int64_t m = 0; m < rows; ++m) {
          const uint16_t* xp = a.x + (row0 + m) * a.x_sr + chunk * kChunk;
          for (int j = 0; j < kChunk; ++j) xf[j] = gs_bf16_to_float(xp[j]);
          float& acc = lanes[m * kLanes + lane];
          acc = gs_chunk_dot(a.fmt, w, xf, s0, s1, acc);
        }
      }
      const float post = gs_post_scale(a, expert, n);
      for (int64_t m = 0; m < rows; ++m)
        a.out[(row0 + m) * a.N + n] = gs_float_to_bf16(gs_lane_tree(&lanes[m * kLanes]) * post);
    }
  }
}

}  // namespace

PYBIND11_MODULE(GS_MODULE_NAME, m) {
  m.doc() = "graphsafe grouped quantized MoE GEMM, CPU twin of moe_gemm.hip";
  m.def("moe_gemm", [](GS_MOE_GEMM_PYARGS) {
    (void)block_m;  // the CPU walks each slot's rows directly; block_m only picks the GPU register tile
    (void)stream;
    (void)workspace;  // the CPU twin reads x as it is; workspace_bytes() is 0 here
    (void)workspace_bytes;
    GsMoeArgs a = GS_MOE_GEMM_MAKE_ARGS;
    gs_require(zero_unwritten == 0 || zero_unwritten == 1, "moe_gemm", "zero_unwritten must be 0 or 1");
    moe_gemm_cpu(a, zero_unwritten);
  });
  // The per-signature plan ops.py keeps (GsMoePlan in moe_gemm.hip); module_local: the GPU module has its own.
  pybind11::class_<GsMoePlan>(m, "Plan", pybind11::module_local())
      .def_readonly("workspace_bytes", &GsMoePlan::workspace_bytes);
  m.def("plan", [](GS_MOE_GEMM_PATHARGS) { return GsMoePlan{GS_MOE_GEMM_MAKE_ARGS, block_m, 0}; });
  m.def("run", [](GS_MOE_GEMM_RUNARGS) {
    (void)workspace;  // the CPU twin reads x as it is; the plan's workspace size is 0
    (void)stream;
    GsMoeArgs a = gs_moe_plan_args(plan, x, w, s, g, map, out);
    gs_require(zero_unwritten == 0 || zero_unwritten == 1, "moe_gemm", "zero_unwritten must be 0 or 1");
    moe_gemm_cpu(a, zero_unwritten);
  });
  m.def("kernel_path", [](GS_MOE_GEMM_PATHARGS) {
    (void)block_m;
    (void)GS_MOE_GEMM_MAKE_ARGS;  // the same validation as moe_gemm
    return std::string("cuda_core");  // the CPU twin is the reference order the CUDA-core kernel matches
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
  m.def("workspace_bytes", [](GS_MOE_GEMM_PATHARGS) {
    (void)block_m;
    (void)GS_MOE_GEMM_MAKE_ARGS;
    return static_cast<int64_t>(0);
  });
}
