// moe_gemm.hip -- grouped, weight-quantized MoE GEMM walking the sync-free block map (aiter#5831).
//
//   out[r, n] = sum_k x[r, k] * W[e, k, n]   for every row r of a slot (e, row_start, row_count)
//   x: bf16 [R, K] grouped by expert; W: [E, K, N] in one of 7 formats (kernels/common/quant.py), read through
//   element strides, so the [E, N, K] storage's transposed view is consumed with no per-call copy;
//   out: bf16 [R, N]; f32 accumulation; slots with expert -1 return at once.
//
// Zero-fill (aiter#5831 defect 1): rows no slot covers (foreign experts under expert parallelism, -1
// padding) are written as zeros inside the op and so inside any graph that captures it: by zero-fill blocks
// in the CUDA-core, bf16 ring and bf16 warpgroup-MMA kernels' own grids (gs_zero_fill_block), else by
// gs_moe_prepare_rows. Only those rows: a row is zeroed iff no valid slot covers it (decided on the device;
// the host never sees the routing). zero_unwritten=0 exists only for the negative control.
//
// Four kernels:
// * The CUDA-core kernel (every format, every slot size; on AMD the only one outside the MFMA targets)
//   does the f32 math in an
//   order fixed so that moe_gemm.cpp (which includes this file's GS_HD part) gives the SAME
//   BITS (build.py disables FMA contraction; the fmaf calls below are explicit):
//     K is split into chunks of 32 (one MX/Q4_0 scale block; NVFP4 has two 16-element sub-chunks).
//     Logical lane l (0..31) owns chunks l, l+32, l+64, ...; per sub-chunk it forms
//     cp = fmaf(x_j, w_j, cp) over j in order, then acc = fmaf(cp, scale, acc).
//     The 32 lane sums are combined by the tree p[i] += p[i + s] for s = 16, 8, 4, 2, 1; the result is
//     multiplied by the per-channel post-scale (fp8_fnuz; 1.0 otherwise) and rounded once to bf16.
//   The 32 logical lanes reduce through width-32 shuffles, so 64-wide AMD wavefronts hold two independent
//   groups (warpSize is 64 on CDNA). Each weight byte is read once per slot with 16-byte loads when K is
//   contiguous and aligned (else element-wise strided loads feed the SAME math). At 1 token per expert it
//   reads MXFP8 weights at 0.80-0.85 of the H200's copy bandwidth with the sm_89+ e4m3 conversion
//   (0.32 with the portable decode); at 16 rows per slot its 16 f32 FMAs per weight make it compute-bound
//   (reports/measurements/h200-2026-11-30-session2).
// * Two tensor-core kernels (CUDA sm_80+, bf16/mxfp8/block_fp8 for slots of more than 4 rows, MXFP4 for
//   every slot; see gs_moe_gemm_uses_mma): the shared-memory ring kernel for slots of up to 16 rows (decode;
//   0.87 of copy bandwidth at 16 tokens per expert, reports/measurements/h200-2026-11-30-session4; MXFP4 from
//   1 row on) and the shared-memory tile kernel gs_moe_gemm_prefill_kernel for larger slots (prefill, 64 or
//   128 x 256 outputs per CTA; MXFP4 too); both decode e2m1 weights to f16 in registers. In sm_90a builds
//   (H100 / H200) every prefill slot takes a warpgroup-MMA kernel instead: gs_moe_gemm_wgmma_kernel for bf16,
//   gs_moe_gemm_wgmma_q_kernel for MXFP8, MXFP4 and block-FP8. All are deterministic but accumulate in the
//   tensor core's own order: within one bf16 rounding of the CUDA-core kernel, not bitwise equal. kernel_path() in the Python op says
//   which family ran ("tensor_core" or "cuda_core").
// * On AMD gfx90a/gfx94x/gfx950 the matrix-core (MFMA) kernel takes the tensor-core kernels' slots
//   (gs_moe_gemm_mfma_kernel; compiled and checked for MFMA instructions, not run: no AMD GPU here).
#include "hip_compat.h"

// ------------------------------------------------------------------------------------------ formats
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

// ------------------------------------------------------------------------------------------ entry points
// What moe_gemm.entry.h calls for the Python module and the dispatcher unit (moe_gemm.bind.cpp,
// moe_gemm.torch.cpp: host C++ built by g++ beside this file, kernels/common/native.py, "Translation units"),
// after it has refused every bad argument. This file defines them over the
// kernels below, moe_gemm.cpp over the CPU twin.
//   gs_moe_gemm_run: one GEMM on `stream` (a hipStream_t / cudaStream_t; the CPU twin computes before it
//     returns); `a` carries the workspace pointers whenever gs_moe_gemm_workspace(a, block_m) > 0. Returns
//     null, or the runtime's error text.
//   gs_moe_gemm_tensor_core: whether a tensor-core (or matrix-core) kernel takes this call.
//   gs_moe_gemm_workspace: device workspace bytes this call needs (0 on the CPU and the CUDA-core path).
const char* gs_moe_gemm_run(GsMoeArgs a, int block_m, int zero_unwritten, uintptr_t stream);
bool gs_moe_gemm_tensor_core(const GsMoeArgs& a, int block_m);
int64_t gs_moe_gemm_workspace(const GsMoeArgs& a, int block_m);

#ifndef GS_BACKEND_HOST
// Translation units (kernels/common/native.py): the module's build compiles this file with -DGS_SPLIT_UNITS
// beside five parts that include it, each defining GS_MOE_GEMM_PART to the unit it compiles:
//   2 moe_gemm.prefill.hip: the prefill kernels and their launcher;
//   3 moe_gemm.cuda_core.hip / 4 moe_gemm.cuda_core_4bit.hip: the CUDA-core kernel's 1- and 4-row tiles for the
//     8- and 16-bit formats (8 instantiations) / the 4-bit ones (6);
//   5 moe_gemm.cuda_core16.hip / 6 moe_gemm.cuda_core16_4bit.hip: its 16-row tiles, the same split (4 / 3);
// this file (unit 1) keeps the ring, MFMA and row-preparation kernels, the launcher and the entry points. They
// compile at the same time, so the family's cold build takes its longest unit: nvcc sm_90a on the 2-core box,
// each alone, the 16-row tiles took 8.2 s as one unit and 5.1 / 4.5 s split by format width, the small tiles
// 5.2 / 4.3 s (reports/measurements/h200-2026-12-02-session12, "Builds"). Compiled alone (unit 0:
// bench/moe_gemm_variants.cu, .ci/compile_hip.sh) the file holds everything.
#if defined(GS_MOE_GEMM_PART)
#if GS_MOE_GEMM_PART < 2 || GS_MOE_GEMM_PART > 6
#error "GS_MOE_GEMM_PART names a part unit: 2 (prefill) to 6 (16-row CUDA-core tiles, 4-bit formats)"
#endif
#define GS_MOE_UNIT GS_MOE_GEMM_PART
#elif defined(GS_SPLIT_UNITS)
#define GS_MOE_UNIT 1
#else
#define GS_MOE_UNIT 0
#endif
#define GS_MOE_MAIN_UNIT (GS_MOE_UNIT == 0 || GS_MOE_UNIT == 1)
#define GS_MOE_PREFILL_UNIT (GS_MOE_UNIT == 0 || GS_MOE_UNIT == 2)
#define GS_MOE_CUDA_CORE_UNIT (GS_MOE_UNIT == 0 || GS_MOE_UNIT == 3)
#define GS_MOE_CUDA_CORE_4BIT_UNIT (GS_MOE_UNIT == 0 || GS_MOE_UNIT == 4)
#define GS_MOE_CUDA_CORE_16_UNIT (GS_MOE_UNIT == 0 || GS_MOE_UNIT == 5)
#define GS_MOE_CUDA_CORE_16_4BIT_UNIT (GS_MOE_UNIT == 0 || GS_MOE_UNIT == 6)
// ------------------------------------------------------------------------------------------ kernels
#include <atomic>  // gs_device_has_mma_bf16's / gs_device_has_mfma's per-device answers
#if defined(GS_BACKEND_CUDA)
#include <type_traits>  // std::true_type: the ring and prefill kernels' variants of their chunk loops
#include <cuda_fp8.h>  // __nv_cvt_fp8x2_to_halfraw2: cvt.rn.f16x2.e4m3x2, one instruction per 2 weights on sm_89+
#endif

constexpr int kThreads = 256;
constexpr int kColGroups = kThreads / kLanes;  // 8 groups of 32 logical lanes; each group owns NC columns

// The CUDA-core kernel's register tile per row-tile size MR: NC columns per lane group. MR = 16 with 4
// columns kept 4x16 accumulators plus a decoded chunk live and spilled; 2 columns do not.
template <int MR>
struct GsTile {
  static constexpr int NC = MR >= 16 ? 2 : 4;
  static constexpr int kTileN = kColGroups * NC;
};

#if defined(GS_BACKEND_CUDA)
// The two e4m3fn bytes in the low 16 bits of `pair` -> f16x2, exactly: f16 holds every e4m3fn value and
// NaN stays NaN (also the 0x7F/0xFF poison). Portable form: E and M shift into f16's fields (value * 2^-8;
// subnormals land on f16 subnormals), one f16 multiply by 2^8 (a power of two: exact), NaN bytes patched.
__device__ __forceinline__ uint32_t gs_e4m3x2_to_f16x2_portable(uint32_t pair) {
  const uint32_t t = __byte_perm(pair, 0, 0x1404);  // byte 0 -> bits 8..15, byte 1 -> bits 24..31
  uint32_t bits = ((t >> 1) & 0x3F803F80u) | (t & 0x80008000u);
  __half2 v, m;
  const uint32_t k256 = 0x5C005C00u;  // f16 2^8 in both halves
  memcpy(&v, &bits, 4);
  memcpy(&m, &k256, 4);
  v = __hmul2(v, m);
  memcpy(&bits, &v, 4);
  if ((pair & 0x7Fu) == 0x7Fu) bits = (bits & 0xFFFF0000u) | 0x7E00u;
  if ((pair & 0x7F00u) == 0x7F00u) bits = (bits & 0x0000FFFFu) | 0x7E000000u;
  return bits;
}
// The same on sm_89+ with the hardware conversion (cvt.rn.f16x2.e4m3x2): one instruction per 2 weights,
// where the portable form takes ~6. bench/moe_gemm_variants.cu checks both on all 256 bytes.
__device__ __forceinline__ uint32_t gs_e4m3x2_to_f16x2(uint32_t pair) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair & 0xFFFFu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
#else
  return gs_e4m3x2_to_f16x2_portable(pair);
#endif
}
#endif

#if defined(GS_BACKEND_CUDA)
// Eight e2m1 nibbles of one word (element 2i in byte i's low nibble, 2i + 1 in its high one) -> four f16x2
// words (h[i]: elements 2i, 2i + 1), exactly. A nibble S.EE.M placed as f16 bits (S at 15, EEM at 11..9)
// reads value * 2^-14 (EE = 0 lands on f16 subnormals, like e2m1's own), so one f16 multiply by 2^14 (a
// power of two: exact) gives the value, -0 included. Those f16 bits have a zero low byte and the high byte
// (n & 8) << 4 | (n & 7) << 1, formed for the word's 4 low and 4 high nibbles at once; one byte permute
// per pair places them. About 4 instructions per weight to f32 where gs_e2m1 takes about 8.
__device__ __forceinline__ void gs_e2m1x8_to_f16x2(uint32_t word, uint32_t* h) {
  const uint32_t lo = word & 0x0F0F0F0Fu, hi = (word >> 4) & 0x0F0F0F0Fu;
  const uint32_t bl = ((lo & 0x08080808u) << 4) | ((lo & 0x07070707u) << 1);
  const uint32_t bh = ((hi & 0x08080808u) << 4) | ((hi & 0x07070707u) << 1);
  const uint32_t k2p14 = 0x74007400u;  // f16 2^14 in both halves
  __half2 m;
  memcpy(&m, &k2p14, 4);
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    uint32_t bits = __byte_perm(bl, bh, (b << 4) | ((4 + b) << 12)) & 0xFF00FF00u;
    __half2 v;
    memcpy(&v, &bits, 4);
    v = __hmul2(v, m);
    memcpy(&h[b], &v, 4);
  }
}
#endif

// Weight decode on the device, DEC selecting how e4m3fn turns into f32: 0 portable bit arithmetic
// (gs_decode_chunk_t, ~8 integer/float instructions per weight), 1 the sm_89+ hardware conversion
// e4m3x2 -> f16x2 then f16 -> f32. f16 holds every e4m3fn value exactly (NaN stays NaN) and f16 -> f32 is
// exact, so both give the f32 that gs_e4m3fn gives: the CPU twin's bits are kept either way.
// bench/moe_gemm_variants.cu measures the two (reports/measurements/h200-2026-11-30/README.md). DEC 1 also
// decodes e2m1 (mxfp4, nvfp4) through f16x2 (gs_e2m1x8_to_f16x2), exact like gs_e2m1.
template <int FMT, int DEC>
__device__ __forceinline__ void gs_decode_chunk_dev(const uint32_t* words, float* w) {
#if defined(GS_BACKEND_CUDA) && defined(__CUDA_ARCH__)
  if (DEC == 1 && (FMT == GS_FMT_MXFP4 || FMT == GS_FMT_NVFP4)) {
#pragma unroll
    for (int i = 0; i < kChunk / 8; ++i) {
      uint32_t h[4];
      gs_e2m1x8_to_f16x2(words[i], h);
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        w[8 * i + 2 * b] = __half2float(__ushort_as_half(static_cast<unsigned short>(h[b] & 0xFFFFu)));
        w[8 * i + 2 * b + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(h[b] >> 16)));
      }
    }
    return;
  }
#endif
#if defined(GS_BACKEND_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if (DEC == 1 && (FMT == GS_FMT_MXFP8 || FMT == GS_FMT_BLOCK_FP8)) {
#pragma unroll
    for (int i = 0; i < kChunk / 2; ++i) {
      const uint32_t h = gs_e4m3x2_to_f16x2(words[i >> 1] >> (16 * (i & 1)));
      w[2 * i] = __half2float(__ushort_as_half(static_cast<unsigned short>(h & 0xFFFFu)));
      w[2 * i + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(h >> 16)));
    }
    return;
  }
#endif
  gs_decode_chunk_t<FMT>(words, w);
}

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
// Zero-fill blocks of the CUDA-core, ring and bf16 warpgroup-MMA kernels: gs_moe_gemm_launch adds grid rows
// past the S slots'; zero-fill block zb of zn takes the ranges of kZeroRows rows zb, zb + zn, ...: one pass
// over the map marks the range's rows that a valid slot covers, then the block zeroes the others (what
// gs_moe_prepare_rows does), so these paths make one launch per call: the second launch cost about 2-3 us of
// host time per eager call on the H200's host (reports/measurements/h200-2026-12-01-session3-kernels). A block
// per row instead (a map pass and three barriers each) made the ring path 59-65 us slower at 512 rows (Hy4-TP8
// 16 tokens, reports/measurements/h200-2026-12-01-session4-kernels run1): those blocks queue for the few SM
// slots the GEMM's blocks leave. Rows no slot covers are disjoint from the rows the slots' blocks write, so the two
// kinds of block need no order. Every thread of the block calls it.
constexpr int kZeroRows = 64;
__device__ __forceinline__ void gs_zero_uncovered_rows(const GsMoeArgs& a, int64_t zb, int64_t zn) {
  __shared__ int covered[kZeroRows];
  for (int64_t base = zb * kZeroRows; base < a.R; base += zn * kZeroRows) {
    for (int i = threadIdx.x; i < kZeroRows; i += blockDim.x) covered[i] = 0;
    __syncthreads();
    for (int64_t s = threadIdx.x; s < a.S; s += blockDim.x) {
      const int32_t e = a.map[s * 3], r0 = a.map[s * 3 + 1], cnt = a.map[s * 3 + 2];
      if (e < 0 || e >= a.E) continue;
      const int64_t lo = r0 > base ? r0 : base, hi = r0 + cnt < base + kZeroRows ? r0 + cnt : base + kZeroRows;
      for (int64_t r = lo; r < hi; ++r) covered[r - base] = 1;  // benign race: all write 1
    }
    __syncthreads();
    const int64_t nr = a.R - base < kZeroRows ? a.R - base : kZeroRows;
    for (int64_t r = 0; r < nr; ++r)
      if (!covered[r])
        for (int64_t n = threadIdx.x; n < a.N; n += blockDim.x) a.out[(base + r) * a.N + n] = 0;
    __syncthreads();  // `covered` is reset for the next range only after every thread has read it
  }
}
// A kernel's first step where the launcher may add zero-fill rows to its grid: true (after the fill) for a
// block past the S slots' rows, which then returns; block-uniform.
__device__ __forceinline__ bool gs_zero_fill_block(const GsMoeArgs& a) {
  if (static_cast<int64_t>(blockIdx.y) < a.S) return false;
  const int64_t zrows = static_cast<int64_t>(gridDim.y) - a.S;
  gs_zero_uncovered_rows(a, (static_cast<int64_t>(blockIdx.y) - a.S) * gridDim.x + blockIdx.x, zrows * gridDim.x);
  return true;
}

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

// ------------------------------------------------------------------------ tensor-core kernel (CUDA)
// Not launched by gs_moe_gemm_launch (the prefill kernel below replaced it: 3.45 -> 2.13 ms for MXFP8
// prefill); kept for bench/moe_gemm_variants.cu, which times it. For slots of more than 16 rows the CUDA-core
// kernel does 16+ f32 FMAs per weight and is compute-bound (4.3 ms at 16 tokens per expert on the H200, 2.3% of copy
// bandwidth: reports/measurements/moe_gemm-kernel-design). This path feeds mma.sync.m16n8k16 (bf16 x bf16 -> f32, sm_80+) and is NOT the CPU twin's
// bit pattern: the tensor core's f32 accumulation order is its own. It is deterministic (same bits every
// run and every replay), and its error against the f32 reference is the same order as the CUDA-core
// kernel's (tests/test_moe_gemm_ops.py). The per-chunk scale is still applied as acc = fmaf(c, s, acc) on
// the chunk's 32-element partial c, as in the CUDA-core kernel.
//
// K permutation, so every operand is one contiguous load: mma's k index is a sum index, so any
// permutation applied to both A and B leaves the product unchanged. Lane (g = lane / 4, t = lane % 4) holds
// K elements 8t .. 8t+7 of the chunk for A rows g and g+8 (one 16-byte x load each) and for B column g
// (one 8-byte fp8 load); k-step 0 uses elements 8t+0..3, k-step 1 elements 8t+4..7.
constexpr int kMmaWarps = 4;
constexpr int kMmaNT = 4;                          // n8 tiles per warp
constexpr int kMmaTileN = kMmaWarps * kMmaNT * 8;  // 128 columns per block
constexpr int kMmaUnroll = 4;                      // K chunks loaded ahead per iteration (64 KB in flight per SM)

GS_HD inline bool gs_mma_format(int fmt) {
  return fmt == GS_FMT_BF16 || fmt == GS_FMT_MXFP8 || fmt == GS_FMT_BLOCK_FP8;
}

