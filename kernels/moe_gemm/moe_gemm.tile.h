// moe_gemm.tile.h -- the MoE GEMM's mma.sync prefill kernel (included by moe_gemm.hip): shared-memory tiles of
// 64 or 128 rows x 256 columns for slots of more than 16 rows on CUDA sm_80+ where no warpgroup MMA is built.
#pragma once

#include "moe_gemm.device.h"

#if defined(GS_BACKEND_CUDA)
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
//    from memory once per 64 MW rows (the ring kernel re-reads them per 16: far slower, DESIGN.md).
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
// Measured (H200, sm_90 build, DeepSeek-like 32 x 4096 x 7168, 128 tokens per expert, bench/moe_gemm.py;
// reports/performance.md): block_m 128 (MW = 2) mxfp8 1.06 ms, bf16 1.12, block_fp8 1.42, mxfp4 1.14; block_m 64
// (MW = 1) 1.36 / 1.25 / 1.61 / 1.31; against 0.53 ms for torch._grouped_mm on bf16: 170-230 TFLOP/s, still under
// half of it. Per-m16-tile branches between the MMAs slowed every tile (DESIGN.md), so only a slot's last,
// partial tile takes them (kFull). block_fp8 always takes the exact path (an f32
// partial per chunk).
// Where the time goes (Nsight Compute at DSv3-prefill, reports/performance.md):
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
#endif  // GS_BACKEND_CUDA
