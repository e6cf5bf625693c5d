"""MoE routing metadata for the grouped GEMM, built on the device with no host sync (graph-safe).

Role: turn top-k expert ids (or per-expert group sizes) into the block map kernels/moe_gemm/moe_gemm.hip
walks. One slot = one block of up to `block_m` consecutive rows of the expert-grouped activations, all
of one expert: int32 [S, 3] = (expert, row_start, row_count). Surplus slots hold (-1, 0, 0) and the
kernel returns at once on them.

NOTE on the static bound (aiter#5831): each expert wastes at most one partial block, so the number of
real blocks sum_e cdiv(size_e, block_m) <= cdiv(total_rows, block_m) + E. Sizing the map with that bound
needs no knowledge of the sizes on the host, so nothing here calls .item() or makes a data-dependent
shape: cumsum, searchsorted and scatter_add with static sizes only. The legacy builder
(`block_map_from_group_sizes_legacy`) sizes the map exactly with `.sum().item()`, the host sync that made
aiter's `group_sizes_to_expt_tensors` fail under capture with hipErrorStreamCaptureUnsupported; it stays
as the counterexample (cases/counterexamples/moe_gemm_item_routing.py).

Rows of the grouped activations that no slot covers (ids of foreign experts under expert parallelism,
-1 top-k padding) are placed after every local expert's rows by `route_topk`; the GEMM zero-fills them.
"""

from __future__ import annotations

import torch
from torch import Tensor

SLOT_FIELDS = 3  # (expert, row_start, row_count)
EMPTY_SLOT = (-1, 0, 0)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _check_block_m(block_m: int) -> None:
    if not isinstance(block_m, int) or block_m < 1:
        raise ValueError(f"block_m must be a positive int, got {block_m!r}")


def num_block_slots(total_rows: int, num_experts: int, block_m: int) -> int:
    """Static number of slots: cdiv(total_rows, block_m) + num_experts (see the module note)."""
    _check_block_m(block_m)
    if total_rows < 0 or num_experts < 1:
        raise ValueError(
            f"total_rows must be >= 0 and num_experts >= 1, got total_rows={total_rows}, num_experts={num_experts}"
        )
    return cdiv(total_rows, block_m) + num_experts


def _check_group_sizes(group_sizes: Tensor) -> None:
    if group_sizes.dim() != 1 or group_sizes.numel() < 1:
        raise ValueError(
            f"group_sizes must be a 1-D tensor [E] with E >= 1, got shape {tuple(group_sizes.shape)}"
        )
    if group_sizes.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"group_sizes dtype must be one of (torch.int32, torch.int64), got {group_sizes.dtype}"
        )


def _fill_slots(sizes: Tensor, slots: Tensor, total_rows: int, block_m: int) -> Tensor:
    """(expert, row_start, row_count) for each slot index in `slots`, all with tensor ops."""
    num_experts = sizes.numel()
    sizes = sizes.to(torch.int64).clamp(min=0)  # a negative size would break searchsorted's ordering
    offsets = torch.cumsum(sizes, 0) - sizes  # exclusive prefix sum: first row of each expert
    blocks = (sizes + block_m - 1) // block_m
    block_end = torch.cumsum(blocks, 0)
    expert = torch.searchsorted(block_end, slots, right=True)  # first e with block_end[e] > slot
    valid = expert < num_experts
    e = expert.clamp(max=num_experts - 1)
    local = slots - (block_end[e] - blocks[e])
    row_start = offsets[e] + local * block_m
    row_count = torch.minimum(sizes[e] - local * block_m, torch.full_like(local, block_m))
    # sizes summing past total_rows are malformed: clamp so no slot reaches past the activations
    row_count = torch.minimum(row_count, total_rows - row_start).clamp(min=0)
    valid = valid & (row_count > 0)
    zero = torch.zeros_like(slots)
    out = torch.stack(
        (
            torch.where(valid, e, zero - 1),
            torch.where(valid, row_start, zero),
            torch.where(valid, row_count, zero),
        ),
        dim=1,
    )
    return out.to(torch.int32)


