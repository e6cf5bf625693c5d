// moe_gemm.cuda_core.hip -- the CUDA-core kernels' translation unit of the moe_gemm module
// (kernels/common/native.py, "Translation units"): gs_moe_gemm_launch_cuda_core_small and the 14
// gs_moe_gemm_kernel instantiations it launches (7 formats x the 1- and 4-row tiles), compiled by their own
// compiler process beside moe_gemm.hip. The code is moe_gemm.hip's; only the unit selection differs.
#define GS_MOE_GEMM_PART_CUDA_CORE 1
#include "moe_gemm.hip"
