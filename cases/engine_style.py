"""Engine-style cases: how an inference engine drives a captured decode step, each as a buggy/fixed pair.

- a host-side `prepare` before every replay and eager call (FlashInfer's plan(), vLLM's attention-metadata
  preparation): the wrapper below builds a per-request length mask on the host from `seq_lens`. The bug
  shape: plan() binds a NEW mask tensor instead of copying into the buffer the graph captured, so every
  replay reads the mask of the batch it was captured with (stale_replay);
- capture-size buckets with padding (vLLM captures 1, 2, 4, ... tokens into one pool and replays with fewer
  valid rows): a dynamic per-tensor quantization scale, amax over the activations. The bug shape: the amax
  runs over the whole padded batch, so the valid rows read the padding rows (torch.empty memory in an
  engine; poisoned here): uninitialized. The fix masks the padding rows with the `valid_rows` input;
- a stateful module stepped through a decode loop: a one-layer attention decoder with a KV cache and a
  position buffer. The bug shape: `self.pos = self.pos + 1` rebinds the buffer, so the graph keeps reading
  (and writing the cache at) the position it was captured with (stale_replay); the fix is `self.pos.add_(1)`.
Small shapes: they run in well under a second each on the cpu backend and unchanged on a GPU.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from graphsafe import Case, register

# ---------------------------------------------------------------------------------------------- prepare

BATCH, HEADS, HEAD_DIM, MAX_LEN = 4, 2, 16, 16


class PlannedDecodeAttention:
    """A FlashInfer-style decode wrapper: `plan` (host) then `run` (device, captured)."""

    def __init__(self, copy_into_buffer: bool) -> None:
        self.copy_into_buffer = copy_into_buffer
        self.mask: torch.Tensor | None = None  # (batch, max_len): 0 inside a request's length, -inf after

    def plan(self, inputs: dict[str, torch.Tensor]) -> None:
        lengths = inputs["seq_lens"].tolist()  # plan() takes host-side lengths, as FlashInfer's indptr
        planned = torch.full((len(lengths), MAX_LEN), -math.inf, device=inputs["seq_lens"].device)
        for request, length in enumerate(lengths):
            planned[request, :length] = 0.0
        if self.copy_into_buffer and self.mask is not None and self.mask.shape == planned.shape:
            self.mask.copy_(planned)  # into the buffer the graph reads
        else:
            self.mask = planned  # the bug when a graph was captured: it keeps reading the old tensor

    def run(
        self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, seq_lens: torch.Tensor
    ) -> torch.Tensor:
        assert self.mask is not None, "plan() runs before run()"
        scores = torch.einsum("bhd,bshd->bhs", q, k_cache) / math.sqrt(HEAD_DIM)
        probs = torch.softmax(scores + self.mask[:, None, :], dim=-1)
        return torch.einsum("bhs,bshd->bhd", probs, v_cache)


def decode_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    # Lengths shift by 5 (mod 16) per seed, so A and every B_i plan different masks.
    seq_lens = (seed * 5 + 3 * torch.arange(BATCH)) % MAX_LEN + 1
    return {
        "q": torch.randn(BATCH, HEADS, HEAD_DIM, generator=g).to(device),
        "k_cache": torch.randn(BATCH, MAX_LEN, HEADS, HEAD_DIM, generator=g).to(device),
        "v_cache": torch.randn(BATCH, MAX_LEN, HEADS, HEAD_DIM, generator=g).to(device),
        "seq_lens": seq_lens.to(device),
    }


def _reference_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, seq_lens: torch.Tensor
) -> torch.Tensor:
    positions = torch.arange(MAX_LEN, device=q.device)
    mask = torch.where(positions[None, :] < seq_lens[:, None], 0.0, -math.inf)
    scores = torch.einsum("bhd,bshd->bhs", q.double(), k_cache.double()) / math.sqrt(HEAD_DIM)
    probs = torch.softmax(scores + mask[:, None, :].double(), dim=-1)
    return torch.einsum("bhs,bshd->bhd", probs, v_cache.double()).float()


_rebinding_plan = PlannedDecodeAttention(copy_into_buffer=False)
_copying_plan = PlannedDecodeAttention(copy_into_buffer=True)

register(
    Case(
        name="engine.plan_rebinds_metadata",
        make_inputs=decode_inputs,
        op=_rebinding_plan.run,
        prepare=_rebinding_plan.plan,
        reference=_reference_attention,
        expect="stale_replay",
        note="plan() binds a new mask after capture instead of copying into the captured one",
    )
)
register(
    Case(
        name="engine.plan_copies_metadata",
        make_inputs=decode_inputs,
        op=_copying_plan.run,
        prepare=_copying_plan.plan,
        reference=_reference_attention,
        note="plan() copies the new mask into the buffer the graph captured",
    )
)

# ---------------------------------------------------------------------------------------------- buckets

HIDDEN, OUT_FEATURES = 32, 16
FP8_MAX = 448.0  # float8_e4m3fn's largest finite value: the scale maps amax onto it


def bucket_inputs(seed: int, device: torch.device, *, rows: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    w = torch.Generator().manual_seed(1234)
    return {
        "x": torch.randn(rows, HIDDEN, generator=g).to(device),
        "w": (torch.randn(HIDDEN, OUT_FEATURES, generator=w) / math.sqrt(HIDDEN)).to(device),
        "valid_rows": torch.tensor([rows], dtype=torch.int64).to(device),
    }


def _fake_quant_matmul(x: torch.Tensor, w: torch.Tensor, amax: torch.Tensor) -> torch.Tensor:
    scale = amax.clamp(min=1e-6) / FP8_MAX
    quantized = (x / scale).round().clamp(-FP8_MAX, FP8_MAX) * scale
    return quantized @ w


def quant_matmul_padded_scale(x: torch.Tensor, w: torch.Tensor, valid_rows: torch.Tensor) -> torch.Tensor:
    return _fake_quant_matmul(x, w, x.abs().amax())  # amax over every row, padding included


def quant_matmul_masked_scale(x: torch.Tensor, w: torch.Tensor, valid_rows: torch.Tensor) -> torch.Tensor:
    valid = torch.arange(x.shape[0], device=x.device)[:, None] < valid_rows
    return _fake_quant_matmul(x, w, x.abs().masked_fill(~valid, 0.0).amax())


for _name, _op, _expect, _note in (
    (
        "engine.bucket_scale_reads_padding",
        quant_matmul_padded_scale,
        "uninitialized",
        "the per-tensor scale's amax runs over the padding rows of the captured bucket",
    ),
    (
        "engine.bucket_scale_masks_padding",
        quant_matmul_masked_scale,
        "pass",
        "the amax masks rows at and after valid_rows",
    ),
):
    register(
        Case(
            name=_name,
            make_inputs=bucket_inputs,
            op=_op,
            buckets=(1, 2, 4, 8),
            static_inputs=("w", "valid_rows"),
            expect=_expect,
            note=_note,
        )
    )

# ---------------------------------------------------------------------------------------------- stateful

MODEL_DIM, CACHE_LEN, DECODE_BATCH = 16, 8, 2


class TinyDecoder(torch.nn.Module):
    """One attention layer with a KV cache and a position buffer, stepped one token at a time."""

    def __init__(self, device: torch.device, position_in_place: bool) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(7)
        for name in ("wq", "wk", "wv"):
            weight = torch.randn(MODEL_DIM, MODEL_DIM, generator=g) / math.sqrt(MODEL_DIM)
            setattr(self, name, torch.nn.Parameter(weight.to(device), requires_grad=False))
        self.register_buffer("k_cache", torch.zeros(DECODE_BATCH, CACHE_LEN, MODEL_DIM, device=device))
        self.register_buffer("v_cache", torch.zeros(DECODE_BATCH, CACHE_LEN, MODEL_DIM, device=device))
        self.register_buffer("pos", torch.zeros(1, dtype=torch.int64, device=device))
        self.position_in_place = position_in_place

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = x @ self.wq, x @ self.wk, x @ self.wv
        self.k_cache.index_copy_(1, self.pos, k[:, None, :])
        self.v_cache.index_copy_(1, self.pos, v[:, None, :])
        visible = torch.arange(CACHE_LEN, device=x.device) <= self.pos
        scores = torch.einsum("bd,bsd->bs", q, self.k_cache) / math.sqrt(MODEL_DIM)
        probs = torch.softmax(scores.masked_fill(~visible, -math.inf), dim=-1)
        if self.position_in_place:
            self.pos.add_(1)
        else:
            self.pos = self.pos + 1  # rebinds the buffer: a captured graph keeps the old one
        return torch.einsum("bs,bsd->bd", probs, self.v_cache)


def token_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(DECODE_BATCH, MODEL_DIM, generator=g).to(device)}


def decode_step(module: torch.nn.Module, x: torch.Tensor) -> Any:
    return module(x)


def _decoder(position_in_place: bool) -> Any:
    def make(device: torch.device) -> torch.nn.Module:
        return TinyDecoder(device, position_in_place)

    return make


register(
    Case(
        name="engine.decoder_position_rebound",
        make_inputs=token_inputs,
        op=decode_step,
        make_module=_decoder(position_in_place=False),
        steps=4,
        expect="stale_replay",
        note="`self.pos = self.pos + 1` rebinds the position buffer; the graph keeps the captured one",
    )
)
register(
    Case(
        name="engine.decoder_position_in_place",
        make_inputs=token_inputs,
        op=decode_step,
        make_module=_decoder(position_in_place=True),
        steps=4,
        note="`self.pos.add_(1)` advances the buffer the graph captured",
    )
)