#if defined(GS_BACKEND_CUDA)
// Four e4m3fn bytes -> two bf16x2 words, exactly (the prefill kernel's decode): each byte goes to the top
// of a 16-bit half, E and M shift into bf16's fields (value * 2^-120, subnormals onto bf16 subnormals) and
// one bf16 multiply by 2^120 rescales (a power of two: exact). S.1111.111 (NaN, also the 0x7F/0xFF poison
// bytes) is found with one add over the word and set to a bf16 NaN, so poisoned weights still poison the
// output.
__device__ __forceinline__ void gs_e4m3x4_to_bf16x2(uint32_t word, uint32_t& lo, uint32_t& hi) {
  constexpr uint32_t kPow2_120 = 0x7B807B80u;  // bf16 2^120 in both halves (exponent field 247)
  __nv_bfloat162 m;
  memcpy(&m, &kPow2_120, 4);
  const uint32_t t[2] = {__byte_perm(word, 0, 0x1404), __byte_perm(word, 0, 0x3424)};
  uint32_t r[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    uint32_t bits = ((t[i] >> 4) & 0x07F007F0u) | (t[i] & 0x80008000u);
    __nv_bfloat162 v;
    memcpy(&v, &bits, 4);
    v = __hmul2(v, m);
    memcpy(&r[i], &v, 4);
  }
  const uint32_t nan_bytes = ((word & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u;
  if (nan_bytes) {
    if (nan_bytes & 0x00000080u) r[0] = (r[0] & 0xFFFF0000u) | 0x7FC0u;
    if (nan_bytes & 0x00008000u) r[0] = (r[0] & 0x0000FFFFu) | 0x7FC00000u;
    if (nan_bytes & 0x00800000u) r[1] = (r[1] & 0xFFFF0000u) | 0x7FC0u;
    if (nan_bytes & 0x80000000u) r[1] = (r[1] & 0x0000FFFFu) | 0x7FC00000u;
  }
  lo = r[0];
  hi = r[1];
}

__device__ __forceinline__ void gs_mma_bf16(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();  // the launcher only picks this path on compute capability >= 8.0
#endif
}

__device__ __forceinline__ void gs_mma_f16(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();
#endif
}

// True when a byte of the word is 0x00 or 0xFF: E8M0 values (2^-127, NaN) that gs_e8m0_shift cannot form.
__device__ __forceinline__ bool gs_e8m0_has_00_or_ff(uint32_t w) {
  const uint32_t nw = ~w;
  return (((w - 0x01010101u) & nw) | ((nw - 0x01010101u) & w)) & 0x80808080u;
}
// Byte u of the word as 2^(e-127) in f32: the byte shifted into f32's exponent field. Exact for e in
// 1..254; 0 and 255 go through gs_e8m0 (gs_e8m0_has_00_or_ff finds them).
__device__ __forceinline__ float gs_e8m0_shift(uint32_t w, int u) {
  const uint32_t bits = (u == 3 ? w >> 1 : w << (23 - 8 * u)) & 0x7F800000u;
  return __uint_as_float(bits);
}

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

// ------------------------------------------------ tensor-core decode kernel, shared-memory ring (CUDA)
// Slots of 5..16 rows: the 16-tokens-per-expert decode step; MXFP4 slots of 1..16 rows (1 row: 15 of the 16
// MMA rows are zero; larger slots go to the prefill kernel). MXFP4 on the H200 in the launcher's form (XS 2, 8
// chunks per stage, 8 warps, kRingXsMxfp4's note): 0.631 / 0.684 of copy bandwidth at Hy4-TP8 / DSv3 1 token per
// expert and 0.561 at Hy4-TP8 16 tokens; the CUDA-core kernel 0.31 at 1 token, 0.02 at 16 (reports/measurements/
// h200-2026-12-02-session9/call_d). MXFP8 at Hy4-TP8 16 tokens on the H200 in the launcher's form
// (kRingWarpsMxfp8): 0.81-0.85 of copy bandwidth for the kernel alone, 0.76 with gs_moe_prepare_rows
// (bench/moe_gemm_variants.cu, reports/measurements/h200-2026-12-02-session9; the variants it beat, a one-tile
// MMA kernel at 0.34 and a bf16 software decode at 0.68-0.70, are in reports/measurements/moe_gemm-kernel-design).
// Per block of W warps (W x NT n8 column tiles, 16 rows):
//  * a ring of S stages in shared memory, each stage 4 chunks (128 K) of every column of the tile and the MX
//    scales, and a ring of S + 1 stages of the 16 x rows (see below), filled with cp.async (nothing passes
//    through registers) from per-thread pointers computed once: 8 threads copy one 128-byte fp8 column line,
//    so each request is a full line; the columns' 16-byte pieces are XOR-swizzled so the 8 columns of one B
//    fragment read distinct banks;
//  * MXFP4: one 32-bit word per column, chunk and lane (K elements 8t..8t+7) from 64-byte stage rows,
//    decoded to f16x2 by gs_e2m1x8_to_f16x2_ring; x as below, in that decode's pair order; scales as MXFP8's;
//  * fp8 weights (mxfp8, block_fp8) reach the tensor core as f16 through the sm_89+ hardware conversion
//    (gs_e4m3x2_to_f16x2: exact, NaN kept, one instruction per 2 weights; the bf16 decode took 5) and meet
//    x as f16: gs_moe_prepare_rows scales each x row by a power of two so that its largest magnitude lies in
//    [2^7, 2^8) (exact for every element within 2^24 of it) and the epilogue multiplies the row back. f16 x
//    f16 products are exact in the MMA's f32 accumulator;
//  * MXFP8: each chunk's f32 partial (two MMAs from zero) times its columns' 2^(e-127), formed by shifting e
//    into f32's exponent field; a warp vote per stage sends E8M0 bytes 0 (2^-127, an f32 subnormal) and 255
//    (NaN), which the shift cannot form, to gs_e8m0. The scale is applied in f32, so scaled weights below
//    bf16's normal range keep every bit;
//  * block_fp8's f32 scale is one value per 128 K x 128 N block: warp-uniform over a stage (stages start at
//    multiples of 128 K; a warp's NT * 8 columns lie in one 128-column block), so it multiplies the stage's
//    f32 partial once. bf16 weights and bf16 x go to the tensor core as they are.
// Limit: x elements smaller than 2^-24 of their row's largest round in f16 (error at most 2^-25 of the row's
// largest magnitude); f32 partials in x's row scale overflow only for outputs within 2^7 of f32's maximum.
constexpr int kRingStages = 2;
// MXFP8's ring: 8 warps of 4 n8 tiles (256 columns per block), 2 stages, registers capped for 2 blocks per SM.
// At Hy4-TP8 16 tokens on the H200, kernel alone, as fractions of copy bandwidth (bench/moe_gemm_variants.cu,
// three sweeps): 0.851, 0.820, 0.811 against 0.736, 0.722, 0.721 for 4 warps of 4 tiles capped for 4 blocks,
// the form block_fp8's ring keeps; 3 stages (0.718) or 2 tiles per warp (0.465-0.658) are slower
// (reports/measurements/h200-2026-12-02-session6-kernels/run1_variants.txt, h200-2026-12-02-session8/call_c,
// h200-2026-12-02-session9/call_a).
constexpr int kRingWarpsMxfp8 = 8;
constexpr int kRingMinBlocksMxfp8 = 2;
// MXFP4's ring: swapped operands with the 2^14 in the f32 scale (XS 2), 8 warps of 4 n8 tiles (256 columns per
// block), 2 stages of 8 chunks (256 K, 128 bytes per column), registers capped for 2 blocks per SM. The best of
// bench/moe_gemm_variants.cu's sweeps on the H200, each with the op's gs_moe_prepare_rows launch and checked
// against the CUDA-core kernel, as fractions of copy bandwidth (rows of 4 warps capped for 4 blocks from
// reports/measurements/h200-2026-12-02-session6-kernels/run1_variants.txt; the 8-warp row and its 4-warp
// twin in the same run from h200-2026-12-02-session9/call_d):
//   form                                 Hy4-TP8 1 token  DSv3 1 token  Hy4-TP8 16 tokens
//   XS 0, 4 chunks                       0.429            0.448         0.418
//   XS 1, 4 chunks                       0.544            0.564         0.494
//   XS 2, 4 chunks                       0.544            0.566         0.498
//   XS 2, 8 chunks                       0.603            0.666         0.523
//   XS 2, 8 chunks, 3 stages             0.570            0.598         0.500
//   XS 2, 8 chunks, 4 warps              0.597            0.675         0.527
//   XS 2, 8 chunks, 8 warps (this one)   0.631            0.684         0.561
// 3 or 4 stages of 4 chunks, 2 n8 tiles per warp, a cap for 3 blocks per SM, and 8 warps with 4 chunks, 3
// stages or 2 tiles per warp measured 0.431-0.588 in the same runs. Slots of 2..15 rows take the same kernel
// (not timed at those sizes). Every one of these forms has the ALU pipe as its busiest under Nsight Compute
// (53-65%, this one 63%; h200-2026-12-02-session9/call_f): the e2m1 decode's shifts, masks and permutes bound it.
constexpr int kRingNtMxfp4 = 4;
constexpr int kRingWarpsMxfp4 = 8;
constexpr int kRingMinBlocksMxfp4 = 2;
constexpr int kRingStagesMxfp4 = 2;
constexpr int kRingChunksMxfp4 = 8;
constexpr int kRingXsMxfp4 = 2;
// n8 tiles per warp of the launcher's ring per format: bf16 2 (its 2 stages within 48 KB), the others 4.
GS_HD constexpr int gs_ring_nt(int fmt) { return fmt == GS_FMT_BF16 ? 2 : fmt == GS_FMT_MXFP4 ? kRingNtMxfp4 : 4; }

__device__ __forceinline__ void gs_cp_async16(void* smem, const void* gmem, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0));
#else
  __trap();  // the launcher only picks this path on compute capability >= 8.0
#endif
}
__device__ __forceinline__ void gs_cp_async4(void* smem, const void* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(gmem));
#else
  __trap();
#endif
}
__device__ __forceinline__ void gs_cp_async8(void* smem, const void* gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(gmem));
#else
  __trap();
#endif
}
__device__ __forceinline__ void gs_cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void gs_cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// Chunks per ring stage: 4 (128 K: one block_fp8 scale block; 128 bytes per fp8 column), MXFP4 8 (256 K, 128
// bytes per e2m1 column: with XS 2 and 4 warps, 0.603 / 0.666 of copy bandwidth at Hy4-TP8 / DSv3 decode against
// 0.544 / 0.566 at 4 chunks, kRingXsMxfp4's note).
GS_HD constexpr int gs_ring_chunks(int fmt) { return fmt == GS_FMT_MXFP4 ? kRingChunksMxfp4 : 4; }

template <int FMT, int U = gs_ring_chunks(FMT)>
struct GsRing {
  static constexpr int kEb = FMT == GS_FMT_BF16 ? 2 : 1;   // bytes per storage element (mxfp4: 2 K per byte)
  static constexpr bool kMx = FMT == GS_FMT_MXFP8 || FMT == GS_FMT_MXFP4;  // one E8M0 byte per chunk and column
  static constexpr int kU = U;                             // chunks per stage
  static constexpr int kRowBytes = FMT == GS_FMT_MXFP4 ? kU * kChunk / 2 : kU * kChunk * kEb;  // a column's stage slice
  static constexpr int kPieces = kRowBytes / 16;           // 16-byte cp.async pieces per column
  static constexpr int kPieceK = 16 * kU * kChunk / kRowBytes;  // K elements per piece
  static constexpr int kXRow = kU * kChunk + 32;           // x row in elements, padded 64 B (bank spread)
  static constexpr int kXBytes = 16 * kXRow * 2;
  static constexpr int kSCol = kMx ? kU : 0;               // E8M0 bytes per column and stage
  static_assert(FMT != GS_FMT_BLOCK_FP8 || kU == 4, "block_fp8: one stage per 128-K scale block");
  static_assert(!kMx || kU == 4 || kU == 8, "MX scale words: one or two per column and stage");
  // Byte offset of K element k within a column.
  GS_HD static constexpr int64_t kbytes(int64_t k) { return FMT == GS_FMT_MXFP4 ? k / 2 : k * kEb; }
  // Swizzle of a column's 16-byte pieces so the 8 columns g of one fragment load hit distinct banks. 128-byte
  // rows (fp8; MXFP4 at 8 chunks): lane (g, t) reads at piece p ^ g, bank 4 (p ^ g) + (t or t / 2) mod 32.
  // MXFP4 at 4 chunks (64-byte rows): bank 16g + 4 (u ^ f(g)) + t mod 32; the even (odd) g share the 16g
  // term, so f(g) = (g >> 1) & 3 tells the four apart.
  GS_HD static constexpr int swz(int row, int piece) {
    return FMT == GS_FMT_BF16 ? piece ^ ((row & 1) << 2) : kRowBytes == 64 ? piece ^ ((row >> 1) & 3) : piece ^ (row & 7);
  }
};
// S weight slots (weights, scale bytes), then S + 1 x slots: gs_moe_gemm_mma_ring_kernel.
template <int FMT, int NT, int S, int W = kMmaWarps, int U = gs_ring_chunks(FMT)>
constexpr int gs_ring_smem_bytes() {
  using R = GsRing<FMT, U>;
  constexpr int tn = W * NT * 8;
  return S * (tn * R::kRowBytes + tn * R::kSCol) + (S + 1) * R::kXBytes;
}

__device__ __forceinline__ uint32_t gs_hmul2_bits(uint32_t x, uint32_t m) {
  __half2 a, b;
  memcpy(&a, &x, 4);
  memcpy(&b, &m, 4);
  a = __hmul2(a, b);
  memcpy(&x, &a, 4);
  return x;
}

// The ring kernel's e2m1 decode: one word of 8 nibbles (K elements 8t..8t+7 of a column; element 2i in byte
// i's low nibble, 2i + 1 in its high one) -> four f16x2 B-fragment words, exactly. A nibble S.EE.M placed as
// f16 bits S000EEM0 in a half's high byte reads value * 2^-14 (EE = 0 lands on f16 subnormals, like e2m1's
// own), so one f16 multiply by 2^14 (a power of two: exact) gives the value, -0 included. The high bytes of
// the 4 low nibbles (bl) and of the 4 high nibbles (bh) are formed at once; each byte permute takes two of
// them with zero low bytes, so the pairs are elements (0, 2), (4, 6) from bl and (1, 3), (5, 7) from bh,
// and gs_moe_prepare_rows writes x in the same order for MXFP4. 15 instructions per 8 weights.
// gs_e2m1x8_to_f16x2_mul takes the f16x2 multiplier: the prefill kernel's MXFP4 fast path passes 2^(e-113),
// the 2^14 and the chunk's E8M0 scale in one multiply (exact in the range its note gives).
__device__ __forceinline__ void gs_e2m1x8_to_f16x2_mul(uint32_t word, uint32_t m, uint32_t* h) {
  const uint32_t bl = ((word << 4) & 0x80808080u) | ((word << 1) & 0x0E0E0E0Eu);
  const uint32_t bh = (word & 0x80808080u) | ((word >> 3) & 0x0E0E0E0Eu);
  h[0] = gs_hmul2_bits(__byte_perm(bl, 0, 0x1404), m);  // elements 0, 2
  h[1] = gs_hmul2_bits(__byte_perm(bh, 0, 0x1404), m);  // 1, 3
  h[2] = gs_hmul2_bits(__byte_perm(bl, 0, 0x3424), m);  // 4, 6
  h[3] = gs_hmul2_bits(__byte_perm(bh, 0, 0x3424), m);  // 5, 7
}
// The same bytes without the multiply: f16 values of the e2m1 weights times 2^-14, exact (EE = 0 on f16
// subnormals). The ring's XS = 2 path takes the 2^14 into its f32 scale (gs_e8m0_fold14).
__device__ __forceinline__ void gs_e2m1x8_to_f16x2_raw(uint32_t word, uint32_t* h) {
  const uint32_t bl = ((word << 4) & 0x80808080u) | ((word << 1) & 0x0E0E0E0Eu);
  const uint32_t bh = (word & 0x80808080u) | ((word >> 3) & 0x0E0E0E0Eu);
  h[0] = __byte_perm(bl, 0, 0x1404);  // elements 0, 2
  h[1] = __byte_perm(bh, 0, 0x1404);  // 1, 3
  h[2] = __byte_perm(bl, 0, 0x3424);  // 4, 6
  h[3] = __byte_perm(bh, 0, 0x3424);  // 5, 7
}
// True when a byte of the word is 0 or above 240: E8M0 values whose 2^(e - 127 + 14) gs_e8m0_shift cannot form
// in f32 after gs_e8m0_fold14 (0: 2^-127 is subnormal; 241..254 would pass 2^127; 255 is NaN). Byte-wise
// t = (b + 15) mod 256 without carries between bytes, then whether a byte of t is below 16.
__device__ __forceinline__ bool gs_e8m0_outside_1_240(uint32_t w) {
  const uint32_t t = ((w & 0x7F7F7F7Fu) + 0x0F0F0F0Fu) ^ (w & 0x80808080u);
  return ((t - 0x10101010u) & ~t & 0x80808080u) != 0;
}
// E8M0 bytes 1..240 plus 14 each (no carries for those bytes): gs_e8m0_shift of the result is 2^(e - 127) * 2^14.
__device__ __forceinline__ uint32_t gs_e8m0_fold14(uint32_t w) { return w + 0x0E0E0E0Eu; }
constexpr uint32_t kF16x2Pow14 = 0x74007400u;  // f16 2^14 in both halves
__device__ __forceinline__ void gs_e2m1x8_to_f16x2_ring(uint32_t word, uint32_t* h) {
  gs_e2m1x8_to_f16x2_mul(word, kF16x2Pow14, h);
}


