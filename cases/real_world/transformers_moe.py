"""transformers' Mixture-of-Experts block under each experts implementation a CPU or GPU build can run.

A tiny Mixtral configuration built from its config class (no hub download, seeded random weights): the
MixtralSparseMoeBlock a decoder layer calls (router softmax + top-k, then the experts), with
`config._experts_implementation` switched the way `from_pretrained(..., experts_implementation=...)` sets it.
Implementations in transformers.integrations.moe.ALL_EXPERTS_FUNCTIONS that need hub kernels and a GPU
("deepgemm", "sonicmoe") are not registered here; `SKIPPED` says so.
"""

from __future__ import annotations

import functools

import torch

from graphsafe import Case, register
from graphsafe.cases.real_world import SKIPPED

# transformers is imported by the ops on their first call; where it is missing the cases are skipped.
REQUIRES = ("import:transformers",)

TOKENS, HIDDEN, INTERMEDIATE, EXPERTS, TOP_K = 16, 64, 32, 4, 2


@functools.cache
def _moe_block(implementation: str, dtype: torch.dtype, device: torch.device) -> torch.nn.Module:
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

    config = MixtralConfig(
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_local_experts=EXPERTS,
        num_experts_per_tok=TOP_K,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
    )
    config._experts_implementation = implementation
    block = MixtralSparseMoeBlock(config).eval()
    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for parameter in block.parameters():  # the experts' weights are torch.empty until loaded
            parameter.copy_(torch.randn(parameter.shape, generator=g) * 0.1)
    return block.to(device=device, dtype=dtype)


def _hidden(dtype: torch.dtype, seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"hidden": torch.randn(1, TOKENS, HIDDEN, generator=g).to(device=device, dtype=dtype)}


def _moe(implementation: str, dtype: torch.dtype, hidden: torch.Tensor) -> torch.Tensor:
    return _moe_block(implementation, dtype, hidden.device)(hidden)


def _register(implementation: str, dtype: torch.dtype, expect: str, note: str) -> None:
    suffix = {torch.float32: "fp32", torch.bfloat16: "bf16"}[dtype]
    register(
        Case(
            name=f"transformers_moe_{implementation}_{suffix}",
            make_inputs=functools.partial(_hidden, dtype),
            op=functools.partial(_moe, implementation, dtype),
            expect=expect,
            requires=REQUIRES,
            note=f"expected {expect}: {note}",
        )
    )


_register(
    "eager",
    torch.float32,
    "capture_sync",
    "transformers/models/mixtral/modeling_mixtral.py MixtralExperts.forward: "
    "`expert_hit = torch.greater(expert_mask.sum(...), 0).nonzero()` then a Python loop over the hit experts "
    "(`if expert_idx == self.num_experts` is a host read); nonzero sizes its output on the host",
)
_register(
    "batched_mm",
    torch.float32,
    "pass",
    "transformers/integrations/moe.py batched_mm_experts_forward: repeat_interleave by the constant top_k, "
    "gate_up_proj[expert_ids] gathers with integer indices, bmm, reshape+sum: fixed shapes, no host read",
)
_register(
    "grouped_mm",
    torch.bfloat16,
    "pass",
    "transformers/integrations/moe.py grouped_mm_experts_forward: offsets from "
    "torch.histc(bins=E, min=0, max=E-1) (explicit range: no host read, SummaryOps.cu _histc_cuda_template), "
    "then torch._grouped_mm on bf16, the sm_90 CUTLASS path that reads offs on the device "
    "(aten/src/ATen/native/cuda/GroupedBlas.cpp _grouped_mm_cuda: 'fast path, no d2h sync needed')",
)
_register(
    "grouped_mm",
    torch.float32,
    "capture_sync",
    "the same grouped_mm path on fp32: _grouped_mm_cuda leaves the bf16 fast path for _grouped_mm_fallback, "
    "which copies offs to the host (on the GPU: a device-to-host copy into pageable memory under capture)",
)
for hub_only in ("deepgemm", "sonicmoe"):
    SKIPPED[f"{__name__}:{hub_only}"] = (
        f"experts implementation {hub_only!r} loads its kernels from the hub and needs a GPU; "
        "this suite downloads nothing"
    )
