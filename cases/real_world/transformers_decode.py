"""A decoder decoding one token with a static KV cache, as generate() and speculative decoding drive it.

A tiny Llama (2 layers, hidden 64) built from LlamaConfig with seeded random weights, a StaticCache prefilled
with an 8-token prompt, then the step under test: the forward of one new token at position 8, followed by
`cache.crop(-1)`, the rewind speculative decoding applies to a rejected token. The rewind keeps the cache
in the same state before every call, so A, each B and eager B decode from the same prefix.
"""

from __future__ import annotations

import functools

import torch

from graphsafe import Case, register

# transformers is imported by the ops on their first call. transformers 5.17 (the H200 image's) has no
# StaticLayer.crop, the rewind each call ends with: where it is missing the cases are skipped, naming it.
REQUIRES = ("import:transformers.cache_utils.StaticLayer.crop",)

PROMPT, VOCAB, MAX_CACHE = 8, 128, 32


@functools.cache
def _decoder(attention: str, device: torch.device) -> tuple[torch.nn.Module, object]:
    from transformers import LlamaConfig, LlamaForCausalLM, StaticCache

    config = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=VOCAB,
        max_position_embeddings=64,
    )
    config._attn_implementation = attention
    g = torch.Generator().manual_seed(4321)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=g) * 0.05)
    model = model.to(device)
    cache = StaticCache(config=config, max_cache_len=MAX_CACHE)
    prompt = torch.randint(0, VOCAB, (1, PROMPT), generator=g).to(device)
    with torch.no_grad():
        model(input_ids=prompt, cache=cache, use_cache=True)
    return model, cache


def _next_token(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "input_ids": torch.randint(0, VOCAB, (1, 1), generator=g).to(device),
        "position_ids": torch.tensor([[PROMPT]]).to(device),
    }


def decode_step(attention: str, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
    model, cache = _decoder(attention, input_ids.device)
    logits = model(input_ids=input_ids, cache=cache, position_ids=position_ids, use_cache=True).logits
    cache.crop(-1)  # type: ignore[attr-defined]
    return logits


def decode_step_implicit_positions(input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
    """The same step without position_ids: LlamaModel.forward derives them from cache.get_seq_length()."""
    model, cache = _decoder("sdpa", input_ids.device)
    logits = model(input_ids=input_ids, cache=cache, use_cache=True).logits
    cache.crop(-1)  # type: ignore[attr-defined]
    return logits


_NOTE = (
    "expected pass: transformers/cache_utils.py StaticLayer.update writes the new key/value with "
    "keys.index_copy_(2, arange(kv_length) + cumulative_length, ...) and advances the device tensor "
    "cumulative_length in place (add_); StaticLayer.crop rewinds it with sub_; the causal mask comes from "
    "position_ids and the fixed max_cache_len (masking_utils.create_causal_mask): fixed shapes, device-side "
    "state, no host read. The static cache was built for torch.compile with CUDA graphs"
)
for attention in ("sdpa", "eager"):
    register(
        Case(
            name=f"transformers_llama_decode_static_cache_{attention}",
            make_inputs=_next_token,
            op=functools.partial(decode_step, attention),
            static_inputs=("position_ids",),
            requires=REQUIRES,
            note=f"{_NOTE}; attention implementation {attention!r}",
        )
    )
register(
    Case(
        name="transformers_llama_decode_static_cache_implicit_positions",
        make_inputs=_next_token,
        op=decode_step_implicit_positions,
        static_inputs=("position_ids",),
        requires=REQUIRES,
        note=f"{_NOTE}; without position_ids, models/llama/modeling_llama.py LlamaModel.forward adds "
        "cache.get_seq_length() to an arange, and StaticLayer.get_seq_length returns the device tensor "
        "cumulative_length (no int()): still no host read",
    )
)
