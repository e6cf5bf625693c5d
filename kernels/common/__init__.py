"""What every op family shares: the build wiring (native.py), the weight formats and their oracles (quant.py,
gs_formats.h), the MoE block map (routing.py), and the C++ headers every kernel includes (hip_compat.h: one
source for HIP and CUDA; gs_checks.h: argument refusals)."""
