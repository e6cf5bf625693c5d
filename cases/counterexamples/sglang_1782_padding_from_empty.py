"""SGLang PR #1782: CUDA-graph padding reads a token index from a `torch.empty` table (memory fault on MI300X).

Public report: https://github.com/sgl-project/sglang/pull/1782 (2024-10-24), "Fix cuda graph padding for
triton attention backend". A decode graph is captured for a batch size; a smaller batch is padded up to it,
and the padded entries point at request slot 0 with a short sequence length. The triton attention backend
then reads that slot's row of `req_to_token`, which came from `torch.empty` and was never written: the token
indices it finds are garbage, the KV reads go out of bounds, and on MI300X the replay died with a GPU memory
access fault ("Memory Fault on AMD is gone" after the fix). The fix allocates `req_to_token` with
`torch.zeros` (slot 0 then points at KV slot 0, the padding slot) and always pads with sequence length 1.

Rebuilt here in torch ops (the same on the cpu and gpu backends): a decode attention for REAL_REQS requests
padded to a graph batch of GRAPH_BS. Each call builds the request table (row 0: the padding request, never
written) and the KV pool (slot 0: the padding slot, zeroed; the step's tokens in slots 1..), gathers each
entry's KV through its row, masks past its length and takes a softmax-weighted sum.
- buggy: the table from `torch.empty` (main): the padded entry's token index is whatever the allocator
  left; under the harness's poisoned allocation that is -1 or 0x7F7F7F7F;
- fixed: the table from `torch.zeros` (the PR): the padded entry reads the zeroed padding slot.
Triton's load does not check bounds; torch's indexing would stop at its bound check, so the emulation wraps
the index into the pool (`remainder`), where it lands on a slot this step never wrote: poisoned KV, and the
padded row comes back NaN or poison (`uninitialized`).

Left out: the fault itself (the emulated load stays inside the pool, so nothing faults; on a GPU the real
out-of-bounds read may fault or return garbage); MI300X; the triton attention kernel and SGLang's memory pool
(both persistent there, rebuilt per call here, which the poisoned allocation makes equivalent: row 0 is
never written either way).
"""

from __future__ import annotations

import functools
import math

import torch

from graphsafe import Case, register
from graphsafe.toolkit import CaseTable, Column, Line, Report

POOL_SLOTS, MAX_CTX, REAL_REQS, GRAPH_BS, HEAD = 256, 16, 3, 4, 32
PADDING_REQ = 0  # the request row padded entries point at
PADDING_SEQ_LEN = 1  # the PR pads with sequence length 1 (main used a backend-dependent fill value)
TOKENS = REAL_REQS * MAX_CTX  # the step's tokens occupy KV slots 1..TOKENS; slots above stay unwritten


def make_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    seq_lens = torch.randint(1, MAX_CTX + 1, (GRAPH_BS,), generator=g)
    seq_lens[REAL_REQS:] = PADDING_SEQ_LEN
    return {
        "q": torch.randn(GRAPH_BS, HEAD, generator=g).to(device),
        "k_new": torch.randn(TOKENS, HEAD, generator=g).to(device),
        "v_new": torch.randn(TOKENS, HEAD, generator=g).to(device),
        # each request's token slots, somewhere in 1..TOKENS
        "req_tokens": (torch.randperm(TOKENS, generator=g) + 1)
        .view(REAL_REQS, MAX_CTX)
        .to(torch.int32)
        .to(device),
        "seq_lens": seq_lens.to(device),
        # the batch's request rows (1..REAL_REQS), then the padded entries' row 0; the same every step
        "req_rows": torch.tensor([*range(1, REAL_REQS + 1), *[PADDING_REQ] * (GRAPH_BS - REAL_REQS)]).to(
            device
        ),
    }


