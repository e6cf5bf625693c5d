// moe_gemm_variants.cu -- sweep of kernels/moe_gemm/moe_gemm.hip's kernel variants at the bench shapes.
//
// Role: the measurements behind the launcher's choices (the e4m3 decode kDecode, the tensor-core paths for
// slots of more than 4 rows, the ring kernel's tiles, stages, warps and register cap), in one standalone
// nvcc program (no torch). It also checks, on the device: (1) every one of the 256 e4m3fn
// bytes, in each of the 4 positions of a word, decodes to the same f32 bits through the portable decode, the
// sm_89+ hardware conversion, the prefill kernel's bf16 decode and the ring kernel's e4m3x2 -> f16x2 (its
// hardware and portable forms), and a NaN byte poisons its own element only; (2) the CUDA-core variants
// give bitwise identical outputs (they are all the CPU twin's math); (3) the tensor-core output's relative
// error against the CUDA-core output (NaN where it has NaN, and only there), including a small shape with
// NaN weight bytes, scales up to 2^12 and E8M0 bytes 0 and 255 (the ring kernel's exact-scale path).
// Exit 1 on any mismatch. The portable decode's half of check (1) also runs without a GPU in `make test`
// (tests/test_moe_gemm_ops.py, every fp8 byte through the CPU twin against torch's decode).
// (4) MXFP4 at the decode shapes: ring-kernel tilings against the CUDA-core kernel (tolerance), timed.
// (5) The prefill kernel's tilings (rows of warps, chunks and stages per ring) for MXFP8, bf16 and MXFP4 at the
// DeepSeek-like prefill shape and the small-K shape (K 512, 64 tokens per expert), with 64- and 128-row slots.
// (6) Built for sm_90a with -DGS_SM90A=1 (the line below): the warpgroup-MMA kernels' tilings in (5)'s sweep,
// bf16 (64- and 128-row CTAs, columns, stages) and the quantized formats (rows of x per CTA, stages, forms,
// warpgroups per CTA), checked like the others; block-FP8 (f32 scales per 128 x 128 block) joins bf16 and MXFP4
// in (5).
// GS_VARIANTS_SHAPE=name runs one shape, GS_VARIANTS_FMT=name (bf16, mxfp8, mxfp4, block_fp8) one format;
// GS_VARIANTS_ONCE=1 times one launch per variant (for ncu).
//
//   nvcc -x cu -O2 -std=c++17 -arch=sm_90a -DGS_SM90A=1 --fmad=false -I kernels/common -I kernels/moe_gemm \
//        -DGS_MOE_GEMM_MATH_ONLY bench/moe_gemm_variants.cu -o /tmp/moe_gemm_variants && /tmp/moe_gemm_variants
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "moe_gemm.hip"

#define CK(x)                                                                      \
  do {                                                                             \
    cudaError_t e_ = (x);                                                          \
    if (e_ != cudaSuccess) {                                                       \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(2);                                                                \
    }                                                                              \
  } while (0)

// Byte b at position p (0..3) of a word whose other bytes are 0x38 (e4m3fn 1.0): each decode's four
// outputs, [b][p][i]. Putting b in every position checks that a NaN byte poisons its own element only
// (the tensor-core decode finds NaN bytes with one add over the word and patches them by position).
__device__ float f16_bits_to_float(uint32_t h) { return __half2float(__ushort_as_half(static_cast<unsigned short>(h))); }

__global__ void decode_all(float* portable, float* hw, float* tc, float* f16_hw, float* f16_portable) {
  const uint32_t b = threadIdx.x;  // 0..255
  for (int p = 0; p < 4; ++p) {
    const uint32_t word = (0x38383838u & ~(0xFFu << (8 * p))) | (b << (8 * p));
    uint32_t words[16] = {0};
    words[0] = word;
    float w[kChunk];
    float* out_p = portable + (b * 4 + p) * 4;
    float* out_h = hw + (b * 4 + p) * 4;
    float* out_t = tc + (b * 4 + p) * 4;
    gs_decode_chunk_dev<GS_FMT_MXFP8, 0>(words, w);
    for (int i = 0; i < 4; ++i) out_p[i] = w[i];
    gs_decode_chunk_dev<GS_FMT_MXFP8, 1>(words, w);
    for (int i = 0; i < 4; ++i) out_h[i] = w[i];
    uint32_t lo, hi;
    gs_e4m3x4_to_bf16x2(word, lo, hi);
    const uint16_t halves[4] = {static_cast<uint16_t>(lo), static_cast<uint16_t>(lo >> 16),
                                static_cast<uint16_t>(hi), static_cast<uint16_t>(hi >> 16)};
    for (int i = 0; i < 4; ++i) out_t[i] = gs_bf16_to_float(halves[i]);
    // the ring kernel's fp8 path: e4m3x2 -> f16x2, hardware and portable forms
    const uint32_t hw2[2] = {gs_e4m3x2_to_f16x2(word), gs_e4m3x2_to_f16x2(word >> 16)};
    const uint32_t pt2[2] = {gs_e4m3x2_to_f16x2_portable(word), gs_e4m3x2_to_f16x2_portable(word >> 16)};
    for (int i = 0; i < 4; ++i) {
      f16_hw[(b * 4 + p) * 4 + i] = f16_bits_to_float(hw2[i / 2] >> (16 * (i % 2)) & 0xFFFFu);
      f16_portable[(b * 4 + p) * 4 + i] = f16_bits_to_float(pt2[i / 2] >> (16 * (i % 2)) & 0xFFFFu);
    }
  }
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next_u32() {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return static_cast<uint32_t>(rng >> 16);
}

struct Shape {
  const char* name;
  int64_t E, N, K, tpe;
  bool rare = false;  // scales up to 2^12 and a NaN byte every 4099 weights: the ring kernel's exact path
};

// Whether GS_VARIANTS_FMT (unset: every format) selects format `name` for the sweeps below.
static bool fmt_selected(const char* name) {
  const char* only = std::getenv("GS_VARIANTS_FMT");
  return !only || std::strcmp(only, name) == 0;
}

template <typename Launch>
static float time_ms(Launch launch, int iters = 20) {
  if (std::getenv("GS_VARIANTS_ONCE")) iters = 1;  // under a profiler: one measured launch per variant
  launch();
  CK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaEventRecord(a));
  for (int i = 0; i < iters; ++i) launch();
  CK(cudaEventRecord(b));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  return ms / iters;
}

