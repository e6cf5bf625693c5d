"""The moe_gemm op family (aiter PR #5831): the grouped, weight-quantized MoE GEMM over a sync-free block map.
moe_gemm.hip (device) and moe_gemm.cpp (its CPU twin, which includes the kernel's decoders), the torch op
(ops.py; importing it registers graphsafe::moe_gemm) and the f32 oracle (reference.py). The weight formats and
the block map are shared: kernels/common/quant.py and kernels/common/routing.py."""
