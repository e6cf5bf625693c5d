"""LMDeploy PR #4569: padded requests of a captured decode batch write their KV into a live request's block.

Public report: https://github.com/InternLM/lmdeploy/pull/4569 (2026-05-07), "block_offsets padding 0"
(merged). Its description: "0 is reserved for padding requests. kv cache would be polluted if
block_offsets contain data from previous step." A decode graph is captured for a batch of `max_batchs`
requests; a smaller batch is replayed in it, and `fill_buffers_cudagraph` (lmdeploy/pytorch/models/utils/
cudagraph.py) copies only the live requests' rows into the graph's `block_offsets` buffer, while the
padded requests get q_seqlens = kv_seqlens = max_tokens // max_batchs (1 in decode). The padded rows of
`block_offsets` still hold the block table of whichever request sat in that row at an earlier step, so a
padded request writes its token's K/V into that request's block: when the request is still running (it
moved up a row because an earlier one finished), its cached KV is overwritten. The fix zeroes the whole
buffer before the live rows are written, so padded requests write into block 0, kept for them.

Rebuilt here in torch ops (the same on the cpu and gpu backends) with the harness's capture-size buckets:
a paged decode attention step (each request writes its new token's K/V at position kv_len - 1 through its
block table, as lmdeploy's fill_kv_cache does, then attends over positions 0..kv_len - 1) captured for
GRAPH_BS requests and replayed with fewer. The step at seed s runs requests s, s+1, ... (each owns the same
blocks at every step), so when the batch shrinks the next request moves up a row: A's row n still holds the
table of request n, which B_0 runs in row n - 1. The harness copies the live rows into the graph's buffers
and leaves integer padding rows as they were (float padding rows are poisoned); the case's `prepare` hook is
the rest of `fill_buffers_cudagraph`, run before every replay and eager call:
- buggy (main): padded rows get kv_seqlens = 1 and keep their old block table: the padded request writes
  its (poisoned) K/V over position 0 of a live request's first block, which that request then reads:
  `uninitialized` (the valid rows read what the padding rows wrote);
- fixed (the PR): the padded rows' block table is zeroed first; they write into block 0: `pass`.

Left out: the model around the attention (input_ids, position_ids, MLA, sliding windows, mrope, SSM state
ids); q_start_loc/cu_seqlens; lmdeploy's kernels and its bf16/fp16 cache (float32 here); the report gives
no shapes, so block size 64 is CudaGraphMeta's default and the rest is small.
"""

from __future__ import annotations

import functools
import math

import torch

from graphsafe import Case, register
from graphsafe.toolkit import CaseTable, Column, Line, Report

GRAPH_BS = 4  # the captured batch (max_batchs)
BLOCK_SIZE = 64  # CudaGraphMeta.block_size's default
BLOCKS_PER_REQUEST = 2  # the block table's width: contexts up to 128 tokens
MAX_CONTEXT = BLOCK_SIZE * BLOCKS_PER_REQUEST
HEAD_DIM = 64
PAD_SEQLEN = 1  # max_tokens // max_batchs for a decode graph: what padded requests get as q and kv length
PADDING_BLOCK = 0  # "0 is reserved for padding requests"
# A request's first block is one of FIRST_BLOCKS, its second one of SECOND_BLOCKS (coprime counts, both above
# GRAPH_BS): the GRAPH_BS + 1 consecutive requests a step runs or leaves in a padding row never share a
# block, and the block tables of the steps at seeds s and s + n are equal only when n is a multiple of 11 x 13
# = 143, so every B of a run with fewer than 143 replays differs from A (the harness refuses an equal input).
FIRST_BLOCKS, SECOND_BLOCKS = 11, 13
POOL_BLOCKS = 1 + FIRST_BLOCKS + SECOND_BLOCKS


def request_blocks(request: torch.Tensor) -> torch.Tensor:
    """The block table of each request: the same blocks at every step, never block 0. [rows, width]"""
    first = 1 + request % FIRST_BLOCKS
    second = 1 + FIRST_BLOCKS + request % SECOND_BLOCKS
    return torch.stack([first, second], dim=1).to(torch.int32)


def kv_length(request: torch.Tensor, step: int) -> torch.Tensor:
    """Request k's context length at step s (>= 2: a live request's new token never lands on position 0)."""
    return (2 + (request * 29 + step) % (MAX_CONTEXT - 1)).to(torch.int32)