static int failures = 0;

static void compare(const char* what, const std::vector<uint16_t>& ref, const std::vector<uint16_t>& out, bool bitwise) {
  double max_diff = 0, max_ref = 0;
  size_t mismatches = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const float r = gs_bf16_to_float(ref[i]), o = gs_bf16_to_float(out[i]);
    if (ref[i] != out[i]) ++mismatches;
    if (std::isnan(r) != std::isnan(o)) max_diff = INFINITY;
    else if (!std::isnan(r)) max_diff = std::fmax(max_diff, std::fabs(o - r));
    max_ref = std::fmax(max_ref, std::fabs(r));
  }
  const double rel = max_diff / (max_ref + 1e-6);
  const bool ok = bitwise ? mismatches == 0 : rel < 5e-3;
  if (!ok) ++failures;
  std::printf("  %-44s %s  mismatching=%zu rel_err=%.3g\n", what, ok ? "ok  " : "FAIL", mismatches, rel);
}

// (4) MXFP4 at the decode shapes: the CUDA-core kernel (the CPU twin's bits, the reference here) against
// ring-kernel tilings and chunks per stage (tolerance), each with the op's prepare_rows launch, and the op's
// launcher.
static void mxfp4_sweep(const Shape* shapes, size_t count) {
  std::printf("\nmxfp4\nshape,variant,ms,weight_GBps,frac_of_copy_bw\n");
  for (size_t si = 0; si < count; ++si) {
    const Shape& s = shapes[si];
    const char* only = std::getenv("GS_VARIANTS_SHAPE");
    if ((only && std::strcmp(only, s.name) != 0) || s.tpe > 16 || s.rare || !fmt_selected("mxfp4")) continue;
    const int64_t R = s.E * s.tpe;
    const int64_t wbytes = s.E * s.N * s.K / 2, sbytes = s.E * s.N * (s.K / 32);
    std::vector<uint8_t> w(wbytes), sc(sbytes);
    for (auto& b : w) b = static_cast<uint8_t>(next_u32());
    for (auto& b : sc) b = static_cast<uint8_t>(124 + next_u32() % 6);
    std::vector<uint16_t> x(R * s.K);
    for (auto& v : x) v = gs_float_to_bf16((static_cast<int>(next_u32() % 2001) - 1000) / 500.0f);
    std::vector<int32_t> map;
    for (int64_t e = 0; e < s.E; ++e)
      map.insert(map.end(), {static_cast<int32_t>(e), static_cast<int32_t>(e * s.tpe), static_cast<int32_t>(s.tpe)});
    for (int64_t e = 0; e < s.E; ++e) map.insert(map.end(), {-1, 0, 0});
    uint8_t *dw, *ds, *dcopy, *dsrc;
    uint16_t *dx, *dout, *dxh;
    int32_t* dmap;
    float* dxrs;
    CK(cudaMalloc(&dw, wbytes));
    CK(cudaMalloc(&ds, sbytes));
    CK(cudaMalloc(&dcopy, wbytes + sbytes));
    CK(cudaMalloc(&dsrc, wbytes + sbytes));
    CK(cudaMalloc(&dx, x.size() * 2));
    CK(cudaMalloc(&dout, R * s.N * 2));
    CK(cudaMalloc(&dmap, map.size() * 4));
    CK(cudaMalloc(&dxh, R * s.K * 2));
    CK(cudaMalloc(&dxrs, R * 4));
    CK(cudaMemcpy(dw, w.data(), wbytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(ds, sc.data(), sbytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dmap, map.data(), map.size() * 4, cudaMemcpyHostToDevice));
    GsMoeArgs a{GS_FMT_MXFP4, dx, s.K, R, s.K, s.N, s.E, dw, s.N * s.K / 2, 1, s.K / 2, ds, s.N * (s.K / 32), 1,
                s.K / 32, 32, 1, nullptr, 0, dmap, static_cast<int64_t>(map.size() / 3), dout, 1, 1};
    a.xh = dxh;
    a.x_rs = dxrs;
    const float copy_ms = time_ms([&] { CK(cudaMemcpyAsync(dcopy, dsrc, wbytes + sbytes, cudaMemcpyDeviceToDevice)); });
    const double copy_gbs = 2.0 * (wbytes + sbytes) / copy_ms / 1e6;
    std::printf("%s,d2d_copy,%.4f,%.1f,1.000\n", s.name, copy_ms, copy_gbs);
    std::vector<uint16_t> first, out(R * s.N);
    auto run = [&](const char* variant, auto launch) {
      const float ms = time_ms(launch);
      const double gbs = (wbytes + sbytes) / ms / 1e6;
      std::printf("%s,%s,%.4f,%.1f,%.3f\n", s.name, variant, ms, gbs, gbs / copy_gbs);
      CK(cudaMemcpy(out.data(), dout, out.size() * 2, cudaMemcpyDeviceToHost));
      if (first.empty()) first = out;
      else compare(variant, first, out, false);
    };
    if (s.tpe == 1) {
      run("cuda_core_MR1_dec1", [&] {
        dim3 grid((s.N + GsTile<1>::kTileN - 1) / GsTile<1>::kTileN, a.S);
        gs_moe_gemm_kernel<GS_FMT_MXFP4, 1, 1><<<grid, kThreads>>>(a);
      });
    } else {
      run("cuda_core_MR16_dec1", [&] {
        dim3 grid((s.N + GsTile<16>::kTileN - 1) / GsTile<16>::kTileN, a.S);
        gs_moe_gemm_kernel<GS_FMT_MXFP4, 16, 1><<<grid, kThreads>>>(a);
      });
    }
#define RING4W(NT, ST, MINB, UC, XS, W)                                                                 \
  run("prepare_rows_then_ring_NT" #NT "_S" #ST "_minblocks" #MINB "_chunks" #UC "_xs" #XS "_warps" #W, [&] { \
    constexpr int smem = gs_ring_smem_bytes<GS_FMT_MXFP4, NT, ST, W, UC>();                              \
    CK(cudaFuncSetAttribute(gs_moe_gemm_mma_ring_kernel<GS_FMT_MXFP4, NT, ST, MINB, W, UC, XS>,          \
                            cudaFuncAttributeMaxDynamicSharedMemorySize, smem));                        \
    gs_moe_prepare_rows<<<R, kThreads>>>(a, 1);                                                          \
    dim3 grid((s.N + W * NT * 8 - 1) / (W * NT * 8), a.S);                                              \
    gs_moe_gemm_mma_ring_kernel<GS_FMT_MXFP4, NT, ST, MINB, W, UC, XS><<<grid, W * 32, smem>>>(a);      \
  })
#define RING4(NT, ST, MINB, UC, XS) RING4W(NT, ST, MINB, UC, XS, 4)
    run("op_launch", [&] { CK(gs_moe_gemm_launch(a, static_cast<int>(s.tpe), 1, 0)); });  // what the op runs
    // XS: 0 the unswapped ring, 1 weights as the MMA's A operand, 2 that and the e2m1 decode's 2^14 in the f32
    // scale (kRingXsMxfp4 picks the launcher's).
    RING4(4, 2, 4, 4, 0);
    RING4(4, 2, 4, 4, 1);
    RING4(4, 2, 4, 4, 2);
    RING4(4, 3, 4, 4, 2);
    RING4(4, 4, 4, 4, 2);
    RING4(4, 2, 4, 8, 2);  // 8 chunks (128 bytes per column) per stage
    RING4(4, 3, 3, 8, 2);
    RING4(2, 2, 4, 4, 2);
    RING4(4, 2, 3, 4, 2);
    // Narrower tiles with 8 chunks and more blocks per SM: at Hy4-TP8 decode NT 4 makes 512 blocks, one wave of
    // 4 per SM (16 warps), against 1024 at DSv3 (0.603 against 0.666 of copy bandwidth, reports/performance.md).
    RING4(2, 2, 4, 8, 2);
    RING4(2, 2, 6, 8, 2);
    RING4(2, 2, 8, 8, 2);
    RING4(2, 3, 6, 8, 2);
    RING4(4, 2, 5, 8, 2);
    // 8 warps per block (MXFP8's ring gained 12% from them at 16 tokens, kRingWarpsMxfp8).
    RING4W(4, 2, 2, 8, 2, 8);  // the launcher's (kRingWarpsMxfp4)
    RING4W(4, 2, 2, 4, 2, 8);
    RING4W(2, 2, 4, 8, 2, 8);
    RING4W(4, 3, 2, 8, 2, 8);
#undef RING4
#undef RING4W
    CK(cudaGetLastError());
    for (void* ptr : {static_cast<void*>(dw), static_cast<void*>(ds), static_cast<void*>(dcopy), static_cast<void*>(dsrc),
                      static_cast<void*>(dx), static_cast<void*>(dxh), static_cast<void*>(dxrs),
                      static_cast<void*>(dout), static_cast<void*>(dmap)})
      CK(cudaFree(ptr));
  }
}

