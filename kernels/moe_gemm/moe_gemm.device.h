// moe_gemm.device.h -- device helpers the MoE GEMM's kernels share (included by moe_gemm.hip): the device-side
// weight decodes (e4m3 through the sm_89+ conversion or bit arithmetic into f16 / bf16 / f32, e2m1 into f16x2,
// E8M0 scales by exponent shifts), the mma.sync and cp.async wrappers, and the zero-fill blocks some kernels add
// to their grids.
#pragma once

#include "moe_gemm.formats.h"

#if defined(GS_BACKEND_CUDA)
#include <type_traits>  // std::true_type: the ring and prefill kernels' variants of their chunk loops
#include <cuda_fp8.h>  // __nv_cvt_fp8x2_to_halfraw2: cvt.rn.f16x2.e4m3x2, one instruction per 2 weights on sm_89+
#endif

constexpr int kThreads = 256;
constexpr int kColGroups = kThreads / kLanes;  // 8 groups of 32 logical lanes; each group owns NC columns

// -------------------------------------------------------------------------------------------- weight decodes
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
// bench/moe_gemm_variants.cu measures the two (reports/performance.md). DEC 1 also
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

// ------------------------------------------------------------------------------------------ zero-fill blocks
// Zero-fill blocks of the CUDA-core, ring and bf16 warpgroup-MMA kernels: gs_moe_gemm_launch adds grid rows past
// the S slots'; zero-fill block zb of zn takes the ranges of kZeroRows rows zb, zb + zn, ...: one pass over the map
// marks the range's rows that a valid slot covers, then the block zeroes the others (what gs_moe_prepare_rows
// does), so these paths make one launch per call: a second launch costs host time per eager call (`host_us`,
// reports/performance.md). A block per row instead (a map pass and three barriers each) made the ring path
// slower at 512 rows (Hy4-TP8 16 tokens, DESIGN.md): those blocks queue for the few SM slots
// the GEMM's blocks leave. Rows no slot covers are disjoint from the rows the slots' blocks write, so the two kinds
// of block need no order. Every thread of the block calls it.
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

// --------------------------------------------------- tensor-core kernels' decodes, mma.sync, cp.async (CUDA)
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
#endif  // GS_BACKEND_CUDA
