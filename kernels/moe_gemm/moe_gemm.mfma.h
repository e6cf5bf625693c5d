// moe_gemm.mfma.h -- the MoE GEMM's matrix-core kernel for AMD CDNA (gfx90a, gfx94x, gfx950; included by
// moe_gemm.hip): the tensor-core kernels' slots there.
#pragma once

#include "moe_gemm.formats.h"

// ------------------------------------------------------------------ matrix-core kernel (AMD CDNA: MFMA)
// The tensor-core kernel's form for gfx90a/gfx94x/gfx950 (MI200/MI300-class): slots of more than 4 rows in
// bf16/mxfp8/block_fp8 go through v_mfma_f32_16x16x16bf16_1k (bf16 x bf16 -> f32, 64-lane wavefront). Same
// contract as the NVIDIA kernels: deterministic, its own f32 accumulation order (not the CPU twin's bits),
// each 32-element chunk's partial scaled in f32 with acc = fmaf(c, s, acc) for the K-scaled formats.
// The target's macros pick the instruction: GS_AMD_MFMA below is set only in the device passes of those
// targets; the host picks this kernel by the device's architecture name (gs_device_has_mfma), which names
// the same targets. No AMD GPU was available where it was written: it is compile-checked (.ci/compile_hip.sh
// asserts v_mfma in the gfx90a and gfx942 assembly), its results were not measured.
//
// MFMA 16x16x16 operand layout (AMD's matrix instruction calculator): lane l = i + 16 q (i < 16, q < 4)
// holds A[row i][k 4q..4q+3], B[k 4q..4q+3][column i] (4 bf16 each) and D[rows 4q..4q+3][column i] (4 f32).
// k is a sum index, so one permutation applied to A and B leaves D unchanged: lane q takes K elements
// 8q..8q+7 of each 32-element chunk, 8q..8q+3 in the first MFMA and 8q+4..8q+7 in the second, so x is one
// 16-byte load per row and a weight column one 16-byte (bf16) or 8-byte (fp8) load. Each lane's 4
// accumulators share one output column, so one K scale per lane and column tile.
#if defined(GS_BACKEND_HIP)
#if defined(__HIP_DEVICE_COMPILE__) && (defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || \
                                        defined(__gfx942__) || defined(__gfx950__))
#define GS_AMD_MFMA 1
#endif
constexpr int kMfmaWaves = 4;                               // 64-lane wavefronts per block
constexpr int kMfmaNT = 4;                                  // 16-column tiles per wavefront
constexpr int kMfmaMT = 4;                                  // 16-row tiles per wavefront (weights decoded once)
constexpr int kMfmaTileN = kMfmaWaves * kMfmaNT * 16;      // 256 columns per block

typedef short gs_v4i16 __attribute__((ext_vector_type(4)));
typedef float gs_v4f32 __attribute__((ext_vector_type(4)));

__device__ __forceinline__ gs_v4i16 gs_v4i16_of(uint32_t lo, uint32_t hi) {
  const uint32_t w[2] = {lo, hi};
  gs_v4i16 v;
  memcpy(&v, w, 8);
  return v;
}

// c + A (16 x 16 bf16) B (16 x 16 bf16) in f32.
__device__ __forceinline__ gs_v4f32 gs_mfma_bf16(gs_v4i16 a, gs_v4i16 b, gs_v4f32 c) {
#if defined(GS_AMD_MFMA)
  return __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b, c, 0, 0, 0);
#else
  __builtin_trap();  // the launcher picks this kernel only on the MFMA targets above
  return c;
#endif
}

// Four e4m3fn bytes -> four bf16 in two words, exactly: gs_e4m3fn's f32 has at most 4 significant bits (its
// subnormals land on normal f32), so the top 16 bits are that value in bf16; NaN (also the 0x7F/0xFF poison
// bytes) becomes 0x7FC0/0xFFC0, a bf16 NaN, so poisoned weights still poison the output.
__device__ __forceinline__ void gs_e4m3x4_to_bf16x4(uint32_t word, uint32_t& lo, uint32_t& hi) {
  uint32_t h[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float f = gs_e4m3fn((word >> (8 * j)) & 0xFFu);
    uint32_t bits;
    memcpy(&bits, &f, 4);
    h[j] = bits >> 16;
  }
  lo = h[0] | (h[1] << 16);
  hi = h[2] | (h[3] << 16);
}