// The prefill kernel's tilings (moe_gemm.hip, GsPf: MW rows of 4 warps, U chunks and S stages per ring) on
// prepared x (a.xh written), each timed alone; the MW = 2 rows with a map of 128-row slots (the launcher's
// choice for block_m >= 128), then the op's launcher at block_m 128. `run(name, launch, bitwise)` times and
// compares against the first output.
template <int FMT, typename Run>
static void prefill_variants(const GsMoeArgs& a, int64_t tpe, Run& run) {
  std::vector<int32_t> map128;
  for (int64_t e = 0; e < a.E; ++e)
    for (int64_t r = 0; r < tpe; r += 128)
      map128.insert(map128.end(), {static_cast<int32_t>(e), static_cast<int32_t>(e * tpe + r),
                                   static_cast<int32_t>(std::min<int64_t>(128, tpe - r))});
  for (int64_t e = 0; e < a.E; ++e) map128.insert(map128.end(), {-1, 0, 0});
  int32_t* dmap128;
  CK(cudaMalloc(&dmap128, map128.size() * 4));
  CK(cudaMemcpy(dmap128, map128.data(), map128.size() * 4, cudaMemcpyHostToDevice));
  GsMoeArgs a128 = a;
  a128.map = dmap128;
  a128.S = static_cast<int64_t>(map128.size() / 3);
  // The tile kernels read x as prepared in its own order: the op's launch before this (the MXFP8 warpgroup-MMA
  // kernel on sm_90a) may have left it in that kernel's order.
  if (a.xh) {
    gs_moe_prepare_rows<<<static_cast<unsigned>(a.R), kThreads>>>(a, 0);
    CK(cudaDeviceSynchronize());
  }
// Variants whose ring needs more than the 227 KB of shared memory a block can opt into are skipped.
#define PF(NAME, MW, U, S)                                                                            \
  if constexpr (GsPf<FMT, MW, U, S>::kSmem <= 227 * 1024)                                             \
    run(NAME, [&] {                                                                                   \
      const GsMoeArgs& aa = MW == 1 ? a : a128;                                                       \
      CK((gs_launch_prefill<FMT, MW, U, S>(aa, 0)));                                                  \
    }, false)
  constexpr int U0 = gs_pf_chunks(FMT);  // 64 bytes per weight column and stage
  if constexpr (FMT == GS_FMT_MXFP4) {
    PF("prefill_MW1_64B_S3", 1, 4, 3);  // block_m 64 (the launcher's below 128)
    PF("prefill_MW1_64B_S4", 1, 4, 4);
    PF("prefill_MW2_64B_S3", 2, 4, 3);  // block_m 128 (the launcher's)
    PF("prefill_MW2_64B_S4", 2, 4, 4);
  } else {
    PF("prefill_MW1_64B_S3", 1, U0, 3);  // block_m 64 (the launcher's below 128)
    PF("prefill_MW1_64B_S4", 1, U0, 4);
    PF("prefill_MW1_128B_S3", 1, 2 * U0, 3);
    PF("prefill_MW2_64B_S3", 2, U0, 3);  // block_m 128
    PF("prefill_MW2_64B_S4", 2, U0, 4);
    PF("prefill_MW2_128B_S3", 2, 2 * U0, 3);
    PF("prefill_MW2_128B_S4", 2, 2 * U0, 4);
  }
#undef PF
#if defined(GS_SM90A)
  if constexpr (FMT == GS_FMT_BF16) {
#define WG(NAME, BN, S, BM, MINB, AA) run(NAME, [&] { CK((gs_launch_wgmma<BN, S, BM, MINB>(AA, 0, 0))); }, false)
    // 128-row slots (block_m 128) with 128-row CTAs; the launcher's first.
    WG("wgmma_BM128_N256_S4_m128", 256, 4, 128, 1, a128);
    WG("wgmma_BM128_N128_S6_m128", 128, 6, 128, 1, a128);
    WG("wgmma_BM128_N128_S7_m128", 128, 7, 128, 1, a128);
    WG("wgmma_BM128_N192_S5_m128", 192, 5, 128, 1, a128);
    // 64-row slots (block_m 64) with 64-row CTAs (the two warpgroups split the columns); the launcher's first.
    WG("wgmma_BM64_N128_S4_minb2_m64", 128, 4, 64, 2, a);
    WG("wgmma_BM64_N256_S5_m64", 256, 5, 64, 1, a);
    WG("wgmma_BM64_N256_S4_m64", 256, 4, 64, 1, a);
    WG("wgmma_BM64_N128_S8_m64", 128, 8, 64, 1, a);
    WG("wgmma_BM128_N128_S6_m64", 128, 6, 128, 1, a);  // 128-row CTAs on 64-row slots: half their rows are zeros
    // 128-row slots with 64-row CTAs: the weights staged twice per slot.
    WG("wgmma_BM64_N256_S5_m128", 256, 5, 64, 1, a128);
#undef WG
  }
  if constexpr (FMT != GS_FMT_BF16) {
    // The quantized-weight kernel reads x as gs_moe_prepare_rows writes it with xh_wgmma set: its own copy here.
    GsMoeArgs aw = a, aw128 = a128;
    CK(cudaMalloc(&aw.xh, a.R * a.K * 2));
    CK(cudaMalloc(&aw.x_rs, a.R * 4));
    aw.xh_wgmma = 1;
    gs_moe_prepare_rows<<<static_cast<unsigned>(a.R), kThreads>>>(aw, 0);
    CK(cudaDeviceSynchronize());
    aw128.xh = aw.xh, aw128.x_rs = aw.x_rs, aw128.xh_wgmma = 1;
#define WQ(NAME, TM, S, MINB, MODE, AA) run(NAME, [&] { CK((gs_launch_wgmma_q<FMT, TM, S, MINB, MODE>(AA, 0))); }, false)
#define WQF(NAME, TM, S, MINB, AA) run(NAME, [&] { CK((gs_launch_wgmma_q_forms<FMT, TM, S, MINB>(AA, 0))); }, false)
// 3 warpgroups per CTA (192 columns; MX formats only): NWG 3.
#define WQ3(NAME, TM, S, MODE, AA) run(NAME, [&] { CK((gs_launch_wgmma_q<FMT, TM, S, 1, MODE, 3>(AA, 0))); }, false)
#define WQF3(NAME, TM, S, AA) run(NAME, [&] { CK((gs_launch_wgmma_q_forms<FMT, TM, S, 1, 3>(AA, 0))); }, false)
    // The launcher's forms (MX: the fast form, then the rest exactly; here every CTA's scales fit the fast form),
    // each form alone, and other tilings.
    if constexpr (FMT == GS_FMT_BLOCK_FP8) {
      WQF("wgmma_q_forms_TM128_S6_m128", 128, 6, 1, aw128);  // the launcher's at block_m >= 128
      WQF("wgmma_q_forms_TM64_S4_minb2_m64", 64, 4, 2, aw);  // the launcher's below
      WQ("wgmma_q_block_TM128_S4_m128", 128, 4, 1, kWqExact, aw128);
      WQ("wgmma_q_block_TM128_S5_m128", 128, 5, 1, kWqExact, aw128);
      WQ("wgmma_q_block_TM128_S7_m128", 128, 7, 1, kWqExact, aw128);
      WQ("wgmma_q_block_TM64_S4_m64", 64, 4, 1, kWqExact, aw);
      WQ("wgmma_q_block_TM64_S6_minb2_m64", 64, 6, 2, kWqExact, aw);
    } else {
      WQF3("wgmma_q_forms_G3_TM128_S5_m128", 128, 5, aw128);  // the launcher's at block_m >= 128
      WQF("wgmma_q_forms_TM64_S4_minb2_m64", 64, 4, 2, aw);  // the launcher's below
      WQF("wgmma_q_forms_TM128_S5_m128", 128, 5, 1, aw128);  // 2 warpgroups per CTA
      WQ3("wgmma_q_fast_G3_TM128_S4_m128", 128, 4, kWqFast, aw128);
      WQ3("wgmma_q_fast_G3_TM128_S5_m128", 128, 5, kWqFast, aw128);
      WQ3("wgmma_q_fast_G3_TM128_S6_m128", 128, 6, kWqFast, aw128);
      WQ3("wgmma_q_exact_G3_TM128_S5_m128", 128, 5, kWqExact, aw128);
      WQ("wgmma_q_fast_TM128_S5_m128", 128, 5, 1, kWqFast, aw128);
      WQ("wgmma_q_fast_TM128_S6_m128", 128, 6, 1, kWqFast, aw128);
      WQ("wgmma_q_exact_TM128_S5_m128", 128, 5, 1, kWqExact, aw128);
      WQ("wgmma_q_fast_TM64_S4_minb2_m64", 64, 4, 2, kWqFast, aw);
      WQ("wgmma_q_exact_TM64_S4_minb2_m64", 64, 4, 2, kWqExact, aw);
      WQ("wgmma_q_fast_TM64_S4_minb2_m128", 64, 4, 2, kWqFast, aw128);  // 128-row slots in 64-row CTAs
      // One launch in which each CTA takes its form against the pair (fast form's launch, then the rest's); the
      // launcher's forms above are one or the other by K (kWqAutoMaxK).
      WQ("wgmma_q_auto_TM64_S4_minb2_m64", 64, 4, 2, kWqAuto, aw);
      run("wgmma_q_pair_TM64_S4_minb2_m64", [&] {
        CK((gs_launch_wgmma_q<FMT, 64, 4, 2, kWqFast>(aw, 0)));
        CK((gs_launch_wgmma_q<FMT, 64, 4, 2, kWqRest>(aw, 0)));
      }, false);
      WQ3("wgmma_q_auto_G3_TM128_S5_m128", 128, 5, kWqAuto, aw128);
      run("wgmma_q_pair_G3_TM128_S5_m128", [&] {
        CK((gs_launch_wgmma_q<FMT, 128, 5, 1, kWqFast, 3>(aw128, 0)));
        CK((gs_launch_wgmma_q<FMT, 128, 5, 1, kWqRest, 3>(aw128, 0)));
      }, false);
    }
#undef WQ
#undef WQF
#undef WQ3
#undef WQF3
    CK(cudaFree(aw.xh));
    CK(cudaFree(aw.x_rs));
  }
#endif
  run("op_launch_block_m128", [&] { CK(gs_moe_gemm_launch(a128, 128, 1, 0)); }, false);  // prepare_rows + prefill
  CK(cudaFree(dmap128));
}