// MINB (blocks per SM the register budget must allow), W (warps per block) and U (chunks per stage): the
// launcher's are in gs_moe_gemm_launch (W 4; MXFP8 and MXFP4 8: kRingWarpsMxfp8, kRingWarpsMxfp4);
// bench/moe_gemm_variants.cu instantiates others to measure them.
//
// x has its own ring of S + 1 slots, one stage ahead of the weights: the group of cp.async copies that brings
// stage st's weights also brings stage st + 1's x (bf16 x for bf16 weights; for fp8 / MXFP4 the row-scaled
// f16 x gs_moe_prepare_rows wrote into the workspace, in the MXFP4 pair order), so x never waits behind the
// weights (bf16 at Hy4-TP8 16 tokens: 1.01 of copy bandwidth, reports/measurements/
// h200-2026-12-01-session4-kernels; whether the ring costs the fp8 path is open there). Grid rows past the S
// slots' are zero-fill blocks (gs_zero_uncovered_rows) when the launcher passes them: the bf16 ring is then
// one launch per call (the fp8 / MXFP4 paths launch gs_moe_prepare_rows first anyway, which zero-fills).
// Converting x inside this kernel instead (every column block of a slot converting the slot's rows again)
// measured 20-35% slower for MXFP8 and MXFP4 (same folder), so the f16 x stays a separate pass.
//
// XS (MXFP4: 1 or 2, kRingXsMxfp4 picks the launcher's, 2; MXFP8: 1, bench/moe_gemm_variants.cu only): the operands
// swap, out^T = W^T x^T. The decoded weights are the MMA's A operand (m16: 16 columns, rows g and g + 8 of the
// fragment are columns g and g + 8 of a pair of n8 tiles) and x the B operand (n8: 8 rows of the slot; rows 8..15 take a second MMA on the same weights, only
// in a row group of more than 8 rows). One MMA per decoded word of 8 weights instead of two, half the f32
// scale FMAs, and no register moves to gather x fragments (a lane's 16-byte x read of row g is its B fragment
// for both k16 steps). The SASS of the unswapped MXFP4 loop (sm_90, nvdisasm) holds about 34 instructions per
// decoded word: 14 decode, 2 HMMA, 4 FFMA, 2 for the scales, 8-10 register moves for the A fragments, loads and
// the chunk bound; at 1 row per slot 15 of its 16 MMA rows are zero. XS 2's loop holds about 18 (71 per chunk
// of 4 words: 7 + 4 decode per word, 1 HMMA, 2 FFMA, 1 for the scales). A NumPy model of both forms' fragment,
// pair-order, scale and 2^14 arithmetic (xs_model.py in reports/measurements/h200-2026-12-02-session6-kernels)
// matches an f64 reference; on the H200 XS 1 and 2 match the CUDA-core kernel at both decode shapes and 16 tokens
// (same folder, run1_variants.txt; timings in kRingXsMxfp4's note).
template <int FMT, int NT, int S, int MINB = 1, int W = kMmaWarps, int UC = gs_ring_chunks(FMT), int XS = 0>
__global__ void __launch_bounds__(W * 32, MINB) gs_moe_gemm_mma_ring_kernel(GsMoeArgs a) {
  static_assert(XS == 0 || ((FMT == GS_FMT_MXFP4 || (FMT == GS_FMT_MXFP8 && XS == 1)) && NT % 2 == 0),
                "XS: MXFP4 (1, 2) or MXFP8 (1) with pairs of n8 tiles");
  using R = GsRing<FMT, UC>;
  constexpr bool kX16 = FMT != GS_FMT_BF16;  // fp8 / e2m1 weights: x as gs_moe_prepare_rows' row-scaled f16
  constexpr int U = R::kU, TN = W * NT * 8, kThr = W * 32;
  constexpr int kXPer = 16 * U * 4 / kThr;  // x pieces per thread per stage (16 rows x U * 4 pieces)
  constexpr int kRowThreads = U * 4;        // threads holding one x row's pieces of a stage (16 or 32)
  constexpr int kWBytes = TN * R::kRowBytes, kSBytes = TN * R::kSCol;
  constexpr int kStageBytes = kWBytes + kSBytes;
  constexpr int kXSlot = R::kXBytes;
  constexpr int kWPer = TN * R::kPieces / kThr;  // weight pieces per thread per stage
  constexpr int kRowStep = kThr / R::kPieces;    // rows between a thread's pieces
  constexpr int kSW = R::kMx ? U / 4 : 1;        // E8M0 words per column and stage
  static_assert(kThr % R::kPieces == 0 && TN % kRowStep == 0 && TN <= kThr && kXPer >= 1 && 16 * U * 4 % kThr == 0,
                "ring tiling");
  extern __shared__ __align__(16) uint8_t gs_ring_smem[];
  if (gs_zero_fill_block(a)) return;
  const int64_t slot = blockIdx.y;
  const int32_t expert = a.map[slot * 3];
  if (expert < 0 || expert >= a.E) return;  // block-uniform
  const int64_t row0 = a.map[slot * 3 + 1], rows = a.map[slot * 3 + 2];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * TN;
  const int64_t nchunks = a.K / kChunk, nst = (nchunks + U - 1) / U;
  uint8_t* const xring = gs_ring_smem + S * kStageBytes;
  const uint16_t* xbase = kX16 ? a.xh : a.x;  // kX16: gs_moe_prepare_rows' f16 x [R, K]
  const int64_t xstride = kX16 ? a.K : a.x_sr;
  // Issue side, fixed per thread: weight pieces (row wr + j * kRowStep, piece wp), x pieces, the scale bytes.
  const int wr = tid / R::kPieces, wp = tid % R::kPieces;
  const uint8_t* wsrc[kWPer];
#pragma unroll
  for (int j = 0; j < kWPer; ++j) {
    const int64_t n = col0 + wr + j * kRowStep < a.N ? col0 + wr + j * kRowStep : a.N - 1;  // clamp: never stored
    wsrc[j] = a.w + (expert * a.w_se + n * a.w_sn) * R::kEb + wp * 16;
  }
  const int wdst = wr * R::kRowBytes + R::swz(wr, wp) * 16;  // + j * kRowStep * kRowBytes; same swizzle for all j
  const int xrow = tid / kRowThreads, xpiece = tid % kRowThreads;  // x pieces: rows xrow + h * (16 / kXPer)
  const uint8_t* ssrc = nullptr;
  bool vec_s = false;
  if (R::kMx && tid < TN) {
    const int64_t n = col0 + tid < a.N ? col0 + tid : a.N - 1;
    ssrc = a.s + expert * a.s_se + n * a.s_sn;
    vec_s = a.s_sk == 1 &&
            ((reinterpret_cast<uintptr_t>(a.s) | static_cast<uintptr_t>(a.s_se | a.s_sn)) & static_cast<uintptr_t>(R::kMx ? R::kSCol - 1 : 0)) == 0;
  }
  const float* sblk = FMT == GS_FMT_BLOCK_FP8
                          ? reinterpret_cast<const float*>(a.s) + expert * a.s_se + ((col0 + warp * NT * 8) / 128) * a.s_sn
                          : nullptr;
  // Compute side, fixed per lane: this lane's B column row of the weight tile and its fragment offsets.
  const int brow = warp * NT * 8 + g;
  int boff[U];
#pragma unroll
  for (int u = 0; u < U; ++u)
    boff[u] = FMT == GS_FMT_BF16    ? brow * R::kRowBytes + R::swz(g, 4 * u + t) * 16
              : FMT == GS_FMT_MXFP4 ? brow * R::kRowBytes + R::swz(g, u) * 16 + 4 * t
                                    : brow * R::kRowBytes + R::swz(g, 2 * u + t / 2) * 16 + 8 * (t & 1);
  for (int64_t rg = 0; rg < rows; rg += 16) {
    const uint16_t* xsrc[kXPer];
    bool xin[kXPer];
#pragma unroll
    for (int h = 0; h < kXPer; ++h) {
      const int64_t r = rg + xrow + (16 / kXPer) * h;
      xin[h] = r < rows;
      xsrc[h] = xbase + (xin[h] ? (row0 + r) * xstride : 0) + xpiece * 8;
    }
    // Weights and scale bytes of stage st into ring slot st % S (cp.async).
    auto issue_w = [&](int64_t st) {
      uint8_t* base = gs_ring_smem + (st % S) * kStageBytes;
      const int64_t kel = st * U * kChunk;  // first K element of the stage
      const bool wvalid = kel + wp * R::kPieceK < a.K;
#pragma unroll
      for (int j = 0; j < kWPer; ++j)
        gs_cp_async16(base + wdst + j * kRowStep * R::kRowBytes, wvalid ? wsrc[j] + R::kbytes(kel) : a.w, wvalid);
      if (R::kMx && tid < TN) {
        uint8_t* dst = base + kWBytes + tid * R::kSCol;
        const int64_t c0 = st * U;
        if (vec_s && c0 + U <= nchunks) {
          if (U == 8)
            gs_cp_async8(dst, ssrc + c0);
          else
            gs_cp_async4(dst, ssrc + c0);
        } else {  // unaligned scale layout or the last partial stage: plain loads (rare; correct)
          uint32_t v[kSW] = {};
          for (int u = 0; u < U; ++u)
            if (c0 + u < nchunks) v[u / 4] |= static_cast<uint32_t>(ssrc[(c0 + u) * a.s_sk]) << (8 * (u % 4));
#pragma unroll
          for (int q = 0; q < kSW; ++q) reinterpret_cast<uint32_t*>(dst)[q] = v[q];
        }
      }
    };
    // x of stage st into x slot st % (S + 1) (cp.async; rows past the slot and K past the end: zeros).
    auto issue_x = [&](int64_t st) {
      uint8_t* base = xring + (st % (S + 1)) * kXSlot;
      const int64_t kel = st * U * kChunk;
      const bool kx = kel + xpiece * 8 < a.K;
#pragma unroll
      for (int h = 0; h < kXPer; ++h)
        gs_cp_async16(base + ((xrow + (16 / kXPer) * h) * R::kXRow + xpiece * 8) * 2,
                      kx && xin[h] ? xsrc[h] + kel : xbase, kx && xin[h]);
    };
    float acc[NT][4];  // XS: [j * 2 + tt][i], m16 column tile j, n8 row tile tt
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;
    const bool two_row_tiles = rows - rg > 8;  // XS: a second n8 row tile (block-uniform)
    static_cast<void>(two_row_tiles);
    // Groups: prologue group k (k < S - 1) = weights k + x k + 1 (group 0 also x 0); the loop's group at stage
    // st = weights st + S - 1 + x st + S. Waiting for all but the newest S - 2 groups at stage st leaves weights
    // st and x st + 1 landed.
    if (nst > 0) issue_x(0);
#pragma unroll
    for (int st = 0; st < S - 1; ++st) {
      if (st < nst) issue_w(st);
      if (st + 1 < nst) issue_x(st + 1);
      gs_cp_async_commit();
    }
    for (int64_t st = 0; st < nst; ++st) {
      gs_cp_async_wait<S - 2>();  // weights st and x st + 1 have landed (for this thread) ...
      __syncthreads();            // ... for every thread, and every warp is done with stage st - 1's slots
      if (st + S - 1 < nst) issue_w(st + S - 1);
      if (st + S < nst) issue_x(st + S);
      gs_cp_async_commit();  // possibly empty: keeps the group count per stage
      const uint8_t* base = gs_ring_smem + (st % S) * kStageBytes;
      const uint8_t* xslot = xring + (st % (S + 1)) * kXSlot;
      const uint8_t* xs = xslot + (g * R::kXRow + 8 * t) * 2;
      const float bscale = FMT == GS_FMT_BLOCK_FP8 ? sblk[((st * U * kChunk) / 128) * a.s_sk] : 1.0f;
      const int ulim = nchunks - st * U < U ? static_cast<int>(nchunks - st * U) : U;  // chunks in this stage
      float part[FMT == GS_FMT_BLOCK_FP8 ? NT : 1][4] = {};
      // MX: the stage's E8M0 bytes (one per chunk; kSW words) of the two accumulator columns 2t, 2t + 1 of
      // each n8 tile; exact_scale flags a byte 0 or 255 among the warp's, whose f32 value the shift cannot form.
      uint32_t sw[R::kMx ? NT : 1][2][kSW];
      bool exact_scale = false;
      if (R::kMx && XS == 0) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const uint8_t* sp = base + kWBytes + (warp * NT * 8 + nt * 8 + 2 * t) * R::kSCol;
          if (kSW == 2) {
            const uint4 v = *reinterpret_cast<const uint4*>(sp);
            sw[nt][0][0] = v.x, sw[nt][0][kSW - 1] = v.y, sw[nt][1][0] = v.z, sw[nt][1][kSW - 1] = v.w;
          } else {
            const uint2 v = *reinterpret_cast<const uint2*>(sp);
            sw[nt][0][0] = v.x, sw[nt][1][0] = v.y;
          }
#pragma unroll
          for (int c = 0; c < 2; ++c)
#pragma unroll
            for (int q = 0; q < kSW; ++q) exact_scale |= gs_e8m0_has_00_or_ff(sw[nt][c][q]);
        }
      }
      // The stage's chunks; kExact (a stage with an E8M0 byte 0 or 255: the last partial stage, which pads
      // with 0, or a NaN/2^-127 scale) decodes each scale with gs_e8m0 instead of the shift. The MX chunks'
      // f32 partials are independent MMAs from zero: folding MXFP4's scale into its f16 weights and
      // accumulating in place (one MMA chain per tile, the prefill kernel's MXFP8 fast path) measured 5-13%
      // slower in the ring on the H200 (run2 against run1 of reports/measurements/
      // h200-2026-12-01-session3-kernels).
      auto chunks = [&](auto exact_tag) {
        constexpr bool kExact = decltype(exact_tag)::value;
        static_cast<void>(kExact);  // read only by the MX instantiations
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (u >= ulim) break;
          const uint4 x0 = *reinterpret_cast<const uint4*>(xs + u * kChunk * 2);
          const uint4 x1 = *reinterpret_cast<const uint4*>(xs + (8 * R::kXRow + u * kChunk) * 2);
          // K elements 8t..8t+3 / 8t+4..8t+7 of rows g, g + 8 (MXFP4: x in its decode's pair order, so the
          // words hold elements (0, 2), (1, 3) / (4, 6), (5, 7): store_x)
          const uint32_t k0[4] = {x0.x, x1.x, x0.y, x1.y};
          const uint32_t k1[4] = {x0.z, x1.z, x0.w, x1.w};
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            if constexpr (FMT == GS_FMT_BF16) {
              const uint4 v = *reinterpret_cast<const uint4*>(base + boff[u] + nt * 8 * R::kRowBytes);
              gs_mma_bf16(acc[nt], k0, v.x, v.y);
              gs_mma_bf16(acc[nt], k1, v.z, v.w);
            } else {
              uint32_t b0, b1, b2, b3;
              if constexpr (FMT == GS_FMT_MXFP4) {
                uint32_t h[4];
                gs_e2m1x8_to_f16x2_ring(*reinterpret_cast<const uint32_t*>(base + boff[u] + nt * 8 * R::kRowBytes), h);
                b0 = h[0], b1 = h[1], b2 = h[2], b3 = h[3];
              } else {
                const uint2 v = *reinterpret_cast<const uint2*>(base + boff[u] + nt * 8 * R::kRowBytes);
                b0 = gs_e4m3x2_to_f16x2(v.x), b1 = gs_e4m3x2_to_f16x2(v.x >> 16);
                b2 = gs_e4m3x2_to_f16x2(v.y), b3 = gs_e4m3x2_to_f16x2(v.y >> 16);
              }
              if constexpr (FMT == GS_FMT_BLOCK_FP8) {
                gs_mma_f16(part[FMT == GS_FMT_BLOCK_FP8 ? nt : 0], k0, b0, b1);
                gs_mma_f16(part[FMT == GS_FMT_BLOCK_FP8 ? nt : 0], k1, b2, b3);
              } else {  // MXFP8 / MXFP4: the chunk's partial in f32, times its columns' 2^(e-127)
                float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                gs_mma_f16(c, k0, b0, b1);
                gs_mma_f16(c, k1, b2, b3);
                const uint32_t w0 = sw[R::kMx ? nt : 0][0][(u / 4) % kSW], w1 = sw[R::kMx ? nt : 0][1][(u / 4) % kSW];
                const float s0 = kExact ? gs_e8m0(w0 >> (8 * (u % 4)) & 0xFFu) : gs_e8m0_shift(w0, u % 4);
                const float s1 = kExact ? gs_e8m0(w1 >> (8 * (u % 4)) & 0xFFu) : gs_e8m0_shift(w1, u % 4);
                acc[nt][0] = fmaf(c[0], s0, acc[nt][0]);
                acc[nt][1] = fmaf(c[1], s1, acc[nt][1]);
                acc[nt][2] = fmaf(c[2], s0, acc[nt][2]);
                acc[nt][3] = fmaf(c[3], s1, acc[nt][3]);
              }
            }
          }
        }
      };
      // XS: lane (g, t) holds the E8M0 words of its A-fragment columns g and g + 8 of each m16 tile j (the
      // stage's kSW words per column); the warp's lanes cover its 4 NT * 8 columns, so the vote sees them all.
      uint32_t sx[XS ? NT / 2 : 1][2][kSW];
      if constexpr (XS != 0) {
        exact_scale = false;
#pragma unroll
        for (int j = 0; j < NT / 2; ++j)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const uint32_t* sp = reinterpret_cast<const uint32_t*>(base + kWBytes + (warp * NT * 8 + 16 * j + 8 * c + g) * R::kSCol);
#pragma unroll
            for (int q = 0; q < kSW; ++q) {
              sx[j][c][q] = sp[q];
              exact_scale |= XS == 2 ? gs_e8m0_outside_1_240(sx[j][c][q]) : gs_e8m0_has_00_or_ff(sx[j][c][q]);
            }
          }
      }
      auto chunks_xs = [&](auto exact_tag, auto two_tag) {
        constexpr bool kExact = decltype(exact_tag)::value, kTwo = decltype(two_tag)::value;
        static_cast<void>(kExact);
#pragma unroll
        for (int u = 0; u < U; ++u) {
          if (u >= ulim) break;
          const uint4 x0 = *reinterpret_cast<const uint4*>(xs + u * kChunk * 2);  // row g: B for both k16 steps
          uint4 x1 = make_uint4(0u, 0u, 0u, 0u);
          if constexpr (kTwo) x1 = *reinterpret_cast<const uint4*>(xs + (8 * R::kXRow + u * kChunk) * 2);
#pragma unroll
          for (int j = 0; j < (XS ? NT / 2 : 1); ++j) {
            uint32_t hg[4], h8[4];  // columns g and g + 8 of m16 tile j (n8 tiles 2j and 2j + 1)
            if constexpr (FMT == GS_FMT_MXFP8) {  // 8 e4m3 bytes per column: K elements 8t..8t+7 in order
              const uint2 vg = *reinterpret_cast<const uint2*>(base + boff[u] + 2 * j * 8 * R::kRowBytes);
              const uint2 v8 = *reinterpret_cast<const uint2*>(base + boff[u] + (2 * j + 1) * 8 * R::kRowBytes);
              hg[0] = gs_e4m3x2_to_f16x2(vg.x), hg[1] = gs_e4m3x2_to_f16x2(vg.x >> 16);
              hg[2] = gs_e4m3x2_to_f16x2(vg.y), hg[3] = gs_e4m3x2_to_f16x2(vg.y >> 16);
              h8[0] = gs_e4m3x2_to_f16x2(v8.x), h8[1] = gs_e4m3x2_to_f16x2(v8.x >> 16);
              h8[2] = gs_e4m3x2_to_f16x2(v8.y), h8[3] = gs_e4m3x2_to_f16x2(v8.y >> 16);
            } else if constexpr (XS == 2) {  // weights times 2^-14; the scale takes the 2^14 (fast) or c does (exact)
              const uint32_t wg = *reinterpret_cast<const uint32_t*>(base + boff[u] + 2 * j * 8 * R::kRowBytes);
              const uint32_t w8 = *reinterpret_cast<const uint32_t*>(base + boff[u] + (2 * j + 1) * 8 * R::kRowBytes);
              gs_e2m1x8_to_f16x2_raw(wg, hg);
              gs_e2m1x8_to_f16x2_raw(w8, h8);
            } else {
              const uint32_t wg = *reinterpret_cast<const uint32_t*>(base + boff[u] + 2 * j * 8 * R::kRowBytes);
              const uint32_t w8 = *reinterpret_cast<const uint32_t*>(base + boff[u] + (2 * j + 1) * 8 * R::kRowBytes);
              gs_e2m1x8_to_f16x2_ring(wg, hg);
              gs_e2m1x8_to_f16x2_ring(w8, h8);
            }
            const uint32_t k0[4] = {hg[0], h8[0], hg[1], h8[1]};
            const uint32_t k1[4] = {hg[2], h8[2], hg[3], h8[3]};
            const uint32_t w0 = sx[XS ? j : 0][0][(u / 4) % kSW], w1 = sx[XS ? j : 0][1][(u / 4) % kSW];
            const float s0 = kExact ? gs_e8m0(w0 >> (8 * (u % 4)) & 0xFFu)
                                    : gs_e8m0_shift(XS == 2 ? gs_e8m0_fold14(w0) : w0, u % 4);
            const float s1 = kExact ? gs_e8m0(w1 >> (8 * (u % 4)) & 0xFFu)
                                    : gs_e8m0_shift(XS == 2 ? gs_e8m0_fold14(w1) : w1, u % 4);
#pragma unroll
            for (int tt = 0; tt < (kTwo ? 2 : 1); ++tt) {
              const uint4 xv = tt ? x1 : x0;
              float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
              gs_mma_f16(c, k0, xv.x, xv.y);
              gs_mma_f16(c, k1, xv.z, xv.w);
              if (XS == 2 && kExact)
#pragma unroll
                for (float& v : c) v *= 16384.0f;  // 2^14: exact (|c| <= 32 * 2^8 * 6 * 2^-14)
              float* ac = acc[(XS ? j : 0) * 2 + tt];
              ac[0] = fmaf(c[0], s0, ac[0]);  // column g, rows 2t, 2t + 1
              ac[1] = fmaf(c[1], s0, ac[1]);
              ac[2] = fmaf(c[2], s1, ac[2]);  // column g + 8
              ac[3] = fmaf(c[3], s1, ac[3]);
            }
          }
        }
      };
      if constexpr (XS != 0) {
        const bool exact = __any_sync(0xFFFFFFFFu, exact_scale);
        if (exact && two_row_tiles)
          chunks_xs(std::true_type{}, std::true_type{});
        else if (exact)
          chunks_xs(std::true_type{}, std::false_type{});
        else if (two_row_tiles)
          chunks_xs(std::false_type{}, std::true_type{});
        else
          chunks_xs(std::false_type{}, std::false_type{});
      } else if (R::kMx && __any_sync(0xFFFFFFFFu, exact_scale)) {
        chunks(std::true_type{});
      } else {
        chunks(std::false_type{});
      }
      if (FMT == GS_FMT_BLOCK_FP8) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[nt][i] = fmaf(part[FMT == GS_FMT_BLOCK_FP8 ? nt : 0][i], bscale, acc[nt][i]);
      }
    }
    __syncthreads();  // the next row group's prologue refills slots other warps may still read
    const int64_t nw = col0 + warp * NT * 8;
    if constexpr (XS != 0) {  // acc[j * 2 + tt][i]: column nw + 16 j + g + 8 (i / 2), row rg + 8 tt + 2 t + i % 2
#pragma unroll
      for (int j = 0; j < NT / 2; ++j)
#pragma unroll
        for (int tt = 0; tt < 2; ++tt)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int64_t r = rg + 8 * tt + 2 * t + (i % 2), n = nw + 16 * j + g + 8 * (i / 2);
            if (r < rows && n < a.N) a.out[(row0 + r) * a.N + n] = gs_float_to_bf16(acc[j * 2 + tt][i] * a.x_rs[row0 + r]);
          }
    } else {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t r = rg + g + 8 * h;
        if (r >= rows) continue;
        const float rs = kX16 ? a.x_rs[row0 + r] : 1.0f;  // undo the f16 row scale (a power of two: exact)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            const int64_t n = nw + nt * 8 + 2 * t + i;
            if (n < a.N) a.out[(row0 + r) * a.N + n] = gs_float_to_bf16(kX16 ? acc[nt][2 * h + i] * rs : acc[nt][2 * h + i]);
          }
      }
    }
  }
}