def block_map_from_group_sizes(group_sizes: Tensor, total_rows: int, block_m: int) -> Tensor:
    """Sync-free block map, int32 [cdiv(total_rows, block_m) + E, 3]; surplus slots are (-1, 0, 0).

    `total_rows` is the static row count of the grouped activations (a Python int, e.g. T * topk).
    """
    _check_group_sizes(group_sizes)
    num_slots = num_block_slots(total_rows, group_sizes.numel(), block_m)
    slots = torch.arange(num_slots, device=group_sizes.device, dtype=torch.int64)
    return _fill_slots(group_sizes, slots, total_rows, block_m)


def block_map_from_group_sizes_legacy(group_sizes: Tensor, total_rows: int, block_m: int) -> Tensor:
    """Counterexample: the exact-size map of aiter's legacy path. `.item()` syncs the host (not graph-safe)."""
    _check_group_sizes(group_sizes)
    _check_block_m(block_m)
    blocks = (group_sizes.to(torch.int64).clamp(min=0) + block_m - 1) // block_m
    total_blocks = int(blocks.sum().item())  # the host sync aiter#5831 removed
    slots = torch.arange(total_blocks, device=group_sizes.device, dtype=torch.int64)
    return _fill_slots(group_sizes, slots, total_rows, block_m)


def route_topk(topk_ids: Tensor, num_local_experts: int, block_m: int, expert_start: int = 0):
    """Group top-k assignments by local expert, without a host sync.

    topk_ids: int [T, topk] global expert ids; -1 is padding; ids outside
    [expert_start, expert_start + num_local_experts) belong to other ranks (expert parallelism).
    Returns (sorted_rows int64 [T*topk], group_sizes int32 [E], block_map int32 [S, 3]): row r of the
    grouped activations is flattened assignment sorted_rows[r] (token sorted_rows[r] // topk). Local
    assignments come first, grouped by expert in token order (stable sort); the rest follow and are
    covered by no slot.
    """
    if topk_ids.dim() != 2:
        raise ValueError(f"topk_ids must be 2-D [T, topk], got shape {tuple(topk_ids.shape)}")
    if topk_ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"topk_ids dtype must be one of (torch.int32, torch.int64), got {topk_ids.dtype}")
    if num_local_experts < 1:
        raise ValueError(f"num_local_experts must be >= 1, got {num_local_experts}")
    local = topk_ids.flatten().to(torch.int64) - expert_start
    valid = (local >= 0) & (local < num_local_experts)
    key = torch.where(valid, local, torch.full_like(local, num_local_experts))
    _, sorted_rows = torch.sort(key, stable=True)
    counts = torch.zeros(num_local_experts + 1, dtype=torch.int64, device=topk_ids.device)
    counts.scatter_add_(0, key, torch.ones_like(key))
    group_sizes = counts[:num_local_experts].to(torch.int32)
    block_map = block_map_from_group_sizes(group_sizes, key.numel(), block_m)
    return sorted_rows, group_sizes, block_map


def block_map_reference(sizes: list[int], total_rows: int, block_m: int) -> list[tuple[int, int, int]]:
    """Plain-Python construction the tests compare against (one loop per expert, then -1 padding)."""
    slots = []
    row = 0
    for expert, size in enumerate(sizes):
        for start in range(0, size, block_m):
            slots.append((expert, row + start, min(block_m, size - start)))
        row += size
    num_slots = cdiv(total_rows, block_m) + len(sizes)
    assert len(slots) <= num_slots, "the static bound failed"
    return slots + [EMPTY_SLOT] * (num_slots - len(slots))


def covered_rows(block_map: Tensor, total_rows: int) -> Tensor:
    """Bool [total_rows]: rows some slot writes (for tests and reference outputs)."""
    mask = torch.zeros(total_rows, dtype=torch.bool, device=block_map.device)
    for expert, start, count in block_map.tolist():
        if expert >= 0:
            mask[start : start + count] = True
    return mask
