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
//   does the f32 math in an order fixed so that moe_gemm.cpp (which includes moe_gemm.formats.h) gives the
//   SAME BITS (build.py disables FMA contraction; the fmaf calls of moe_gemm.formats.h are explicit):
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
//   (reports/performance.md).
// * Two tensor-core kernels (CUDA sm_80+, bf16/mxfp8/block_fp8 for slots of more than 4 rows, MXFP4 for every slot;
//   see gs_moe_gemm_uses_mma): the shared-memory ring kernel for slots of up to 16 rows (decode; MXFP8 0.81-0.85 of
//   copy bandwidth at 16 tokens per expert, reports/performance.md; MXFP4 from 1 row on) and the shared-memory tile
//   kernel gs_moe_gemm_prefill_kernel for larger slots (prefill, 64 or 128 x 256 outputs per CTA; MXFP4 too); both
//   decode e2m1 weights to f16 in registers. In sm_90a builds (H100 / H200) every prefill slot takes a
//   warpgroup-MMA kernel instead: gs_moe_gemm_wgmma_kernel for bf16, gs_moe_gemm_wgmma_q_kernel for MXFP8, MXFP4
//   and block-FP8. All are deterministic but accumulate in the tensor core's own order: within one bf16 rounding of
//   the CUDA-core kernel, not bitwise equal. kernel_path() in the Python op says which family ran ("tensor_core" or
//   "cuda_core").
// * On AMD gfx90a/gfx94x/gfx950 the matrix-core (MFMA) kernel takes the tensor-core kernels' slots
//   (gs_moe_gemm_mfma_kernel; compiled and checked for MFMA instructions, not run: no AMD GPU here).
//
// Files: this one holds the entry points, the translation units' selection, gs_moe_prepare_rows and the launcher
// (which kernel takes which slot); each kernel's launch constants sit beside it. It includes, in this order:
//   moe_gemm.formats.h    each format's decode, the chunk dot product and lane tree, the argument struct and the
//                         scale lookups: host-device code the CPU twin (moe_gemm.cpp) shares
//   moe_gemm.device.h     device helpers: fast weight and scale decodes, mma.sync and cp.async wrappers, zero-fill
//   moe_gemm.cuda_core.h  the CUDA-core kernel
//   moe_gemm.mma.h        the one-tile mma.sync kernel (bench/moe_gemm_variants.cu only)
//   moe_gemm.ring.h       the shared-memory ring kernel (decode slots)
//   moe_gemm.tile.h       the shared-memory tile kernel (prefill slots without warpgroup MMA)
//   moe_gemm.wgmma.h      the warpgroup-MMA instructions and the bf16 prefill kernel (sm_90a)
//   moe_gemm.wgmma_q.h    the warpgroup-MMA prefill kernel for MXFP8, MXFP4 and block-FP8 (sm_90a)
//   moe_gemm.mfma.h       the matrix-core kernel (AMD)
// The build cache's key hashes every header of this folder (harness/native/build.py, "Cache key"). DESIGN.md
// (this folder) gives the launch rules' reasons and the designs measured and not kept.
#include "moe_gemm.formats.h"

// ------------------------------------------------------------------------------------------ entry points
// What moe_gemm.entry.h calls for the Python module and the dispatcher unit (moe_gemm.bind.cpp,
// moe_gemm.torch.cpp: host C++ built by g++ beside this file, kernels/common/native.py, "Translation units"),
// after it has refused every bad argument. This file defines them over the
// kernels it includes, moe_gemm.cpp over the CPU twin.
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
// compile at the same time, so the family's cold build takes its longest unit (each unit's seconds:
// reports/performance.md, `build_times`); split by format width, each CUDA-core unit builds well under the time
// of one unit holding both widths. Compiled alone (unit 0:
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
#include "moe_gemm.device.h"
#include "moe_gemm.cuda_core.h"
#include "moe_gemm.mma.h"
#include "moe_gemm.ring.h"
#include "moe_gemm.tile.h"
#include "moe_gemm.wgmma.h"
#include "moe_gemm.wgmma_q.h"
#include "moe_gemm.mfma.h"

// ------------------------------------------------------------------------------------------ launcher
GS_HD inline bool gs_mma_format(int fmt) {
  return fmt == GS_FMT_BF16 || fmt == GS_FMT_MXFP8 || fmt == GS_FMT_BLOCK_FP8;
}

#if defined(GS_BACKEND_CUDA)
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
#elif defined(GS_BACKEND_HIP)
// The device's architecture is one of the MFMA targets (moe_gemm.mfma.h: gfx90a, gfx94x, gfx950): asked once
// per device and kept, so an eager call makes no property query. 0 unknown, 1 no, 2 yes.
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
#endif

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
    // 2-byte accesses made this kernel several times slower (DESIGN.md).
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
// 16-byte-aligned K-contiguous operands on CUDA sm_80+ (mma.sync) or AMD gfx90a/gfx94x/gfx950 (MFMA), and on CUDA
// sm_80+ for MXFP4 slots of every size (the ring or prefill kernel; the CUDA-core kernel reads MXFP4 weights at
// 0.31 of copy bandwidth at 1 token per expert and 0.02 at 16 on the H200, reports/performance.md); the bit-exact
// CUDA-core kernel otherwise. kernel_path() exposes it so tests can state which path produced an output.
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
  // 1.10 (bench/moe_gemm_variants.cu on the H200, reports/performance.md).
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
    // Slots of at most 16 rows (decode): the shared-memory ring kernel; larger slots (prefill): the shared-memory
    // tile kernel (gs_launch_prefill). Ring configuration: 4 warps of 4 n8 tiles, 2 stages and registers capped for
    // 4 blocks per SM (block_fp8; the sweep's other points are in DESIGN.md); MXFP8 and MXFP4 take 8 warps capped
    // for 2 blocks (kRingWarpsMxfp8's and kRingXsMxfp4's notes). bf16 takes 2 tiles so that its 2 stages stay
    // within 48 KB of shared memory, the size a kernel gets without an opt-in attribute (1.02 of copy bandwidth
    // at 16 tokens, reports/performance.md). MXFP4 takes the ring for slots of up to 16 rows (every decode
    // size: its CUDA-core kernel is slower, see gs_moe_gemm_uses_mma), in the form kRingXsMxfp4's note gives (XS 2,
    // kRingStagesMxfp4 stages of gs_ring_chunks(MXFP4) = 8 chunks, 8 warps: 0.631 / 0.684 of copy bandwidth at
    // Hy4-TP8 / DSv3 decode against 0.429 / 0.448 for the first ring's XS 0, 4 chunks and 4 warps). zero_rows == 0
    // means gs_moe_prepare_rows zero-filled above (or no fill).
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
