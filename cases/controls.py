"""Torch-level negative controls and their fixed twins: each failure family of the seeds, with no custom kernel.

Every control is named by how it fails and expects that failure's verdict; every fixed twin must pass. The
tests in tests/test_controls.py prove that each detector bites and that correct ops are not flagged.
"""

from __future__ import annotations

import weakref

import torch

from graphsafe import Case, register

TOKENS, EXPERTS, TOP_K, HIDDEN = 16, 8, 2, 64


def _routing_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(TOKENS, HIDDEN, generator=g)
    expert_ids = torch.randint(0, EXPERTS, (TOKENS, TOP_K), generator=g, dtype=torch.int64)
    weights = torch.rand(TOKENS, TOP_K, generator=g)
    return {"hidden": hidden.to(device), "expert_ids": expert_ids.to(device), "weights": weights.to(device)}


def _tokens_per_expert_reference(
    hidden: torch.Tensor, expert_ids: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """out[e] = sum over (token, slot) routed to e of weight * hidden[token], in float64 (independent oracle)."""
    out = torch.zeros(EXPERTS, HIDDEN, dtype=torch.float64)
    for t in range(TOKENS):
        for k in range(TOP_K):
            out[int(expert_ids[t, k])] += float(weights[t, k]) * hidden[t].double().cpu()
    return out.to(hidden.dtype).to(hidden.device)


# --- host sync in routing metadata (aiter#5831: `.item()` makes capture fail) -----------------------------


def routing_with_item(hidden: torch.Tensor, expert_ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Buggy: sizes its work from a host-read maximum, like group_sizes_to_expt_tensors' `.sum().item()`."""
    used = int(expert_ids.max().item()) + 1
    out = torch.zeros(EXPERTS, HIDDEN, dtype=hidden.dtype, device=hidden.device)
    contrib = (weights.unsqueeze(-1) * hidden.unsqueeze(1)).reshape(-1, HIDDEN)
    return out.index_add(0, expert_ids.reshape(-1).clamp(max=used - 1), contrib)


def routing_scatter_add(
    hidden: torch.Tensor, expert_ids: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """Fixed: static shapes only; scatter-add over a fixed number of experts."""
    out = torch.zeros(EXPERTS, HIDDEN, dtype=hidden.dtype, device=hidden.device)
    contrib = (weights.unsqueeze(-1) * hidden.unsqueeze(1)).reshape(-1, HIDDEN)
    return out.index_add(0, expert_ids.reshape(-1), contrib)


register(
    Case(
        name="control_item_in_routing",
        make_inputs=_routing_inputs,
        op=routing_with_item,
        reference=_tokens_per_expert_reference,
        expect="capture_sync",
        note="negative control: .item() under capture is a host sync (aiter#5831)",
    )
)
register(
    Case(
        name="fixed_scatter_add_routing",
        make_inputs=_routing_inputs,
        op=routing_scatter_add,
        reference=_tokens_per_expert_reference,
        tolerance=1e-5,
        note="fixed twin; float32 index_add vs a float64 loop: summation order differs, 1e-5 covers it",
    )
)

# --- torch.empty output with an unwritten tail (aiter#5831: stale NaN rows) ---------------------------------

ROWS, COLS, WRITTEN = 32, 16, 24


def _tail_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(WRITTEN, COLS, generator=g).to(device)}


def _tail_reference(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(ROWS, COLS, dtype=torch.float64, device=x.device)
    out[:WRITTEN] = x.double() * 2
    return out.to(x.dtype)


def empty_output_tail_unwritten(x: torch.Tensor) -> torch.Tensor:
    """Buggy: rows past the routed ones are never written (a foreign expert under EP, -1 padding)."""
    out = torch.empty(ROWS, COLS, dtype=x.dtype, device=x.device)
    out[:WRITTEN] = x * 2
    return out


def zeroed_output(x: torch.Tensor) -> torch.Tensor:
    """Fixed: zero-initialised where rows can be left unwritten."""
    out = torch.zeros(ROWS, COLS, dtype=x.dtype, device=x.device)
    out[:WRITTEN] = x * 2
    return out


register(
    Case(
        name="control_empty_output_tail",
        make_inputs=_tail_inputs,
        op=empty_output_tail_unwritten,
        reference=_tail_reference,
        expect="uninitialized",
        note="negative control: torch.empty tail holds poison (aiter#5831: 100% NaN rows)",
    )
)
register(
    Case(name="fixed_zeroed_output", make_inputs=_tail_inputs, op=zeroed_output, reference=_tail_reference)
)

# --- a value cached in Python on the first call --------------------------------------------------------------


def _scale_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(64, generator=g).to(device), "w": torch.randn(64, generator=g).to(device)}


def _scale_reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x.double() * (w.double().abs().max())).to(x.dtype)


# Keyed by object identity (tensors compare element-wise, so they cannot be dict keys by value).
_scale_cache: dict[int, tuple[weakref.ref[torch.Tensor], torch.Tensor]] = {}


def cached_weight_scale(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Buggy: caches a weight-derived scale per tensor object on the first call, as if weights never changed.

    Eager on a fresh clone computes the right scale; the graph's static `w` keeps the scale of input A.
    """
    entry = _scale_cache.get(id(w))
    if entry is None or entry[0]() is not w:
        entry = (weakref.ref(w), w.abs().max())
        _scale_cache[id(w)] = entry
    return x * entry[1]


def recomputed_weight_scale(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Fixed: the scale is computed inside the graph every time."""
    return x * w.abs().max()


register(
    Case(
        name="control_python_cached_value",
        make_inputs=_scale_inputs,
        op=cached_weight_scale,
        reference=_scale_reference,
        expect="stale_replay",
        note="negative control: a Python-side cache is invisible to capture and frozen at input A",
    )
)
register(
    Case(
        name="fixed_recomputed_value",
        make_inputs=_scale_inputs,
        op=recomputed_weight_scale,
        reference=_scale_reference,
    )
)

# --- an op that returns NaN ---------------------------------------------------------------------------------


def _positive_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"x": (torch.rand(128, generator=g) + 0.5).to(device)}


def nan_producing_log(x: torch.Tensor) -> torch.Tensor:
    """Buggy: log of a negated input is NaN everywhere; NaN must fail, never pass as 'equal to eager'."""
    return torch.log(-x)


def correct_log(x: torch.Tensor) -> torch.Tensor:
    return torch.log(x)


register(
    Case(
        name="control_returns_nan",
        make_inputs=_positive_inputs,
        op=nan_producing_log,
        expect="uninitialized",
        note="negative control with no reference: eager itself is NaN, which is never a pass",
    )
)
register(
    Case(
        name="control_returns_nan_with_reference",
        make_inputs=_positive_inputs,
        op=nan_producing_log,
        reference=lambda x: torch.log(x.double()).to(x.dtype),
        expect="uninitialized",
        note="negative control: NaN where the reference is finite",
    )
)
register(
    Case(
        name="fixed_log",
        make_inputs=_positive_inputs,
        op=correct_log,
        reference=lambda x: torch.log(x.double()).to(x.dtype),
    )
)

# --- an op that modifies its input --------------------------------------------------------------------------


def scales_input_in_place(x: torch.Tensor) -> torch.Tensor:
    """Buggy: returns the right values but writes them into its input."""
    return x.mul_(2.0)


def scales_into_new_tensor(x: torch.Tensor) -> torch.Tensor:
    return x * 2.0


register(
    Case(
        name="control_modifies_input",
        make_inputs=_positive_inputs,
        op=scales_input_in_place,
        reference=lambda x: x * 2.0,
        expect="eager_mismatch",
        note="negative control: an undeclared write to an input (KernelBench's input-zeroing kernel)",
    )
)
register(
    Case(
        name="fixed_no_input_write",
        make_inputs=_positive_inputs,
        op=scales_into_new_tensor,
        reference=lambda x: x * 2.0,
    )
)

# --- bf16 arithmetic within threshold -----------------------------------------------------------------------


def _bf16_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(64, 256, generator=g).to(torch.bfloat16)
    b = torch.randn(256, 32, generator=g).to(torch.bfloat16)
    return {"a": a.to(device), "b": b.to(device)}


def bf16_gated_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """silu(a @ b) * a[:, :32] in bf16: three roundings to bf16 along the way."""
    return torch.nn.functional.silu(a @ b) * a[:, :32]


def gated_matmul_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The same math in float64 with one rounding at the end."""
    a64, b64 = a.double(), b.double()
    return (torch.nn.functional.silu(a64 @ b64) * a64[:, :32]).to(torch.bfloat16)


register(
    Case(
        name="fixed_bf16_matmul",
        make_inputs=_bf16_inputs,
        op=bf16_gated_matmul,
        reference=gated_matmul_reference,
        note="correct bf16 arithmetic must not be flagged: its intermediate roundings give a relative error "
        "up to about 0.007 (CPU backend, seeds 1-3, measured), inside the 0.02 default (FreeToken issue #350's threshold)",
    )
)


# --- an output buffer cached per shape and shared by every graph of that shape -------------------------------

_output_cache: dict[tuple[int, ...], torch.Tensor] = {}


def cached_output_buffer(x: torch.Tensor) -> torch.Tensor:
    """Buggy: writes into a module-level buffer reused for every call of the same shape and returns it.

    One graph replayed and read at once is right; several live graphs of one size all return the same
    memory, so every replay overwrites the outputs of the graphs replayed before it.
    """
    key = tuple(x.shape)
    if key not in _output_cache:
        _output_cache[key] = torch.empty_like(x)
    return torch.mul(x, 2.0, out=_output_cache[key])


register(
    Case(
        name="control_output_shared_across_live_graphs",
        make_inputs=_positive_inputs,
        op=cached_output_buffer,
        reference=lambda x: x * 2.0,
        expect="stale_replay",
        live_graphs=4,
        note="negative control for the live-graph stress: only graphs alive at once expose the shared output",
    )
)
register(
    Case(
        name="fixed_output_per_call",
        make_inputs=_positive_inputs,
        op=scales_into_new_tensor,
        reference=lambda x: x * 2.0,
        live_graphs=4,
        note="fixed twin: a fresh output per call",
    )
)