// ------------------------------------------- tensor-core prefill kernel, shared-memory tiles (CUDA)
// Slots of more than 16 rows (prefill: the DeepSeek-like shape runs 128 tokens per expert). A CTA computes a
// (64 MW)-row x 256-column output tile: MW rows of 4 warps side by side along N, each warp 64 rows x 64
// columns (4 m16 x 8 n8 mma.sync tiles), so every weight element a CTA stages is converted exactly once and
// feeds 64 MW rows, and every x element in shared memory feeds 256 columns. The launcher takes MW = 2 (128-row
// tiles, 8 warps) for slots of block_m >= 128, else MW = 1 (the weights of a 128-row slot are then staged once
// instead of twice). Per CTA, a ring of S stages (3: 4 measured 1-10% slower on the H200 at MW = 1) filled by
// cp.async (nothing passes through registers): each stage is U chunks of every one of the 256 weight columns
// (gs_pf_chunks: 1 chunk of bf16, 2 of fp8, 4 of e2m1: 64 bytes per column) and the matching x rows. The
// operand layout is the ring kernel's K permutation (lane t holds K elements 8t..8t+7 of a chunk: one 16-byte
// x read per row and one 16-byte bf16 / 8-byte fp8 / 4-byte e2m1 weight read per column), conflict-free with
// the swizzles of GsPf.
//  * bf16 weights: bf16 x bf16 into the f32 accumulators directly.
//  * fp8 weights (mxfp8, block_fp8): the ring kernel's f16 path: weights through the hardware e4m3 -> f16
//    conversion (exact, NaN kept), x as gs_moe_prepare_rows' row-scaled f16, the row scale undone in the
//    epilogue.
//  * MXFP4 weights: one 32-bit word (8 e2m1 nibbles) per column, chunk and lane, decoded to f16x2 in
//    registers (gs_e2m1x8_to_f16x2_mul: x in its pair order, as in the ring kernel); every weight is read
//    from memory once per 64 MW rows (the ring kernel re-reads them per 16: 40.9 ms at the prefill shape below).
//  * MX fast path: when every E8M0 byte a warp needs for a group of 4 chunks lies in 113..134 (MXFP8; 2^-14 ..
//    2^7; quantize_weight gives about 2^-7 for N(0,1) weights) or 104..128 (MXFP4), the scale multiplies the
//    f16 weights (HMUL2) and the chunk accumulates in the tensor core directly. MXFP8: e4m3 magnitudes
//    2^-9 .. 448 times 2^-14 .. 2^7 land in 2^-23 .. 57344, inside f16 with every bit kept. MXFP4: one f16
//    multiply by 2^(e-113) does the decode's 2^14 and the scale at once (a normal f16 for e in 99..128); e2m1
//    values 0.5 .. 6 (lowest bit 2^-1) times 2^(e-127) keep every bit from e = 104 (lowest bit 2^-24, f16's
//    smallest subnormal). Otherwise (a warp vote; E8M0 0 and 255 included) each chunk's f32 partial is
//    multiplied by gs_e8m0's scale with acc = fmaf(c, s, acc), as in the ring kernel: exact for every scale.
//  * block_fp8: its f32 scale is uniform over a warp's 64 columns and a chunk, so each chunk's f32 partial
//    takes it with acc = fmaf(c, s, acc).
// Deterministic: a fixed order per output element, no atomics. Slots' rows past the slot read zeros (cp.async
// zero-fill) and m16 tiles wholly past it are skipped (a warp whose 64 rows all lie past it only copies).
// Measured (H200, DeepSeek-like 32 x 4096 x 7168, 128 tokens per expert, bench/moe_gemm.py; reports/measurements/
// h200-2026-12-01-session5-kernels run2): block_m 128 (MW = 2) mxfp8 1.06 ms, bf16 1.12, block_fp8 1.42, mxfp4
// 1.14; block_m 64 (MW = 1) 1.36 / 1.25 / 1.61 / 1.31; against
// 0.53 ms for torch._grouped_mm on bf16: 170-230 TFLOP/s, still under half of it. The per-m16-tile branches
// between the MMAs cost 40-70% in every tile (mxfp8 1.83 against 1.06 ms, run1 and run2 there), so only a slot's
// last, partial tile takes them (kFull). block_fp8 always takes the exact path (an f32 partial per chunk).
// Where the time goes (Nsight Compute at DSv3-prefill, reports/measurements/h200-2026-12-02-session9/call_b):
// the launcher's tilings run 8 warps per SM (244-255 registers: 128 accumulators per thread; the fp8 and MXFP4
// forms spill besides; tilings with larger rings fit 4), issue an instruction in 35-44% of cycles (26-28% at 4
// warps) and keep the tensor pipe 26-36% busy. bf16, which does not spill, is no busier than MXFP8: two warps
// per scheduler cannot hide the MMA and shared-memory latencies, which is what warpgroup MMA (sm_90 wgmma,
// asynchronous, operands from shared memory) would.
constexpr int kPfWarpsN = 4;                       // warps side by side along N
constexpr int kPfMT = 4;                           // m16 tiles per warp: 64 rows
constexpr int kPfNT = 8;                           // n8 tiles per warp: 64 columns
constexpr int kPfWarpM = 16 * kPfMT;               // rows per warp row
constexpr int kPfTileN = kPfWarpsN * kPfNT * 8;    // 256 columns per CTA
constexpr int kPfStages = 3;
// Chunks per stage: 64 bytes of each weight column (two 32-byte sectors).
GS_HD constexpr int gs_pf_chunks(int fmt) { return fmt == GS_FMT_BF16 ? 1 : fmt == GS_FMT_MXFP4 ? 4 : 2; }

template <int FMT, int MW = 1, int U = gs_pf_chunks(FMT), int S = kPfStages>
struct GsPf {
  static constexpr int kEb = FMT == GS_FMT_BF16 ? 2 : 1;
  static constexpr bool kMx = FMT == GS_FMT_MXFP8 || FMT == GS_FMT_MXFP4;  // one E8M0 byte per chunk and column
  static constexpr int kTileM = kPfWarpM * MW;
  static constexpr int kThreads = kPfWarpsN * MW * 32;
  static constexpr int kARow = U * kChunk * 2;  // bytes of one x row per stage (f16 / bf16)
  static constexpr int kBRow = FMT == GS_FMT_MXFP4 ? U * kChunk / 2 : U * kChunk * kEb;  // one weight column
  static constexpr int kAPieces = kARow / 16, kBPieces = kBRow / 16;
  static constexpr int kBPieceK = 16 * U * kChunk / kBRow;  // K elements per 16-byte weight piece
  static constexpr int kABytes = kTileM * kARow, kBBytes = kPfTileN * kBRow;
  // MX formats: each weight column's E8M0 word of the stage's group of 4 chunks (every stage of a group carries it).
  static constexpr int kSBytes = kMx ? kPfTileN * 4 : 0;
  static constexpr int kStageBytes = kABytes + kBBytes + kSBytes;
  // MW = 1: 75 KB mxfp8, 72 KB block_fp8, 60 KB bf16, 99 KB mxfp4 (2 CTAs per SM); MW = 2: 99 / 96 / 72 / 147 KB.
  static constexpr int kSmem = S * kStageBytes;
  static_assert(FMT != GS_FMT_MXFP4 || U == 4, "MXFP4: 64-byte weight rows (swb)");
  static_assert(FMT != GS_FMT_BF16 || U == 1 || U == 2, "bf16: 64- or 128-byte weight rows (swb)");
  static_assert(FMT == GS_FMT_BF16 || FMT == GS_FMT_MXFP4 || U == 2 || U == 4, "fp8: 64- or 128-byte rows (swb)");
  static_assert(4 % U == 0, "a stage lies in one group of 4 chunks (MX scale word, block_fp8's 128-K block)");
  GS_HD static constexpr int64_t kbytes(int64_t k) { return FMT == GS_FMT_MXFP4 ? k / 2 : k * kEb; }
  // 16-byte piece p of x row r / weight column c. A quarter-warp's 16-byte x reads cover rows g, g + 1 at
  // pieces 4u + t: with rows of 128 bytes or more the two rows would share banks unless odd rows swap 64-byte
  // halves. Weight reads: bf16 (16 bytes, a quarter-warp on columns g, g + 1) likewise; fp8 (8 bytes, half a
  // warp on columns g..g+3, 32 bytes each at pieces 2u + t/2): 64-byte rows move columns 2, 3 to the other
  // piece pair, 128-byte rows give each of the 4 columns its own pair; e2m1 (4 bytes, the whole warp on 8
  // columns of 64 bytes): the ring kernel's swizzle, (c >> 1) & 3 telling the 4 columns of one 16g bank offset apart.
  GS_HD static constexpr int swa(int r, int p) { return kARow >= 128 ? p ^ ((r & 1) << 2) : p; }
  GS_HD static constexpr int swb(int c, int p) {
    return FMT == GS_FMT_BF16    ? (kBRow >= 128 ? p ^ ((c & 1) << 2) : p)
           : FMT == GS_FMT_MXFP4 ? p ^ ((c >> 1) & 3)
           : kBRow == 64         ? p ^ (c & 2)
                                 : p ^ ((c & 3) << 1);
  }
};

template <int FMT, int MW = 1, int U = gs_pf_chunks(FMT), int S = kPfStages>
__global__ void __launch_bounds__(GsPf<FMT, MW, U, S>::kThreads, 2 / MW) gs_moe_gemm_prefill_kernel(GsMoeArgs a) {
  using P = GsPf<FMT, MW, U, S>;
  constexpr bool kX16 = FMT != GS_FMT_BF16;  // fp8 / e2m1 weights: x comes as gs_moe_prepare_rows' scaled f16
  constexpr int kThr = P::kThreads, kTileM = P::kTileM;
  constexpr int kAPer = kTileM * P::kAPieces / kThr, kARowStep = kThr / P::kAPieces;
  constexpr int kBPer = kPfTileN * P::kBPieces / kThr, kBColStep = kThr / P::kBPieces;
  static_assert(kAPer >= 1 && kBPer >= 1 && kBPer <= 32 && kARowStep % 2 == 0 && kBColStep % 8 == 0 &&
                    kPfTileN % kThr == 0,
                "tiling: one swizzle per thread for all its pieces");
  extern __shared__ __align__(16) uint8_t gs_pf_smem[];
  const int64_t slot = blockIdx.y;
  const int32_t expert = a.map[slot * 3];
  if (expert < 0 || expert >= a.E) return;  // block-uniform
  const int64_t row0 = a.map[slot * 3 + 1], rows = a.map[slot * 3 + 2];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  // This warp's column quarter and first row (compile-time 0 at MW = 1: a runtime 0 cost 12-44 spilled bytes).
  const int wn = MW == 1 ? warp : warp % kPfWarpsN, mbase = MW == 1 ? 0 : (warp / kPfWarpsN) * kPfWarpM;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kPfTileN;
  const int64_t nw = col0 + wn * kPfNT * 8;  // this warp's first output column
  const bool wactive = nw < a.N;             // warp-uniform; an idle warp still copies and meets barriers
  const int64_t nchunks = a.K / kChunk, nst = (nchunks + U - 1) / U;
  const uint16_t* xbase = kX16 ? a.xh : a.x;
  const int64_t xstride = kX16 ? a.K : a.x_sr;
  // Issue side, fixed per thread: x pieces (rows ar + j * kARowStep, piece ap), weight pieces (columns
  // br + j * kBColStep, piece bp). Row steps are even and column steps multiples of 8, so one swizzle serves all j.
  const int ar = tid / P::kAPieces, ap = tid % P::kAPieces;
  const int br = tid / P::kBPieces, bp = tid % P::kBPieces;
  const int achunk = ap * 8 / kChunk, bchunk = bp * P::kBPieceK / kChunk;  // chunk within the stage
  const int adst = ar * P::kARow + P::swa(ar, ap) * 16;
  const int bdst = P::kABytes + br * P::kBRow + P::swb(br, bp) * 16;
  const uint8_t* wsrc = a.w + (expert * a.w_se) * P::kEb + bp * 16;
  uint32_t bmask = 0;  // weight columns inside N (the others are zero-filled, never stored)
#pragma unroll
  for (int j = 0; j < kBPer; ++j)
    if (col0 + br + j * kBColStep < a.N) bmask |= 1u << j;
  // MX formats: threads copy the E8M0 word (chunks 4q..4q+3) of columns tid + h * kThr with each stage.
  const uint8_t* sbase = P::kMx ? a.s + expert * a.s_se : nullptr;
  const bool vec_s = P::kMx && a.s_sk == 1 &&
                     ((reinterpret_cast<uintptr_t>(a.s) | static_cast<uintptr_t>(a.s_se | a.s_sn)) & 3u) == 0;
  const float* sblk = FMT == GS_FMT_BLOCK_FP8 && wactive
                          ? reinterpret_cast<const float*>(a.s) + expert * a.s_se + (nw / 128) * a.s_sn
                          : nullptr;

  for (int64_t rg = 0; rg < rows; rg += kTileM) {
    const int mrows = static_cast<int>(rows - rg < kTileM ? rows - rg : kTileM);
    const bool mactive = wactive && mbase < mrows;  // warp-uniform: this warp has rows and columns to compute
    const uint16_t* xsrc[kAPer];
    bool xin[kAPer];
#pragma unroll
    for (int j = 0; j < kAPer; ++j) {
      const int r = ar + j * kARowStep;
      xin[j] = r < mrows;
      xsrc[j] = xbase + (xin[j] ? (row0 + rg + r) * xstride : 0) + ap * 8;
    }
    auto issue = [&](int64_t st, int sl) {
      uint8_t* base = gs_pf_smem + sl * P::kStageBytes;
      const int64_t kel = st * U * kChunk;  // first K element of the stage
      const bool ak = st * U + achunk < nchunks, bk = st * U + bchunk < nchunks;
#pragma unroll
      for (int j = 0; j < kAPer; ++j)
        gs_cp_async16(base + adst + j * kARowStep * P::kARow, ak && xin[j] ? xsrc[j] + kel : xbase, ak && xin[j]);
#pragma unroll
      for (int j = 0; j < kBPer; ++j) {
        const bool v = bk && ((bmask >> j) & 1u);
        const uint8_t* src = v ? wsrc + (col0 + br + j * kBColStep) * a.w_sn * P::kEb + P::kbytes(kel) : a.w;
        gs_cp_async16(base + bdst + j * kBColStep * P::kBRow, src, v);
      }
      if constexpr (P::kMx) {
        const int64_t q = st * U / 4;  // the stage's group of 4 chunks
#pragma unroll
        for (int h = 0; h < kPfTileN / kThr; ++h) {
          const int c = tid + h * kThr;
          const int64_t n = col0 + c < a.N ? col0 + c : a.N - 1;  // clamp: never stored
          const uint8_t* p = sbase + n * a.s_sn;
          uint8_t* dst = base + P::kABytes + P::kBBytes + c * 4;
          if (vec_s && 4 * q + 4 <= nchunks) {
            gs_cp_async4(dst, p + 4 * q);
          } else {  // unaligned scale layout or the last partial group: plain loads (0 past the end)
            uint32_t v = 0;
            for (int u = 0; u < 4; ++u)
              if (4 * q + u < nchunks) v |= static_cast<uint32_t>(p[(4 * q + u) * a.s_sk]) << (8 * u);
            *reinterpret_cast<uint32_t*>(dst) = v;
          }
        }
      }
    };
    float acc[kPfMT][kPfNT][4];
#pragma unroll
    for (int mt = 0; mt < kPfMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kPfNT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.0f;
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
      if (s < nst) issue(s, s);
      gs_cp_async_commit();
    }
    int cur = 0;  // ring slot of stage st
    for (int64_t st = 0; st < nst; ++st) {
      gs_cp_async_wait<S - 2>();  // stage st has landed (for this thread) ...
      __syncthreads();            // ... for every thread, and every warp is done with stage st - 1's slot
      const int refill = cur == 0 ? S - 1 : cur - 1;
      if (st + S - 1 < nst) issue(st + S - 1, refill);
      gs_cp_async_commit();  // possibly empty: keeps "all but the newest S - 2 groups" meaning stage st + 1
      const uint8_t* As = gs_pf_smem + cur * P::kStageBytes;
      const uint8_t* Bs = As + P::kABytes;
      cur = cur + 1 == S ? 0 : cur + 1;
      if (!mactive) continue;
      // MX formats: this lane's B columns' scale words; the fast path needs every byte of the warp's in range.
      const uint8_t* Ss = Bs + P::kBBytes;
      bool fast = false;
      if constexpr (P::kMx) {
        bool in = true;
#pragma unroll
        for (int nt = 0; nt < kPfNT; ++nt) {
          const uint32_t w = *reinterpret_cast<const uint32_t*>(Ss + (wn * kPfNT * 8 + nt * 8 + g) * 4);
          if constexpr (FMT == GS_FMT_MXFP8)
            in = in && __vcmpgtu4(__vsub4(w, 0x71717171u), 0x15151515u) == 0;  // e - 113 <= 21 per byte
          else
            in = in && __vcmpgtu4(__vsub4(w, 0x68686868u), 0x18181818u) == 0;  // e - 104 <= 24 per byte
        }
        fast = __all_sync(0xFFFFFFFFu, in);
      }
      const float bscale = FMT == GS_FMT_BLOCK_FP8 ? sblk[((st * U * kChunk) / 128) * a.s_sk] : 1.0f;
      // kFull: the warp's 4 m16 tiles all hold rows of the slot (every tile but a slot's last), so the chunk
      // loop has no per-tile branch between its MMAs.
      auto chunks = [&](auto fast_tag, auto full_tag) {
        constexpr bool kFast = decltype(fast_tag)::value;
        constexpr bool kFull = decltype(full_tag)::value;
        // One chunk at a time: unrolled, the compiler hoists the next chunk's 32 x-fragment registers over
        // this chunk's MMAs and spills (ptxas, sm_90: 140-196 bytes for the fp8 formats).
#pragma unroll 1
        for (int u = 0; u < U; ++u) {
          const int64_t chunk = st * U + u;
          if (chunk >= nchunks) break;
          uint32_t k0[kPfMT][4], k1[kPfMT][4];  // [m tile] K elements 8t..8t+3 / 8t+4..8t+7 of rows g, g + 8
#pragma unroll
          for (int mt = 0; mt < kPfMT; ++mt) {
            if (!kFull && mbase + mt * 16 >= mrows) break;  // warp-uniform
            const int r0 = mbase + mt * 16 + g, r1 = r0 + 8;
            const uint4 x0 = *reinterpret_cast<const uint4*>(As + r0 * P::kARow + P::swa(r0, 4 * u + t) * 16);
            const uint4 x1 = *reinterpret_cast<const uint4*>(As + r1 * P::kARow + P::swa(r1, 4 * u + t) * 16);
            k0[mt][0] = x0.x, k0[mt][1] = x1.x, k0[mt][2] = x0.y, k0[mt][3] = x1.y;
            k1[mt][0] = x0.z, k1[mt][1] = x1.z, k1[mt][2] = x0.w, k1[mt][3] = x1.w;
          }
          const int cb = static_cast<int>(chunk & 3);  // this chunk's byte in the MX scale words
          // byte_perm selector: result bytes 0, 2 zero (byte 4: operand 2 is 0), bytes 1, 3 the scale byte cb.
          const uint32_t sel = 0x0404u | (static_cast<uint32_t>(cb) << 4) | (static_cast<uint32_t>(cb) << 12);
          static_cast<void>(sel);  // read by the MX fast paths only
          static_cast<void>(kFast);
#pragma unroll
          for (int nt = 0; nt < kPfNT; ++nt) {
            const int c = wn * kPfNT * 8 + nt * 8 + g;  // this lane's B column in the stage
            uint32_t b[4];
            if constexpr (FMT == GS_FMT_BF16) {
              const uint4 v = *reinterpret_cast<const uint4*>(Bs + c * P::kBRow + P::swb(c, 4 * u + t) * 16);
              b[0] = v.x, b[1] = v.y, b[2] = v.z, b[3] = v.w;
            } else if constexpr (FMT == GS_FMT_MXFP4) {
              const uint32_t v = *reinterpret_cast<const uint32_t*>(Bs + c * P::kBRow + P::swb(c, u) * 16 + 4 * t);
              uint32_t m = kF16x2Pow14;  // the exact decode's 2^14
              if constexpr (kFast) {
                // 2^(e-113) as f16 in both halves: (e - 98) << 10. The byte permute puts e at bits 8 and 24;
                // times 4 minus 98 << 10 | 98 << 26 (mod 2^32, e >= 104: no borrow between halves).
                const uint32_t w = *reinterpret_cast<const uint32_t*>(Ss + c * 4);
                m = __byte_perm(w, 0u, sel) * 4u - ((98u << 10) + (98u << 26));
              }
              gs_e2m1x8_to_f16x2_mul(v, m, b);
            } else {
              const uint2 v =
                  *reinterpret_cast<const uint2*>(Bs + c * P::kBRow + P::swb(c, 2 * u + t / 2) * 16 + 8 * (t & 1));
              b[0] = gs_e4m3x2_to_f16x2(v.x), b[1] = gs_e4m3x2_to_f16x2(v.x >> 16);
              b[2] = gs_e4m3x2_to_f16x2(v.y), b[3] = gs_e4m3x2_to_f16x2(v.y >> 16);
            }
            if constexpr (FMT == GS_FMT_BF16) {
#pragma unroll
              for (int mt = 0; mt < kPfMT; ++mt) {
                if (!kFull && mbase + mt * 16 >= mrows) break;
                gs_mma_bf16(acc[mt][nt], k0[mt], b[0], b[1]);
                gs_mma_bf16(acc[mt][nt], k1[mt], b[2], b[3]);
              }
            } else if constexpr (P::kMx && kFast) {
              if constexpr (FMT == GS_FMT_MXFP8) {
                // 2^(e-127) as f16 in both halves: (e - 112) << 10. The byte permute puts e at bits 8 and 24;
                // times 4 minus 112 << 10 | 112 << 26 (mod 2^32, e >= 113: no borrow between halves).
                const uint32_t w = *reinterpret_cast<const uint32_t*>(Ss + c * 4);
                const uint32_t m = __byte_perm(w, 0u, sel) * 4u - ((112u << 10) + (112u << 26));
#pragma unroll
                for (int i = 0; i < 4; ++i) b[i] = gs_hmul2_bits(b[i], m);
              }
#pragma unroll
              for (int mt = 0; mt < kPfMT; ++mt) {
                if (!kFull && mbase + mt * 16 >= mrows) break;
                gs_mma_f16(acc[mt][nt], k0[mt], b[0], b[1]);
                gs_mma_f16(acc[mt][nt], k1[mt], b[2], b[3]);
              }
            } else {
              float s0 = bscale, s1 = bscale;
              if constexpr (P::kMx) {  // accumulator columns 2t, 2t + 1
                const uint2 w2 = *reinterpret_cast<const uint2*>(Ss + (wn * kPfNT * 8 + nt * 8 + 2 * t) * 4);
                s0 = gs_e8m0((w2.x >> (8 * cb)) & 0xFFu);
                s1 = gs_e8m0((w2.y >> (8 * cb)) & 0xFFu);
              }
#pragma unroll
              for (int mt = 0; mt < kPfMT; ++mt) {
                if (!kFull && mbase + mt * 16 >= mrows) break;
                float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                gs_mma_f16(p, k0[mt], b[0], b[1]);
                gs_mma_f16(p, k1[mt], b[2], b[3]);
                acc[mt][nt][0] = fmaf(p[0], s0, acc[mt][nt][0]);
                acc[mt][nt][1] = fmaf(p[1], s1, acc[mt][nt][1]);
                acc[mt][nt][2] = fmaf(p[2], s0, acc[mt][nt][2]);
                acc[mt][nt][3] = fmaf(p[3], s1, acc[mt][nt][3]);
              }
            }
          }
        }
      };
      const bool full = mbase + kPfWarpM <= mrows;  // warp-uniform
      if (P::kMx && fast) {
        if (full)
          chunks(std::true_type{}, std::true_type{});
        else
          chunks(std::true_type{}, std::false_type{});
      } else {
        if (full)
          chunks(std::false_type{}, std::true_type{});
        else
          chunks(std::false_type{}, std::false_type{});
      }
    }
    __syncthreads();  // the next row group's prologue refills slots other warps may still read
    if (!mactive) continue;
#pragma unroll
    for (int mt = 0; mt < kPfMT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = mbase + mt * 16 + g + 8 * h;
        if (r >= mrows) continue;
        const int64_t orow = row0 + rg + r;
        const float rs = kX16 ? a.x_rs[orow] : 1.0f;  // undo the f16 row scale (a power of two: exact)
        uint16_t* o = a.out + orow * a.N;
#pragma unroll
        for (int nt = 0; nt < kPfNT; ++nt) {
          const int64_t n = nw + nt * 8 + 2 * t;
          const uint16_t v0 = gs_float_to_bf16(acc[mt][nt][2 * h] * rs);
          const uint16_t v1 = gs_float_to_bf16(acc[mt][nt][2 * h + 1] * rs);
          if (n + 1 < a.N && (a.N & 1) == 0) {
            *reinterpret_cast<uint32_t*>(o + n) = static_cast<uint32_t>(v0) | (static_cast<uint32_t>(v1) << 16);
          } else {
            if (n < a.N) o[n] = v0;
            if (n + 1 < a.N) o[n + 1] = v1;
          }
        }
      }
  }
}