// MT 16-row tiles per wavefront; grid (N / kMfmaTileN, slots); kMfmaWaves wavefronts per block.
template <int FMT, int MT>
__global__ void __launch_bounds__(kMfmaWaves * 64) gs_moe_gemm_mfma_kernel(GsMoeArgs a) {
  constexpr int eb = FMT == GS_FMT_BF16 ? 2 : 1;
  constexpr int NT = kMfmaNT;
  const int64_t slot = blockIdx.y;
  const int32_t expert = a.map[slot * 3];
  if (expert < 0 || expert >= a.E) return;  // surplus slot stamped -1
  const int64_t row0 = a.map[slot * 3 + 1], rows = a.map[slot * 3 + 2];
  const int lane = threadIdx.x % 64, i = lane % 16, q = lane / 16;
  const int64_t nw = static_cast<int64_t>(blockIdx.x) * kMfmaTileN + (threadIdx.x / 64) * NT * 16;
  if (nw >= a.N) return;  // wavefront-uniform
  const int64_t nchunks = a.K / kChunk;
  const uint8_t* wcol[NT];  // this lane's weight column per tile (clamped: a duplicate read, never stored)
  int64_t ncol[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int64_t n = nw + nt * 16 + i;
    ncol[nt] = n < a.N ? n : a.N - 1;
    wcol[nt] = a.w + (expert * a.w_se + ncol[nt] * a.w_sn) * eb;
  }
  for (int64_t rg = 0; rg < rows; rg += 16 * MT) {
    gs_v4f32 acc[MT][NT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) acc[mt][nt] = gs_v4f32{0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t chunk = 0; chunk < nchunks; ++chunk) {
      gs_v4i16 b[NT][2];  // [tile][K elements 8q..8q+3, 8q+4..8q+7]
      float s[NT];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const uint8_t* p = wcol[nt] + (chunk * kChunk + 8 * q) * eb;
        if (FMT == GS_FMT_BF16) {
          const uint4 v = *reinterpret_cast<const uint4*>(p);
          b[nt][0] = gs_v4i16_of(v.x, v.y);
          b[nt][1] = gs_v4i16_of(v.z, v.w);
        } else {
          const uint2 v = *reinterpret_cast<const uint2*>(p);
          uint32_t w0, w1, w2, w3;
          gs_e4m3x4_to_bf16x4(v.x, w0, w1);
          gs_e4m3x4_to_bf16x4(v.y, w2, w3);
          b[nt][0] = gs_v4i16_of(w0, w1);
          b[nt][1] = gs_v4i16_of(w2, w3);
        }
        s[nt] = FMT == GS_FMT_BF16 ? 1.0f : gs_k_scale_t<FMT>(a, expert, chunk * kChunk, ncol[nt]);
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int64_t r = rg + mt * 16 + i;
        uint4 xv = make_uint4(0u, 0u, 0u, 0u);  // rows past the slot: zero A rows, never stored
        if (r < rows) xv = *reinterpret_cast<const uint4*>(a.x + (row0 + r) * a.x_sr + chunk * kChunk + 8 * q);
        const gs_v4i16 a0 = gs_v4i16_of(xv.x, xv.y), a1 = gs_v4i16_of(xv.z, xv.w);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          if (FMT == GS_FMT_BF16) {  // no K scale: accumulate in the matrix core directly
            acc[mt][nt] = gs_mfma_bf16(a0, b[nt][0], acc[mt][nt]);
            acc[mt][nt] = gs_mfma_bf16(a1, b[nt][1], acc[mt][nt]);
          } else {
            gs_v4f32 c = gs_mfma_bf16(a0, b[nt][0], gs_v4f32{0.0f, 0.0f, 0.0f, 0.0f});
            c = gs_mfma_bf16(a1, b[nt][1], c);
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[mt][nt][j] = fmaf(c[j], s[nt], acc[mt][nt][j]);
          }
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int64_t n = nw + nt * 16 + i;
        if (n >= a.N) continue;
        const float post = gs_post_scale(a, expert, n);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int64_t r = rg + mt * 16 + 4 * q + j;
          if (r < rows) a.out[(row0 + r) * a.N + n] = gs_float_to_bf16(acc[mt][nt][j] * post);
        }
      }
  }
}
#endif  // GS_BACKEND_HIP