def padded_decode_attention(
    q: torch.Tensor,
    k_new: torch.Tensor,
    v_new: torch.Tensor,
    req_tokens: torch.Tensor,
    seq_lens: torch.Tensor,
    req_rows: torch.Tensor,
    *,
    zero_table: bool,
) -> torch.Tensor:
    allocate = torch.zeros if zero_table else torch.empty
    req_to_token = allocate(REAL_REQS + 1, MAX_CTX, dtype=torch.int32, device=q.device)
    req_to_token[1:].copy_(req_tokens)  # row PADDING_REQ is never written
    k_pool = torch.empty(POOL_SLOTS, HEAD, dtype=q.dtype, device=q.device)
    v_pool = torch.empty(POOL_SLOTS, HEAD, dtype=q.dtype, device=q.device)
    k_pool[0].zero_()  # slot 0: the padding slot
    v_pool[0].zero_()
    k_pool[1 : TOKENS + 1].copy_(k_new)
    v_pool[1 : TOKENS + 1].copy_(v_new)
    # Triton's unchecked load, emulated inside the pool: an index from garbage lands on an unwritten slot.
    slots = torch.remainder(req_to_token[req_rows].long(), POOL_SLOTS)  # [GRAPH_BS, MAX_CTX]
    valid = torch.arange(MAX_CTX, device=q.device) < seq_lens.unsqueeze(1)
    scores = torch.einsum("bh,blh->bl", q, k_pool[slots]) / math.sqrt(HEAD)
    probs = torch.softmax(torch.where(valid, scores, float("-inf")), dim=-1)
    values = torch.where(valid.unsqueeze(-1), v_pool[slots], 0.0)
    return torch.einsum("bl,blh->bh", probs, values)


def reference(q, k_new, v_new, req_tokens, seq_lens, req_rows) -> torch.Tensor:
    """float64: padded entries attend to the padding slot (zero K and V), as the fix defines."""
    k_pool = torch.zeros(POOL_SLOTS, HEAD, dtype=torch.float64)
    v_pool = torch.zeros(POOL_SLOTS, HEAD, dtype=torch.float64)
    k_pool[1 : TOKENS + 1] = k_new.cpu().double()
    v_pool[1 : TOKENS + 1] = v_new.cpu().double()
    table = torch.zeros(REAL_REQS + 1, MAX_CTX, dtype=torch.long)
    table[1:] = req_tokens.cpu().long()
    out = torch.zeros(GRAPH_BS, HEAD, dtype=torch.float64)
    for b in range(GRAPH_BS):
        n = int(seq_lens[b])
        slots = table[int(req_rows[b]), :n]
        scores = k_pool[slots] @ q[b].cpu().double() / math.sqrt(HEAD)
        out[b] = torch.softmax(scores, dim=0) @ v_pool[slots]
    return out.to(q.dtype).to(q.device)


VARIANTS = {
    variant: register(
        Case(
            name=f"sglang1782.padded_decode.{variant}",
            make_inputs=make_inputs,
            op=functools.partial(padded_decode_attention, zero_table=zero),
            reference=reference,
            expect=expect,
            static_inputs=("req_rows",),
            note=note,
        )
    )
    for variant, zero, expect, note in (
        ("buggy", False, "uninitialized", "req_to_token from torch.empty: the padded entry reads garbage"),
        ("fixed", True, "pass", "req_to_token from torch.zeros: the padded entry reads the padding slot"),
    )
}

REPORT = Report(
    title="SGLang #1782: CUDA-graph padding reads req_to_token from torch.empty (memory fault on MI300X)",
    url="https://github.com/sgl-project/sglang/pull/1782",
    date="2024-10-24",
    reproduced=f"a decode attention for {REAL_REQS} requests padded to a graph batch of {GRAPH_BS}, the padded "
    "entry pointing at request row 0, with the request table from torch.empty (main) or torch.zeros (the PR), "
    "the unchecked load emulated inside the KV pool",
    left_out="the memory access fault itself (the emulated load stays in the pool; the verdict is the "
    "poisoned values the padded row reads); MI300X; SGLang's triton kernel and persistent memory pool",
    tables=(
        CaseTable(
            title="Padded decode batch (the report: GPU memory access fault on MI300X before, gone after)",
            label_header="check",
            lines=(Line("padded decode batch", buggy=VARIANTS["buggy"], fixed=VARIANTS["fixed"]),),
            columns=(
                Column("verdict", "buggy", header="main"),
                Column("verdict", "fixed", header="PR"),
                Column("nonfinite", "buggy", header="main NaN/poison count"),
                Column("graph error", "fixed", header="PR graph error"),
                Column("as expected"),
            ),
            sides=("main", "PR"),
        ),
    ),
)