// ------------------------------------------- warpgroup-MMA prefill kernel (sm_90a: wgmma)
// bf16 slots of more than 16 rows on the H100 / H200 when the module is built for sm_90a (harness/native/
// build.py targets sm_90a on compute capability 9.0 and then defines GS_SM90A). A CTA computes a BM-row x BN-
// column output tile with two warpgroups issuing m64nNk16 warpgroup MMAs whose operands both come from shared
// memory (x rows as A, weight columns as B: both K-major, wgmma's untransposed form), accumulating in f32
// registers (N / 2 per thread). Every thread copies with cp.async into a ring of S stages of 64 K (128 bytes
// per row: one row of the 128-byte swizzle the wgmma descriptors name; 16-byte piece p of row r at p ^ (r & 7),
// the layout TMA writes for that mode). Per stage: wait for its copies, make them visible to the asynchronous
// proxy wgmma reads through (fence.proxy.async), one barrier, refill the slot whose MMAs the barrier proved
// finished (two stages back: each warpgroup waits for all but its newest group of MMAs), then issue this
// stage's 4 MMAs without waiting for them, so one stage's MMAs overlap the next stage's barrier and copies
// (mma.sync's synchronous tiles kept the tensor pipe 26-36% busy, the prefill kernel's note). Deterministic:
// each output element accumulates its K in a fixed order; rows past the slot read zeros. Checked on the H200
// against the CPU twin (tests/test_moe_gemm_ops.py: partial tiles, odd N, K tails, NaN weights and rows, 200-row
// slots) and under compute-sanitizer memcheck (reports/measurements/h200-2026-12-02-session10).
// DSv3-prefill bf16 on the H200 (bench/moe_gemm_variants.cu and bench/moe_gemm.py, same folder): 0.510-0.535 ms
// in the launcher's 128-row form in calls A-C (0.83-0.86 of copy bandwidth, 450-470 TFLOP/s) and 0.548-0.568 in
// calls G-H, against 1.06-1.07 for the mma.sync tile kernel and 0.519-0.529 for torch._grouped_mm in the same
// runs; 64-row slots 0.67-0.70 ms (the weights are staged once per 64 rows).
// A form that converted MXFP8 weights per stage into bf16 in shared memory (with the E8M0 scale) measured no
// faster than the mma.sync kernel (0.997-1.127 against 1.028 ms at DSv3-prefill) and latency-bound under Nsight
// Compute (32% issue, 2 warps per scheduler): MXFP8 takes gs_moe_gemm_wgmma_q_kernel below instead.
constexpr int kWgK = 64;  // K per stage: 128 bytes of bf16 per row
// The launcher's forms. 128-row slots: 256 columns, 4 stages (193 KB): 0.510 / 0.535 ms at DSv3-prefill against
// 0.522 / 0.512 for 128 columns and 6 stages, 0.529 for 192 columns and 5, 0.528 for 128 and 7; 0.0308 against
// 0.0335-0.0337 ms at small-K-MoE. 64-row slots: 128 columns, 4 stages, 2 CTAs per SM (97 KB each): 0.0275 ms
// at small-K-MoE against 0.0290-0.0295 for one CTA of 256 columns and 4-5 stages or of 128 and 8; at DSv3-prefill
// in 64-row slots 0.674 against 0.670-0.683 (reports/measurements/h200-2026-12-02-session10, calls A and B).
constexpr int kWgN = 256;
constexpr int kWgStages = 4;
constexpr int kWgN64 = 128;
constexpr int kWgStages64 = 4;
constexpr int kWgMinBlocks64 = 2;

// BM rows x BN columns per CTA, S stages. BM 128: the two warpgroups take 64 rows each, all BN columns; BM 64:
// both take the same 64 rows and half the columns each (slots of at most 64 rows stage every weight once).
template <int BN, int S, int BM>
struct GsWg {
  static constexpr int kThreads = 256;
  static constexpr int kABytes = BM * 128, kBBytes = BN * 128;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kSmem = S * kStageBytes + 1024;  // + slack to align the ring to the 1024-byte swizzle atom
  static constexpr int kMmaN = BM == 128 ? BN : BN / 2;  // columns of one warpgroup's MMAs
  static_assert(BM == 64 || BM == 128, "rows per CTA: 64 or 128");
  static_assert(kMmaN == 64 || kMmaN == 128 || kMmaN == 192 || kMmaN == 256, "wgmma N: 64, 128, 192 or 256");
  static_assert(S >= 3, "one stage in the MMAs, one being waited for, at least one in flight");
  static_assert(kSmem <= 227 * 1024, "shared memory a CTA can opt into");
};

// Shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"): start address >> 4, leading byte offset
// 16 (unused by the swizzled K-major layout), stride byte offset 1024 (8 rows of 128 bytes), 128-byte swizzle.
__device__ __forceinline__ uint64_t gs_wgmma_desc(uint32_t saddr) {
  return static_cast<uint64_t>((saddr & 0x3FFFFu) >> 4) | (uint64_t{1} << 16) | (uint64_t{64} << 32) |
         (uint64_t{1} << 62);
}

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GS_WGMMA_DEVICE 1
// One wgmma instruction per helper (PTX ISA, wgmma.mma_async): m64nNk16, D += A B (scale-d 1) with bf16 A and B
// from shared memory (descriptors), N / 2 f32 accumulators per thread in the instruction's operand order.
__device__ __forceinline__ void gs_wgmma_m64n256k16_bf16(float (&d)[128], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(da), "l"(db), "r"(1));
}
__device__ __forceinline__ void gs_wgmma_m64n192k16_bf16(float (&d)[96], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
      "}, %96, %97, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
      : "l"(da), "l"(db), "r"(1));
}
__device__ __forceinline__ void gs_wgmma_m64n128k16_bf16(float (&d)[64], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(1));
}
__device__ __forceinline__ void gs_wgmma_m64n64k16_bf16(float (&d)[32], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(1));
}
__device__ __forceinline__ void gs_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void gs_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void gs_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// m64n128k16, A (f16) from registers, B from shared memory; scale_d 0: D = A B, 1: D += A B.
__device__ __forceinline__ void gs_wgmma_rs_m64n128k16_f16(float (&d)[64], const uint32_t (&a)[4], uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}
// m64n64k16, A (f16) from registers, B from shared memory; scale_d 0: D = A B, 1: D += A B.
__device__ __forceinline__ void gs_wgmma_rs_m64n64k16_f16(float (&d)[32], const uint32_t (&a)[4], uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}
// One m64nNk16 MMA of bf16 operands from shared memory into f32 accumulators (N / 2 per thread).
template <int N>
__device__ __forceinline__ void gs_wgmma_bf16(float (&d)[N / 2], uint64_t da, uint64_t db) {
  if constexpr (N == 256) gs_wgmma_m64n256k16_bf16(d, da, db);
  else if constexpr (N == 192) gs_wgmma_m64n192k16_bf16(d, da, db);
  else if constexpr (N == 128) gs_wgmma_m64n128k16_bf16(d, da, db);
  else gs_wgmma_m64n64k16_bf16(d, da, db);
}
// One m64nNk16 MMA with f16 A from registers and f16 B from shared memory (N / 2 accumulators per thread).
template <int N>
__device__ __forceinline__ void gs_wgmma_rs_f16(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db, int scale_d) {
  if constexpr (N == 128) gs_wgmma_rs_m64n128k16_f16(d, a, db, scale_d);
  else gs_wgmma_rs_m64n64k16_f16(d, a, db, scale_d);
}
// Pins accumulator registers at this point of the instruction stream (CUTLASS's warpgroup_fence_operand): the
// compiler may not move their reads or writes across it, so no register move meets an MMA still writing them.
template <int N>
__device__ __forceinline__ void gs_wgmma_pin(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// The same for a stage's register-A fragments ([chunk][k16 step][register]): every instruction writing them stays
// before this point, so none lands between the MMAs that read them.
__device__ __forceinline__ void gs_wgmma_pin_a(uint32_t (&f)[2][2][4]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) asm volatile("" : "+r"(f[i / 8][(i / 4) % 2][i % 4])::"memory");
}
#endif

template <int BN, int S, int BM = 128, int MINB = 1>
__global__ void __launch_bounds__(256, MINB) gs_moe_gemm_wgmma_kernel(GsMoeArgs a) {
#if defined(GS_WGMMA_DEVICE)
  using P = GsWg<BN, S, BM>;
  constexpr int kN = P::kMmaN, kXPer = BM / 32, kBPer = BN / 32;  // rows each thread copies per stage
  extern __shared__ __align__(16) uint8_t gs_wg_smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(gs_wg_smem_raw));
  uint8_t* const ring = gs_wg_smem_raw + ((1024u - (raw & 1023u)) & 1023u);
  const uint32_t ring_s = static_cast<uint32_t>(__cvta_generic_to_shared(ring));
  if (gs_zero_fill_block(a)) return;
  const int64_t slot = blockIdx.y;
  const int32_t expert = a.map[slot * 3];
  if (expert < 0 || expert >= a.E) return;  // block-uniform
  const int64_t row0 = a.map[slot * 3 + 1], rows = a.map[slot * 3 + 2];
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * BN;
  const int64_t nkt = (a.K + kWgK - 1) / kWgK;
  // This warpgroup's operands within a stage: its 64 rows of x (BM 128) or its half of the columns (BM 64).
  const uint32_t a_off = BM == 128 ? wg * 64 * 128 : 0;
  const uint32_t b_off = P::kABytes + (BM == 128 ? 0 : wg * kN * 128);
  const int mbase = BM == 128 ? wg * 64 : 0, nbase = BM == 128 ? 0 : wg * kN;
  // Issue side: this thread copies 16-byte piece pc of rows pr + 32 j (x: j < kXPer; weights: j < kBPer).
  const int pr = tid / 8, pc = tid % 8;
  const int dst = pr * 128 + ((pc ^ (pr & 7)) * 16);  // pr + 32 j keeps pr & 7: one swizzle for every j
  const uint16_t* wcol[kBPer];
  bool win[kBPer];
#pragma unroll
  for (int j = 0; j < kBPer; ++j) {
    const int64_t n = col0 + pr + 32 * j;
    win[j] = n < a.N;
    wcol[j] = reinterpret_cast<const uint16_t*>(a.w) + expert * a.w_se + (win[j] ? n : 0) * a.w_sn + pc * 8;
  }
  for (int64_t rg = 0; rg < rows; rg += BM) {
    const int mrows = static_cast<int>(rows - rg < BM ? rows - rg : BM);
    const uint16_t* xrow[kXPer];
    bool xin[kXPer];
#pragma unroll
    for (int j = 0; j < kXPer; ++j) {
      const int r = pr + 32 * j;
      xin[j] = r < mrows;
      xrow[j] = a.x + (xin[j] ? (row0 + rg + r) * a.x_sr : 0) + pc * 8;
    }
    auto issue = [&](int64_t kt, int sl) {
      uint8_t* base = ring + sl * P::kStageBytes;
      const int64_t k = kt * kWgK;
      const bool kin = k + pc * 8 < a.K;  // K is a multiple of 32: a piece lies wholly inside or outside
#pragma unroll
      for (int j = 0; j < kXPer; ++j)
        gs_cp_async16(base + dst + j * 32 * 128, kin && xin[j] ? xrow[j] + k : a.x, kin && xin[j]);
#pragma unroll
      for (int j = 0; j < kBPer; ++j)
        gs_cp_async16(base + P::kABytes + dst + j * 32 * 128, kin && win[j] ? wcol[j] + k : a.x, kin && win[j]);
    };
    float acc[kN / 2];
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) acc[i] = 0.0f;
    gs_wgmma_pin(acc);
#pragma unroll
    for (int s = 0; s < S - 2; ++s) {
      if (s < nkt) issue(s, s);
      gs_cp_async_commit();
    }
    for (int64_t kt = 0; kt < nkt; ++kt) {
      gs_cp_async_wait<S - 3>();  // stage kt's copies (this thread's) have landed ...
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // ... visible to wgmma's reads ...
      __syncthreads();  // ... for every thread; every warpgroup's MMAs of stage kt - 2 have finished
      if (kt + S - 2 < nkt) issue(kt + S - 2, static_cast<int>((kt + S - 2) % S));
      gs_cp_async_commit();  // possibly empty: keeps the group count per stage
      // Both warpgroups issue their MMAs even when one has no rows of the slot (it multiplies zeros): a
      // branch around wgmma makes ptxas serialize every MMA of the kernel (its C7518 warning).
      const uint32_t sa = ring_s + static_cast<uint32_t>((kt % S) * P::kStageBytes);
      const uint64_t da = gs_wgmma_desc(sa + a_off), db = gs_wgmma_desc(sa + b_off);
      gs_wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kWgK / 16; ++kk)  // +32 bytes of K per step: +2 in the descriptor's address
        gs_wgmma_bf16<kN>(acc, da + 2 * kk, db + 2 * kk);
      gs_wgmma_commit();
      gs_wgmma_wait<1>();
    }
    gs_wgmma_wait<0>();
    gs_wgmma_pin(acc);
    gs_cp_async_wait<0>();
    __syncthreads();  // the next row group's prologue refills slots other warpgroups may still read
    // Accumulator layout (PTX ISA, wgmma D fragments for .m64nNk16): acc[4 j + 2 h + c] is row 16 warp + g + 8 h
    // of the warpgroup's 64, column 8 j + 2 t + c of its kN.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = mbase + warp * 16 + g + 8 * h;
      if (r >= mrows) continue;
      uint16_t* o = a.out + (row0 + rg + r) * a.N;
#pragma unroll
      for (int j = 0; j < kN / 8; ++j) {
        const int64_t n = col0 + nbase + 8 * j + 2 * t;
        const uint16_t v0 = gs_float_to_bf16(acc[4 * j + 2 * h]), v1 = gs_float_to_bf16(acc[4 * j + 2 * h + 1]);
        if (n + 1 < a.N && (a.N & 1) == 0) {
          *reinterpret_cast<uint32_t*>(o + n) = static_cast<uint32_t>(v0) | (static_cast<uint32_t>(v1) << 16);
        } else {
          if (n < a.N) o[n] = v0;
          if (n + 1 < a.N) o[n + 1] = v1;
        }
      }
    }
  }
#else
  (void)a;
  __trap();  // the launcher picks this kernel only in sm_90a builds (GS_SM90A)
#endif
}

