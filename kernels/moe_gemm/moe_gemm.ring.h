// moe_gemm.ring.h -- the MoE GEMM's decode kernel (included by moe_gemm.hip): tensor cores fed through a
// shared-memory ring, for slots of up to 16 rows on CUDA sm_80+, with the launcher's ring configurations.
#pragma once

#include "moe_gemm.mma.h"

#if defined(GS_BACKEND_CUDA)
// ------------------------------------------------ tensor-core decode kernel, shared-memory ring (CUDA)
// Slots of 5..16 rows: the 16-tokens-per-expert decode step; MXFP4 slots of 1..16 rows (1 row: 15 of the 16 MMA
// rows are zero; larger slots go to the prefill kernel). MXFP4 on the H200 in the launcher's form (XS 2, 8 chunks
// per stage, 8 warps, kRingXsMxfp4's note): 0.631 / 0.684 of copy bandwidth at Hy4-TP8 / DSv3 1 token per expert
// and 0.561 at Hy4-TP8 16 tokens; the CUDA-core kernel 0.31 at 1 token, 0.02 at 16. MXFP8 at Hy4-TP8 16 tokens on
// the H200 in the launcher's form (kRingWarpsMxfp8): 0.81-0.85 of copy bandwidth for the kernel alone, 0.76 with
// gs_moe_prepare_rows (bench/moe_gemm_variants.cu, reports/performance.md; the variants it beat, a one-tile MMA
// kernel and a bf16 software decode, are in DESIGN.md).
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
// (reports/performance.md).
constexpr int kRingWarpsMxfp8 = 8;
constexpr int kRingMinBlocksMxfp8 = 2;
// MXFP4's ring: swapped operands with the 2^14 in the f32 scale (XS 2), 8 warps of 4 n8 tiles (256 columns per
// block), 2 stages of 8 chunks (256 K, 128 bytes per column), registers capped for 2 blocks per SM. The best of
// bench/moe_gemm_variants.cu's sweeps on the H200, each with the op's gs_moe_prepare_rows launch and checked
// against the CUDA-core kernel, as fractions of copy bandwidth (reports/performance.md; the 8-warp row and
// its 4-warp twin from one run):
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
// (53-65%, this one 63%; reports/performance.md): the e2m1 decode's shifts, masks and permutes bound it.
constexpr int kRingNtMxfp4 = 4;
constexpr int kRingWarpsMxfp4 = 8;
constexpr int kRingMinBlocksMxfp4 = 2;
constexpr int kRingStagesMxfp4 = 2;
constexpr int kRingChunksMxfp4 = 8;
constexpr int kRingXsMxfp4 = 2;
// n8 tiles per warp of the launcher's ring per format: bf16 2 (its 2 stages within 48 KB), the others 4.
GS_HD constexpr int gs_ring_nt(int fmt) { return fmt == GS_FMT_BF16 ? 2 : fmt == GS_FMT_MXFP4 ? kRingNtMxfp4 : 4; }

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

// MINB (blocks per SM the register budget must allow), W (warps per block) and U (chunks per stage): the
// launcher's are in gs_moe_gemm_launch (W 4; MXFP8 and MXFP4 8: kRingWarpsMxfp8, kRingWarpsMxfp4);
// bench/moe_gemm_variants.cu instantiates others to measure them.
//
// x has its own ring of S + 1 slots, one stage ahead of the weights: the group of cp.async copies that brings stage
// st's weights also brings stage st + 1's x (bf16 x for bf16 weights; for fp8 / MXFP4 the row-scaled f16 x
// gs_moe_prepare_rows wrote into the workspace, in the MXFP4 pair order), so x never waits behind the weights (bf16
// at Hy4-TP8 16 tokens: the op 1.02 of copy bandwidth, reports/performance.md; whether the ring costs the fp8 path
// was not measured). Grid rows past the S slots' are zero-fill blocks (gs_zero_uncovered_rows) when the launcher
// passes them: the bf16 ring is then one launch per call (the fp8 / MXFP4 paths launch gs_moe_prepare_rows first anyway,
// which zero-fills). Converting x inside this kernel instead (every column block of a slot converting the slot's
// rows again) measured slower for MXFP8 and MXFP4 (DESIGN.md), so the f16 x stays a separate pass.
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
// pair-order, scale and 2^14 arithmetic matches an f64 reference (DESIGN.md); on the H200 XS 1 and 2 match the
// CUDA-core kernel at both decode shapes and 16 tokens (bench/moe_gemm_variants.cu checks it; timings in
// kRingXsMxfp4's note).
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
      // accumulating in place (one MMA chain per tile, the prefill kernel's MXFP8 fast path) measured slower in
      // the ring on the H200 (DESIGN.md).
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
#endif  // GS_BACKEND_CUDA
