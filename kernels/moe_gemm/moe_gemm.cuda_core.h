// moe_gemm.cuda_core.h -- the MoE GEMM's CUDA-core kernel (included by moe_gemm.hip): every format and slot size,
// the CPU twin's bits. Its instantiations are compiled in the moe_gemm.cuda_core*.hip units (moe_gemm.hip's
// unit note).
#pragma once

#include "moe_gemm.device.h"

// The CUDA-core kernel's register tile per row-tile size MR: NC columns per lane group. MR = 16 with 4
// columns kept 4x16 accumulators plus a decoded chunk live and spilled; 2 columns do not.
template <int MR>
struct GsTile {
  static constexpr int NC = MR >= 16 ? 2 : 4;
  static constexpr int kTileN = kColGroups * NC;
};

__device__ __forceinline__ void gs_load_x_chunk(const GsMoeArgs& a, int64_t row, int64_t chunk, float* xf) {
  const uint16_t* p = a.x + row * a.x_sr + chunk * kChunk;
  if (a.vec_x) {
    uint4 v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) v[i] = reinterpret_cast<const uint4*>(p)[i];
    const uint32_t* u = reinterpret_cast<const uint32_t*>(v);
#pragma unroll
    for (int j = 0; j < kChunk; ++j) xf[j] = gs_bf16_to_float(static_cast<uint16_t>(u[j >> 1] >> (16 * (j & 1))));
  } else {
    for (int j = 0; j < kChunk; ++j) xf[j] = gs_bf16_to_float(p[j]);
  }
}

// CUDA-core kernel: the bit-exact twin of moe_gemm.cpp (same decode, same per-lane chunk
// order, same fmaf sequence, same lane tree). Block = 8 lane groups x NC columns; grid (N tiles, slots).
// NC and MINB (blocks per SM the register budget must allow) default to the launcher's choice;
// bench/moe_gemm_variants.cu instantiates others to measure them.
template <int FMT, int MR, int DEC, int NC = GsTile<MR>::NC, int MINB = 1>
__global__ void __launch_bounds__(kThreads, MINB) gs_moe_gemm_kernel(GsMoeArgs a) {
  if (gs_zero_fill_block(a)) return;
  const int64_t slot = blockIdx.y;
  const int32_t expert = a.map[slot * 3];
  if (expert < 0 || expert >= a.E) return;  // surplus slot stamped -1 (aiter: ExptData == -1)
  const int64_t row0 = a.map[slot * 3 + 1], rows = a.map[slot * 3 + 2];
  const int lane = threadIdx.x % kLanes, cg = threadIdx.x / kLanes;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * (kColGroups * NC) + cg * NC;
  const int64_t nchunks = a.K / kChunk;
  constexpr int cb = FMT == GS_FMT_BF16 ? 64 : gs_fmt_4bit(FMT) ? 16 : 32;
  constexpr int ce = FMT == GS_FMT_BF16 ? 32 : cb;  // storage elements along K per chunk
  constexpr int eb = FMT == GS_FMT_BF16 ? 2 : 1;

  for (int64_t rg = 0; rg < rows; rg += MR) {
    const int mr = static_cast<int>(rows - rg < MR ? rows - rg : MR);
    float acc[NC][MR];
#pragma unroll
    for (int c = 0; c < NC; ++c)
#pragma unroll
      for (int m = 0; m < MR; ++m) acc[c][m] = 0.0f;
    for (int64_t chunk = lane; chunk < nchunks; chunk += kLanes) {
      uint32_t words[NC][16];
      // Issue every column's loads before any math: NC independent 16-byte load streams per lane.
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        const int64_t n = n0 + c < a.N ? n0 + c : a.N - 1;  // clamp: a duplicate read, never stored
        if (a.vec_w) {
          const uint8_t* p = a.w + (expert * a.w_se + chunk * ce + n * a.w_sn) * eb;
#pragma unroll
          for (int i = 0; i < cb / 16; ++i) reinterpret_cast<uint4*>(words[c])[i] = reinterpret_cast<const uint4*>(p)[i];
        } else {
          gs_load_chunk_strided_t<FMT>(a, expert, chunk, n, words[c]);
        }
      }
      if (MR == 1) {  // one row: convert its x chunk once and reuse it for every column
        float xf[kChunk];
        gs_load_x_chunk(a, row0 + rg, chunk, xf);
#pragma unroll
        for (int c = 0; c < NC; ++c) {
          const int64_t n = n0 + c < a.N ? n0 + c : a.N - 1;
          float w[kChunk];
          gs_decode_chunk_dev<FMT, DEC>(words[c], w);
          const float s0 = gs_k_scale_t<FMT>(a, expert, chunk * kChunk, n);
          const float s1 = FMT == GS_FMT_NVFP4 ? gs_k_scale_t<FMT>(a, expert, chunk * kChunk + 16, n) : 0.0f;
          acc[c][0] = gs_chunk_dot_t<FMT>(w, xf, s0, s1, acc[c][0]);
        }
      } else {
#pragma unroll
        for (int c = 0; c < NC; ++c) {
          const int64_t n = n0 + c < a.N ? n0 + c : a.N - 1;
          float w[kChunk];
          gs_decode_chunk_dev<FMT, DEC>(words[c], w);
          const float s0 = gs_k_scale_t<FMT>(a, expert, chunk * kChunk, n);
          const float s1 = FMT == GS_FMT_NVFP4 ? gs_k_scale_t<FMT>(a, expert, chunk * kChunk + 16, n) : 0.0f;
#pragma unroll
          for (int m = 0; m < MR; ++m) {
            if (m < mr) {
              float xf[kChunk];
              gs_load_x_chunk(a, row0 + rg + m, chunk, xf);
              acc[c][m] = gs_chunk_dot_t<FMT>(w, xf, s0, s1, acc[c][m]);
            }
          }
        }
      }
    }
    // The lane tree of gs_lane_tree through register shuffles: at step s lane i (< s) adds lane i ^ s =
    // i + s, which is p[i] = p[i] + p[i + s]; lane 0 ends with the tree's sum. Width 32 keeps the 32
    // logical lanes apart on 64-wide AMD wavefronts. (Shared memory and 28 barriers per block before.)
#pragma unroll
    for (int c = 0; c < NC; ++c)
#pragma unroll
      for (int m = 0; m < MR; ++m)
#pragma unroll
        for (int s = kLanes / 2; s >= 1; s >>= 1) acc[c][m] = acc[c][m] + __shfl_xor(acc[c][m], s, kLanes);
    if (lane == 0) {
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        const int64_t n = n0 + c;
        if (n >= a.N) continue;
        const float post = gs_post_scale(a, expert, n);
#pragma unroll
        for (int m = 0; m < MR; ++m)
          if (m < mr) a.out[(row0 + rg + m) * a.N + n] = gs_float_to_bf16(acc[c][m] * post);
      }
    }
  }
}