def make_inputs(seed: int, device: torch.device, *, rows: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    cache = torch.Generator().manual_seed(4569)  # the pool's cached context, the same every step
    requests = seed + torch.arange(rows)  # the step at seed s runs requests s, s+1, ...
    return {
        "q": torch.randn(rows, HEAD_DIM, generator=g).to(device),
        "k_new": torch.randn(rows, HEAD_DIM, generator=g).to(device),
        "v_new": torch.randn(rows, HEAD_DIM, generator=g).to(device),
        "block_offsets": request_blocks(requests).to(device),
        "kv_seqlens": kv_length(requests, seed).to(device),
        "k_cache": torch.randn(POOL_BLOCKS, BLOCK_SIZE, HEAD_DIM, generator=cache).to(device),
        "v_cache": torch.randn(POOL_BLOCKS, BLOCK_SIZE, HEAD_DIM, generator=cache).to(device),
        "batch_size": torch.tensor([rows], dtype=torch.int64).to(device),
    }


def fill_padding(inputs: dict[str, torch.Tensor], *, zero_block_offsets: bool) -> None:
    """The padding half of fill_buffers_cudagraph, on the graph's buffers after the live rows were copied."""
    batch_size = int(inputs["batch_size"].item())
    inputs["kv_seqlens"][batch_size:] = PAD_SEQLEN  # qkv_seqlens.fill_(max_tokens // max_batchs)
    if zero_block_offsets:
        inputs["block_offsets"][batch_size:] = PADDING_BLOCK  # the PR: block_offsets.zero_() first


def paged_decode(
    q: torch.Tensor,
    k_new: torch.Tensor,
    v_new: torch.Tensor,
    block_offsets: torch.Tensor,
    kv_seqlens: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    batch_size: torch.Tensor,
) -> torch.Tensor:
    """One decode token per request: write its K/V through the block table, then attend over the context."""
    del batch_size  # read on the host by the fill (`prepare`); the graph runs every row of its batch
    rows = q.shape[0]
    flat_k, flat_v = k_cache.view(-1, HEAD_DIM), v_cache.view(-1, HEAD_DIM)
    blocks = block_offsets.long()
    # fill_kv_cache: every row of the batch, padded ones included, writes at position kv_len - 1.
    last = kv_seqlens.long() - 1
    slots = blocks.gather(1, (last // BLOCK_SIZE)[:, None]).squeeze(1) * BLOCK_SIZE + last % BLOCK_SIZE
    flat_k.index_copy_(0, slots, k_new)
    flat_v.index_copy_(0, slots, v_new)
    # paged attention over positions 0..kv_len - 1 of each row's blocks.
    positions = torch.arange(MAX_CONTEXT, device=q.device)
    context = blocks[:, positions // BLOCK_SIZE] * BLOCK_SIZE + positions % BLOCK_SIZE  # [rows, MAX_CONTEXT]
    keys, values = flat_k[context.reshape(-1)], flat_v[context.reshape(-1)]
    scores = torch.einsum("rd,rpd->rp", q, keys.view(rows, MAX_CONTEXT, HEAD_DIM)) / math.sqrt(HEAD_DIM)
    visible = positions[None, :] < kv_seqlens.long()[:, None]
    probs = torch.softmax(scores.masked_fill(~visible, -math.inf), dim=-1)
    return torch.einsum("rp,rpd->rd", probs, values.view(rows, MAX_CONTEXT, HEAD_DIM))


def reference(q, k_new, v_new, block_offsets, kv_seqlens, k_cache, v_cache, batch_size) -> torch.Tensor:
    """float64 on the live requests only, one at a time: each reads its cached context and its own token."""
    k_cache, v_cache = k_cache.double().clone(), v_cache.double().clone()
    out = torch.zeros(q.shape[0], HEAD_DIM, dtype=torch.float64)
    for r in range(q.shape[0]):
        n = int(kv_seqlens[r])
        table = block_offsets[r].long().cpu()
        slots = [(int(table[p // BLOCK_SIZE]), p % BLOCK_SIZE) for p in range(n)]
        keys = torch.stack([k_cache[b, o].cpu() for b, o in slots[:-1]] + [k_new[r].double().cpu()])
        values = torch.stack([v_cache[b, o].cpu() for b, o in slots[:-1]] + [v_new[r].double().cpu()])
        probs = torch.softmax(keys @ q[r].double().cpu() / math.sqrt(HEAD_DIM), dim=0)
        out[r] = probs @ values
    return out.to(q.dtype).to(q.device)


VARIANTS = {
    variant: register(
        Case(
            name=f"lmdeploy4569.padded_decode.{variant}",
            make_inputs=make_inputs,
            op=paged_decode,
            reference=reference,
            prepare=functools.partial(fill_padding, zero_block_offsets=zero),
            buckets=(GRAPH_BS,),
            static_inputs=("k_cache", "v_cache", "batch_size"),
            mutates=("k_cache", "v_cache"),
            expect=expect,
            note=note,
        )
    )
    for variant, zero, expect, note in (
        (
            "buggy",
            False,
            "uninitialized",
            "padded rows keep an earlier step's block table and write their K/V into a live request's block",
        ),
        ("fixed", True, "pass", "block_offsets zeroed before the live rows: padded rows write into block 0"),
    )
}

REPORT = Report(
    title="LMDeploy #4569: padded requests of a captured decode batch write their KV into a live request's block",
    url="https://github.com/InternLM/lmdeploy/pull/4569",
    date="2026-05-07",
    reproduced=f"a paged decode attention step captured for {GRAPH_BS} requests and replayed with fewer, the "
    "batch shrinking so that a live request moves up a row; the padded rows' block table kept from the "
    "earlier step (main) or zeroed to the reserved block 0 (the PR)",
    left_out="the model around the attention, q_start_loc/cu_seqlens, MLA, sliding windows, mrope and SSM "
    "state ids; lmdeploy's kernels and bf16/fp16 cache (float32 here); the report gives no shapes",
    tables=(
        CaseTable(
            title=f"Decode graph for {GRAPH_BS} requests replayed with 1, 2 and 4 live requests",
            label_header="check",
            lines=(Line("padded decode batch", buggy=VARIANTS["buggy"], fixed=VARIANTS["fixed"]),),
            columns=(
                Column("verdict", "buggy", header="main"),
                Column("verdict", "fixed", header="PR"),
                Column("detail", "buggy", header="main detail"),
                Column("graph error", "fixed", header="PR graph error"),
                Column("as expected"),
            ),
            sides=("main", "PR"),
        ),
    ),
)
