"""graphsafe's reference kernels: HIP sources (kernels/hip), their CPU twins (kernels/cpu), the build cache
(build.py), torch custom ops over them (ops.py) and independent torch oracles (reference.py).

Importing this package compiles nothing; kernels/ops.py builds a module on its first call on a device.
"""
