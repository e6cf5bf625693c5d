"""CPU/hybrid MoE, weights and references: one layer's
quantized experts (ExpertBank), the hybrid layer's GPU part (SharedExpert), one decode step's routing inputs,
and the float64 oracles that the cases and the probe compare with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from graphsafe.kernels.common import quant
from graphsafe.kernels.cpu_moe.settings import FORMATS, check_choice


@dataclass(frozen=True)
class ExpertBank:
    """One layer's experts: w13 [E, 2I, H] (gate rows, then up rows) and w2 [E, H, I] in one format."""

    fmt: str
    num_experts: int
    hidden: int
    inter: int
    w13: quant.QuantizedWeight
    w2: quant.QuantizedWeight

    def pointers(self, q: quant.QuantizedWeight) -> tuple[int, int, int]:
        scale = q.scale.data_ptr() if q.scale is not None else 0
        glob = q.global_scale.data_ptr() if q.global_scale is not None else 0
        return q.data.data_ptr(), scale, glob


def make_bank(fmt: str, num_experts: int, hidden: int, inter: int, seed: int = 0) -> ExpertBank:
    """Random experts quantized with kernels/common/quant.py (weights ~ N(0, 1/fan_in), so outputs stay O(1))."""
    check_choice("fmt", fmt, FORMATS)
    g = torch.Generator().manual_seed(seed)
    w13 = torch.randn(num_experts, 2 * inter, hidden, generator=g) / math.sqrt(hidden)
    w2 = torch.randn(num_experts, hidden, inter, generator=g) / math.sqrt(inter)

    def q(w: torch.Tensor) -> quant.QuantizedWeight:
        qw = quant.quantize_weight(w, fmt)
        contiguous = {k: (v.contiguous() if isinstance(v, torch.Tensor) else v) for k, v in vars(qw).items()}
        return quant.QuantizedWeight(**contiguous)

    return ExpertBank(fmt, num_experts, hidden, inter, q(w13), q(w2))


def reference_moe(
    hidden: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, bank: ExpertBank
) -> torch.Tensor:
    """Independent oracle in float64 from quant.dequantize_weight (no intermediate rounding), on CPU."""
    return reference_moe_f64(hidden, ids, weights, bank).to(hidden.dtype).to(hidden.device)


def reference_layer(
    hidden: torch.Tensor,
    ids: torch.Tensor,
    weights: torch.Tensor,
    bank: ExpertBank,
    shared: SharedExpert | None = None,
) -> torch.Tensor:
    """The hybrid layer's oracle: the CPU experts' contribution plus the GPU part, summed in float64 and
    rounded once (both halves unrounded: the layer's own bf16 roundings are what the threshold measures)."""
    if shared is None:
        return reference_moe(hidden, ids, weights, bank)
    total = reference_moe_f64(hidden, ids, weights, bank) + shared.reference(hidden)
    return total.to(hidden.dtype).to(hidden.device)


def reference_moe_f64(
    hidden: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, bank: ExpertBank
) -> torch.Tensor:
    """The CPU experts' contribution in float64 on CPU, unrounded (reference_moe rounds it once)."""
    w13 = quant.dequantize_weight(bank.w13).double()
    w2 = quant.dequantize_weight(bank.w2).double()
    x = hidden.detach().cpu().double()
    idx = ids.detach().cpu().long()
    rw = weights.detach().cpu().double()
    gu = torch.einsum("tkih,th->tki", w13[idx], x)  # [T, K, 2I]
    g, u = gu[..., : bank.inter], gu[..., bank.inter :]
    h = torch.nn.functional.silu(g) * u
    y = torch.einsum("tkhi,tki->tkh", w2[idx], h)
    return (rw.unsqueeze(-1) * y).sum(dim=1)


@dataclass(frozen=True)
class SharedExpert:
    """The hybrid layer's GPU part: a shared expert (one dense SiLU-MLP on every token), in torch ops so that
    a CUDA/HIP graph and the CPU backend's recorder both capture it. w13 [2I, H] (gate rows, then up rows)
    and w2 [H, I], in the activation dtype, on the layer's device. Its input is the hidden states, so it
    changes between replays as the CPU experts' inputs do."""

    w13: torch.Tensor
    w2: torch.Tensor

    @property
    def inter(self) -> int:
        return self.w2.shape[1]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = torch.nn.functional.linear(x, self.w13).split(self.inter, dim=-1)
        return torch.nn.functional.linear(torch.nn.functional.silu(gate) * up, self.w2)

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """float64 on CPU, no intermediate rounding (the layer's bf16 matmuls round gate/up and h)."""
        gu = x.detach().cpu().double() @ self.w13.detach().cpu().double().T
        gate, up = gu[:, : self.inter], gu[:, self.inter :]
        return (torch.nn.functional.silu(gate) * up) @ self.w2.detach().cpu().double().T


def make_shared_expert(
    hidden: int, inter: int, *, seed: int = 0, dtype: torch.dtype = torch.bfloat16, device: Any = "cpu"
) -> SharedExpert:
    """Random dense weights ~ N(0, 1/fan_in) (outputs O(1), the same scale as the CPU experts' sum)."""
    g = torch.Generator().manual_seed(seed)
    w13 = torch.randn(2 * inter, hidden, generator=g) / math.sqrt(hidden)
    w2 = torch.randn(hidden, inter, generator=g) / math.sqrt(inter)
    return SharedExpert(w13.to(dtype).to(device).contiguous(), w2.to(dtype).to(device).contiguous())


def make_routing(
    seed: int, tokens: int, num_experts: int, top_k: int, hidden: int, device: Any, dtype: torch.dtype
):
    """Hidden states, distinct top-k expert ids (int32) and softmax router weights (f32) for one step."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=g).to(dtype)
    logits = torch.randn(tokens, num_experts, generator=g)
    top = torch.topk(logits, top_k, dim=-1)
    return {
        "hidden": x.to(device),
        "expert_ids": top.indices.to(torch.int32).to(device),
        "router_weights": torch.softmax(top.values, dim=-1).to(device),
    }
