// moe_gemm.prefill.hip -- the prefill kernels' translation unit of the moe_gemm module (kernels/common/native.py,
// "Translation units"): gs_moe_gemm_launch_prefill and the kernels it launches (in sm_90a builds the 16
// warpgroup-MMA instantiations, elsewhere the 8 gs_moe_gemm_prefill_kernel ones), compiled by their own
// compiler process beside moe_gemm.hip (which holds every other kernel, the launcher and the entry points).
// The code is moe_gemm.hip's; only the unit selection differs.
#define GS_MOE_GEMM_PART 2
#include "moe_gemm.hip"
