// moe_gemm.hip -- grouped, weight-quantized MoE GEMM walking the sync-free block map (aiter#5831).
//
//   out[r, n] = sum_k x[r, k] * W[e, k, n]   for every row r of a slot (e, row_start, row_count)
//   x: bf16 [R, K] grouped by expert; W: [E, K, N] in one of 7 formats (kernels/quant.py), read through
//   element strides, so the [E, N, K] storage's transposed view is consumed with no per-call copy;
//   out: bf16 [R, N]; f32 accumulation; slots with expert -1 return at once.
//
// Zero-fill (aiter#5831 defect 1): rows no slot covers (foreign experts under expert parallelism, -1
// padding) are written as zeros by gs_moe_zero_unwritten, inside the op and so inside any graph that
// captures it. Only those rows: a row is zeroed iff no valid slot covers it (decided on the device; the
// host never sees the routing). zero_unwritten=0 exists only for the negative control.
//
// Order of the f32 math, fixed so that kernels/cpu/moe_gemm.cpp (which includes this file's GS_HD part)
// gives the SAME BITS (build.py disables FMA contraction; the fmaf calls below are explicit):
//   K is split into chunks of 32 (one MX/Q4_0 scale block; NVFP4 has two 16-element sub-chunks).
//   Logical lane l (0..31) owns chunks l, l+32, l+64, ...; per sub-chunk it forms
//   cp = fmaf(x_j, w_j, cp) over j in order, then acc = fmaf(cp, scale, acc).
//   The 32 lane sums are combined by the tree p[i] += p[i + s] for s = 16, 8, 4, 2, 1; the result is
//   multiplied by the per-channel post-scale (fp8_fnuz; 1.0 otherwise) and rounded once to bf16.
// The 32 logical lanes are threads of one block reducing through shared memory: no warp-size assumption
// (AMD CDNA runs 64-wide wavefronts; PITFALLS.md "Portability").
//
// Decode shapes are memory-bound: each weight byte is read once per slot with 16-byte loads when the
// K axis is contiguous and aligned (the vector path; else element-wise strided loads feed the SAME math).
// NOTE on throughput: x is re-read from L1 per column; at 16 rows per slot the f32 FMAs (16 per weight)
// make this CUDA-core kernel compute-bound (H200: ~33 T FMA/s vs 4.8 T weights/s); see bench/moe_gemm.py.
#include "hip_compat.h"

// ------------------------------------------------------------------------------------------ formats
enum GsMoeFormat : int {
  GS_MOE_BF16 = 0,
  GS_MOE_MXFP8 = 1,
  GS_MOE_FP8_FNUZ = 2,
  GS_MOE_BLOCK_FP8 = 3,
  GS_MOE_MXFP4 = 4,
  GS_MOE_NVFP4 = 5,
  GS_MOE_Q4_0 = 6,
};
#define GS_MOE_FORMAT_NAMES "0 bf16, 1 mxfp8, 2 fp8_fnuz, 3 block_fp8, 4 mxfp4, 5 nvfp4, 6 q4_0"

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

GS_HD inline int gs_elem_bytes(int fmt) { return fmt == GS_MOE_BF16 ? 2 : 1; }

