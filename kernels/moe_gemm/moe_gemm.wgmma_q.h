// moe_gemm.wgmma_q.h -- the MoE GEMM's warpgroup-MMA prefill kernel for MXFP8, MXFP4 and block-FP8, weights
// decoded into the A registers (sm_90a builds; included by moe_gemm.hip), with its forms and thresholds.
#pragma once

#include "moe_gemm.wgmma.h"

#if defined(GS_BACKEND_CUDA)
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
// block-FP8 0.589-0.592 ms against 1.388 for the mma.sync tile kernel; MXFP8 0.676 (fast form alone 0.634) and
// MXFP4 0.676 (0.636) with 3 warpgroups per CTA, against 0.750 / 0.774 with 2 in the same runs
// (reports/performance.md). The variants measured and dropped are in DESIGN.md.
constexpr int kWqCols = 128;  // block-FP8's scale block, the columns of its CTAs (2 warpgroups)
// NWG: warpgroups per CTA, 64 weight columns each; block-FP8 takes 2 (one scale block per CTA). kWqGroupsMx: the
// launcher's for MXFP8 and MXFP4 at 128 rows. With 2 the kernel is latency-bound: 8 warps per SM (registers and
// shared memory each allow one CTA), 0.52 of 2 warps per scheduler eligible, issue slots 40% busy, the tensor pipe
// 37% (Nsight Compute, MXFP8 fast form, reports/performance.md); 3 gives 12 warps per SM at a cap of 168 registers
// (the fast forms fit; the exact forms spill 44-168 bytes), at a cost of partial column tiles (DSv3's 4096 columns
// are 21.3 tiles of 192): DSv3-prefill 0.676 ms for both the MXFP8 and the MXFP4 pair against 0.750 / 0.774 with 2,
// fast forms alone 0.612-0.644 at 4-6 stages. At 64 rows the kernel keeps 2 warpgroups and 2 CTAs per SM (3 would
// cap registers at 85).
constexpr int kWqGroupsMx = 3;
// Forms: kWqExact (every CTA; MX: each chunk's f32 partial times its scale; block-FP8: each 128-K block's), kWqFast
// (MX only: only CTAs whose every column's E8M0 bytes, 255 aside, span at most the format's window: the scale goes
// into the f16 weights and every MMA accumulates in place), kWqRest (only the other CTAs, exactly) and kWqAuto
// (every CTA, in the form its scan chose: both forms' code in one kernel, its registers the larger form's). For
// MXFP8 and MXFP4 the launcher runs kWqAuto up to kWqAutoMaxK and kWqFast then kWqRest above it: the second launch
// costs a fixed few microseconds (a launch, and CTAs that scan and exit), the one-launch kernel a share of every
// MMA stage. On the H200 (reports/performance.md): kernels alone, both forms in one run
// (bench/moe_gemm_variants.cu), one launch / pair in ms, MXFP8 and MXFP4:
//   64-row CTAs   K 512: 0.0290 / 0.0324, 0.0259 / 0.0295   K 7168: 0.8430 / 0.7877, 0.8342 / 0.8052
//   128-row CTAs  K 512: 0.0468 / 0.0478, 0.0422 / 0.0441   K 7168: 0.7418 / 0.6425, 0.7469 / 0.6430
// Lines through each pair of points cross near K 600 (128 rows) and K 900-1250 (64 rows), so the threshold is the
// measured K 512; the op at small-K-MoE gains the same from a graph (DESIGN.md).
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
// The launcher's forms, measured at DSv3-prefill (bench/moe_gemm_variants.cu, reports/performance.md): at 128 rows
// of x, MX formats 5 stages (3 warpgroups: 150 KB with e4m3; fast forms at 4 / 5 / 6 stages MXFP8 0.644 / 0.634 /
// 0.628 ms, MXFP4 0.612 / 0.636 / 0.637, the pairs measured at 5 only), block-FP8 6 (0.592 against 0.618 at 4); at
// 64 rows 4 stages, 2 CTAs per SM (69 KB each with e4m3; block-FP8 0.656 ms against 0.647 at 6 stages and 0.933 at
// 4 stages with 1 CTA per SM; small-K-MoE 0.0231 against 0.0236).
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
    // whose CTAs nearly all exit after it, paid for 4-byte loads (7 dependent rounds of 8 loads at DSv3-prefill);
    // 16-byte loads made the op faster there and left small-K-MoE unchanged, and spreading the scan over every
    // thread with shared atomics per column was faster there but slower at small-K-MoE (DESIGN.md).
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
          // DESIGN.md).
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
          // conversion: each order is the faster one for its format at DSv3-prefill (DESIGN.md).
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
#endif  // GS_BACKEND_CUDA
