// moe_gemm.cuda_core16.hip -- the CUDA-core kernel's 16-row tiles as a translation unit of the moe_gemm module
// (kernels/common/native.py, "Translation units"): gs_moe_gemm_launch_cuda_core_16 and the 7 gs_moe_gemm_kernel
// instantiations it launches (one per format), compiled by their own compiler process beside moe_gemm.hip. The
// code is moe_gemm.hip's; only the unit selection differs.
#define GS_MOE_GEMM_PART_CUDA_CORE_16 1
#include "moe_gemm.hip"
