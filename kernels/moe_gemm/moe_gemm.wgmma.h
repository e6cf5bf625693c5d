// moe_gemm.wgmma.h -- the warpgroup-MMA instructions and the MoE GEMM's bf16 prefill kernel on them (sm_90a
// builds: H100 / H200; included by moe_gemm.hip), with its launch forms.
#pragma once

#include "moe_gemm.device.h"

#if defined(GS_BACKEND_CUDA)
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
// slots) and under compute-sanitizer memcheck.
// DSv3-prefill bf16 on the H200 (bench/moe_gemm_variants.cu and bench/moe_gemm.py, reports/performance.md):
// 0.510-0.568 ms in the launcher's 128-row form (0.83-0.86 of copy bandwidth, 450-470 TFLOP/s at 0.510-0.535),
// against 1.06-1.07 for the mma.sync tile kernel and 0.519-0.529 for torch._grouped_mm in the same runs; 64-row
// slots 0.67-0.70 ms (the weights are staged once per 64 rows).
// A form that converted MXFP8 weights per stage into bf16 in shared memory (with the E8M0 scale) measured no
// faster than the mma.sync kernel and latency-bound under Nsight Compute (DESIGN.md): MXFP8 takes
// gs_moe_gemm_wgmma_q_kernel (moe_gemm.wgmma_q.h) instead.
constexpr int kWgK = 64;  // K per stage: 128 bytes of bf16 per row
// The launcher's forms. 128-row slots: 256 columns, 4 stages (193 KB): 0.510 / 0.535 ms at DSv3-prefill against
// 0.522 / 0.512 for 128 columns and 6 stages, 0.529 for 192 columns and 5, 0.528 for 128 and 7; 0.0308 against
// 0.0335-0.0337 ms at small-K-MoE. 64-row slots: 128 columns, 4 stages, 2 CTAs per SM (97 KB each): 0.0275 ms
// at small-K-MoE against 0.0290-0.0295 for one CTA of 256 columns and 4-5 stages or of 128 and 8; at DSv3-prefill
// in 64-row slots 0.674 against 0.670-0.683 (reports/performance.md).
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
#endif  // GS_BACKEND_CUDA
