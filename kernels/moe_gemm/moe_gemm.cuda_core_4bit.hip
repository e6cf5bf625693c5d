// moe_gemm.cuda_core_4bit.hip -- a translation unit of the moe_gemm module (kernels/common/native.py, "Translation
// units"): the CUDA-core kernel's 1- and 4-row tiles for the 4-bit formats (mxfp4, nvfp4, q4_0):
// gs_moe_gemm_launch_cuda_core_small_4bit and the 6 gs_moe_gemm_kernel instantiations it launches, compiled by its
// own compiler process beside moe_gemm.hip. The code is moe_gemm.hip's; only the unit selection differs
// (moe_gemm.hip's unit note).
#define GS_MOE_GEMM_PART 4
#include "moe_gemm.hip"
