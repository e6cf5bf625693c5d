// moe_gemm.mma.h -- the MoE GEMM's first tensor-core kernel (mma.sync, registers only; included by moe_gemm.hip):
// not launched, kept for bench/moe_gemm_variants.cu; its warp constants and K permutation are the ring kernel's
// (moe_gemm.ring.h).
#pragma once

#include "moe_gemm.device.h"

// ------------------------------------------------------------------------ tensor-core kernel (CUDA)
// Not launched by gs_moe_gemm_launch (the prefill kernel, moe_gemm.tile.h, replaced it, faster for MXFP8
// prefill: DESIGN.md); kept for bench/moe_gemm_variants.cu, which times it. For slots of more than 16 rows the
// CUDA-core kernel does 16+ f32 FMAs per weight and is compute-bound (4.3 ms at 16 tokens per expert on the H200,
// 0.023 of copy bandwidth: reports/performance.md). This path feeds mma.sync.m16n8k16 (bf16 x bf16 -> f32,
// sm_80+) and is NOT the CPU twin's bit pattern: the tensor core's f32 accumulation order is its own. It is deterministic (same bits every run
// and every replay), and its error against the f32 reference is the same order as the CUDA-core kernel's
// (tests/test_moe_gemm_ops.py). The per-chunk scale is still applied as acc = fmaf(c, s, acc) on the chunk's
// 32-element partial c, as in the CUDA-core kernel.
//
// K permutation, so every operand is one contiguous load: mma's k index is a sum index, so any
// permutation applied to both A and B leaves the product unchanged. Lane (g = lane / 4, t = lane % 4) holds
// K elements 8t .. 8t+7 of the chunk for A rows g and g+8 (one 16-byte x load each) and for B column g
// (one 8-byte fp8 load); k-step 0 uses elements 8t+0..3, k-step 1 elements 8t+4..7.
constexpr int kMmaWarps = 4;
constexpr int kMmaNT = 4;                          // n8 tiles per warp
constexpr int kMmaTileN = kMmaWarps * kMmaNT * 8;  // 128 columns per block
constexpr int kMmaUnroll = 4;                      // K chunks loaded ahead per iteration (64 KB in flight per SM)