// Decode the 32 weights of one chunk from its little-endian words. FMT is a template parameter so the
// device kernel resolves every index at compile time and keeps words/w in registers (a runtime switch
// put them on a 768-byte stack frame under ptxas).
template <int FMT>
GS_HD inline void gs_decode_chunk_t(const uint32_t* words, float* w) {
#pragma unroll
  for (int j = 0; j < kChunk; ++j) {
    const uint32_t byte4 = (words[j >> 2] >> (8 * (j & 3))) & 0xFFu;
    if (FMT == GS_MOE_BF16) {
      w[j] = gs_bf16_to_float(static_cast<uint16_t>(words[j >> 1] >> (16 * (j & 1))));
    } else if (FMT == GS_MOE_MXFP8 || FMT == GS_MOE_BLOCK_FP8) {
      w[j] = gs_e4m3fn(byte4);
    } else if (FMT == GS_MOE_FP8_FNUZ) {
      w[j] = gs_e4m3fnuz(byte4);
    } else if (FMT == GS_MOE_Q4_0) {  // ggml: byte i holds element i (low nibble) and i + 16 (high nibble)
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
  constexpr int sub = FMT == GS_MOE_NVFP4 ? 16 : 32;
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
    case GS_MOE_BF16: CALL(GS_MOE_BF16); break;             \
    case GS_MOE_MXFP8: CALL(GS_MOE_MXFP8); break;           \
    case GS_MOE_FP8_FNUZ: CALL(GS_MOE_FP8_FNUZ); break;     \
    case GS_MOE_BLOCK_FP8: CALL(GS_MOE_BLOCK_FP8); break;   \
    case GS_MOE_MXFP4: CALL(GS_MOE_MXFP4); break;           \
    case GS_MOE_NVFP4: CALL(GS_MOE_NVFP4); break;           \
    default: CALL(GS_MOE_Q4_0); break;                      \
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
};

// Scale applying to sub-chunk starting at k0 for column n (1.0 where the format has none along K).
GS_HD inline float gs_k_scale(const GsMoeArgs& a, int64_t e, int64_t k0, int64_t n) {
  if (a.fmt == GS_MOE_BF16 || a.fmt == GS_MOE_FP8_FNUZ) return 1.0f;
  int64_t off = e * a.s_se + (k0 / a.s_kblk) * a.s_sk + (n / a.s_nblk) * a.s_sn;
  switch (a.fmt) {
    case GS_MOE_MXFP8:
    case GS_MOE_MXFP4: return gs_e8m0(a.s[off]);
    case GS_MOE_NVFP4: return gs_e4m3fn(a.s[off]) * a.g[e * a.g_se];
    case GS_MOE_Q4_0: return gs_f16(reinterpret_cast<const uint16_t*>(a.s)[off]);
    default: return reinterpret_cast<const float*>(a.s)[off];  // block_fp8
  }
}
GS_HD inline float gs_post_scale(const GsMoeArgs& a, int64_t e, int64_t n) {
  if (a.fmt != GS_MOE_FP8_FNUZ) return 1.0f;
  return reinterpret_cast<const float*>(a.s)[e * a.s_se + n * a.s_sn];
}

// Element-wise (strided) load of one chunk's storage into little-endian words (fully unrolled per FMT so
// the words stay in registers on the device).
template <int FMT>
GS_HD inline void gs_load_chunk_strided_t(const GsMoeArgs& a, int64_t e, int64_t chunk, int64_t n, uint32_t* words) {
  constexpr int ce = FMT == GS_MOE_BF16 ? 32 : (FMT == GS_MOE_MXFP4 || FMT == GS_MOE_NVFP4 || FMT == GS_MOE_Q4_0) ? 16 : 32;
#pragma unroll
  for (int i = 0; i < 16; ++i) words[i] = 0;
#pragma unroll
  for (int i = 0; i < ce; ++i) {
    const int64_t off = e * a.w_se + (chunk * ce + i) * a.w_sk + n * a.w_sn;
    if (FMT == GS_MOE_BF16) {
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

#ifndef GS_BACKEND_HOST
// ------------------------------------------------------------------------------------------ kernels
constexpr int kThreads = 256;
constexpr int kColGroups = kThreads / kLanes;  // 8
constexpr int kNC = 4;                         // columns per column group
constexpr int kTileN = kColGroups * kNC;       // 32 columns per block

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

template <int FMT, int MR>
__global__ void __launch_bounds__(kThreads) gs_moe_gemm_kernel(GsMoeArgs a) {
  __shared__ float red[kColGroups][MR][kLanes];
  const int64_t slot = blockIdx.y;
  const int32_t expert = a.map[slot * 3];
  if (expert < 0 || expert >= a.E) return;  // surplus slot stamped -1 (aiter: ExptData == -1)
  const int64_t row0 = a.map[slot * 3 + 1], rows = a.map[slot * 3 + 2];
  const int lane = threadIdx.x % kLanes, cg = threadIdx.x / kLanes;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTileN + cg * kNC;
  const int64_t nchunks = a.K / kChunk;
  constexpr int cb = FMT == GS_MOE_BF16 ? 64 : (FMT == GS_MOE_MXFP4 || FMT == GS_MOE_NVFP4 || FMT == GS_MOE_Q4_0) ? 16 : 32;
  constexpr int ce = FMT == GS_MOE_BF16 ? 32 : cb;  // storage elements along K per chunk
  constexpr int eb = FMT == GS_MOE_BF16 ? 2 : 1;

  for (int64_t rg = 0; rg < rows; rg += MR) {
    const int mr = static_cast<int>(rows - rg < MR ? rows - rg : MR);
    float acc[kNC][MR];
#pragma unroll
    for (int c = 0; c < kNC; ++c)
#pragma unroll
      for (int m = 0; m < MR; ++m) acc[c][m] = 0.0f;
    for (int64_t chunk = lane; chunk < nchunks; chunk += kLanes) {
      uint32_t words[kNC][16];
      // Issue every column's loads before any math: kNC independent 16-byte load streams per lane.
#pragma unroll
      for (int c = 0; c < kNC; ++c) {
        const int64_t n = n0 + c < a.N ? n0 + c : a.N - 1;  // clamp: a duplicate read, never stored
        if (a.vec_w) {
          const uint8_t* p = a.w + (expert * a.w_se + chunk * ce + n * a.w_sn) * eb;
#pragma unroll
          for (int i = 0; i < cb / 16; ++i) reinterpret_cast<uint4*>(words[c])[i] = reinterpret_cast<const uint4*>(p)[i];
        } else {
          gs_load_chunk_strided_t<FMT>(a, expert, chunk, n, words[c]);
        }
      }
#pragma unroll
      for (int c = 0; c < kNC; ++c) {
        const int64_t n = n0 + c < a.N ? n0 + c : a.N - 1;
        float w[kChunk];
        gs_decode_chunk_t<FMT>(words[c], w);
        const float s0 = gs_k_scale(a, expert, chunk * kChunk, n);
        const float s1 = FMT == GS_MOE_NVFP4 ? gs_k_scale(a, expert, chunk * kChunk + 16, n) : 0.0f;
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
    // Combine the 32 lanes per (column, row) in shared memory with the tree of gs_lane_tree.
#pragma unroll
    for (int c = 0; c < kNC; ++c) {
#pragma unroll
      for (int m = 0; m < MR; ++m) red[cg][m][lane] = acc[c][m];
      __syncthreads();
      for (int s = kLanes / 2; s >= 1; s >>= 1) {
        if (lane < s)
          for (int m = 0; m < MR; ++m) red[cg][m][lane] = red[cg][m][lane] + red[cg][m][lane + s];
        __syncthreads();
      }
      const int64_t n = n0 + c;
      if (n < a.N && lane < mr) {
        const float v = red[cg][lane][0] * gs_post_scale(a, expert, n);
        a.out[(row0 + rg + lane) * a.N + n] = gs_float_to_bf16(v);
      }
      __syncthreads();
    }
  }
}

// One block per row (grid-stride): zero the row iff no valid slot covers it.
__global__ void __launch_bounds__(kThreads) gs_moe_zero_unwritten(GsMoeArgs a) {
  __shared__ int covered;
  for (int64_t row = blockIdx.x; row < a.R; row += gridDim.x) {
    if (threadIdx.x == 0) covered = 0;
    __syncthreads();
    for (int64_t s = threadIdx.x; s < a.S; s += blockDim.x) {
      const int32_t e = a.map[s * 3], r0 = a.map[s * 3 + 1], cnt = a.map[s * 3 + 2];
      if (e >= 0 && e < a.E && row >= r0 && row < r0 + cnt) covered = 1;  // benign race: all write 1
    }
    __syncthreads();
    if (!covered)
      for (int64_t n = threadIdx.x; n < a.N; n += blockDim.x) a.out[row * a.N + n] = 0;
    __syncthreads();
  }
}

hipError_t gs_moe_gemm_launch(const GsMoeArgs& a, int block_m, int zero_unwritten, hipStream_t stream) {
  if (zero_unwritten && a.R > 0 && a.N > 0) {
    const int64_t blocks = a.R < 65535 ? a.R : 65535;
    hipLaunchKernelGGL(gs_moe_zero_unwritten, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream, a);
  }
  if (a.S == 0 || a.N == 0) return hipGetLastError();
  dim3 grid(static_cast<unsigned>((a.N + kTileN - 1) / kTileN), static_cast<unsigned>(a.S));
  // Rows per register tile: decode slots (1..16 rows) never loop; larger block_m loops over row groups.
#define GS_LAUNCH(F)                                                                      \
  if (block_m <= 1)                                                                       \
    hipLaunchKernelGGL((gs_moe_gemm_kernel<F, 1>), grid, dim3(kThreads), 0, stream, a);   \
  else if (block_m <= 4)                                                                  \
    hipLaunchKernelGGL((gs_moe_gemm_kernel<F, 4>), grid, dim3(kThreads), 0, stream, a);   \
  else                                                                                    \
    hipLaunchKernelGGL((gs_moe_gemm_kernel<F, 16>), grid, dim3(kThreads), 0, stream, a);
  GS_MOE_DISPATCH(a.fmt, GS_LAUNCH)
#undef GS_LAUNCH
  return hipGetLastError();
}
#endif  // !GS_BACKEND_HOST

#ifndef GS_MOE_GEMM_MATH_ONLY
// ------------------------------------------------------------------------------------------ entry
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "gs_checks.h"

// Validate everything before any pointer is read; shared by the CPU and GPU modules.
inline GsMoeArgs gs_moe_make_args(int fmt, uintptr_t x, int64_t x_sr, int64_t R, int64_t K, int64_t N, int64_t E,
                                  uintptr_t w, int64_t w_se, int64_t w_sk, int64_t w_sn, uintptr_t s, int64_t s_se,
                                  int64_t s_sk, int64_t s_sn, int64_t s_kblk, int64_t s_nblk, uintptr_t g,
                                  int64_t g_se, uintptr_t map, int64_t S, uintptr_t out) {
  const char* op = "moe_gemm";
  gs_require(fmt >= GS_MOE_BF16 && fmt <= GS_MOE_Q4_0, op,
             "fmt is " + std::to_string(fmt) + "; allowed: " GS_MOE_FORMAT_NAMES);
  gs_require(R >= 0 && N >= 0 && E >= 1 && S >= 0, op, "sizes must satisfy R >= 0, N >= 0, E >= 1, S >= 0");
  gs_require(K > 0 && K % kChunk == 0, op, "K is " + std::to_string(K) + "; allowed: a positive multiple of 32");
  gs_require_ptr(op, "x", x, R * K);
  gs_require_ptr(op, "w", w, N * K);
  gs_require_ptr(op, "block_map", map, S * 3);
  gs_require_ptr(op, "out", out, R * N);
  if (fmt != GS_MOE_BF16) gs_require_ptr(op, "w_scale", s, N * K);
  if (fmt == GS_MOE_NVFP4) gs_require_ptr(op, "w_global_scale", g, E);
  gs_require(fmt == GS_MOE_BF16 || fmt == GS_MOE_FP8_FNUZ || (s_kblk > 0 && s_nblk > 0), op,
             "scale block sizes must be positive");
  GsMoeArgs a{fmt,  reinterpret_cast<const uint16_t*>(x), x_sr, R, K, N, E, reinterpret_cast<const uint8_t*>(w),
              w_se, w_sk, w_sn, reinterpret_cast<const uint8_t*>(s), s_se, s_sk, s_sn, s_kblk > 0 ? s_kblk : 1,
              s_nblk > 0 ? s_nblk : 1, reinterpret_cast<const float*>(g), g_se, reinterpret_cast<const int32_t*>(map),
              S, reinterpret_cast<uint16_t*>(out), 0, 0};
  const int64_t eb = gs_elem_bytes(fmt);
  a.vec_w = w_sk == 1 && (w % 16) == 0 && ((w_sn * eb) % 16) == 0 && ((w_se * eb) % 16) == 0;
  a.vec_x = (x % 16) == 0 && ((x_sr * 2) % 16) == 0;
  return a;
}

#define GS_MOE_GEMM_PYARGS                                                                                      \
  int fmt, uintptr_t x, int64_t x_sr, int64_t R, int64_t K, int64_t N, int64_t E, uintptr_t w, int64_t w_se,    \
      int64_t w_sk, int64_t w_sn, uintptr_t s, int64_t s_se, int64_t s_sk, int64_t s_sn, int64_t s_kblk,          \
      int64_t s_nblk, uintptr_t g, int64_t g_se, uintptr_t map, int64_t S, uintptr_t out, int64_t block_m,        \
      int zero_unwritten, uintptr_t stream
#define GS_MOE_GEMM_MAKE_ARGS \
  gs_moe_make_args(fmt, x, x_sr, R, K, N, E, w, w_se, w_sk, w_sn, s, s_se, s_sk, s_sn, s_kblk, s_nblk, g, g_se, map, S, out)

#ifndef GS_BACKEND_HOST
PYBIND11_MODULE(GS_MODULE_NAME, m) {
  m.doc() = "graphsafe grouped quantized MoE GEMM (HIP source; built by kernels/build.py)";
  m.def("moe_gemm", [](GS_MOE_GEMM_PYARGS) {
    GsMoeArgs a = GS_MOE_GEMM_MAKE_ARGS;
    gs_require(zero_unwritten == 0 || zero_unwritten == 1, "moe_gemm", "zero_unwritten must be 0 or 1");
    hipError_t err = gs_moe_gemm_launch(a, static_cast<int>(block_m), zero_unwritten, reinterpret_cast<hipStream_t>(stream));
    if (err != hipSuccess) throw std::runtime_error(std::string("moe_gemm: launch failed: ") + hipGetErrorString(err));
  });
}
#endif  // !GS_BACKEND_HOST
#endif  // !GS_MOE_GEMM_MATH_ONLY
