"""The moe_gemm family's oracle: plain torch math, independent of the kernels.

Role: what the moe_gemm cases compare eager output with. Weights are dequantized with kernels/common/quant.py,
which does the kernels' own f32 decode (bit-identical decoded weights), then one f32 matmul per slot: the
only difference left against a correct kernel is the order of the f32 accumulation.
"""

from __future__ import annotations

import torch
from torch import Tensor

from graphsafe.kernels.common.quant import QuantizedWeight, dequantize_weight


def moe_gemm_reference(x: Tensor, q: QuantizedWeight, block_map: Tensor) -> Tensor:
    """f32 oracle of moe_gemm: dequantize, one f32 matmul per slot, zeros where no slot writes."""
    deq = dequantize_weight(q)  # [E, N, K] f32
    out = torch.zeros(x.shape[0], deq.shape[-2], dtype=torch.float32, device=x.device)
    for expert, start, count in block_map.tolist():
        if 0 <= expert < deq.shape[0] and count > 0:
            out[start : start + count] = x[start : start + count].float() @ deq[expert].T
    return out