// ----------------- warpgroup-MMA prefill kernel for MXFP8, MXFP4 and block-FP8, weights from registers (sm_90a)
// Quantized-weight slots of more than 16 rows in sm_90a builds. The operands swap (the ring kernel's XS form): a
// CTA's 64 * NWG weight columns are the MMAs' M (64 per warpgroup) and its TM rows of x their N, so
// out^T = W^T x^T.
// Each thread reads its two columns' bytes of a 32-K chunk from shared memory (8 e4m3 bytes, or 4 bytes of e2m1
// pairs, per column) and decodes them straight into wgmma's A registers: e4m3 with the hardware e4m3x2 -> f16x2
// conversion, e2m1 with gs_e2m1x8_to_f16x2_mul's byte arithmetic (both exact, NaN kept). x is
// gs_moe_prepare_rows' row-scaled f16 (the ring kernel's note: products exact in f32), permuted within each
// 32-element chunk (xh_wgmma) so that a thread's 8 consecutive decoded weights are its A fragments' K positions
// (PTX ISA, wgmma .m64nNk16 A fragments: row g takes K 2t, 2t+1, 2t+8, 2t+9 of each k16 step; decoded pair i of
// the 8 weights 8t.. of a chunk meets x's pair t + 4 i; for MXFP4 prepare_rows first puts x in the e2m1
// decode's pair order, elements (0, 2), (1, 3), (4, 6), (5, 7)).
// Forms (kWqExact's note). MX formats: the exact one runs each 32-K chunk's two MMAs from zero into an f32
// partial and adds it times its columns' 2^(e-127) (gs_e8m0: every E8M0 byte, 0 and 255 included), as the twin
// forms it; the fast one multiplies the scale into the f16 weights (exactly, for tiles whose scales span a narrow
// window) and lets every MMA of a stage accumulate in place. Block-FP8 has one form: a 128-K block's 8 MMAs
// accumulate into an f32 partial that is added times the CTA's one f32 scale of that block (its 2 warpgroups'
// 128-column tile is one scale block wide).
// x (f16, 128-byte swizzled rows) and the raw weights come through a cp.async ring of S stages of 64 K as in
// gs_moe_gemm_wgmma_kernel; the weights' 16-byte pieces are swizzled so that the A reads of a warp hit distinct
// banks.
// Measured on the H200 at DSv3-prefill in 128-row slots (bench/moe_gemm_variants.cu), the launcher's forms:
// block-FP8 0.589-0.592 ms against 1.388 for the mma.sync tile kernel (reports/measurements/
// h200-2026-12-02-session11, calls B, C, G); MXFP8 0.676 (fast form alone 0.634) and MXFP4 0.676 (0.636) with 3
// warpgroups per CTA, against 0.750 / 0.774 with 2 in the same runs (h200-2026-12-02-session12, call E).
// The variants measured and dropped are in reports/measurements/moe_gemm-kernel-design.
constexpr int kWqCols = 128;  // block-FP8's scale block, the columns of its CTAs (2 warpgroups)
// NWG: warpgroups per CTA, 64 weight columns each; block-FP8 takes 2 (one scale block per CTA). kWqGroupsMx: the
// launcher's for MXFP8 and MXFP4 at 128 rows. With 2 the kernel is latency-bound: 8 warps per SM (registers and
// shared memory each allow one CTA), 0.52 of 2 warps per scheduler eligible, issue slots 40% busy, the tensor
// pipe 37% (Nsight Compute, MXFP8 fast form, reports/measurements/h200-2026-12-02-session12, call D); 3 gives
// 12 warps per SM at a cap of 168 registers (the fast forms fit; the exact forms spill 44-168 bytes), at a cost
// of partial column tiles (DSv3's 4096 columns are 21.3 tiles of 192): DSv3-prefill 0.676 ms for both the MXFP8
// and the MXFP4 pair against 0.750 / 0.774 with 2, fast forms alone 0.612-0.644 at 4-6 stages (call E). At 64
// rows the kernel keeps 2 warpgroups and 2 CTAs per SM (3 would cap registers at 85).
constexpr int kWqGroupsMx = 3;
// Forms: kWqExact (every CTA; MX: each chunk's f32 partial times its scale; block-FP8: each 128-K block's),
// kWqFast (MX only: only CTAs whose every column's E8M0 bytes, 255 aside, span at most the format's window: the
// scale goes into the f16 weights and every MMA accumulates in place), kWqRest (only the other CTAs, exactly)
// and kWqAuto (every CTA, in the form its scan chose: both forms' code in one kernel, its registers the larger
// form's). For MXFP8 and MXFP4 the launcher runs kWqAuto up to kWqAutoMaxK and kWqFast then kWqRest above it: the
// second launch costs a fixed few microseconds (a launch, and CTAs that scan and exit), the one-launch kernel a
// share of every MMA stage. On the H200 (reports/measurements/h200-2026-12-03-session16): kernels alone, both
// forms in one run (bench/moe_gemm_variants.cu, call D), one launch / pair in ms, MXFP8 and MXFP4:
//   64-row CTAs   K 512: 0.0290 / 0.0324, 0.0259 / 0.0295   K 7168: 0.8430 / 0.7877, 0.8342 / 0.8052
//   128-row CTAs  K 512: 0.0468 / 0.0478, 0.0422 / 0.0441   K 7168: 0.7418 / 0.6425, 0.7469 / 0.6430
// Lines through each pair of points cross near K 600 (128 rows) and K 900-1250 (64 rows), so the threshold is the
// measured K 512. The op at small-K-MoE (K 512, 64 rows) from a graph: MXFP8 0.0329-0.0331 ms against the pair's
// 0.0356-0.0357, MXFP4 0.0309-0.0312 against 0.0339-0.0342 (bench/moe_gemm.py, both trees in call C).
// Fast form, per column: c = (largest e) - top; the weights become w 2^(e - c), exact normal-range or subnormal
// f16 multiples of the format's values, their products with the f16 x are exact in f32, and the epilogue
// multiplies by 2^(c - 127). e4m3 (decoded to its value): e - c in -14..7 (448 * 2^7 = 57344 < 65504; the lowest
// e4m3 bit 2^-9 times 2^-14 is 2^-23, at or above f16's 2^-24), the multiplier 2^(e - c) a normal f16. e2m1
// (decoded to value * 2^-14, gs_e2m1x8_to_f16x2_mul's note): e - c in -23..1 (6 * 2^1 = 12; 0.5 * 2^-23 is f16's
// smallest subnormal, and e2m1 values have 2 significant bits), the multiplier 2^(e - c + 14) a normal f16
// (exponent field 6..30). tests/test_moe_gemm_ops.py reads these four numbers and proves both windows exact.
constexpr int kWqExact = 0, kWqFast = 1, kWqRest = 2, kWqAuto = 3;
constexpr int64_t kWqAutoMaxK = 512;
constexpr int kWqTopE4m3 = 7;
constexpr int kWqWindowE4m3 = 21;
constexpr int kWqTopE2m1 = 1;
constexpr int kWqWindowE2m1 = 24;
// The launcher's forms, measured at DSv3-prefill (bench/moe_gemm_variants.cu, reports/measurements/
// h200-2026-12-02-session11, call A; h200-2026-12-02-session12, call E): at 128 rows of x, MX formats 5 stages
// (3 warpgroups: 150 KB with e4m3; fast forms at 4 / 5 / 6 stages MXFP8 0.644 / 0.634 / 0.628 ms, MXFP4 0.612 /
// 0.636 / 0.637, the pairs measured at 5 only), block-FP8 6 (0.592 against 0.618 at 4); at 64 rows
// 4 stages, 2 CTAs per SM (69 KB each with e4m3; block-FP8 0.656 ms against 0.647 at 6 stages and 0.933 at 4
// stages with 1 CTA per SM; small-K-MoE 0.0231 against 0.0236).
constexpr int kWqStages = 5;
constexpr int kWqStagesBlock = 6;
constexpr int kWqStages64 = 4;
constexpr int kWqMinBlocks64 = 2;

template <int FMT, int TM, int S, int NWG = 2>
struct GsWq {
  static constexpr bool kE2m1 = FMT == GS_FMT_MXFP4, kBlock = FMT == GS_FMT_BLOCK_FP8;
  static constexpr int kThreads = 128 * NWG;
  static constexpr int kCols = 64 * NWG;               // weight columns per CTA
  static constexpr int kXThreads = 256;                // threads that copy x: TM rows x 8 pieces, TM / 32 each
  static constexpr int kColBytes = kE2m1 ? 32 : 64;    // one weight column's bytes of a 64-K stage
  static constexpr int kXBytes = TM * 128;             // TM rows of f16 x, 64 K each (the MMAs' B)
  static constexpr int kWBytes = kCols * kColBytes;    // the CTA's columns of weights, 64 K each
  // The stage's scales: MX formats each column's E8M0 word of the stage's group of 4 chunks, block-FP8 the CTA's
  // f32 of the stage's 128-K block.
  static constexpr int kSBytes = kBlock ? 16 : kCols * 4;
  static constexpr int kStageBytes = (kXBytes + kWBytes + kSBytes + 1023) / 1024 * 1024;  // swizzle atoms aligned
  static constexpr int kSmem = S * kStageBytes + 1024;
  static constexpr int kTop = kE2m1 ? kWqTopE2m1 : kWqTopE4m3, kWindow = kE2m1 ? kWqWindowE2m1 : kWqWindowE4m3;
  static constexpr uint32_t kUnit = kE2m1 ? 0x7400u : 0x3C00u;  // f16 multiplier of the weights when unscaled
  static_assert(FMT == GS_FMT_MXFP8 || FMT == GS_FMT_MXFP4 || FMT == GS_FMT_BLOCK_FP8, "quantized formats only");
  static_assert(TM == 64 || TM == 128, "rows of x per CTA (the MMAs' N): 64 or 128");
  static_assert(NWG == 2 || (NWG == 3 && !kBlock), "2 warpgroups, or 3 for the MX formats (block-FP8: kWqCols)");
  static_assert(S >= 3, "one stage in the MMAs, one being waited for, at least one in flight");
  static_assert(kSmem <= 227 * 1024, "shared memory a CTA can opt into");
  // Byte offset of 16-byte piece p of weight column c. e4m3 (4 pieces, 8-byte reads): columns c and c + 2 share
  // banks, so odd pairs swap halves. e2m1 (2 pieces, 4-byte reads): columns c and c + 4 share banks, so every
  // other group of 4 columns swaps its pieces.
  GS_HD static constexpr int wpiece(int c, int p) {
    return kE2m1 ? c * 32 + ((p ^ ((c >> 2) & 1)) * 16) : c * 64 + ((p ^ (((c >> 1) & 1) << 1)) * 16);
  }
};

template <int FMT, int TM, int S, int MINB = 1, int MODE = kWqExact, int NWG = 2>
__global__ void __launch_bounds__(128 * NWG, MINB) gs_moe_gemm_wgmma_q_kernel(GsMoeArgs a) {
#if defined(GS_WGMMA_DEVICE)
  using P = GsWq<FMT, TM, S, NWG>;
  constexpr int kCols = P::kCols;
  constexpr bool kE2m1 = P::kE2m1, kBlock = P::kBlock;
  static_assert(!kBlock || MODE == kWqExact, "block-FP8 has one form");
  __shared__ int col_shift[kCols];  // the fast form's c per column (kWqTopE4m3's note)
  constexpr int kXPer = TM / 32;  // x pieces each thread copies per stage (TM rows x 8 pieces)
  constexpr int kWPer = kE2m1 ? 1 : 2;  // weight pieces each thread copies per stage
  extern __shared__ __align__(16) uint8_t gs_wq_smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(gs_wq_smem_raw));
  uint8_t* const ring = gs_wq_smem_raw + ((1024u - (raw & 1023u)) & 1023u);
  const uint32_t ring_s = static_cast<uint32_t>(__cvta_generic_to_shared(ring));
  const int64_t slot = blockIdx.y;
  const int32_t expert = a.map[slot * 3];
  if (expert < 0 || expert >= a.E) return;  // block-uniform
  const int64_t row0 = a.map[slot * 3 + 1], rows = a.map[slot * 3 + 2];
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kCols;
  const int64_t nkt = (a.K + kWgK - 1) / kWgK, nchunks = a.K / kChunk;
  // Issue side. x: threads tid < 256, piece pc of rows pr + 32 j, swizzled. Weights: e4m3 piece wp of columns
  // tid / 4 and tid / 4 + kCols / 2, e2m1 piece wp of column tid / 2 (wp 0 holds K 0..31 of the stage, 1 K
  // 32..63). Scales: MX formats thread tid < kCols copies column tid's word, block-FP8 thread 0 the CTA's f32.
  const bool xcopier = tid < P::kXThreads;  // warp-uniform
  const int pr = tid / 8, pc = tid % 8;
  const int xdst = pr * 128 + ((pc ^ (pr & 7)) * 16);
  const int wcol[2] = {kE2m1 ? tid / 2 : tid / 4, tid / 4 + kCols / 2}, wp = kE2m1 ? tid % 2 : tid % 4;
  const int64_t wk_piece = kE2m1 ? 32 : 16;  // K per weight piece
  const uint8_t* wsrc[kWPer];
  bool win[kWPer];
