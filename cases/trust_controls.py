"""Negative controls and fixed twins for how verdicts are decided: replay vs eager, hidden state (Python
values and tensors), random ops, poison patterns (float and integer), NaN on the comparison's torch path,
deadlines and capture-time classification.

Every control is named by how it fails and expects that failure's verdict; every fixed twin must pass.
tests/test_trust.py runs them on the CPU backend, and tests/mutants.py requires each detector's mutant to
turn at least one of them into a wrong verdict.
"""

from __future__ import annotations

import random
import time
import weakref

import torch
import torch.nn.functional as F

from graphsafe import Case, is_capturing, register

N = 256


def _vector(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(N, generator=g).to(device)}


# --- a per-tensor scale read on the host at warm-up and baked into the graph --------------------------------
# The shape of a stale fp8 activation scale: B's scale differs from A's by 0.25% per seed step (0.25% on the
# first replay), far inside bf16's 0.02 reference threshold; only replay vs eager, bit-exact, sees it.


def _scaled_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "x": torch.randn(N, generator=g).to(device),
        "scale": torch.tensor([1.0025**seed], dtype=torch.float32).to(device),
    }


def _scaled_reference(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return (x.double() * scale.double()).to(torch.bfloat16)


_host_scale: dict[str, float] = {}


def scale_read_on_host_at_warmup(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Buggy: reads the scale on the host outside capture (warm-up, eager calls) and reuses the last value read
    while capturing, so the graph multiplies by A's scale forever."""
    if not is_capturing():
        _host_scale["value"] = float(scale)
    return (x * _host_scale["value"]).to(torch.bfloat16)


def scale_read_in_graph(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Fixed: the scale stays a device tensor, read by the kernel on every replay."""
    return (x * scale).to(torch.bfloat16)


register(
    Case(
        name="control_stale_scale_baked_at_warmup",
        make_inputs=_scaled_inputs,
        op=scale_read_on_host_at_warmup,
        reference=_scaled_reference,
        expect="stale_replay",
        note="negative control: the replay's scale is off by 0.25-0.75%, inside bf16's 0.02 reference "
        "threshold; replay vs eager (bit-exact) catches it",
    )
)
register(
    Case(
        name="control_stale_scale_no_reference",
        make_inputs=_scaled_inputs,
        op=scale_read_on_host_at_warmup,
        expect="stale_replay",
        note="negative control without a reference: only replay vs eager can see the stale scale",
    )
)
register(
    Case(
        name="fixed_scale_read_in_graph",
        make_inputs=_scaled_inputs,
        op=scale_read_in_graph,
        reference=_scaled_reference,
        note="fixed twin: the scale is a device tensor",
    )
)
register(
    Case(
        name="fixed_scale_read_in_graph_no_reference",
        make_inputs=_scaled_inputs,
        op=scale_read_in_graph,
        note="fixed twin without a reference",
    )
)

# --- hidden state: a module-level cache filled on the first call ever ---------------------------------------


def _weighted_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(N, generator=g).to(device), "w": torch.randn(N, generator=g).to(device)}


def _weighted_reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x.double() * w.double().abs().max()).to(x.dtype)


_first_call_scale: list[torch.Tensor] = []


def scale_cached_on_first_call(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Buggy: a lazily initialised constant derived from the first weights ever seen. Graph and eager agree
    with each other after the first call; only eager B before the op saw A shows the right value."""
    if not _first_call_scale:
        _first_call_scale.append(w.abs().max())
    return x * _first_call_scale[0]


_first_call_scale_b: list[torch.Tensor] = []


def scale_cached_on_first_call_b(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The same bug with a cache of its own: a cache filled by an earlier case in the same process is not
    fresh for a later one, so two cases never share one."""
    if not _first_call_scale_b:
        _first_call_scale_b.append(w.abs().max())
    return x * _first_call_scale_b[0]


def scale_computed_per_call(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * w.abs().max()


register(
    Case(
        name="control_first_call_cache_no_reference",
        make_inputs=_weighted_inputs,
        op=scale_cached_on_first_call,
        expect="stale_replay",
        note="negative control: state leaked from A (a module-level cache filled on the first call); no "
        "reference, graph equals eager, only the hidden-state probe sees it",
    )
)
register(
    Case(
        name="control_first_call_cache_with_reference",
        make_inputs=_weighted_inputs,
        op=scale_cached_on_first_call_b,
        reference=_weighted_reference,
        expect="stale_replay",
        note="negative control: the same leak with a reference; the verdict names the leak, not only the "
        "eager mismatch it causes",
    )
)
register(
    Case(
        name="fixed_scale_computed_per_call",
        make_inputs=_weighted_inputs,
        op=scale_computed_per_call,
        reference=_weighted_reference,
        note="fixed twin: no state outside the call",
    )
)

# --- random ops: graph-safe sampling passes, baked randomness does not --------------------------------------


def _logits(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"logits": torch.randn(16, 64, generator=g).to(device)}


def dropout_training(x: torch.Tensor) -> torch.Tensor:
    return F.dropout(x, p=0.5, training=True)


def multinomial_sample(logits: torch.Tensor) -> torch.Tensor:
    return torch.multinomial(torch.softmax(logits, dim=-1), num_samples=1)


def gumbel_sample(logits: torch.Tensor) -> torch.Tensor:
    """Gumbel-max sampling with rand_like: argmax(logits - log(-log(u)))."""
    u = torch.rand_like(logits).clamp_(min=1e-10, max=1.0 - 1e-7)
    return torch.argmax(logits - torch.log(-torch.log(u)), dim=-1)


for _name, _make, _op in (
    ("fixed_dropout_training", _vector, dropout_training),
    ("fixed_multinomial_sampling", _logits, multinomial_sample),
    ("fixed_gumbel_sampling", _logits, gumbel_sample),
):
    register(
        Case(
            name=_name,
            make_inputs=_make,
            op=_op,
            note="graph-safe random op: a replay draws from the generator's state exactly as an eager call does, "
            "so from the same state both draw the same numbers",
        )
    )


def host_random_baked(x: torch.Tensor) -> torch.Tensor:
    """Buggy: a jitter drawn on the host (Python's random) becomes a constant of the graph."""
    return x * (1.0 + 0.01 * random.random())


_noise_per_buffer: dict[int, tuple[weakref.ref[torch.Tensor], torch.Tensor]] = {}


def noise_drawn_once_per_buffer(x: torch.Tensor) -> torch.Tensor:
    """Buggy: noise drawn on the first call with a buffer and reused for it: a graph's static input is one
    buffer, so every replay adds the same noise while each eager call draws new noise."""
    entry = _noise_per_buffer.get(id(x))
    if entry is None or entry[0]() is not x:
        entry = (weakref.ref(x), torch.rand_like(x))
        _noise_per_buffer[id(x)] = entry
    return x + entry[1]


def noise_drawn_per_call(x: torch.Tensor) -> torch.Tensor:
    return x + torch.rand_like(x)


register(
    Case(
        name="control_host_random_baked_at_capture",
        make_inputs=_vector,
        op=host_random_baked,
        expect="stale_replay",
        note="negative control: a host-drawn random value captured as a constant",
    )
)
register(
    Case(
        name="control_noise_drawn_once_reused",
        make_inputs=_vector,
        op=noise_drawn_once_per_buffer,
        expect="stale_replay",
        note="negative control: noise drawn once per buffer and reused by every replay",
    )
)
register(
    Case(
        name="fixed_noise_drawn_per_call",
        make_inputs=_vector,
        op=noise_drawn_per_call,
        note="fixed twin: rand_like on every call, replayed from the generator",
    )
)


# --- sampling from a generator of the op's own (a sampler's seeded generator, made once at set-up) -----------
# Made at import: a generator created inside the op's first call is not followed (harness/hidden_state.py
# `op_generators` looks before the check starts). CPU only for now: under CUDA graph capture a generator
# other than the default is registered with the graph lazily only in torch releases with pytorch#176753
# (before, the capture raises "philox_cuda_state for an unexpected CUDA generator"), and no GPU run of these
# two cases has been made to say which the suite's torch does.
_sampler_generators = {"cpu": torch.Generator().manual_seed(11)}
_reseeded_generators = {"cpu": torch.Generator().manual_seed(11)}


def noise_from_own_generator(x: torch.Tensor) -> torch.Tensor:
    g = _sampler_generators[x.device.type]
    return x + torch.rand(x.shape, generator=g, device=x.device)


def noise_from_generator_reseeded_per_call(x: torch.Tensor) -> torch.Tensor:
    """Buggy: reseeds its generator on the host on every call, so eager draws the same noise each call; a
    graph keeps only the draw (the reseed is host code), so each replay draws the next noise instead."""
    g = _reseeded_generators[x.device.type]
    g.manual_seed(11)
    return x + torch.rand(x.shape, generator=g, device=x.device)


register(
    Case(
        name="control_own_generator_reseeded_per_call",
        make_inputs=_vector,
        op=noise_from_generator_reseeded_per_call,
        expect="stale_replay",
        requires=("cpu",),
        note="negative control: a seed set on the host per call is a constant the graph never replays",
    )
)
register(
    Case(
        name="fixed_noise_from_own_generator",
        make_inputs=_vector,
        op=noise_from_own_generator,
        requires=("cpu",),
        note="fixed twin: draws from the op's own generator on every call, replayed from it",
    )
)

# --- poison patterns: failures that show under one pattern only ---------------------------------------------


def min_with_unwritten(x: torch.Tensor) -> torch.Tensor:
    """Buggy: reads an unwritten buffer. Under 0xFF (NaN) the minimum is NaN; under 0x7F (3.4e38) it is x,
    so the case fails in the first pattern's rows and passes in the last ones."""
    return torch.minimum(torch.empty_like(x), x)


def min_with_initialised(x: torch.Tensor) -> torch.Tensor:
    return torch.minimum(torch.full_like(x, float("inf")), x)


def fmax_with_unwritten(x: torch.Tensor) -> torch.Tensor:
    """Buggy: fmax ignores NaN, so under the NaN fills (0xFF, torch's fill_uninitialized_memory) the unwritten
    buffer vanishes and the result is x; only a finite poison (0x7F: 3.4e38) survives fmax and shows it."""
    return torch.fmax(torch.empty_like(x), x)


def fmax_with_initialised(x: torch.Tensor) -> torch.Tensor:
    return torch.fmax(torch.full_like(x, float("-inf")), x)


def _int_ids(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"ids": torch.randint(0, 1000, (48,), generator=g, dtype=torch.int32).to(device)}


def _int_tail_reference(ids: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(64, dtype=torch.int32, device=ids.device)
    out[:48] = ids
    return out


def int_output_tail_unwritten(ids: torch.Tensor) -> torch.Tensor:
    """Buggy: an int32 routing buffer whose padding rows are never written. Integers have no NaN: only the
    poison values (-1, 0x7F7F7F7F, INT_MAX) say the tail is unwritten."""
    out = torch.empty(64, dtype=torch.int32, device=ids.device)
    out[:48] = ids
    return out


def int_output_zeroed(ids: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(64, dtype=torch.int32, device=ids.device)
    out[:48] = ids
    return out


_written_once: dict[str, torch.Tensor] = {}


def output_written_once(x: torch.Tensor) -> torch.Tensor:
    """Buggy: the output buffer is filled on the first call and returned as it is afterwards; a graph of it
    writes nothing on replay."""
    if "out" not in _written_once:
        _written_once["out"] = x * 2
    return _written_once["out"]


register(
    Case(
        name="control_uninitialized_under_one_pattern",
        make_inputs=_vector,
        op=min_with_unwritten,
        reference=lambda x: x.clone(),
        expect="uninitialized",
        note="negative control: fails under the 0xFF pattern only on the cpu backend (the case verdict must be "
        "the worst row, not the last)",
    )
)
register(
    Case(
        name="fixed_min_with_initialised",
        make_inputs=_vector,
        op=min_with_initialised,
        reference=lambda x: x.clone(),
        note="fixed twin: the buffer is initialised",
    )
)
register(
    Case(
        name="control_unwritten_hidden_by_fmax",
        make_inputs=_vector,
        op=fmax_with_unwritten,
        reference=lambda x: x.clone(),
        expect="uninitialized",
        note="negative control: a NaN-ignoring op hides an unwritten buffer from NaN poisoning; the 0x7F pattern "
        "must reach empty* results on every backend",
    )
)
register(
    Case(
        name="fixed_fmax_with_initialised",
        make_inputs=_vector,
        op=fmax_with_initialised,
        reference=lambda x: x.clone(),
        note="fixed twin: the buffer is initialised to -inf",
    )
)
register(
    Case(
        name="control_int_output_tail_unwritten",
        make_inputs=_int_ids,
        op=int_output_tail_unwritten,
        reference=_int_tail_reference,
        expect="uninitialized",
        note="negative control: only the poison-value check can tell an unwritten int32 tail from a wrong value",
    )
)
register(
    Case(
        name="fixed_int_output_zeroed",
        make_inputs=_int_ids,
        op=int_output_zeroed,
        reference=_int_tail_reference,
    )
)
register(
    Case(
        name="control_output_written_once",
        make_inputs=_vector,
        op=output_written_once,
        reference=lambda x: x * 2,
        expect="uninitialized",
        note="negative control: the graph writes nothing on replay; output poisoning makes that loud",
    )
)

# --- capture-time classification ------------------------------------------------------------------------------


def _expert_ids(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"ids": torch.randint(0, 8, (64,), generator=g).to(device)}


def counts_with_bincount(ids: torch.Tensor) -> torch.Tensor:
    """Buggy under capture: bincount's length is max(ids)+1, read on the host (on CUDA a copy to pageable
    memory: "Cannot copy between CPU and CUDA tensors during CUDA graph capture unless the CPU tensor is
    pinned")."""
    return torch.bincount(ids, minlength=8)


def counts_with_scatter_add(ids: torch.Tensor) -> torch.Tensor:
    return torch.zeros(8, dtype=torch.int64, device=ids.device).scatter_add_(0, ids, torch.ones_like(ids))


register(
    Case(
        name="control_bincount_under_capture",
        make_inputs=_expert_ids,
        op=counts_with_bincount,
        reference=counts_with_scatter_add,
        expect="capture_sync",
        note="negative control: a host read of a device value under capture is a host sync, whatever the "
        "runtime's message calls it",
    )
)
register(
    Case(
        name="fixed_counts_with_scatter_add",
        make_inputs=_expert_ids,
        op=counts_with_scatter_add,
        reference=lambda ids: torch.bincount(ids.cpu(), minlength=8).to(ids.device),
    )
)

# --- deadline: a case that hangs, on any backend ---------------------------------------------------------------

_SLEEP_S = 6.0
_slept = {"done": False}


def sleeps_past_deadline(x: torch.Tensor) -> torch.Tensor:
    """Sleeps once per process (6 s, twice the case's deadline), then behaves: with the deadline working the
    worker is killed; with it broken the case finishes and passes."""
    if not _slept["done"]:
        time.sleep(_SLEEP_S)
        _slept["done"] = True
    return x * 2


register(
    Case(
        name="control_sleeps_past_deadline",
        make_inputs=_vector,
        op=sleeps_past_deadline,
        reference=lambda x: x * 2,
        expect="timeout",
        deadline=3,
        note="negative control for the runner's deadline on every backend (the GPU-only spin control needs a "
        "kernel); runs isolated only",
    )
)

# --- NaN in outputs the native comparison pass does not take: float64, non-contiguous (harness/scan.py) --------
# The native pass scans contiguous float32/float16/bfloat16 outputs; a float64 output and a transposed view
# go through torch's reductions, which must see the NaN as well.


def _positive_matrix(seed: int, device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"x": (torch.rand(16, 32, generator=g, dtype=torch.float64) + 0.5).to(dtype).to(device)}


def _positive_float64(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    return _positive_matrix(seed, device, torch.float64)


def _positive_float32(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    return _positive_matrix(seed, device, torch.float32)


def log_of_negated(x: torch.Tensor) -> torch.Tensor:
    """Buggy: the log of a negated input, NaN everywhere."""
    return torch.log(-x)


def log_of_negated_transposed(x: torch.Tensor) -> torch.Tensor:
    """Buggy: NaN everywhere, returned as a transposed (non-contiguous) view."""
    return torch.log(-x).t()


def log_transposed(x: torch.Tensor) -> torch.Tensor:
    return torch.log(x).t()


def _log_transposed_reference(x: torch.Tensor) -> torch.Tensor:
    return torch.log(x.double()).to(x.dtype).t()


register(
    Case(
        name="control_nan_in_float64_output",
        make_inputs=_positive_float64,
        op=log_of_negated,
        expect="uninitialized",
        note="negative control: NaN in a float64 output with no reference (the scan's torch path)",
    )
)
register(
    Case(
        name="fixed_float64_log",
        make_inputs=_positive_float64,
        op=torch.log,
        note="fixed twin: finite float64 output",
    )
)
register(
    Case(
        name="control_nan_in_transposed_output",
        make_inputs=_positive_float32,
        op=log_of_negated_transposed,
        reference=_log_transposed_reference,
        expect="uninitialized",
        note="negative control: NaN in a non-contiguous float32 output where the reference is finite (the "
        "scan's torch path)",
    )
)
register(
    Case(
        name="fixed_transposed_log",
        make_inputs=_positive_float32,
        op=log_transposed,
        reference=_log_transposed_reference,
        note="fixed twin: finite transposed output",
    )
)

# --- unwritten integer outputs: the integer poison values (harness/compare.py poison_values) --------------------


def int_min_with_unwritten(ids: torch.Tensor) -> torch.Tensor:
    """Buggy: reads an unwritten int32 buffer. Under 0xFF it holds -1 and the minimum is -1; under 0x7F it
    holds 0x7F7F7F7F and the minimum is `ids`: only -1 counted as poison names the failure."""
    return torch.minimum(torch.empty_like(ids), ids)


def int_min_with_initialised(ids: torch.Tensor) -> torch.Tensor:
    return torch.minimum(torch.full_like(ids, torch.iinfo(ids.dtype).max), ids)


_int_written_once: dict[str, torch.Tensor] = {}


def int_output_written_once(ids: torch.Tensor) -> torch.Tensor:
    """Buggy: an int32 output filled on the first call and returned as it is afterwards: a graph of it writes
    nothing on replay, so the output keeps what output poisoning wrote, the dtype's max."""
    if "out" not in _int_written_once:
        _int_written_once["out"] = ids * 2
    return _int_written_once["out"]


register(
    Case(
        name="control_int_unwritten_under_0xff_only",
        make_inputs=_int_ids,
        op=int_min_with_unwritten,
        reference=lambda ids: ids.clone(),
        expect="uninitialized",
        note="negative control: an unwritten int32 value shows as -1 (0xFF bytes) under one pattern only",
    )
)
register(
    Case(
        name="fixed_int_min_with_initialised",
        make_inputs=_int_ids,
        op=int_min_with_initialised,
        reference=lambda ids: ids.clone(),
        note="fixed twin: the buffer is initialised to the dtype's max",
    )
)
register(
    Case(
        name="control_int_output_written_once",
        make_inputs=_int_ids,
        op=int_output_written_once,
        reference=lambda ids: ids * 2,
        expect="uninitialized",
        note="negative control: an int32 output the graph never writes holds the poison the harness wrote "
        "before the replay (the dtype's max)",
    )
)
register(
    Case(
        name="fixed_int_output_per_call",
        make_inputs=_int_ids,
        op=lambda ids: ids * 2,
        reference=lambda ids: ids * 2,
        note="fixed twin: a fresh int32 output per call",
    )
)

# --- hidden state kept in a tensor: a first-call cache written in place -----------------------------------------
# The state tensor exists before the op's first call (made with the inputs, on their device, as an engine
# allocates its buffers at start-up), so the probe meets it as a tensor whose values the op changes, not as a
# new name (which the probe's container path covers): only restoring tensor values puts it back.

_scale_state: dict[str, torch.Tensor] = {}
_scratch_state: dict[str, torch.Tensor] = {}


def _weighted_inputs_with_state(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    for table in (_scale_state, _scratch_state):
        if device.type not in table:
            table[device.type] = torch.zeros((), device=device)
    return _weighted_inputs(seed, device)


def scale_kept_in_tensor_on_first_call(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Buggy: a scale tensor set from the first weights ever seen (0 means unset) and kept, written in place
    with no host sync, so graph and eager agree with each other after the first call."""
    state = _scale_state[x.device.type]
    state.copy_(torch.where(state == 0, w.abs().max(), state))
    return x * state


def scale_written_to_tensor_per_call(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    state = _scratch_state[x.device.type]
    state.copy_(w.abs().max())
    return x * state


register(
    Case(
        name="control_first_call_cache_in_tensor",
        make_inputs=_weighted_inputs_with_state,
        op=scale_kept_in_tensor_on_first_call,
        expect="stale_replay",
        note="negative control: state leaked from A through a module-level tensor updated in place; no "
        "reference, graph equals eager, only the hidden-state probe sees it",
    )
)
register(
    Case(
        name="fixed_scale_written_to_tensor_per_call",
        make_inputs=_weighted_inputs_with_state,
        op=scale_written_to_tensor_per_call,
        note="fixed twin: the same tensor overwritten on every call carries nothing from A",
    )
)
