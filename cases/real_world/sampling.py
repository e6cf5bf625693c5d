"""Sampling as decode loops and training steps call it: graph-safe random ops, expected `pass`.

A CUDA graph reads its generator's seed and offset at replay and advances the offset, exactly as an eager call
of the same kernels does (at::CUDAGeneratorImpl::philox_cuda_state under capture; CUDAGraph::replay's
prologue), so a replay and an eager call started from the same generator state draw the same numbers. The
harness restores one generator state before the replay and before eager B; a case fails only when the
randomness is stale (drawn once at capture and reused), which none of these does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from graphsafe import Case, register

BATCH, VOCAB, HIDDEN = 4, 64, 32


def _logits(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"logits": (3 * torch.randn(BATCH, VOCAB, generator=g)).to(device)}


def _activations(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(BATCH, HIDDEN, generator=g).to(device)}


def dropout_training(x: torch.Tensor) -> torch.Tensor:
    """nn.Dropout in a training step: a fresh Bernoulli mask per call."""
    return F.dropout(x, p=0.25, training=True)


def multinomial_sampling(logits: torch.Tensor) -> torch.Tensor:
    """Sampling a next token per row, as generate(do_sample=True) does after softmax."""
    return torch.multinomial(torch.softmax(logits, dim=-1), num_samples=1)


def gumbel_max_sampling(logits: torch.Tensor) -> torch.Tensor:
    """Gumbel-max sampling (vLLM/SGLang-style samplers): argmax(logits - log(-log(u))) with u = rand_like."""
    u = torch.rand_like(logits).clamp_(min=1e-10, max=1.0 - 1e-7)
    return torch.argmax(logits - torch.log(-torch.log(u)), dim=-1)


_RNG_NOTE = (
    "expected pass: the op draws fresh numbers from the default generator on every call, as a graph replay "
    "does (philox seed and offset read at replay); graph and eager agree when started from the same state"
)
register(
    Case(name="sampling_dropout_training", make_inputs=_activations, op=dropout_training, note=_RNG_NOTE)
)
register(
    Case(
        name="sampling_multinomial",
        make_inputs=_logits,
        op=multinomial_sampling,
        note=_RNG_NOTE
        + "; aten/src/ATen/native/Distributions.cpp multinomial: one sample without replacement "
        "takes the exponential_/argmax path, its checks are _assert_async (no host read)",
    )
)
register(
    Case(
        name="sampling_gumbel_rand_like",
        make_inputs=_logits,
        op=gumbel_max_sampling,
        note=_RNG_NOTE + "; rand_like, log and argmax launch kernels only",
    )
)
