"""Independent torch oracles for the moe_combine family (plain torch math; never calls ops.py).

Role: what a case compares eager output with. Two kinds per op:
  * ``*_f32``: the kernel's f32 recipe written in torch, one elementwise op at a time (acc = acc + w*x in
    sequential k, then * routed_scale, then + shared term, one rounding to the output dtype). torch runs
    each elementwise op as its own IEEE-rounded kernel and never contracts across ops, so where the op has
    no transcendental this oracle is BIT-EXACT with a correct kernel (moe_combine; measured in
    tests/test_moe_combine_ops.py). It is what the bit-exact cases compare with.
  * ``*_f64``: the same math in float64 (sigmoid included), rounded once to the output dtype: the oracle for
    tolerance-based cases, independent of any f32 ordering choice.
The sigmoid ops are not bit-exact against torch.sigmoid (torch's Sleef exp and the kernels' portable expf
round differently by an ulp), so their bit-exact check is kernel vs CPU implementation, not vs torch.
"""

from __future__ import annotations

import torch


def _out_dtype(out_dtype: torch.dtype | None, default: torch.dtype) -> torch.dtype:
    return default if out_dtype is None else out_dtype


def _gate_column(gate_logit: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return gate_logit.reshape(-1, 1).to(dtype)


def moe_combine_f32(
    expert_out: torch.Tensor,
    weights: torch.Tensor,
    shared: torch.Tensor | None = None,
    routed_scale: float = 1.0,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """routed_scale * sum_k w[t,k] * x[t,k,h] (+ shared) in f32, sequential k, one rounding at the end."""
    T, K, H = expert_out.shape
    x = expert_out.to(torch.float32)
    w = weights.to(torch.float32)
    acc = torch.zeros((T, H), dtype=torch.float32, device=expert_out.device)
    for k in range(K):
        acc = acc + w[:, k : k + 1] * x[:, k, :]
    acc = acc * torch.tensor(routed_scale, dtype=torch.float32, device=acc.device)
    if shared is not None:
        acc = acc + shared.to(torch.float32)
    return acc.to(_out_dtype(out_dtype, expert_out.dtype))


def moe_combine_f64(
    expert_out: torch.Tensor,
    weights: torch.Tensor,
    shared: torch.Tensor | None = None,
    routed_scale: float = 1.0,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """The same math in float64 via einsum, rounded once to the output dtype."""
    routed = torch.einsum("tk,tkh->th", weights.double(), expert_out.double()) * routed_scale
    if shared is not None:
        routed = routed + shared.double()
    return routed.to(_out_dtype(out_dtype, expert_out.dtype))


def moe_combine_gate_f32(
    expert_out: torch.Tensor,
    weights: torch.Tensor,
    shared: torch.Tensor,
    gate_logit: torch.Tensor,
    routed_scale: float = 1.0,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """moe_combine_f32 with shared term bf16(sigmoid(gate) * shared) in f32 (torch.sigmoid, not the kernels')."""
    gate = torch.sigmoid(_gate_column(gate_logit, torch.float32))
    shared_term = (gate * shared.to(torch.float32)).to(torch.bfloat16).to(torch.float32)
    routed = moe_combine_f32(expert_out, weights, None, routed_scale, torch.float32)
    return (routed + shared_term).to(_out_dtype(out_dtype, expert_out.dtype))


def moe_combine_gate_f64(
    expert_out: torch.Tensor,
    weights: torch.Tensor,
    shared: torch.Tensor,
    gate_logit: torch.Tensor,
    routed_scale: float = 1.0,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """float64 math; the shared term still goes through bf16 because the op defines it that way."""
    gate = torch.sigmoid(_gate_column(gate_logit, torch.float64))
    shared_term = (gate * shared.double()).to(torch.bfloat16).double()
    routed = moe_combine_f64(expert_out, weights, None, routed_scale, torch.float64)
    return (routed + shared_term).to(_out_dtype(out_dtype, expert_out.dtype))


def shared_expert_gate_f64(
    gate_logit: torch.Tensor, shared: torch.Tensor, out_dtype: torch.dtype | None = None
) -> torch.Tensor:
    """sigmoid(gate[t]) * shared[t, c] in float64, rounded once."""
    gate = torch.sigmoid(_gate_column(gate_logit, torch.float64))
    return (gate * shared.double()).to(_out_dtype(out_dtype, shared.dtype))