#pragma unroll
  for (int j = 0; j < kWPer; ++j) {
    const int64_t n = col0 + wcol[j];
    win[j] = n < a.N;
    wsrc[j] = a.w + expert * a.w_se + (win[j] ? n : 0) * a.w_sn + wp * 16;
  }
  const uint8_t* ssrc = nullptr;
  bool vec_s = false;
  if (!kBlock && tid < kCols) {
    const int64_t n = col0 + tid < a.N ? col0 + tid : a.N - 1;  // clamp: never stored
    ssrc = a.s + expert * a.s_se + n * a.s_sn;
    vec_s = a.s_sk == 1 && ((reinterpret_cast<uintptr_t>(a.s) | static_cast<uintptr_t>(a.s_se | a.s_sn)) & 3u) == 0;
  }
  const float* const bsrc =
      kBlock ? reinterpret_cast<const float*>(a.s) + expert * a.s_se + (col0 / kWqCols) * a.s_sn : nullptr;
  bool fast_cta = false;  // the scan's answer: every column's scales fit the fast form's window
  if constexpr (MODE != kWqExact) {
    // Which form takes this CTA: the fast one iff every column's E8M0 bytes (255 aside) fit the window. Thread
    // tid < kCols scans column tid's row in 16-byte loads where the layout allows (4-byte, then byte loads
    // otherwise), 6 in flight (8 made ptxas spill in MXFP4's 64-row fast form, whose registers the scan
    // shares), with byte-wise min / max per 32-bit word (255 left out of both: of the min as
    // the sentinel it is, of the max by a mask). Both launches of the pair scan, and the exact form's launch,
    // whose CTAs nearly all exit after it, cost 0.042 ms of the MXFP8 pair's 0.676 at DSv3-prefill with 4-byte
    // loads (7 dependent rounds of 8 loads there; reports/measurements/h200-2026-12-02-session12, call E).
    // With 16-byte loads the op from a graph at DSv3-prefill (bench/moe_gemm.py, gs_moe_prepare_rows included)
    // took 0.683 / 0.684 ms for MXFP8 against 0.716 with 4-byte loads in the same run, MXFP4 0.666 / 0.667
    // against 0.694 / 0.701, small-K-MoE unchanged (h200-2026-12-02-session14, call D); spreading the scan over
    // every thread with shared atomics per column measured 0.022 ms faster there but 0.0024 ms slower at
    // small-K-MoE (call C).
    int fits = 1;
    if (tid < kCols) {
      uint32_t lo4 = ~0u, hi4 = 0u;
      auto see = [&](uint32_t w) { lo4 = __vminu4(lo4, w), hi4 = __vmaxu4(hi4, w & ~__vcmpeq4(w, ~0u)); };
      const uintptr_t salign = reinterpret_cast<uintptr_t>(a.s) | static_cast<uintptr_t>(a.s_se | a.s_sn);
      int64_t q = 0;
      if (vec_s && (salign & 15u) == 0) {
#pragma unroll 6
        for (; q + 16 <= nchunks; q += 16) {
          const uint4 w = *reinterpret_cast<const uint4*>(ssrc + q);
          see(w.x), see(w.y), see(w.z), see(w.w);
        }
      }
      if (vec_s) {
#pragma unroll 4
        for (; q + 4 <= nchunks; q += 4) see(*reinterpret_cast<const uint32_t*>(ssrc + q));
      }
      for (; q < nchunks; ++q) see(0xFFFFFF00u | ssrc[q * a.s_sk]);  // bytes 255: seen by neither
      lo4 = __vminu4(lo4, lo4 >> 16), lo4 = __vminu4(lo4, lo4 >> 8);
      hi4 = __vmaxu4(hi4, hi4 >> 16), hi4 = __vmaxu4(hi4, hi4 >> 8);
      const unsigned lo = lo4 & 0xFFu, hi = hi4 & 0xFFu;
      fits = lo == 255u || hi - lo <= static_cast<unsigned>(P::kWindow);
      col_shift[tid] = lo == 255u ? 127 : static_cast<int>(hi) - P::kTop;
    }
    fast_cta = __syncthreads_and(fits) != 0;
    if (MODE != kWqAuto && fast_cta != (MODE == kWqFast)) return;  // block-uniform: the pair's other launch takes it
  }
  // The compute side in form F (kWqFast or kWqExact), one instantiation per form: kWqAuto runs the one its
  // CTA's scan chose. This thread's A rows are weight columns c0 (row g of its warp's 16) and c0 + 8; per chunk cc
  // it reads their bytes of K cc * 32 + 8 t .. + 7 (e4m3: 8 bytes, half t % 2 of piece 2 cc + t / 2; e2m1: 4
  // bytes, word t of piece cc).
  auto compute = [&](auto form) {
    constexpr int F = decltype(form)::value;
    const int c0 = 64 * wg + 16 * warp + g;
    const int shift[2] = {F == kWqFast ? col_shift[c0] : 0, F == kWqFast ? col_shift[c0 + 8] : 0};
    int woff[2][2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int cc = 0; cc < 2; ++cc)
        woff[h][cc] = P::kXBytes + (kE2m1 ? P::wpiece(c0 + 8 * h, cc) + 4 * t
                                          : P::wpiece(c0 + 8 * h, 2 * cc + t / 2) + (t % 2) * 8);
    // A fragments of chunk cc of stage st, f[k16 step][register] (register r: column c0 + 8 (r % 2)), each weight
    // times its column's f16 multiplier m[r % 2] (e4m3 only where the form scales, F kWqFast). e4m3 raw bytes
    // (0, 1) -> K 2t, 2t + 1 of step 0, (2, 3) -> 2t + 8, 2t + 9, (4..7) likewise for step 1; e2m1 decoded pair i
    // (gs_e2m1x8_to_f16x2_mul) -> x's pair t + 4 i, the same four positions.
    auto afrag = [&](const uint8_t* st, int cc, const uint32_t(&m)[2], uint32_t(&f)[2][4]) {
      if constexpr (kE2m1) {
        uint32_t h[2][4];
#pragma unroll
        for (int c = 0; c < 2; ++c)
          gs_e2m1x8_to_f16x2_mul(*reinterpret_cast<const uint32_t*>(st + woff[c][cc]), m[c], h[c]);
        f[0][0] = h[0][0], f[0][1] = h[1][0], f[0][2] = h[0][1], f[0][3] = h[1][1];
        f[1][0] = h[0][2], f[1][1] = h[1][2], f[1][2] = h[0][3], f[1][3] = h[1][3];
      } else {
        const uint2 r0 = *reinterpret_cast<const uint2*>(st + woff[0][cc]);
        const uint2 r1 = *reinterpret_cast<const uint2*>(st + woff[1][cc]);
        f[0][0] = gs_e4m3x2_to_f16x2(r0.x), f[0][1] = gs_e4m3x2_to_f16x2(r1.x);
        f[0][2] = gs_e4m3x2_to_f16x2(r0.x >> 16), f[0][3] = gs_e4m3x2_to_f16x2(r1.x >> 16);
        f[1][0] = gs_e4m3x2_to_f16x2(r0.y), f[1][1] = gs_e4m3x2_to_f16x2(r1.y);
        f[1][2] = gs_e4m3x2_to_f16x2(r0.y >> 16), f[1][3] = gs_e4m3x2_to_f16x2(r1.y >> 16);
        if constexpr (F == kWqFast) {
#pragma unroll
          for (int k16 = 0; k16 < 2; ++k16)
#pragma unroll
            for (int r = 0; r < 4; ++r) f[k16][r] = gs_hmul2_bits(f[k16][r], m[r % 2]);
        }
      }
    };
    constexpr uint32_t unit[2] = {P::kUnit | (P::kUnit << 16), P::kUnit | (P::kUnit << 16)};
    for (int64_t rg = 0; rg < rows; rg += TM) {
      const int mrows = static_cast<int>(rows - rg < TM ? rows - rg : TM);
      const uint16_t* xrow[kXPer];
      bool xin[kXPer];
#pragma unroll
      for (int j = 0; j < kXPer; ++j) {
        const int r = pr + 32 * j;
        xin[j] = r < mrows;
        xrow[j] = a.xh + (xin[j] ? (row0 + rg + r) * a.K : 0) + pc * 8;
      }
      auto issue = [&](int64_t kt, int sl) {
        uint8_t* base = ring + sl * P::kStageBytes;
        const int64_t k = kt * kWgK;
        const bool xk = k + pc * 8 < a.K;  // K is a multiple of 32
        if (xcopier) {
#pragma unroll
          for (int j = 0; j < kXPer; ++j)
            gs_cp_async16(base + xdst + j * 32 * 128, xk && xin[j] ? xrow[j] + k : a.xh, xk && xin[j]);
        }
#pragma unroll
        for (int j = 0; j < kWPer; ++j) {
          const bool ok = win[j] && k + wp * wk_piece < a.K;
          gs_cp_async16(base + P::kXBytes + P::wpiece(wcol[j], wp), ok ? wsrc[j] + (kE2m1 ? k / 2 : k) : a.w, ok);
        }
        uint8_t* sd = base + P::kXBytes + P::kWBytes;
        if constexpr (kBlock) {
          if (tid == 0) gs_cp_async4(sd, bsrc + (kt / 2) * a.s_sk);  // the stage's 128-K block (2 stages per block)
        } else if (tid < kCols) {
          const int64_t q = kt / 2;  // the stage's group of 4 chunks (2 stages per group)
          sd += tid * 4;
          if (vec_s && 4 * q + 4 <= nchunks) {
            gs_cp_async4(sd, ssrc + 4 * q);
          } else {  // unaligned scale layout or the last partial group: plain loads (0 past the end)
            uint32_t v = 0;
            for (int u = 0; u < 4; ++u)
              if (4 * q + u < nchunks) v |= static_cast<uint32_t>(ssrc[(4 * q + u) * a.s_sk]) << (8 * u);
            *reinterpret_cast<uint32_t*>(sd) = v;
          }
        }
      };
      float acc[TM / 2], part[TM / 2];
#pragma unroll
      for (int i = 0; i < TM / 2; ++i) acc[i] = part[i] = 0.0f;
      gs_wgmma_pin(part);
      gs_wgmma_pin(acc);
      [[maybe_unused]] float block_scale = 0.0f;  // block-FP8: the scale of the block whose partial `part` holds
#pragma unroll
      for (int s = 0; s < S - 2; ++s) {
        if (s < nkt) issue(s, s);
        gs_cp_async_commit();
      }
      for (int64_t kt = 0; kt < nkt; ++kt) {
        const int sl = static_cast<int>(kt % S);
        gs_cp_async_wait<S - 3>();  // stage kt's copies (this thread's) have landed ...
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // ... visible to wgmma's reads ...
        __syncthreads();  // ... for every thread; the MMAs of stage kt - 2 have finished
        if (kt + S - 2 < nkt) issue(kt + S - 2, static_cast<int>((kt + S - 2) % S));
        gs_cp_async_commit();  // possibly empty: keeps the group count per stage
        const uint8_t* st = ring + sl * P::kStageBytes;
        const uint32_t xs = ring_s + static_cast<uint32_t>(sl * P::kStageBytes);
        const uint8_t* const ss = st + P::kXBytes + P::kWBytes;
        if constexpr (F == kWqFast || kBlock) {
          // The stage's 4 MMAs accumulate in place (the fast form into acc with the scale in the weights,
          // block-FP8 into its block's partial): wait for the previous stage's MMAs (they read the A registers
          // rewritten here, and block-FP8 reads the finished partial at a block's first stage), then issue these
          // without waiting. Two sets of A registers, so that one stage's MMAs run over the next stage's
          // conversion, measured wrong or serialized: ptxas either serializes every wgmma (its C7513 note, "non
          // wgmma instructions defining input registers of a wgmma between start and end of the pipeline stage")
          // or, where MMAs stayed in flight across a branch, let them through with wrong sums (H200,
          // reports/measurements/h200-2026-12-02-session11, call A).
          gs_wgmma_wait<0>();
          [[maybe_unused]] const bool block_start = kt % 2 == 0;  // block-FP8: a 128-K block begins
          uint32_t f[2][2][4];  // [chunk][k16 step][register]
          if constexpr (kBlock) {
            if (block_start && kt > 0) {
              gs_wgmma_pin(part);
#pragma unroll
              for (int i = 0; i < TM / 2; ++i) acc[i] = fmaf(part[i], block_scale, acc[i]);
            }
            block_scale = *reinterpret_cast<const float*>(ss);
          }
          // The f16 multipliers of chunk cc's columns c0, c0 + 8: the fast form's 2^(e - c) (e4m3) or 2^(e - c + 14)
          // (e2m1), a normal f16 in the window, NaN for e = 255; the unit elsewhere.
          uint32_t m[2][2] = {{unit[0], unit[1]}, {unit[0], unit[1]}};  // [chunk][column c0, c0 + 8]
          auto multipliers = [&](int cc) {
            if constexpr (F == kWqFast) {
              const uint32_t sw[2] = {*reinterpret_cast<const uint32_t*>(ss + c0 * 4),
                                      *reinterpret_cast<const uint32_t*>(ss + (c0 + 8) * 4)};
              const int sh = 8 * (2 * static_cast<int>(kt % 2) + cc);
              const bool in = kt * 2 + cc < nchunks;  // past K: zero weights, the unit multiplier
#pragma unroll
              for (int h = 0; h < 2; ++h) {
                const int e = static_cast<int>((sw[h] >> sh) & 0xFFu);
                const uint32_t bits = !in        ? P::kUnit
                                      : e == 255 ? 0x7E00u
                                                 : static_cast<uint32_t>(e - shift[h] + 15 + (kE2m1 ? 14 : 0)) << 10;
                m[cc][h] = bits | (bits << 16);
              }
            }
          };
          // e2m1 forms both chunks' multipliers before converting either, e4m3 each chunk's just before its
          // conversion: at DSv3-prefill the fast forms took 0.726 ms against 0.750-0.758 the other way (MXFP4) and
          // 0.684 against 0.761 (MXFP8) (reports/measurements/h200-2026-12-02-session11, calls B, C, F, G).
          if constexpr (kE2m1) {
            multipliers(0);
            multipliers(1);
            afrag(st, 0, m[0], f[0]);
            afrag(st, 1, m[1], f[1]);
          } else {
#pragma unroll
            for (int cc = 0; cc < 2; ++cc) {
              multipliers(cc);
              afrag(st, cc, m[cc], f[cc]);
            }
          }
          gs_wgmma_pin_a(f);  // every conversion done before the first MMA: none lands between the MMAs
          const uint64_t db = gs_wgmma_desc(xs);
          gs_wgmma_fence();
#pragma unroll
          for (int cc = 0; cc < 2; ++cc)
#pragma unroll
            for (int k16 = 0; k16 < 2; ++k16) {
              if constexpr (kBlock)
                gs_wgmma_rs_f16<TM>(part, f[cc][k16], db + 4 * cc + 2 * k16,
                                    block_start && cc == 0 && k16 == 0 ? 0 : 1);
              else
                gs_wgmma_rs_f16<TM>(acc, f[cc][k16], db + 4 * cc + 2 * k16, 1);
            }
          gs_wgmma_commit();
        } else {
          const uint32_t sw[2] = {*reinterpret_cast<const uint32_t*>(ss + c0 * 4),
                                  *reinterpret_cast<const uint32_t*>(ss + (c0 + 8) * 4)};
#pragma unroll
          for (int cc = 0; cc < 2; ++cc) {
            uint32_t f[2][4];
            afrag(st, cc, unit, f);
            // B: the chunk's 32 K of x (64 bytes) at + cc * 64 in the swizzled rows, + 32 bytes for step 1.
            const uint64_t db = gs_wgmma_desc(xs + cc * 64);
            gs_wgmma_fence();
            gs_wgmma_rs_f16<TM>(part, f[0], db, 0);
            gs_wgmma_rs_f16<TM>(part, f[1], db + 2, 1);
            gs_wgmma_commit();
            // The chunk's partial times its columns' scales. Reading it needs the MMAs complete (a read of wgmma
            // accumulators with MMAs in flight makes ptxas serialize every MMA: its C7514 warning), so the other
            // warpgroup's MMAs, not this one's, overlap this.
            const int sh = 8 * (2 * static_cast<int>(kt % 2) + cc);  // this chunk's byte in the group's word
            const float s0 = gs_e8m0((sw[0] >> sh) & 0xFFu), s1 = gs_e8m0((sw[1] >> sh) & 0xFFu);
            gs_wgmma_wait<0>();
            gs_wgmma_pin(part);
#pragma unroll
            for (int i = 0; i < TM / 2; ++i) acc[i] = fmaf(part[i], (i / 2) % 2 ? s1 : s0, acc[i]);
          }
        }
      }
      gs_wgmma_wait<0>();  // the in-place forms' last stage
      if constexpr (kBlock) {
        gs_wgmma_pin(part);
#pragma unroll
        for (int i = 0; i < TM / 2; ++i) acc[i] = fmaf(part[i], block_scale, acc[i]);
      }
      gs_wgmma_pin(acc);
      gs_cp_async_wait<0>();
      __syncthreads();  // the next row group's prologue refills slots other warpgroups may still read
      // The fast form's acc holds sum(w 2^(e - c) x): times 2^(c - 127) per column (a power of two).
      const float cs[2] = {F == kWqFast ? ldexpf(1.0f, shift[0] - 127) : 1.0f,
                           F == kWqFast ? ldexpf(1.0f, shift[1] - 127) : 1.0f};
      // acc[4 j + 2 h + c]: weight column c0 + 8 h, x row 8 j + 2 t + c of the row group (wgmma D fragments).
#pragma unroll
      for (int j = 0; j < TM / 8; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int r = 8 * j + 2 * t + c;
          if (r >= mrows) continue;
          const int64_t orow = row0 + rg + r;
          const float rs = a.x_rs[orow];  // undo the f16 row scale (a power of two: exact)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int64_t n = col0 + c0 + 8 * h;
            if (n < a.N) a.out[orow * a.N + n] = gs_float_to_bf16(acc[4 * j + 2 * h + c] * cs[h] * rs);
          }
        }
    }
  };
  if constexpr (MODE == kWqAuto) {
    if (fast_cta) compute(std::integral_constant<int, kWqFast>{});
    else compute(std::integral_constant<int, kWqExact>{});
  } else {
    compute(std::integral_constant<int, MODE == kWqFast ? kWqFast : kWqExact>{});
  }
#else
  (void)a;
  __trap();  // the launcher picks this kernel only in sm_90a builds (GS_SM90A)
#endif
}

// Compute capability >= 8.0 of the current device (mma.sync bf16): asked once per device and kept, so an
// eager call makes no attribute query (the op's host cost per call is in bench/moe_gemm.py, host_us).
// 0 unknown, 1 no, 2 yes; two threads racing on a device both ask and store the same answer.
inline bool gs_device_has_mma_bf16() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> known[kMaxDevices];  // static storage: zero before first use
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  if (dev >= 0 && dev < kMaxDevices && known[dev] != 0) return known[dev] == 2;
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
  if (dev >= 0 && dev < kMaxDevices) known[dev] = major >= 8 ? 2 : 1;
  return major >= 8;
}
#endif  // GS_BACKEND_CUDA

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

// The device's architecture is one of the MFMA targets above (gfx90a, gfx94x, gfx950): asked once per device
// and kept, so an eager call makes no property query. 0 unknown, 1 no, 2 yes.
inline bool gs_device_has_mfma() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> known[kMaxDevices];  // static storage: zero before first use
  int dev = 0;
  if (hipGetDevice(&dev) != hipSuccess) return false;
  if (dev >= 0 && dev < kMaxDevices && known[dev] != 0) return known[dev] == 2;
  hipDeviceProp_t prop;
  if (hipGetDeviceProperties(&prop, dev) != hipSuccess) return false;
  const char* arch = prop.gcnArchName;  // e.g. "gfx942:sramecc+:xnack-"
  const bool yes = strncmp(arch, "gfx90a", 6) == 0 || strncmp(arch, "gfx94", 5) == 0 || strncmp(arch, "gfx950", 6) == 0;
  if (dev >= 0 && dev < kMaxDevices) known[dev] = yes ? 2 : 1;
  return yes;
}
#endif  // GS_BACKEND_HIP

// One block per row (grid-stride), before the GEMM kernel:
//  * zero_unwritten: zero the output row iff no valid slot covers it;
//  * a.xh set (the ring and prefill kernels' fp8 / MXFP4 paths): write the row of x as f16 times
//    2^(134 - E), E the largest
//    biased exponent among its finite bf16 elements (at least 8), and 2^(E - 134) into a.x_rs. The row's
//    largest magnitude lands in [2^7, 2^8), far inside f16's range (65504), so every element within 2^24 of
//    it converts exactly (f16 subnormals reach 2^-24; bf16 has 8 significant bits); smaller ones round,
//    by at most 2^-25 of the row's largest. NaN stays NaN, inf stays inf. The f16 x is what lets the fp8
//    weights reach the tensor core through the hardware e4m3 -> f16 conversion (the ring kernel's note).
#if GS_MOE_MAIN_UNIT
__global__ void __launch_bounds__(kThreads) gs_moe_prepare_rows(GsMoeArgs a, int zero_unwritten) {
  __shared__ int covered;
  __shared__ unsigned row_exp;
  for (int64_t row = blockIdx.x; row < a.R; row += gridDim.x) {
    if (threadIdx.x == 0) covered = 0, row_exp = 8;
    __syncthreads();
    if (zero_unwritten)
      for (int64_t s = threadIdx.x; s < a.S; s += blockDim.x) {
        const int32_t e = a.map[s * 3], r0 = a.map[s * 3 + 1], cnt = a.map[s * 3 + 2];
        if (e >= 0 && e < a.E && row >= r0 && row < r0 + cnt) covered = 1;  // benign race: all write 1
      }
#if defined(GS_BACKEND_CUDA)
    // 16-byte pieces of 8 elements: the ring path runs only with a.vec_x (gs_moe_gemm_uses_mma); scalar
    // 2-byte accesses would make this kernel 11.7 us at 512 x 6144 on the H200.
    const uint4* xr = reinterpret_cast<const uint4*>(a.x + row * a.x_sr);
    if (a.xh) {
      unsigned em = 0;
      for (int64_t k = threadIdx.x; k < a.K / 8; k += blockDim.x) {
        const uint4 v = xr[k];
        for (uint32_t w : {v.x, v.y, v.z, v.w})
          for (uint32_t e : {(w >> 7) & 0xFFu, (w >> 23) & 0xFFu}) em = e != 255u && e > em ? e : em;
      }
      atomicMax(&row_exp, em);
    }
#endif
    __syncthreads();
    if (zero_unwritten && !covered)
      for (int64_t n = threadIdx.x; n < a.N; n += blockDim.x) a.out[row * a.N + n] = 0;
#if defined(GS_BACKEND_CUDA)
    if (a.xh) {
      const float mult = gs_bits_f32((261u - row_exp) << 23);  // 2^(134 - E), E in 8..254: a normal f32
      for (int64_t k = threadIdx.x; k < a.K / 8; k += blockDim.x) {
        const uint4 v = xr[k];
        uint32_t h[4] = {v.x, v.y, v.z, v.w};
        for (uint32_t& w : h) {
          const __half2 f = __floats2half2_rn(gs_bits_f32(w << 16) * mult, gs_bits_f32(w & 0xFFFF0000u) * mult);
          memcpy(&w, &f, 4);
        }
        if (a.fmt == GS_FMT_MXFP4) {  // the ring's e2m1 pair order within 8 elements: 0, 2, 1, 3, 4, 6, 5, 7
          const uint32_t p[4] = {__byte_perm(h[0], h[1], 0x5410), __byte_perm(h[0], h[1], 0x7632),
                                 __byte_perm(h[2], h[3], 0x5410), __byte_perm(h[2], h[3], 0x7632)};
          for (int i = 0; i < 4; ++i) h[i] = p[i];
        }
        if (a.xh_wgmma) {  // pair i of the chunk's group u = k % 4 goes to pair u + 4 i (the kernel's note)
          uint32_t* chunk = reinterpret_cast<uint32_t*>(a.xh + row * a.K) + (k / 4) * 16 + k % 4;
          for (int i = 0; i < 4; ++i) chunk[4 * i] = h[i];
        } else {
          reinterpret_cast<uint4*>(a.xh + row * a.K)[k] = make_uint4(h[0], h[1], h[2], h[3]);
        }
      }
      if (threadIdx.x == 0) a.x_rs[row] = gs_bits_f32((row_exp - 7u) << 23);  // 2^(E - 134)
    }
#endif
    __syncthreads();
  }
}
#endif  // GS_MOE_MAIN_UNIT

// The fp8 decode the production launcher uses: the hardware conversion where the toolkit targets sm_89+
// (it falls back to the portable decode inside gs_decode_chunk_dev elsewhere, including AMD).
constexpr int kDecode = 1;

// Which kernel runs: a matrix-core kernel for slots of more than 4 rows in bf16/mxfp8/block_fp8 with
// 16-byte-aligned K-contiguous operands on CUDA sm_80+ (mma.sync) or AMD gfx90a/gfx94x/gfx950 (MFMA), and on
// CUDA sm_80+ for MXFP4 slots of every size (the ring or prefill kernel; the CUDA-core kernel read MXFP4 weights at 0.33
// of copy bandwidth at 1 token per expert and 0.023 at 16 on the H200, reports/measurements/
// h200-2026-12-01-eager-host-cost); the bit-exact CUDA-core kernel otherwise. kernel_path() exposes it so
// tests can state which path produced an output.
inline bool gs_moe_gemm_uses_mma(const GsMoeArgs& a, int block_m) {
#if defined(GS_BACKEND_CUDA)
  return ((block_m > 4 && gs_mma_format(a.fmt)) || a.fmt == GS_FMT_MXFP4) && a.vec_w && a.vec_x &&
         gs_device_has_mma_bf16();
#elif defined(GS_BACKEND_HIP)
  return block_m > 4 && gs_mma_format(a.fmt) && a.vec_w && a.vec_x && gs_device_has_mfma();
#else
  (void)a;
  (void)block_m;
  return false;
#endif
}

// zero_rows: grid rows of zero-fill blocks after the S rows of slots (gs_zero_uncovered_rows), 0 for none.
template <int FMT, int MR>
inline void gs_launch_cuda_core(const GsMoeArgs& a, hipStream_t stream, int64_t zero_rows) {
  dim3 grid(static_cast<unsigned>((a.N + GsTile<MR>::kTileN - 1) / GsTile<MR>::kTileN),
            static_cast<unsigned>(a.S + zero_rows));
  hipLaunchKernelGGL((gs_moe_gemm_kernel<FMT, MR, kDecode>), grid, dim3(kThreads), 0, stream, a);
}

// The CUDA-core kernel's launchers, one per translation unit (the unit note above): decode slots of 1 and of up
// to 4 rows, or 16-row tiles (slots of more than 4 rows where no tensor-core kernel runs, looping over 16-row
// groups); each for the 8- and 16-bit formats or for the 4-bit ones (gs_fmt_4bit; gs_moe_gemm_launch picks).
#define GS_MOE_DISPATCH_8_16BIT(fmt, CALL)                  \
  switch (fmt) {                                            \
    case GS_FMT_BF16: CALL(GS_FMT_BF16); break;             \
    case GS_FMT_MXFP8: CALL(GS_FMT_MXFP8); break;           \
    case GS_FMT_FP8_FNUZ: CALL(GS_FMT_FP8_FNUZ); break;     \
    default: CALL(GS_FMT_BLOCK_FP8); break;                 \
  }
#define GS_MOE_DISPATCH_4BIT(fmt, CALL)                     \
  switch (fmt) {                                            \
    case GS_FMT_MXFP4: CALL(GS_FMT_MXFP4); break;           \
    case GS_FMT_NVFP4: CALL(GS_FMT_NVFP4); break;           \
    default: CALL(GS_FMT_Q4_0); break;                      \
  }
#define GS_LAUNCH_SMALL(F)                          \
  if (block_m <= 1)                                 \
    gs_launch_cuda_core<F, 1>(a, stream, zero_rows); \
  else                                              \
    gs_launch_cuda_core<F, 4>(a, stream, zero_rows);
#define GS_LAUNCH_16(F) gs_launch_cuda_core<F, 16>(a, stream, zero_rows);
#if GS_MOE_CUDA_CORE_UNIT
hipError_t gs_moe_gemm_launch_cuda_core_small(const GsMoeArgs& a, int block_m, int64_t zero_rows,
                                              hipStream_t stream) {
  GS_MOE_DISPATCH_8_16BIT(a.fmt, GS_LAUNCH_SMALL)
  return hipGetLastError();
}
#endif
#if GS_MOE_CUDA_CORE_4BIT_UNIT
hipError_t gs_moe_gemm_launch_cuda_core_small_4bit(const GsMoeArgs& a, int block_m, int64_t zero_rows,
                                                   hipStream_t stream) {
  GS_MOE_DISPATCH_4BIT(a.fmt, GS_LAUNCH_SMALL)
  return hipGetLastError();
}
#endif
#if GS_MOE_CUDA_CORE_16_UNIT
hipError_t gs_moe_gemm_launch_cuda_core_16(const GsMoeArgs& a, int64_t zero_rows, hipStream_t stream) {
  GS_MOE_DISPATCH_8_16BIT(a.fmt, GS_LAUNCH_16)
  return hipGetLastError();
}
#endif
#if GS_MOE_CUDA_CORE_16_4BIT_UNIT
hipError_t gs_moe_gemm_launch_cuda_core_16_4bit(const GsMoeArgs& a, int64_t zero_rows, hipStream_t stream) {
  GS_MOE_DISPATCH_4BIT(a.fmt, GS_LAUNCH_16)
  return hipGetLastError();
}
#endif
#undef GS_LAUNCH_SMALL
#undef GS_LAUNCH_16
#undef GS_MOE_DISPATCH_8_16BIT
#undef GS_MOE_DISPATCH_4BIT

