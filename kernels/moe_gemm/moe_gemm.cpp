// moe_gemm.cpp -- CPU implementation of the grouped quantized MoE GEMM (g++; its Python module is
// moe_gemm.bind.cpp over the entry points at the end, the same layer as the kernels').
//
// Role: the "cpu" impl of graphsafe::moe_gemm and the bitwise twin of moe_gemm.hip's CUDA-core kernel. It
// includes the kernels' host-device part, moe_gemm.formats.h (format decoders, chunk dot product, lane tree), so
// the two cannot drift apart: same decode, same per-lane chunk order (lane l owns chunks l, l+32, ...), same fmaf
// sequence, same tree, same single bf16 rounding. The build cache turns contraction off in both compilers and
// hashes the headers of this folder into its key, so editing moe_gemm.formats.h rebuilds this module too.
#include <stdint.h>

#include <vector>

#include "moe_gemm.formats.h"

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

// The module's entry points (moe_gemm.hip declares them; moe_gemm.entry.h checks the arguments first).
const char* gs_moe_gemm_run(GsMoeArgs a, int /*block_m*/, int zero_unwritten, uintptr_t /*stream*/) {
  // block_m only picks the GPU register tile (the CPU walks each slot's rows directly); the CPU twin reads x as
  // it is, so it needs no workspace.
  moe_gemm_cpu(a, zero_unwritten);
  return nullptr;
}
bool gs_moe_gemm_tensor_core(const GsMoeArgs& /*a*/, int /*block_m*/) { return false; }
int64_t gs_moe_gemm_workspace(const GsMoeArgs& /*a*/, int /*block_m*/) { return 0; }
