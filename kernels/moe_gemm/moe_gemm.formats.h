// moe_gemm.formats.h -- the host-device part of the MoE GEMM (moe_gemm.hip): each format's decode of a
// 32-element chunk, the chunk dot product and the 32-lane tree in the fixed order the CUDA-core kernel and the CPU
// twin share, the argument struct and the scale lookups. g++ compiles it in moe_gemm.cpp (the CPU twin), nvcc /
// hipcc in the kernels' units: one source for both, so the twin's bits cannot drift from the kernel's.
#pragma once

#include "hip_compat.h"
#include "gs_formats.h"  // GsFormat: the format codes kernels/common/quant.py FORMAT_CODES hands over

constexpr int kChunk = 32;   // K elements per chunk
constexpr int kLanes = 32;   // logical lanes splitting K

GS_HD inline float gs_bits_f32(uint32_t bits) {
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

// e4m3fn: bias 7, S.1111.111 is NaN, no inf. Placing E and M into f32 bits gives value * 2^-120
// (subnormals land on f32 denormals; no flush-to-zero in these builds), so one exact multiply fixes it.
GS_HD inline float gs_e4m3fn(uint32_t b) {
  float mag = gs_bits_f32((b & 0x7Fu) << 20) * 0x1p120f;
  if ((b & 0x7Fu) == 0x7Fu) mag = NAN;
  return (b & 0x80u) ? -mag : mag;
}
// e4m3fnuz (gfx942): bias 8, 0x80 is the only NaN, no -0.
GS_HD inline float gs_e4m3fnuz(uint32_t b) {
  if (b == 0x80u) return NAN;
  float mag = gs_bits_f32((b & 0x7Fu) << 20) * 0x1p119f;
  return (b & 0x80u) ? -mag : mag;
}
// e2m1: bias 1; E and M into f32 bits give value * 2^-126.
GS_HD inline float gs_e2m1(uint32_t n) {
  float mag = gs_bits_f32((n & 7u) << 22) * 0x1p126f;
  return (n & 8u) ? -mag : mag;
}
// E8M0: 2^(b - 127); 255 is NaN (0xFF poison decodes to NaN).
GS_HD inline float gs_e8m0(uint32_t b) {
  if (b == 255u) return NAN;
  return b ? gs_bits_f32(b << 23) : gs_bits_f32(0x00400000u);
}
// f16 -> f32, exact (Q4_0's d).
GS_HD inline float gs_f16(uint32_t h) {
  uint32_t s = (h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1Fu) return gs_bits_f32(s | 0x7F800000u | (m << 13));
  if (e == 0) {
    float v = static_cast<float>(m) * 0x1p-24f;
    return s ? -v : v;
  }
  return gs_bits_f32(s | ((e + 112u) << 23) | (m << 13));
}

GS_HD inline int gs_elem_bytes(int fmt) { return fmt == GS_FMT_BF16 ? 2 : 1; }
// Two K elements per storage byte (kernels/moe_gemm/ops.py PACKED).
GS_HD constexpr bool gs_fmt_4bit(int fmt) { return fmt == GS_FMT_MXFP4 || fmt == GS_FMT_NVFP4 || fmt == GS_FMT_Q4_0; }

// Decode the 32 weights of one chunk from its little-endian words. FMT is a template parameter so the
// device kernel resolves every index at compile time and keeps words/w in registers (a runtime switch
// put them on a 768-byte stack frame under ptxas).
template <int FMT>
GS_HD inline void gs_decode_chunk_t(const uint32_t* words, float* w) {
#pragma unroll
  for (int j = 0; j < kChunk; ++j) {
    const uint32_t byte4 = (words[j >> 2] >> (8 * (j & 3))) & 0xFFu;
    if (FMT == GS_FMT_BF16) {
      w[j] = gs_bf16_to_float(static_cast<uint16_t>(words[j >> 1] >> (16 * (j & 1))));
    } else if (FMT == GS_FMT_MXFP8 || FMT == GS_FMT_BLOCK_FP8) {
      w[j] = gs_e4m3fn(byte4);
    } else if (FMT == GS_FMT_FP8_FNUZ) {
      w[j] = gs_e4m3fnuz(byte4);
    } else if (FMT == GS_FMT_Q4_0) {  // ggml: byte i holds element i (low nibble) and i + 16 (high nibble)
      const uint32_t b = (words[(j & 15) >> 2] >> (8 * (j & 3))) & 0xFFu;
      w[j] = static_cast<float>(static_cast<int>((j < 16) ? (b & 15u) : (b >> 4)) - 8);
    } else {  // mxfp4 / nvfp4: element 2i low nibble, 2i + 1 high nibble
      const uint32_t b = (words[j >> 3] >> (8 * ((j >> 1) & 3))) & 0xFFu;
      w[j] = gs_e2m1((j & 1) ? (b >> 4) : (b & 15u));
    }
  }
}

// acc += chunk . x with the sub-chunk scales (s1 only for nvfp4's second 16).
template <int FMT>
GS_HD inline float gs_chunk_dot_t(const float* w, const float* x, float s0, float s1, float acc) {
  constexpr int sub = FMT == GS_FMT_NVFP4 ? 16 : 32;
#pragma unroll
  for (int base = 0; base < kChunk; base += sub) {
    float cp = 0.0f;
#pragma unroll
    for (int j = base; j < base + sub; ++j) cp = fmaf(x[j], w[j], cp);
    acc = fmaf(cp, base == 0 ? s0 : s1, acc);
  }
  return acc;
}

// Runtime-format wrappers (the CPU twin).
#define GS_MOE_DISPATCH(fmt, CALL)                          \
  switch (fmt) {                                            \
    case GS_FMT_BF16: CALL(GS_FMT_BF16); break;             \
    case GS_FMT_MXFP8: CALL(GS_FMT_MXFP8); break;           \
    case GS_FMT_FP8_FNUZ: CALL(GS_FMT_FP8_FNUZ); break;     \
    case GS_FMT_BLOCK_FP8: CALL(GS_FMT_BLOCK_FP8); break;   \
    case GS_FMT_MXFP4: CALL(GS_FMT_MXFP4); break;           \
    case GS_FMT_NVFP4: CALL(GS_FMT_NVFP4); break;           \
    default: CALL(GS_FMT_Q4_0); break;                      \
  }
inline void gs_decode_chunk(int fmt, const uint32_t* words, float* w) {
#define GS_DECODE_CALL(F) gs_decode_chunk_t<F>(words, w)
  GS_MOE_DISPATCH(fmt, GS_DECODE_CALL)
#undef GS_DECODE_CALL
}
inline float gs_chunk_dot(int fmt, const float* w, const float* x, float s0, float s1, float acc) {
  float r = 0.0f;
#define GS_DOT_CALL(F) r = gs_chunk_dot_t<F>(w, x, s0, s1, acc)
  GS_MOE_DISPATCH(fmt, GS_DOT_CALL)
#undef GS_DOT_CALL
  return r;
}

// Tree combination of the 32 lane sums (in place; result in p[0]).
GS_HD inline float gs_lane_tree(float* p) {
  for (int s = kLanes / 2; s >= 1; s >>= 1)
    for (int i = 0; i < s; ++i) p[i] = p[i] + p[i + s];
  return p[0];
}

struct GsMoeArgs {
  int fmt;
  const uint16_t* x;  // bf16 bits [R, K], K contiguous
  int64_t x_sr;
  int64_t R, K, N, E;
  const uint8_t* w;  // storage base; strides in storage elements
  int64_t w_se, w_sk, w_sn;
  const uint8_t* s;  // scale base; strides in scale elements; k/n block sizes
  int64_t s_se, s_sk, s_sn, s_kblk, s_nblk;
  const float* g;       // nvfp4 global scale [E] (stride g_se)
  int64_t g_se;
  const int32_t* map;   // [S, 3]
  int64_t S;
  uint16_t* out;        // bf16 [R, N] contiguous
  int vec_w;            // 16-byte weight loads allowed
  int vec_x;            // 16-byte x loads allowed
  // The ring and prefill kernels' fp8 / MXFP4 paths (gs_moe_workspace_bytes > 0): x scaled per row into f16 [R, K] and the
  // power of two per row that undoes it, written by gs_moe_prepare_rows into the caller's workspace.
  uint16_t* xh = nullptr;
  float* x_rs = nullptr;
  // gs_moe_prepare_rows writes xh in gs_moe_gemm_wgmma_q_kernel's K order within each 32-element chunk.
  int xh_wgmma = 0;
};

// K/N extent of one weight scale per format (kernels/moe_gemm/ops.py SCALE_K_BLOCK / SCALE_N_BLOCK;
// gs_moe_make_args refuses any other). Compile-time, so the scale index is shifts, not a 64-bit divide per
// chunk and column (~70 instructions each on NVIDIA, which has no integer divider).
GS_HD constexpr int gs_scale_k_block(int fmt) {
  return fmt == GS_FMT_NVFP4 ? 16 : fmt == GS_FMT_BLOCK_FP8 ? 128 : (fmt == GS_FMT_BF16 || fmt == GS_FMT_FP8_FNUZ) ? 0 : 32;
}
GS_HD constexpr int gs_scale_n_block(int fmt) { return fmt == GS_FMT_BLOCK_FP8 ? 128 : 1; }

// Scale applying to sub-chunk starting at k0 for column n (1.0 where the format has none along K).
template <int FMT>
GS_HD inline float gs_k_scale_t(const GsMoeArgs& a, int64_t e, int64_t k0, int64_t n) {
  if (FMT == GS_FMT_BF16 || FMT == GS_FMT_FP8_FNUZ) return 1.0f;
  constexpr int64_t kb = gs_scale_k_block(FMT) > 0 ? gs_scale_k_block(FMT) : 1, nb = gs_scale_n_block(FMT);
  const int64_t off = e * a.s_se + (k0 / kb) * a.s_sk + (n / nb) * a.s_sn;
  switch (FMT) {
    case GS_FMT_MXFP8:
    case GS_FMT_MXFP4: return gs_e8m0(a.s[off]);
    case GS_FMT_NVFP4: return gs_e4m3fn(a.s[off]) * a.g[e * a.g_se];
    case GS_FMT_Q4_0: return gs_f16(reinterpret_cast<const uint16_t*>(a.s)[off]);
    default: return reinterpret_cast<const float*>(a.s)[off];  // block_fp8
  }
}
inline float gs_k_scale(const GsMoeArgs& a, int64_t e, int64_t k0, int64_t n) {
  float r = 0.0f;
#define GS_SCALE_CALL(F) r = gs_k_scale_t<F>(a, e, k0, n)
  GS_MOE_DISPATCH(a.fmt, GS_SCALE_CALL)
#undef GS_SCALE_CALL
  return r;
}
GS_HD inline float gs_post_scale(const GsMoeArgs& a, int64_t e, int64_t n) {
  if (a.fmt != GS_FMT_FP8_FNUZ) return 1.0f;
  return reinterpret_cast<const float*>(a.s)[e * a.s_se + n * a.s_sn];
}

// Element-wise (strided) load of one chunk's storage into little-endian words (fully unrolled per FMT so
// the words stay in registers on the device).
template <int FMT>
GS_HD inline void gs_load_chunk_strided_t(const GsMoeArgs& a, int64_t e, int64_t chunk, int64_t n, uint32_t* words) {
  constexpr int ce = FMT == GS_FMT_BF16 ? 32 : gs_fmt_4bit(FMT) ? 16 : 32;
#pragma unroll
  for (int i = 0; i < 16; ++i) words[i] = 0;
#pragma unroll
  for (int i = 0; i < ce; ++i) {
    const int64_t off = e * a.w_se + (chunk * ce + i) * a.w_sk + n * a.w_sn;
    if (FMT == GS_FMT_BF16) {
      const uint32_t v = reinterpret_cast<const uint16_t*>(a.w)[off];
      words[i >> 1] |= v << (16 * (i & 1));
    } else {
      const uint32_t v = a.w[off];
      words[i >> 2] |= v << (8 * (i & 3));
    }
  }
}
inline void gs_load_chunk_strided(const GsMoeArgs& a, int64_t e, int64_t chunk, int64_t n, uint32_t* words) {
#define GS_LOAD_CALL(F) gs_load_chunk_strided_t<F>(a, e, chunk, n, words)
  GS_MOE_DISPATCH(a.fmt, GS_LOAD_CALL)
#undef GS_LOAD_CALL
}