// Grid rows of zero-fill blocks for a kernel whose grid is gx columns wide: a block per kZeroRows rows, up to
// 64 blocks (more rows loop); 0 (gs_moe_prepare_rows zero-fills instead) for an empty map or a grid past
// 65535 rows.
inline int64_t gs_zero_rows(const GsMoeArgs& a, int64_t gx) {
  if (a.R <= 0 || a.N <= 0 || a.S <= 0) return 0;
  int64_t blocks = (a.R + kZeroRows - 1) / kZeroRows;
  blocks = blocks < 64 ? blocks : 64;
  const int64_t z = (blocks + gx - 1) / gx;
  return a.S + z > 65535 ? 0 : z;
}

#if defined(GS_BACKEND_CUDA)
// The dynamic shared memory a kernel launches with: above 48 KB minus its static shared memory it needs the
// opt-in attribute (the ring's MXFP8 configuration takes exactly 48 KB plus 256 static bytes), so it is set
// for every ring and prefill kernel, once per device (it is per function and device): an eager call makes no
// extra runtime call after the first. One flag array per kernel (KERNEL is a template argument).
template <auto KERNEL>
inline hipError_t gs_smem_opt_in(int smem) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> ready[kMaxDevices];  // static storage: zero before first use
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return hipGetLastError();
  if (dev < 0 || dev >= kMaxDevices || ready[dev] == 0) {
    const cudaError_t err = cudaFuncSetAttribute(KERNEL, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return err;
    if (dev >= 0 && dev < kMaxDevices) ready[dev] = 1;
  }
  return hipSuccess;
}

#if GS_MOE_PREFILL_UNIT
// The prefill kernel with MW rows of warps (64 MW rows per CTA), U chunks and S stages per ring.
template <int FMT, int MW, int U = gs_pf_chunks(FMT), int S = kPfStages>
inline hipError_t gs_launch_prefill(const GsMoeArgs& a, hipStream_t stream) {
  using P = GsPf<FMT, MW, U, S>;
  const hipError_t err = gs_smem_opt_in<gs_moe_gemm_prefill_kernel<FMT, MW, U, S>>(P::kSmem);
  if (err != hipSuccess) return err;
  dim3 grid(static_cast<unsigned>((a.N + kPfTileN - 1) / kPfTileN), static_cast<unsigned>(a.S));
  hipLaunchKernelGGL((gs_moe_gemm_prefill_kernel<FMT, MW, U, S>), grid, dim3(P::kThreads), P::kSmem, stream, a);
  return hipGetLastError();
}

// The warpgroup-MMA kernel (bf16, sm_90a builds): BM rows and BN columns per CTA, S stages, MINB CTAs per SM,
// and zero_rows grid rows of zero-fill blocks (gs_zero_fill_block; they take the tail the GEMM's last wave
// leaves): the whole call in one launch.
template <int BN, int S, int BM, int MINB = 1>
inline hipError_t gs_launch_wgmma(const GsMoeArgs& a, hipStream_t stream, int64_t zero_rows) {
  using P = GsWg<BN, S, BM>;
  const hipError_t err = gs_smem_opt_in<gs_moe_gemm_wgmma_kernel<BN, S, BM, MINB>>(P::kSmem);
  if (err != hipSuccess) return err;
  dim3 grid(static_cast<unsigned>((a.N + BN - 1) / BN), static_cast<unsigned>(a.S + zero_rows));
  hipLaunchKernelGGL((gs_moe_gemm_wgmma_kernel<BN, S, BM, MINB>), grid, dim3(P::kThreads), P::kSmem, stream, a);
  return hipGetLastError();
}

// The quantized-weight warpgroup-MMA kernel (sm_90a builds) in form MODE: TM rows of x per CTA, S stages, MINB
// CTAs per SM. Needs x as gs_moe_prepare_rows wrote it with a.xh_wgmma set.
template <int FMT, int TM, int S, int MINB = 1, int MODE = kWqExact, int NWG = 2>
inline hipError_t gs_launch_wgmma_q(const GsMoeArgs& a, hipStream_t stream) {
  using P = GsWq<FMT, TM, S, NWG>;
  const hipError_t err = gs_smem_opt_in<gs_moe_gemm_wgmma_q_kernel<FMT, TM, S, MINB, MODE, NWG>>(P::kSmem);
  if (err != hipSuccess) return err;
  dim3 grid(static_cast<unsigned>((a.N + P::kCols - 1) / P::kCols), static_cast<unsigned>(a.S));
  hipLaunchKernelGGL((gs_moe_gemm_wgmma_q_kernel<FMT, TM, S, MINB, MODE, NWG>), grid, dim3(P::kThreads), P::kSmem,
                     stream, a);
  return hipGetLastError();
}
// The launcher's forms: for MXFP8 and MXFP4 up to kWqAutoMaxK one launch in which each CTA takes its form
// (kWqAuto), above it the fast form's CTAs, then the rest exactly; block-FP8's one form.
template <int FMT, int TM, int S, int MINB = 1, int NWG = 2>
inline hipError_t gs_launch_wgmma_q_forms(const GsMoeArgs& a, hipStream_t stream) {
  if constexpr (FMT == GS_FMT_BLOCK_FP8) {
    return gs_launch_wgmma_q<FMT, TM, S, MINB, kWqExact, NWG>(a, stream);
  } else {
    if (a.K <= kWqAutoMaxK) return gs_launch_wgmma_q<FMT, TM, S, MINB, kWqAuto, NWG>(a, stream);
    const hipError_t err = gs_launch_wgmma_q<FMT, TM, S, MINB, kWqFast, NWG>(a, stream);
    return err != hipSuccess ? err : gs_launch_wgmma_q<FMT, TM, S, MINB, kWqRest, NWG>(a, stream);
  }
}

// Larger slots (prefill): in sm_90a builds the warpgroup-MMA kernels (kWgN's and kWqStages' notes), else the
// shared-memory tile kernel, 64 x 256 outputs per CTA, 128 x 256 for slots of block_m >= 128 (GsPf's note).
// Compiled in the prefill translation unit (GS_MOE_PREFILL_UNIT).
hipError_t gs_moe_gemm_launch_prefill(const GsMoeArgs& a, int block_m, int64_t zero_rows, hipStream_t stream) {
  constexpr int bf16 = GS_FMT_BF16, mx8 = GS_FMT_MXFP8, mx4 = GS_FMT_MXFP4, b8 = GS_FMT_BLOCK_FP8;
#if defined(GS_SM90A)
  if (a.fmt == bf16)
    return block_m >= 128 ? gs_launch_wgmma<kWgN, kWgStages, 128>(a, stream, zero_rows)
                          : gs_launch_wgmma<kWgN64, kWgStages64, 64, kWgMinBlocks64>(a, stream, zero_rows);
#define GS_WQ(F, S128, G128)                                                               \
  return block_m >= 128 ? gs_launch_wgmma_q_forms<F, 128, S128, 1, G128>(a, stream)        \
                        : gs_launch_wgmma_q_forms<F, 64, kWqStages64, kWqMinBlocks64>(a, stream)
  if (a.fmt == mx8) GS_WQ(mx8, kWqStages, kWqGroupsMx);
  if (a.fmt == mx4) GS_WQ(mx4, kWqStages, kWqGroupsMx);
  GS_WQ(b8, kWqStagesBlock, 2);
#undef GS_WQ
#else
  (void)zero_rows;  // 0 here: gs_moe_gemm_launch zero-fills with gs_moe_prepare_rows for these kernels
  // At 128 rows bf16 and the fp8 formats stage 128 bytes per weight column (bf16 2 chunks, fp8 4; 144 and
  // 195 KB of rings, 1 CTA per SM): DSv3-prefill MXFP8 1.02 ms against 1.26 with 64 bytes, bf16 1.06 against
  // 1.10 (bench/moe_gemm_variants.cu on the H200, reports/measurements/h200-2026-12-01-session5-kernels run2).
  if (block_m >= 128) {
    if (a.fmt == bf16) return gs_launch_prefill<bf16, 2, 2>(a, stream);
    if (a.fmt == mx8) return gs_launch_prefill<mx8, 2, 4>(a, stream);
    if (a.fmt == mx4) return gs_launch_prefill<mx4, 2>(a, stream);
    return gs_launch_prefill<b8, 2, 4>(a, stream);
  }
  if (a.fmt == bf16) return gs_launch_prefill<bf16, 1>(a, stream);
  if (a.fmt == mx8) return gs_launch_prefill<mx8, 1>(a, stream);
  if (a.fmt == mx4) return gs_launch_prefill<mx4, 1>(a, stream);
  return gs_launch_prefill<b8, 1>(a, stream);
#endif
}
#endif  // GS_MOE_PREFILL_UNIT

// The ring kernel with NT n8 tiles per warp, ST stages, registers capped for MINB blocks per SM, and zero_rows
// grid rows of zero-fill blocks: the whole call in one launch.
template <int FMT, int NT, int ST, int MINB, int XS = 0, int W = kMmaWarps>
inline hipError_t gs_launch_ring(const GsMoeArgs& a, hipStream_t stream, int64_t zero_rows) {
  constexpr int smem = gs_ring_smem_bytes<FMT, NT, ST, W>();
  constexpr int tn = W * NT * 8, uc = gs_ring_chunks(FMT);
  const hipError_t err = gs_smem_opt_in<gs_moe_gemm_mma_ring_kernel<FMT, NT, ST, MINB, W, uc, XS>>(smem);
  if (err != hipSuccess) return err;
  dim3 grid(static_cast<unsigned>((a.N + tn - 1) / tn), static_cast<unsigned>(a.S + zero_rows));
  hipLaunchKernelGGL((gs_moe_gemm_mma_ring_kernel<FMT, NT, ST, MINB, W, uc, XS>), grid, dim3(W * 32), smem,
                     stream, a);
  return hipGetLastError();
}
#endif

// Whether the ring kernel takes the call (CUDA tensor-core path, slots of at most 16 rows; larger slots take
// the prefill kernel, MXFP4 too).
inline bool gs_moe_uses_ring(const GsMoeArgs& a, int block_m) {
#if defined(GS_BACKEND_CUDA)
  return block_m <= 16 && gs_moe_gemm_uses_mma(a, block_m);
#else
  (void)a;
  (void)block_m;
  return false;
#endif
}

// Whether a warpgroup-MMA kernel takes the call: every tensor-core prefill slot (bf16, MXFP8, MXFP4, block-FP8)
// in sm_90a builds.
inline bool gs_moe_uses_wgmma(const GsMoeArgs& a, int block_m) {
#if defined(GS_SM90A)
  return gs_moe_gemm_uses_mma(a, block_m) && !gs_moe_uses_ring(a, block_m);
#else
  (void)a;
  (void)block_m;
  return false;
#endif
}

// The ring and prefill kernels' fp8 / MXFP4 paths (CUDA) read x as scaled f16 that gs_moe_prepare_rows writes
// first: bytes of caller-provided device workspace for it, 0 on every other path (the MFMA kernel reads bf16
// x). Layout: f16 [R, K], then f32 [R].
inline int64_t gs_moe_workspace_bytes(const GsMoeArgs& a, int block_m) {
#if defined(GS_BACKEND_CUDA)
  const bool x16 = a.fmt != GS_FMT_BF16 && gs_moe_gemm_uses_mma(a, block_m);
  return x16 ? a.R * a.K * 2 + a.R * 4 : 0;
#else
  (void)a;
  (void)block_m;
  return 0;
#endif
}

#if GS_MOE_MAIN_UNIT
#if defined(GS_BACKEND_CUDA)
hipError_t gs_moe_gemm_launch_prefill(const GsMoeArgs& a, int block_m, int64_t zero_rows, hipStream_t stream);
#endif
hipError_t gs_moe_gemm_launch_cuda_core_small(const GsMoeArgs& a, int block_m, int64_t zero_rows,
                                              hipStream_t stream);
hipError_t gs_moe_gemm_launch_cuda_core_small_4bit(const GsMoeArgs& a, int block_m, int64_t zero_rows,
                                                   hipStream_t stream);
hipError_t gs_moe_gemm_launch_cuda_core_16(const GsMoeArgs& a, int64_t zero_rows, hipStream_t stream);
hipError_t gs_moe_gemm_launch_cuda_core_16_4bit(const GsMoeArgs& a, int64_t zero_rows, hipStream_t stream);

// `a` carries the workspace pointers (xh, x_rs) whenever gs_moe_workspace_bytes(a, block_m) > 0.
hipError_t gs_moe_gemm_launch(const GsMoeArgs& a, int block_m, int zero_unwritten, hipStream_t stream) {
  const bool mma = gs_moe_gemm_uses_mma(a, block_m);
  const bool ring = gs_moe_uses_ring(a, block_m);
  const bool x16 = gs_moe_workspace_bytes(a, block_m) > 0;
  if (x16 && (a.xh == nullptr || a.x_rs == nullptr)) return hipErrorInvalidValue;
  // The CUDA-core, bf16 ring and bf16 warpgroup-MMA kernels fold the zero-fill into their own grids
  // (gs_zero_fill_block: one launch per call); where gs_moe_prepare_rows runs anyway (the f16 x of the fp8 /
  // MXFP4 tensor-core paths) it zero-fills, as it does for the MFMA kernel, the sm_80 tile kernel, an empty
  // map and grids past 65535 rows. zero_rows, the kernels' grid rows of zero-fill blocks, is computed once here
  // and passed on: the grid width it assumes sets only how many blocks share the fill (gs_zero_fill_block covers
  // every range with any positive count), so a kernel never recounts to a different answer than the one that
  // skipped gs_moe_prepare_rows' fill.
  int64_t zero_rows = 0;
  if (zero_unwritten && !mma) {
    const int64_t tile = block_m <= 4 ? GsTile<1>::kTileN : GsTile<16>::kTileN;
    zero_rows = gs_zero_rows(a, (a.N + tile - 1) / tile);
  }
#if defined(GS_BACKEND_CUDA)
  if (zero_unwritten && ring && !x16) {
    const int64_t tile = kMmaWarps * 8 * gs_ring_nt(a.fmt);  // the bf16 ring's grid width (the one ring without x16)
    zero_rows = gs_zero_rows(a, (a.N + tile - 1) / tile);
  }
  if (zero_unwritten && !ring && !x16 && gs_moe_uses_wgmma(a, block_m)) {
    const int64_t tile = block_m >= 128 ? kWgN : kWgN64;  // the bf16 warpgroup-MMA kernel's grid width
    zero_rows = gs_zero_rows(a, (a.N + tile - 1) / tile);
  }
#endif
  if (a.R > 0 && ((zero_unwritten && a.N > 0 && zero_rows == 0) || x16)) {
    const int64_t blocks = a.R < 65535 ? a.R : 65535;
    GsMoeArgs pa = a;
    if (!x16) pa.xh = nullptr;
    pa.xh_wgmma = a.fmt != GS_FMT_BF16 && gs_moe_uses_wgmma(a, block_m) ? 1 : 0;
    hipLaunchKernelGGL(gs_moe_prepare_rows, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream, pa,
                       zero_unwritten && a.N > 0 ? 1 : 0);
  }
  if (a.S == 0 || a.N == 0) return hipGetLastError();
#if defined(GS_BACKEND_CUDA)
  if (mma) {
    // Slots of at most 16 rows (decode): the shared-memory ring kernel; larger slots (prefill): the
    // shared-memory tile kernel (gs_launch_prefill). Ring configuration: 4 warps of 4 n8 tiles, 2 stages and
    // registers capped for 4 blocks per SM (block_fp8; the sweep's other points are in reports/measurements/
    // moe_gemm-kernel-design); MXFP8 and MXFP4 take 8 warps capped for 2 blocks (kRingWarpsMxfp8's and
    // kRingXsMxfp4's notes). bf16 takes 2 tiles so that its 2 stages stay within 48 KB of shared memory, the
    // size a kernel gets without an opt-in attribute (0.97-0.99 of copy bandwidth at 16 tokens, bench/moe_gemm.py).
    // MXFP4 takes the ring for slots of up to 16 rows (every decode size: its CUDA-core kernel is slower, see
    // gs_moe_gemm_uses_mma), in the form kRingXsMxfp4's note gives (XS 2, kRingStagesMxfp4 stages of
    // gs_ring_chunks(MXFP4) = 8 chunks, 8 warps: 0.631 / 0.684 of copy bandwidth at Hy4-TP8 / DSv3 decode against
    // 0.430 / 0.448 for the first ring's XS 0, 4 chunks and 4 warps). zero_rows == 0 means
    // gs_moe_prepare_rows zero-filled above (or no fill).
    if (ring) {
      constexpr int bf16 = GS_FMT_BF16, mx8 = GS_FMT_MXFP8, mx4 = GS_FMT_MXFP4, b8 = GS_FMT_BLOCK_FP8;
      if (a.fmt == bf16) return gs_launch_ring<bf16, gs_ring_nt(bf16), kRingStages, 1>(a, stream, zero_rows);
      if (a.fmt == mx8)
        return gs_launch_ring<mx8, gs_ring_nt(mx8), kRingStages, kRingMinBlocksMxfp8, 0, kRingWarpsMxfp8>(a, stream,
                                                                                                   zero_rows);
      if (a.fmt == mx4)
        return gs_launch_ring<mx4, gs_ring_nt(mx4), kRingStagesMxfp4, kRingMinBlocksMxfp4, kRingXsMxfp4,
                              kRingWarpsMxfp4>(a, stream, zero_rows);
      return gs_launch_ring<b8, gs_ring_nt(b8), kRingStages, 4>(a, stream, zero_rows);
    }
    return gs_moe_gemm_launch_prefill(a, block_m, zero_rows, stream);  // larger slots (prefill)
  }
#elif defined(GS_BACKEND_HIP)
  if (mma) {
    dim3 grid(static_cast<unsigned>((a.N + kMfmaTileN - 1) / kMfmaTileN), static_cast<unsigned>(a.S));
    dim3 block(kMfmaWaves * 64);
    if (a.fmt == GS_FMT_BF16)
      hipLaunchKernelGGL((gs_moe_gemm_mfma_kernel<GS_FMT_BF16, kMfmaMT>), grid, block, 0, stream, a);
    else if (a.fmt == GS_FMT_MXFP8)
      hipLaunchKernelGGL((gs_moe_gemm_mfma_kernel<GS_FMT_MXFP8, kMfmaMT>), grid, block, 0, stream, a);
    else
      hipLaunchKernelGGL((gs_moe_gemm_mfma_kernel<GS_FMT_BLOCK_FP8, kMfmaMT>), grid, block, 0, stream, a);
    return hipGetLastError();
  }
#endif
  // The CUDA-core kernel, rows per register tile by block_m: decode slots (1..16 rows) never loop; larger
  // block_m loops over 16-row groups.
  const bool four_bit = gs_fmt_4bit(a.fmt);
  if (block_m <= 4)
    return four_bit ? gs_moe_gemm_launch_cuda_core_small_4bit(a, block_m, zero_rows, stream)
                    : gs_moe_gemm_launch_cuda_core_small(a, block_m, zero_rows, stream);
  return four_bit ? gs_moe_gemm_launch_cuda_core_16_4bit(a, zero_rows, stream)
                  : gs_moe_gemm_launch_cuda_core_16(a, zero_rows, stream);
}

// The module's entry points (declared above, called through moe_gemm.entry.h) over the launcher.
const char* gs_moe_gemm_run(GsMoeArgs a, int block_m, int zero_unwritten, uintptr_t stream) {
  const hipError_t err = gs_moe_gemm_launch(a, block_m, zero_unwritten, reinterpret_cast<hipStream_t>(stream));
  return err == hipSuccess ? nullptr : hipGetErrorString(err);
}
bool gs_moe_gemm_tensor_core(const GsMoeArgs& a, int block_m) { return gs_moe_gemm_uses_mma(a, block_m); }
int64_t gs_moe_gemm_workspace(const GsMoeArgs& a, int block_m) { return gs_moe_workspace_bytes(a, block_m); }
#endif  // GS_MOE_MAIN_UNIT
#endif  // !GS_BACKEND_HOST
