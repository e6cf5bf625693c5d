// moe_gemm.cuda_core.hip -- a translation unit of the moe_gemm module (kernels/common/native.py, "Translation
// units"): the CUDA-core kernel's 1- and 4-row tiles for the 8- and 16-bit formats (bf16, mxfp8, fp8_fnuz,
// block_fp8): gs_moe_gemm_launch_cuda_core_small and the 8 gs_moe_gemm_kernel instantiations it launches, compiled
// by its own compiler process beside moe_gemm.hip. The code is moe_gemm.hip's; only the unit selection differs
// (moe_gemm.hip's unit note).
#define GS_MOE_GEMM_PART 3
#include "moe_gemm.hip"
