"""graphsafe's reference kernels, one folder per op family: the device source (<stem>.hip, compiled as CUDA by
nvcc or as HIP by hipcc), its CPU twin (<stem>.cpp), the torch custom ops over them (ops.py) and independent
oracles (reference.py). kernels/common holds what the families share, including the build wiring.

Imports run one way: kernels import the harness's public API, never cases. Importing a family compiles
nothing; its first call on a device builds (cached on disk by content).
"""