// (5) bf16, MXFP4 and block-FP8 weights at the DeepSeek-like prefill shape and the small-K shape: the op's launcher at
// block_m 64 (the reference output here) against the prefill tilings (prefill_variants).
static void prefill_sweep() {
  for (const Shape& s : {Shape{"DSv3-prefill", 32, 4096, 7168, 128}, Shape{"small-K-MoE", 32, 2048, 512, 64}}) {
    const char* only = std::getenv("GS_VARIANTS_SHAPE");
    if (only && std::strcmp(only, s.name) != 0) continue;
    for (const int fmt : {GS_FMT_BF16, GS_FMT_MXFP4, GS_FMT_BLOCK_FP8}) {
      const bool b8 = fmt == GS_FMT_BLOCK_FP8;
      if (!fmt_selected(fmt == GS_FMT_BF16 ? "bf16" : b8 ? "block_fp8" : "mxfp4")) continue;
      std::printf("\n%s prefill, %s\nshape,variant,ms,weight_GBps,frac_of_copy_bw\n",
                  fmt == GS_FMT_BF16 ? "bf16" : b8 ? "block_fp8" : "mxfp4", s.name);
      const int64_t R = s.E * s.tpe, block_m = 64;
      const int64_t wbytes = fmt == GS_FMT_BF16 ? s.E * s.N * s.K * 2 : b8 ? s.E * s.N * s.K : s.E * s.N * s.K / 2;
      // MXFP4: one E8M0 byte per column and 32 K; block-FP8: one f32 per 128 x 128 block.
      const int64_t sbytes = fmt == GS_FMT_BF16 ? 0 : b8 ? s.E * (s.N / 128) * (s.K / 128) * 4 : s.E * s.N * (s.K / 32);
      std::vector<uint8_t> w(wbytes), sc(sbytes);
      if (fmt == GS_FMT_BF16) {
        for (size_t i = 0; i < w.size(); i += 2) {
          const uint16_t v = gs_float_to_bf16((static_cast<int>(next_u32() % 2001) - 1000) / 8000.0f);
          w[i] = static_cast<uint8_t>(v), w[i + 1] = static_cast<uint8_t>(v >> 8);
        }
      } else if (b8) {
        for (auto& b : w) {  // e4m3fn bytes without the NaN encodings 0x7F and 0xFF
          b = static_cast<uint8_t>(next_u32());
          if ((b & 0x7Fu) == 0x7Fu) b &= 0xFEu;
        }
        for (size_t i = 0; i < sc.size(); i += 4) {
          const float v = (1.0f + (next_u32() % 1000) / 1000.0f) * 0x1p-8f;
          std::memcpy(&sc[i], &v, 4);
        }
      } else {
        for (auto& b : w) b = static_cast<uint8_t>(next_u32());
        for (auto& b : sc) b = static_cast<uint8_t>(124 + next_u32() % 6);
      }
      std::vector<uint16_t> x(R * s.K);
      for (auto& v : x) v = gs_float_to_bf16((static_cast<int>(next_u32() % 2001) - 1000) / 500.0f);
      std::vector<int32_t> map;
      for (int64_t e = 0; e < s.E; ++e)
        for (int64_t r = 0; r < s.tpe; r += block_m)
          map.insert(map.end(), {static_cast<int32_t>(e), static_cast<int32_t>(e * s.tpe + r),
                                 static_cast<int32_t>(std::min<int64_t>(block_m, s.tpe - r))});
      for (int64_t e = 0; e < s.E; ++e) map.insert(map.end(), {-1, 0, 0});
      uint8_t *dw, *ds = nullptr, *dcopy, *dsrc;
      uint16_t *dx, *dout, *dxh;
      int32_t* dmap;
      float* dxrs;
      CK(cudaMalloc(&dw, wbytes));
      if (sbytes) CK(cudaMalloc(&ds, sbytes));
      CK(cudaMalloc(&dcopy, wbytes + sbytes));
      CK(cudaMalloc(&dsrc, wbytes + sbytes));
      CK(cudaMalloc(&dx, x.size() * 2));
      CK(cudaMalloc(&dout, R * s.N * 2));
      CK(cudaMalloc(&dmap, map.size() * 4));
      CK(cudaMalloc(&dxh, R * s.K * 2));
      CK(cudaMalloc(&dxrs, R * 4));
      CK(cudaMemcpy(dw, w.data(), wbytes, cudaMemcpyHostToDevice));
      if (sbytes) CK(cudaMemcpy(ds, sc.data(), sbytes, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(dmap, map.data(), map.size() * 4, cudaMemcpyHostToDevice));
      // [E, K, N] views of [E, N, K] storage, strides in storage elements (bytes for MXFP4's packed pairs).
      const int64_t kst = fmt == GS_FMT_BF16 || b8 ? s.K : s.K / 2;
      GsMoeArgs a{fmt, dx, s.K, R, s.K, s.N, s.E, dw, s.N * kst, 1, kst, ds, s.N * (s.K / 32), 1,
                  s.K / 32, fmt == GS_FMT_BF16 ? 0 : 32, 1, nullptr, 0, dmap, static_cast<int64_t>(map.size() / 3), dout, 1, 1};
      if (fmt == GS_FMT_BF16) a.s_se = a.s_sk = a.s_sn = 0;
      if (b8) {  // scales [E, N / 128, K / 128] viewed as [E, K / 128, N / 128], in f32 elements
        a.s_se = (s.N / 128) * (s.K / 128), a.s_sk = 1, a.s_sn = s.K / 128, a.s_kblk = 128, a.s_nblk = 128;
      }
      a.xh = fmt == GS_FMT_BF16 ? nullptr : dxh;
      a.x_rs = fmt == GS_FMT_BF16 ? nullptr : dxrs;
      if (a.xh) gs_moe_prepare_rows<<<R, kThreads>>>(a, 0);
      CK(cudaDeviceSynchronize());
      const float copy_ms = time_ms([&] { CK(cudaMemcpyAsync(dcopy, dsrc, wbytes + sbytes, cudaMemcpyDeviceToDevice)); });
      const double copy_gbs = 2.0 * (wbytes + sbytes) / copy_ms / 1e6;
      std::printf("%s,d2d_copy,%.4f,%.1f,1.000\n", s.name, copy_ms, copy_gbs);
      std::vector<uint16_t> first, out(R * s.N);
      auto run = [&](const char* variant, auto launch, bool bitwise) {
        const float ms = time_ms(launch);
        const double gbs = (wbytes + sbytes) / ms / 1e6;
        std::printf("%s,%s,%.4f,%.1f,%.3f,%.0f TFLOP/s\n", s.name, variant, ms, gbs, gbs / copy_gbs,
                    2.0 * R * s.N * s.K / ms / 1e9);
        CK(cudaMemcpy(out.data(), dout, out.size() * 2, cudaMemcpyDeviceToHost));
        if (first.empty()) first = out;
        else compare(variant, first, out, bitwise);
      };
      run("op_launch", [&] { CK(gs_moe_gemm_launch(a, static_cast<int>(block_m), 1, 0)); }, false);
      if (fmt == GS_FMT_BF16) prefill_variants<GS_FMT_BF16>(a, s.tpe, run);
      else if (b8) prefill_variants<GS_FMT_BLOCK_FP8>(a, s.tpe, run);
      else prefill_variants<GS_FMT_MXFP4>(a, s.tpe, run);
      CK(cudaGetLastError());
      for (void* ptr : {static_cast<void*>(dw), static_cast<void*>(ds), static_cast<void*>(dcopy), static_cast<void*>(dsrc),
                        static_cast<void*>(dx), static_cast<void*>(dxh), static_cast<void*>(dxrs),
                        static_cast<void*>(dout), static_cast<void*>(dmap)})
        if (ptr) CK(cudaFree(ptr));
    }
  }
}

int main() {
  // (1) every e4m3fn byte in every position of a word, three decodes.
  constexpr size_t kDecodeBytes = 256 * 4 * 4 * sizeof(float);
  float *d_p, *d_h, *d_t, *d_fh, *d_fp;
  for (float** ptr : {&d_p, &d_h, &d_t, &d_fh, &d_fp}) CK(cudaMalloc(ptr, kDecodeBytes));
  decode_all<<<1, 256>>>(d_p, d_h, d_t, d_fh, d_fp);
  CK(cudaDeviceSynchronize());
  std::vector<float> p(256 * 16), h(256 * 16), t(256 * 16), fh(256 * 16), fp(256 * 16);
  CK(cudaMemcpy(p.data(), d_p, kDecodeBytes, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(h.data(), d_h, kDecodeBytes, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(t.data(), d_t, kDecodeBytes, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(fh.data(), d_fh, kDecodeBytes, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(fp.data(), d_fp, kDecodeBytes, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int b = 0; b < 256; ++b)
    for (int pos = 0; pos < 4; ++pos)
      for (int i = 0; i < 4; ++i) {
        const float ref = i == pos ? gs_e4m3fn(b) : 1.0f;
        const size_t at = (b * 4 + pos) * 4 + i;
        for (float v : {p[at], h[at], t[at], fh[at], fp[at]}) {
          const bool same = std::isnan(ref) ? std::isnan(v) : std::memcmp(&ref, &v, 4) == 0;
          if (!same && ++bad <= 20)
            std::printf("  decode mismatch byte 0x%02x at position %d, element %d: ref %g portable %g hw %g "
                        "tensor-core %g f16-hw %g f16-portable %g\n", b, pos, i, ref, p[at], h[at], t[at], fh[at], fp[at]);
        }
      }
  std::printf("e4m3fn decode, 256 bytes x 4 positions x 5 decodes: %s\n",
              bad ? "FAIL" : "ok (same f32 bits, NaN stays NaN and stays in its element)");
  failures += bad != 0;
  for (float* ptr : {d_p, d_h, d_t, d_fh, d_fp}) CK(cudaFree(ptr));

  // (2) + (3) the bench shapes in mxfp8.
  const Shape shapes[] = {{"Hy4-TP8-decode", 32, 2048, 6144, 1},
                          {"Hy4-TP8-16tok", 32, 2048, 6144, 16},
                          {"DSv3-decode", 32, 4096, 7168, 1},
                          {"DSv3-prefill", 32, 4096, 7168, 128},
                          {"small-K-MoE", 32, 2048, 512, 64},
                          {"rare-path-16tok", 8, 520, 1056, 16, true}};
  std::printf("\nshape,variant,ms,weight_GBps,frac_of_copy_bw\n");
  for (const Shape& s : shapes) {
    const char* only = std::getenv("GS_VARIANTS_SHAPE");  // e.g. Hy4-TP8-16tok
    if (only && std::strcmp(only, s.name) != 0) continue;
    if (!fmt_selected("mxfp8")) continue;
    const int64_t R = s.E * s.tpe, block_m = s.tpe <= 16 ? s.tpe : 64;
    const int64_t wbytes = s.E * s.N * s.K, sbytes = s.E * s.N * (s.K / 32);
    std::vector<uint8_t> w(wbytes), sc(sbytes);
    for (auto& b : w) b = static_cast<uint8_t>(next_u32()) & 0xF7;  // never S.1111.111 (NaN)
    for (auto& b : sc) b = static_cast<uint8_t>(124 + next_u32() % 6);
    if (s.rare) {  // N=520: a partial column tile; K=1056: a partial last stage (33 chunks)
      for (size_t i = 0; i < w.size(); i += 4099) w[i] = 0x7F;
      for (auto& b : sc) b = static_cast<uint8_t>(120 + next_u32() % 20);  // 120..139: some above 134
      for (size_t i = 0; i < sc.size(); i += 1009) sc[i] = 0;             // 2^-127: the exact-scale path
      sc[sc.size() / 2] = 255;                                            // NaN: one expert's column
    }
    std::vector<uint16_t> x(R * s.K);
    for (auto& v : x) v = gs_float_to_bf16((static_cast<int>(next_u32() % 2001) - 1000) / 500.0f);
    // block map: one slot per block_m rows of each expert, then E surplus slots stamped -1
    std::vector<int32_t> map;
    for (int64_t e = 0; e < s.E; ++e)
      for (int64_t r = 0; r < s.tpe; r += block_m)
        map.insert(map.end(), {static_cast<int32_t>(e), static_cast<int32_t>(e * s.tpe + r),
                               static_cast<int32_t>(std::min<int64_t>(block_m, s.tpe - r))});
    for (int64_t e = 0; e < s.E; ++e) map.insert(map.end(), {-1, 0, 0});
    uint8_t *dw, *ds, *dcopy, *dsrc;
    uint16_t *dx, *dout;
    int32_t* dmap;
    CK(cudaMalloc(&dw, wbytes));
    CK(cudaMalloc(&dcopy, wbytes + sbytes));
    CK(cudaMalloc(&dsrc, wbytes + sbytes));
    CK(cudaMalloc(&ds, sbytes));
    CK(cudaMalloc(&dx, x.size() * 2));
    CK(cudaMalloc(&dout, R * s.N * 2));
    CK(cudaMalloc(&dmap, map.size() * 4));
    CK(cudaMemcpy(dw, w.data(), wbytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(ds, sc.data(), sbytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dmap, map.data(), map.size() * 4, cudaMemcpyHostToDevice));
    // The op's arguments for the [E, K, N] view of [E, N, K] storage (kernels/moe_gemm/ops.py).
    GsMoeArgs a{GS_FMT_MXFP8, dx, s.K, R, s.K, s.N, s.E, dw, s.N * s.K, 1, s.K, ds, s.N * (s.K / 32), 1,
                s.K / 32, 32, 1, nullptr, 0, dmap, static_cast<int64_t>(map.size() / 3), dout, 1, 1};
    // The prefill path's workspace (x as row-scaled f16), written once here for the kernels timed alone.
    uint16_t* dxh = nullptr;
    float* dxrs = nullptr;
    CK(cudaMalloc(&dxh, R * s.K * 2));
    CK(cudaMalloc(&dxrs, R * 4));
    a.xh = dxh;
    a.x_rs = dxrs;
    gs_moe_prepare_rows<<<R, kThreads>>>(a, 0);
    CK(cudaDeviceSynchronize());
    const float copy_ms = time_ms([&] { CK(cudaMemcpyAsync(dcopy, dsrc, wbytes + sbytes, cudaMemcpyDeviceToDevice)); });
    const double copy_gbs = 2.0 * (wbytes + sbytes) / copy_ms / 1e6;
    std::printf("%s,d2d_copy,%.4f,%.1f,1.000\n", s.name, copy_ms, copy_gbs);
    std::vector<uint16_t> first, out(R * s.N);
    auto run = [&](const char* variant, auto launch, bool bitwise) {
      const float ms = time_ms(launch);
      const double gbs = (wbytes + sbytes) / ms / 1e6;
      std::printf("%s,%s,%.4f,%.1f,%.3f\n", s.name, variant, ms, gbs, gbs / copy_gbs);
      CK(cudaMemcpy(out.data(), dout, out.size() * 2, cudaMemcpyDeviceToHost));
      if (first.empty()) first = out;
      else compare(variant, first, out, bitwise);
    };
    const dim3 mma_grid((s.N + kMmaTileN - 1) / kMmaTileN, a.S);
#define CORE(MR, DEC)                                                                              \
  run("cuda_core_MR" #MR "_dec" #DEC, [&] {                                                        \
    dim3 grid((s.N + GsTile<MR>::kTileN - 1) / GsTile<MR>::kTileN, a.S);                           \
    gs_moe_gemm_kernel<GS_FMT_MXFP8, MR, DEC><<<grid, kThreads>>>(a);                              \
  }, true)
#define CORE_TILE(NC, MINB)                                                                        \
  run("cuda_core_MR1_dec1_NC" #NC "_minblocks" #MINB, [&] {                                        \
    dim3 grid((s.N + kColGroups * NC - 1) / (kColGroups * NC), a.S);                               \
    gs_moe_gemm_kernel<GS_FMT_MXFP8, 1, 1, NC, MINB><<<grid, kThreads>>>(a);                       \
  }, true)
    if (block_m == 1) {
      CORE(1, 1);
      CORE(1, 0);
      CORE_TILE(4, 2);
      CORE_TILE(4, 3);
      CORE_TILE(2, 3);
      CORE_TILE(2, 4);
      CORE_TILE(8, 1);
      // The ring kernel at one row per slot (15 of its 16 MMA rows zero), with the prepare_rows launch the op
      // would make: whether MXFP8 decode would gain from the tensor-core path the launcher keeps for > 4 rows.
      run("prepare_rows_then_ring_NT4_S2_minblocks4", [&] {
        constexpr int smem = gs_ring_smem_bytes<GS_FMT_MXFP8, 4, 2>();
        CK(cudaFuncSetAttribute(gs_moe_gemm_mma_ring_kernel<GS_FMT_MXFP8, 4, 2, 4>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        gs_moe_prepare_rows<<<R, kThreads>>>(a, 1);
        dim3 grid((s.N + 127) / 128, a.S);
        gs_moe_gemm_mma_ring_kernel<GS_FMT_MXFP8, 4, 2, 4><<<grid, 128, smem>>>(a);
      }, false);
      // The same with the ring's operands swapped (XS 1: weights as the MMA's A operand, one MMA per 8 weights
      // and x rows 0..7 as its B operand).
      run("prepare_rows_then_ring_NT4_S2_minblocks4_xs1", [&] {
        constexpr int smem = gs_ring_smem_bytes<GS_FMT_MXFP8, 4, 2>();
        CK(cudaFuncSetAttribute(gs_moe_gemm_mma_ring_kernel<GS_FMT_MXFP8, 4, 2, 4, kMmaWarps, 4, 1>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        gs_moe_prepare_rows<<<R, kThreads>>>(a, 1);
        dim3 grid((s.N + 127) / 128, a.S);
        gs_moe_gemm_mma_ring_kernel<GS_FMT_MXFP8, 4, 2, 4, kMmaWarps, 4, 1><<<grid, 128, smem>>>(a);
      }, false);
      run("op_launch_block_m1", [&] { CK(gs_moe_gemm_launch(a, 1, 1, 0)); }, false);  // the op: CUDA-core kernel
    } else if (block_m <= 16) {
      CORE(16, 1);
      CORE(16, 0);
      run("tensor_core_MT1", [&] { gs_moe_gemm_mma_kernel<GS_FMT_MXFP8, 1><<<mma_grid, kMmaWarps * 32>>>(a); }, false);
#define RING(NT, ST, MINB, W)                                                                         \
  run("tensor_core_ring_NT" #NT "_S" #ST "_minblocks" #MINB "_warps" #W, [&] {                        \
    constexpr int smem = gs_ring_smem_bytes<GS_FMT_MXFP8, NT, ST, W>();                               \
    CK(cudaFuncSetAttribute(gs_moe_gemm_mma_ring_kernel<GS_FMT_MXFP8, NT, ST, MINB, W>,               \
                            cudaFuncAttributeMaxDynamicSharedMemorySize, smem));                     \
    dim3 grid((s.N + W * NT * 8 - 1) / (W * NT * 8), a.S);                                           \
    gs_moe_gemm_mma_ring_kernel<GS_FMT_MXFP8, NT, ST, MINB, W><<<grid, W * 32, smem>>>(a);            \
  }, false)
      RING(4, 2, 4, 4);  // block_fp8's launcher form (MXFP8's is 8 warps below): registers capped for 4 blocks per SM
      run("tensor_core_ring_NT4_S2_minblocks4_warps4_xs1", [&] {  // swapped operands (see block_m 1)
        constexpr int smem = gs_ring_smem_bytes<GS_FMT_MXFP8, 4, 2>();
        CK(cudaFuncSetAttribute(gs_moe_gemm_mma_ring_kernel<GS_FMT_MXFP8, 4, 2, 4, kMmaWarps, 4, 1>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        dim3 grid((s.N + 127) / 128, a.S);
        gs_moe_gemm_mma_ring_kernel<GS_FMT_MXFP8, 4, 2, 4, kMmaWarps, 4, 1><<<grid, 128, smem>>>(a);
      }, false);
      RING(4, 2, 1, 4);  // uncapped: 132 registers, 3 blocks per SM
      RING(2, 2, 1, 4);
      RING(2, 2, 5, 4);
      RING(2, 3, 1, 4);
      RING(2, 3, 5, 4);
      RING(4, 3, 4, 4);
      RING(2, 2, 3, 8);  // 8 warps of 2 n8 tiles: the 4 x 4 tile's columns with twice the warps
      RING(4, 2, 2, 8);
      RING(4, 3, 2, 8);
      RING(2, 3, 4, 8);
#undef RING
      run("op_launch", [&] { CK(gs_moe_gemm_launch(a, static_cast<int>(block_m), 1, 0)); }, false);  // the op: ring
    } else {
      CORE(16, 1);  // block_m 64 loops 16-row groups in the CUDA-core kernel
      run("tensor_core_MT4", [&] { gs_moe_gemm_mma_kernel<GS_FMT_MXFP8, 4><<<mma_grid, kMmaWarps * 32>>>(a); }, false);
      run("op_launch", [&] { CK(gs_moe_gemm_launch(a, static_cast<int>(block_m), 1, 0)); }, false);  // prepare_rows + prefill
      prefill_variants<GS_FMT_MXFP8>(a, s.tpe, run);
    }
#undef CORE
#undef CORE_TILE
    CK(cudaGetLastError());
    for (void* ptr : {static_cast<void*>(dw), static_cast<void*>(ds), static_cast<void*>(dcopy), static_cast<void*>(dsrc),
                      static_cast<void*>(dx), static_cast<void*>(dxh), static_cast<void*>(dxrs),
                      static_cast<void*>(dout), static_cast<void*>(dmap)})
      CK(cudaFree(ptr));
  }
  mxfp4_sweep(shapes, sizeof(shapes) / sizeof(shapes[0]));
  prefill_sweep();
  std::printf("\n%s\n", failures ? "FAIL" : "all checks ok");
  return failures ? 1 : 0;
}
