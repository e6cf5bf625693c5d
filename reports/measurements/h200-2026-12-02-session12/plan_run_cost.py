"""moe_gemm CPU module: host microseconds of `run` with the per-signature plan (best of 7 x 20000 calls, an empty
problem so nothing is computed), and of the whole op. Works with plan() returning a plan object or (plan, bytes).

    OMP_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python reports/measurements/h200-2026-12-02-session12/plan_run_cost.py
"""

import sys
import time

import torch

sys.path.insert(0, ".")
from kernels.moe_gemm import ops as mo

x = torch.ones(0, 32, dtype=torch.bfloat16)
w = torch.ones(1, 32, 8, dtype=torch.bfloat16)
bmap = torch.zeros(0, 3, dtype=torch.int32)
out = torch.empty(0, 8, dtype=torch.bfloat16)
m, args = mo.module_and_args(x, w, None, None, bmap, "bf16", out, 1)
p = m.plan(*args)
plan = p[0] if isinstance(p, tuple) else p
ptrs = (x.data_ptr(), w.data_ptr(), 0, 0, bmap.data_ptr(), out.data_ptr(), 1, 0, 0)
best = []
for _trial in range(7):
    s = time.perf_counter()
    for _ in range(20000):
        m.run(plan, *ptrs)
    best.append((time.perf_counter() - s) / 20000 * 1e6)
print(f"run us min {min(best):.3f} median {sorted(best)[3]:.3f}")
s = time.perf_counter()
for _ in range(2000):
    mo.moe_gemm_op(x, w, None, None, bmap, "bf16", 1)
print("op us", (time.perf_counter() - s) / 2000 * 1e6)
