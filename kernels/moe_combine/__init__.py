"""The moe_combine op family (vllm.cpp PR #509): the weighted sum of the routed experts' outputs plus the shared
expert, with or without its sigmoid gate. moe_combine.hip (device) and moe_combine.cpp (its CPU twin), the torch
ops over them (ops.py; importing it registers graphsafe::moe_combine*), and the torch oracles (reference.py)."""