#if defined(GS_BACKEND_CUDA)
// MT 16-row tiles per warp (weights decoded once for all of them); grid (N / 128, slots); 4 warps.
template <int FMT, int MT>
__global__ void __launch_bounds__(kMmaWarps * 32) gs_moe_gemm_mma_kernel(GsMoeArgs a) {
  constexpr int eb = FMT == GS_FMT_BF16 ? 2 : 1;
  const int64_t slot = blockIdx.y;
  const int32_t expert = a.map[slot * 3];
  if (expert < 0 || expert >= a.E) return;
  const int64_t row0 = a.map[slot * 3 + 1], rows = a.map[slot * 3 + 2];
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t nw = static_cast<int64_t>(blockIdx.x) * kMmaTileN + (threadIdx.x / 32) * kMmaNT * 8;
  if (nw >= a.N) return;  // warp-uniform
  const int64_t nchunks = a.K / kChunk;
  const uint8_t* wcol[kMmaNT];  // this lane's B column per n8 tile (clamped: duplicate reads, never stored)
  int64_t scol[kMmaNT][2];      // the two output columns of this lane per n8 tile (clamped)
#pragma unroll
  for (int nt = 0; nt < kMmaNT; ++nt) {
    const int64_t nb = nw + nt * 8 + g, n0 = nw + nt * 8 + 2 * t;
    wcol[nt] = a.w + (expert * a.w_se + (nb < a.N ? nb : a.N - 1) * a.w_sn) * eb;
    scol[nt][0] = n0 < a.N ? n0 : a.N - 1;
    scol[nt][1] = n0 + 1 < a.N ? n0 + 1 : a.N - 1;
  }
  for (int64_t rg = 0; rg < rows; rg += 16 * MT) {
    float acc[MT][kMmaNT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kMmaNT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.0f;
    for (int64_t c0 = 0; c0 < nchunks; c0 += kMmaUnroll) {
      uint4 wv[kMmaUnroll][kMmaNT];  // fp8: .x/.y used (8 bytes); bf16: all 16 bytes
#pragma unroll
      for (int u = 0; u < kMmaUnroll; ++u)
#pragma unroll
        for (int nt = 0; nt < kMmaNT; ++nt) {
          if (c0 + u < nchunks) {
            const uint8_t* p = wcol[nt] + ((c0 + u) * kChunk + 8 * t) * eb;
            if (FMT == GS_FMT_BF16) {
              wv[u][nt] = *reinterpret_cast<const uint4*>(p);
            } else {
              const uint2 v = *reinterpret_cast<const uint2*>(p);
              wv[u][nt] = make_uint4(v.x, v.y, 0u, 0u);
            }
          }
        }
#pragma unroll
      for (int u = 0; u < kMmaUnroll; ++u) {
        const int64_t chunk = c0 + u;
        if (chunk >= nchunks) break;
        uint32_t afr[MT][2][4];  // [m tile][row g, row g + 8][8 bf16 = K elements 8t .. 8t+7]
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int64_t r = rg + mt * 16 + g + 8 * h;
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            if (r < rows) v = *reinterpret_cast<const uint4*>(a.x + (row0 + r) * a.x_sr + chunk * kChunk + 8 * t);
            afr[mt][h][0] = v.x;
            afr[mt][h][1] = v.y;
            afr[mt][h][2] = v.z;
            afr[mt][h][3] = v.w;
          }
#pragma unroll
        for (int nt = 0; nt < kMmaNT; ++nt) {
          uint32_t b[4];
          if (FMT == GS_FMT_BF16) {
            b[0] = wv[u][nt].x, b[1] = wv[u][nt].y, b[2] = wv[u][nt].z, b[3] = wv[u][nt].w;
          } else {
            gs_e4m3x4_to_bf16x2(wv[u][nt].x, b[0], b[1]);
            gs_e4m3x4_to_bf16x2(wv[u][nt].y, b[2], b[3]);
          }
          float s0 = 1.0f, s1 = 1.0f;
          if (FMT != GS_FMT_BF16) {
            s0 = gs_k_scale_t<FMT>(a, expert, chunk * kChunk, scol[nt][0]);
            s1 = gs_k_scale_t<FMT>(a, expert, chunk * kChunk, scol[nt][1]);
          }
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            const uint32_t k0[4] = {afr[mt][0][0], afr[mt][1][0], afr[mt][0][1], afr[mt][1][1]};
            const uint32_t k1[4] = {afr[mt][0][2], afr[mt][1][2], afr[mt][0][3], afr[mt][1][3]};
            if (FMT == GS_FMT_BF16) {  // no K scale: accumulate in the tensor core directly
              gs_mma_bf16(acc[mt][nt], k0, b[0], b[1]);
              gs_mma_bf16(acc[mt][nt], k1, b[2], b[3]);
            } else {
              float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
              gs_mma_bf16(c, k0, b[0], b[1]);
              gs_mma_bf16(c, k1, b[2], b[3]);
              acc[mt][nt][0] = fmaf(c[0], s0, acc[mt][nt][0]);
              acc[mt][nt][1] = fmaf(c[1], s1, acc[mt][nt][1]);
              acc[mt][nt][2] = fmaf(c[2], s0, acc[mt][nt][2]);
              acc[mt][nt][3] = fmaf(c[3], s1, acc[mt][nt][3]);
            }
          }
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kMmaNT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int64_t r = rg + mt * 16 + g + 8 * (i / 2), n = nw + nt * 8 + 2 * t + (i % 2);
          if (r < rows && n < a.N) a.out[(row0 + r) * a.N + n] = gs_float_to_bf16(acc[mt][nt][i] * gs_post_scale(a, expert, n));
        }
  }
}
#endif  // GS_BACKEND_CUDA
