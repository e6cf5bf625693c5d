"""Negative controls for shape search (harness/search.py), each with its fixed twin.

Each buggy op is right at almost every size and wrong only at a shape edge, the way the seeds' bugs were:
  * `block_tail`: rows are processed in 64-row blocks, a tail of 32 or more rows takes a 32-row half-block
    step, and the rows after it go through a remainder step that is skipped when exactly one row is left
    (`len(rest) > 1` instead of `>= 1`). The last row then keeps what its buffer held (NaN under the
    harness's poisoning): only when T % 64 == 33. Smallest failing sizes: T=33, H=1.
  * `aligned_tail`: the same block structure and lone-row bug, but only on the op's vectorised path, taken
    when H is a multiple of 8 (the other path writes every row): only when T % 64 == 33 and H % 8 == 0, the
    way a tail bug hides in a kernel's aligned fast path. Smallest failing sizes: T=33, H=8. A sweep whose
    lines keep the other dimensions at their smallest values (H = 1) never takes that path.
  * `empty_expert`: per-expert means of the tokens routed to each expert, written row by row with
    index_copy_ into a torch.empty buffer: an expert that receives no token keeps an unwritten row. Only
    when some expert receives no tokens; smallest failing sizes: T=1 token, E=2 experts.
The twins write every row (`>= 1`; torch.zeros, so an expert without tokens has mean 0) and pass at every
size. tests/test_search.py proves that the search finds and shrinks the controls within the default budget
on the CPU backend, and that the twins pass.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from graphsafe import Case, register

BLOCK = 64
HALF_BLOCK = 32


def _blocked_double(x: torch.Tensor, *, lone_row_bug: bool) -> torch.Tensor:
    """2 * x over rows, in the block structure of a tiled kernel (module note)."""
    rows = x.shape[0]
    out = torch.empty_like(x)
    full = rows - rows % BLOCK
    out[:full] = x[:full] * 2
    start = full
    if rows - start >= HALF_BLOCK:
        out[start : start + HALF_BLOCK] = x[start : start + HALF_BLOCK] * 2
        start += HALF_BLOCK
        left = rows - start
        if left > 1 or (left == 1 and not lone_row_bug):
            out[start:] = x[start:] * 2
    elif rows > start:
        out[start:] = x[start:] * 2
    return out


def _block_inputs(seed: int, device: torch.device, *, T: int, H: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(T, H, generator=g).to(device)}


def _double_reference(x: torch.Tensor) -> torch.Tensor:
    return (x.double() * 2).to(x.dtype)


def _register_block_control(
    stem: str, doubling: Callable[..., torch.Tensor], sizes: dict[str, range], note: str
) -> None:
    """The buggy op (lone_row_bug=True, expected `uninitialized`) and its fixed twin, over the same sizes."""
    for suffix, bug in (("buggy", True), ("fixed", False)):
        register(
            Case(
                name=f"shape_search.{stem}.{suffix}",
                make_inputs=_block_inputs,
                op=functools.partial(doubling, lone_row_bug=bug),
                reference=_double_reference,
                expect="uninitialized" if bug else "pass",
                sizes=sizes,
                note=note if bug else "",
            )
        )


VECTOR = 8  # elements per vectorised load of the aligned path


def _aligned_path_double(x: torch.Tensor, *, lone_row_bug: bool) -> torch.Tensor:
    """2 * x: the blocked path (with or without the lone-row bug) when H is a multiple of VECTOR, else one
    pass over every row."""
    if x.shape[1] % VECTOR == 0:
        return _blocked_double(x, lone_row_bug=lone_row_bug)
    return x * 2


_register_block_control(
    "block_tail",
    _blocked_double,
    {"T": range(1, 257), "H": range(1, 65)},
    "the last row is left unwritten only when T % 64 == 33; the search must shrink to T=33, H=1",
)
_register_block_control(
    "aligned_tail",
    _aligned_path_double,
    {"T": range(1, 129), "H": range(1, 65)},
    "the last row is left unwritten only when T % 64 == 33 and H % 8 == 0; smallest: T=33, H=8",
)


def _routing_inputs(seed: int, device: torch.device, *, T: int, E: int, H: int) -> dict[str, torch.Tensor]:
    """Tokens and router logits; each token goes to the expert of its largest logit (top-1)."""
    g = torch.Generator().manual_seed(seed)
    return {
        "x": torch.randn(T, H, generator=g).to(device),
        "logits": torch.randn(T, E, generator=g).to(device),
    }


def _expert_means(x: torch.Tensor, logits: torch.Tensor, *, zero_empty: bool) -> torch.Tensor:
    """Mean of the tokens routed to each expert, [E, H]; written only through the routed tokens' rows."""
    experts = logits.shape[1]
    ids = logits.argmax(dim=1)
    sums = torch.zeros(experts, x.shape[1], dtype=x.dtype, device=x.device).index_add_(0, ids, x)
    counts = torch.zeros(experts, dtype=x.dtype, device=x.device).index_add_(0, ids, torch.ones_like(x[:, 0]))
    per_token = sums[ids] / counts[ids].unsqueeze(1)
    make = torch.zeros if zero_empty else torch.empty
    out = make(experts, x.shape[1], dtype=x.dtype, device=x.device)
    # Every token of an expert writes the same mean, so duplicate indices agree.
    return out.index_copy_(0, ids, per_token)


def _expert_means_reference(x: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    ids = logits.argmax(dim=1)
    out = torch.zeros(logits.shape[1], x.shape[1], dtype=torch.float64)
    for e in range(logits.shape[1]):
        rows = x.double()[ids == e]
        if rows.shape[0]:
            out[e] = rows.mean(dim=0)
    return out.to(x.dtype)


ROUTING_SIZES = {"T": range(1, 65), "E": range(1, 17), "H": range(1, 33)}

register(
    Case(
        name="shape_search.empty_expert.buggy",
        make_inputs=_routing_inputs,
        op=lambda x, logits: _expert_means(x, logits, zero_empty=False),
        reference=_expert_means_reference,
        expect="uninitialized",
        sizes=ROUTING_SIZES,
        note="an expert that receives no token keeps an unwritten row; smallest: T=1, E=2, H=1",
    )
)
register(
    Case(
        name="shape_search.empty_expert.fixed",
        make_inputs=_routing_inputs,
        op=lambda x, logits: _expert_means(x, logits, zero_empty=True),
        reference=_expert_means_reference,
        sizes=ROUTING_SIZES,
    )
)
