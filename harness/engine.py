"""Engine-style protocol loops: capture-size buckets with padding, and stateful modules stepped in a decode loop.

An inference engine does not capture one op at one shape. It captures a step at several batch sizes (vLLM:
1, 2, 4, ... 512 tokens) into one memory pool and replays the smallest graph that fits, with fewer valid rows
than the graph was captured for; and it steps a module whose buffers (KV cache, position) carry state from
one replay to the next. `graphsafe.protocol.check` sends a case here when it declares `buckets` or
`make_module`; the rows and verdicts are the protocol's (`_verdict_row`), so the reports read them alike.

Buckets, per pattern: capture every bucket (largest first, one shared pool), then for each B_i and bucket b
copy n <= b valid rows of B_i (made with make_inputs(seed, device, rows=n)) into b's buffers, poison the
padding rows of float inputs with the pattern's bytes (padding is memory nobody wrote for this step, as in an
engine's torch.empty activations), run `prepare`, replay, and compare the first n rows of each output
that has b rows (other outputs whole):
  * against eager on the same padded buffers, bit-exact                  -> stale_replay when they differ;
  * eager on the padded buffers against eager on exactly n rows (the per-dtype threshold: a GEMM may pick
    another kernel for another row count)                               -> uninitialized when valid rows
    read the padding rows;
  * the reference on n rows, when the case has one, as the protocol does.
n takes the values prev+1, the middle and b in turn over the replays (prev: the next smaller bucket), so
the most padding comes first.

Stateful modules, per pattern: make_module(device) twice (graph and eager copies, which must start equal),
capture one step op(module, **inputs A), put the module's state back in place (warm-up and capture ran
the step), then for each B_i run `steps` steps from the initial state: inputs for step t from seed
`step_seed(seed_b, t)`, replay vs eager step on the eager copy, then every buffer and parameter of the two
modules compared bit-exact: a state that diverges is stale_replay even before an output shows it.

Neither loop runs the hidden-state probe (state is the point of a stateful module; a bucketed op is compared
with itself at n rows) nor the rebuild and live-graph stress.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from graphsafe import verdicts as V
from graphsafe.backends import GraphBackend
from graphsafe.backends.base import flatten_tensors
from graphsafe.case import Case
from graphsafe.compare import compare
from graphsafe.errors import CaseError, OutputTypeError
from graphsafe.poison import poison_outputs
from graphsafe.records import Row
from graphsafe.tracebacks import with_user_frame
from graphsafe.verdict_rules import (
    DEVICE_FAULTS,
    _call_op,
    _capture_failure_row,
    _clone_all,
    _replay_error_row,
    _row_factory,
    _threshold,
    _validate_pairs,
    _verdict_row,
    _worst,
    prepare_inputs,
    raised,
    seeds,
)

DEFAULT_STEPS = 4
_STEP_SEED_STRIDE = 1_000_003  # a prime: the seeds of one sequence's steps never meet another B_i's


def step_seed(seed_b: int, step: int) -> int:
    """The seed of decode step `step` of the sequence that starts from B's seed (step 0 is B itself)."""
    return seed_b + _STEP_SEED_STRIDE * step


def check_pattern(case: Case, be: GraphBackend, pattern: int, replays: int, base_seed: int) -> list[Row]:
    if case.buckets:
        return _bucket_rows(case, be, pattern, replays, base_seed)
    return _stateful_rows(case, be, pattern, replays, base_seed)


def _eager(case: Case, *args: Any, **inputs: torch.Tensor) -> list[torch.Tensor]:
    try:
        with torch.no_grad():
            return list(flatten_tensors(_call_op(case, inputs, *args)))
    except OutputTypeError as exc:
        raise CaseError(case.name, "op", str(exc)) from exc


def _replay_once(
    be: GraphBackend, graph: Any, row: Callable[..., Row], index: int, seed: int, where: str
) -> tuple[tuple[torch.Tensor, ...], list[torch.Tensor]] | Row:
    """Replay the graph once: (the generator state it started from, which each eager call then starts from
    too; copies of its outputs), or the replay_error row when the replay raised."""
    rng = be.rng_state()
    be.synchronize()
    try:
        graph.replay()
        be.synchronize()
    except DEVICE_FAULTS:
        raise
    except Exception as exc:
        return _replay_error_row(exc, row, index, seed, where)
    return rng, [o.clone() for o in graph.outputs]


# ---------------------------------------------------------------------------------------------- buckets


def valid_rows(buckets: tuple[int, ...], bucket: int, replay_index: int) -> int:
    """Valid rows replayed in `bucket` at replay `replay_index`: prev+1, the middle, the bucket, in turn."""
    previous = max((b for b in buckets if b < bucket), default=0)
    choices = sorted({previous + 1, (previous + 1 + bucket) // 2, bucket})
    return choices[replay_index % len(choices)]


def _row_inputs(case: Case, be: GraphBackend, seed: int, b: int) -> set[str]:
    """Inputs whose first dimension is `rows` (make_inputs at rows=b and rows=b+1 tell them apart); the
    others must keep their shape whatever the rows."""
    at_b, at_more = case.inputs(seed, be.device, rows=b), case.inputs(seed, be.device, rows=b + 1)
    names = set()
    for name, t in at_b.items():
        u = at_more[name]
        if t.shape == u.shape:
            continue
        if (
            t.dim() >= 1
            and u.dim() == t.dim()
            and t.shape[0] == b
            and u.shape[0] == b + 1
            and t.shape[1:] == u.shape[1:]
        ):
            names.add(name)
            continue
        raise CaseError(
            case.name,
            "make_inputs",
            f"input {name!r} is {tuple(t.shape)} at rows={b} but {tuple(u.shape)} at rows={b + 1}: a bucketed "
            "input either keeps its shape or has `rows` as its first dimension",
        )
    return names


def _bucket_rows(case: Case, be: GraphBackend, pattern: int, replays: int, base_seed: int) -> list[Row]:
    seed_a, seeds_b = seeds(base_seed, replays)
    row = _row_factory(case, be, pattern, seed_a)
    graphs: dict[int, tuple[Any, dict[str, torch.Tensor]]] = {}
    rows: list[Row] = []
    try:
        with be.shared_pool():
            for b in sorted(case.buckets, reverse=True):  # largest first, as vLLM captures into one pool
                inputs_a = case.inputs(seed_a, be.device, rows=b)
                static = _clone_all(inputs_a)
                prepare_inputs(case, static)
                try:
                    graph = be.capture(functools.partial(_call_op, case, static))
                except DEVICE_FAULTS:
                    raise
                except Exception as exc:
                    failed = _capture_failure_row(case, exc, row, seed_a)
                    failed.detail = f"bucket {b}: {failed.detail}"
                    return [failed]
                graphs[b] = (graph, static)
        row_names = {b: _row_inputs(case, be, seed_a, b) for b in case.buckets}
        for i, seed_b in enumerate(seeds_b):
            for b in case.buckets:
                r = _bucket_replay(case, be, pattern, row, graphs[b], row_names[b], b, i, seed_a, seed_b)
                rows.append(r)
                if r.row_verdict != V.PASS:
                    return rows
        return rows
    finally:
        for graph, _ in graphs.values():
            graph.release()


def _bucket_replay(
    case: Case,
    be: GraphBackend,
    pattern: int,
    row: Callable[..., Row],
    captured: tuple[Any, dict[str, torch.Tensor]],
    row_names: set[str],
    b: int,
    replay_index: int,
    seed_a: int,
    seed_b: int,
) -> Row:
    graph, static = captured
    n = valid_rows(case.buckets, b, replay_index)
    where = f"bucket {b}, {n} valid rows: "
    exact = case.inputs(seed_b, be.device, rows=n)
    _validate_pairs(case, be, seed_a, case.inputs(seed_a, be.device, rows=n), [(seed_b, exact)])

    poison_outputs(graph.outputs)
    with torch.no_grad():
        for name, t in exact.items():
            if name in row_names:
                static[name][:n].copy_(t)
                padding = static[name][n:]
                # Integer rows (token ids, slots) keep what they held: poison there would be an out-of-range
                # index, which an engine's padding never is. Float padding gets the pattern's bytes.
                if padding.numel() and padding.is_floating_point() and padding.is_contiguous():
                    padding.view(torch.uint8).fill_(pattern)
            else:
                static[name].copy_(t)
    prepare_inputs(case, static)
    replayed = _replay_once(be, graph, row, replay_index, seed_b, where)
    if isinstance(replayed, Row):
        return replayed
    rng, graph_out = replayed

    padded = _clone_all(static)
    exact_copy = _clone_all(exact)
    try:
        be.set_rng_state(rng)
        prepare_inputs(case, padded)
        eager_padded = _eager(case, **padded)
        be.set_rng_state(rng)
        prepare_inputs(case, exact_copy)
        eager_exact = _eager(case, **exact_copy)
        be.synchronize()
    except DEVICE_FAULTS:
        raise
    except CaseError:
        raise
    except Exception as exc:
        return raised(
            row(
                V.EAGER_MISMATCH,
                replay_index,
                seed_b,
                detail=with_user_frame(f"{where}eager raised {type(exc).__name__}: {exc}", exc),
            ),
            exc,
        )
    reference = None
    if case.reference is not None:
        try:
            with torch.no_grad():
                reference = list(flatten_tensors(case.reference(**_clone_all(exact))))
        except DEVICE_FAULTS:
            raise
        except Exception as exc:
            raise CaseError(case.name, "reference", f"raised {type(exc).__name__}: {exc}") from exc
    if not (len(graph_out) == len(eager_padded) == len(eager_exact)):
        return row(
            V.EAGER_MISMATCH, replay_index, seed_b, detail=f"{where}outputs differ in count between sizes"
        )

    def valid(outs: list[torch.Tensor]) -> list[torch.Tensor]:
        cut = []
        for o, e in zip(outs, eager_exact, strict=True):
            is_rows = o.dim() >= 1 and o.shape[0] == b and e.dim() == o.dim() and e.shape[0] == n
            cut.append(o[:n] if is_rows and b != n else o)
        return cut

    graph_valid, padded_valid = valid(graph_out), valid(eager_padded)
    for g, e in zip(graph_valid, eager_exact, strict=True):
        if g.shape != e.shape:
            raise CaseError(
                case.name,
                "op",
                f"an output is {tuple(g.shape)} at bucket {b} with {n} valid rows but {tuple(e.shape)} at {n} rows: "
                "outputs either keep their shape or have the rows as their first dimension",
            )
    r = _verdict_row(case, row, replay_index, seed_b, graph_valid, padded_valid, reference, None)
    if r.row_verdict == V.PASS:
        padding_read = _worst(
            [compare(p, e, _threshold(case, e)) for p, e in zip(padded_valid, eager_exact, strict=True)]
        )
        if not padding_read.ok:
            r.row_verdict = V.UNINITIALIZED
            r.detail = (
                "the valid rows depend on the padding rows (eager on the padded buffers vs eager on exactly "
                f"the valid rows): error {padding_read.error:.6g}, {padding_read.nonfinite} NaN/Inf, "
                f"{padding_read.mismatches} mismatching elements"
            )
    elif r.row_verdict == V.UNINITIALIZED and r.detail.startswith("eager output"):
        r.detail = "eager on the padded buffers (padding rows poisoned): " + r.detail
    if r.row_verdict != V.PASS:
        r.detail = where + r.detail
    return r


# ---------------------------------------------------------------------------------------------- stateful


def _state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer, by name (the tensors themselves: writing them writes the module)."""
    return {**dict(module.named_parameters()), **dict(module.named_buffers())}


def _reset(module: torch.nn.Module, initial: dict[str, torch.Tensor]) -> None:
    """Write the initial state into the module's tensors in place (a graph holds their addresses)."""
    with torch.no_grad():
        for name, t in _state(module).items():
            t.copy_(initial[name])


def _stateful_rows(case: Case, be: GraphBackend, pattern: int, replays: int, base_seed: int) -> list[Row]:
    assert case.make_module is not None
    steps = case.steps or DEFAULT_STEPS
    seed_a, seeds_b = seeds(base_seed, replays)
    row = _row_factory(case, be, pattern, seed_a)
    graph_module, eager_module = case.make_module(be.device), case.make_module(be.device)
    for module in (graph_module, eager_module):
        if not isinstance(module, torch.nn.Module):
            raise CaseError(
                case.name, "make_module", f"must return a torch.nn.Module, got {type(module).__name__}"
            )
    initial = {name: t.detach().clone() for name, t in _state(graph_module).items()}
    other = _state(eager_module)
    if set(initial) != set(other) or any(
        not torch.equal(t.cpu(), other[name].detach().cpu()) for name, t in initial.items()
    ):
        raise CaseError(
            case.name, "make_module", "two calls built modules with different state; seed its initialisation"
        )

    inputs_a = case.inputs(seed_a, be.device)
    for seed_b in seeds_b:
        _validate_pairs(case, be, seed_a, inputs_a, [(seed_b, case.inputs(seed_b, be.device))])
    static = _clone_all(inputs_a)
    prepare_inputs(case, static)
    try:
        graph = be.capture(lambda: _call_op(case, static, graph_module))
    except DEVICE_FAULTS:
        raise
    except Exception as exc:
        return [_capture_failure_row(case, exc, row, seed_a)]
    rows: list[Row] = []
    try:
        for i, seed_b in enumerate(seeds_b):
            _reset(graph_module, initial)  # warm-up and capture ran the step; each sequence starts afresh
            _reset(eager_module, initial)
            for t in range(steps):
                r = _stateful_step(
                    case, be, row, graph, static, (graph_module, eager_module), i, t, steps, seed_b
                )
                rows.append(r)
                if r.row_verdict != V.PASS:
                    return rows
        return rows
    finally:
        graph.release()


def _stateful_step(
    case: Case,
    be: GraphBackend,
    row: Callable[..., Row],
    graph: Any,
    static: dict[str, torch.Tensor],
    modules: tuple[torch.nn.Module, torch.nn.Module],
    sequence: int,
    step: int,
    steps: int,
    seed_b: int,
) -> Row:
    graph_module, eager_module = modules
    seed = step_seed(seed_b, step)
    index = sequence * steps + step
    where = f"sequence {sequence}, step {step}: "
    inputs = case.inputs(seed, be.device)
    poison_outputs(graph.outputs)
    with torch.no_grad():
        for name, t in inputs.items():
            static[name].copy_(t)
    prepare_inputs(case, static)
    replayed = _replay_once(be, graph, row, index, seed, where)
    if isinstance(replayed, Row):
        return replayed
    rng, graph_out = replayed
    eager_inputs = _clone_all(inputs)
    try:
        be.set_rng_state(rng)
        prepare_inputs(case, eager_inputs)
        eager_out = _eager(case, eager_module, **eager_inputs)
        be.synchronize()
    except DEVICE_FAULTS:
        raise
    except CaseError:
        raise
    except Exception as exc:
        return raised(
            row(
                V.EAGER_MISMATCH,
                index,
                seed,
                detail=with_user_frame(f"{where}eager raised {type(exc).__name__}: {exc}", exc),
            ),
            exc,
        )
    r = _verdict_row(case, row, index, seed, graph_out, eager_out, None, None)
    if r.row_verdict == V.PASS:
        graph_state, eager_state = _state(graph_module), _state(eager_module)
        for name, e in eager_state.items():
            g = graph_state[name]
            same = g.shape == e.shape and compare(g.detach(), e.detach(), 0.0).ok
            if not same:
                r.row_verdict = V.STALE_REPLAY
                r.detail = (
                    f"module state {name!r} after the replayed step differs from the eager step's (a buffer "
                    "reassigned instead of written in place leaves the graph on the old one)"
                )
                break
    if r.row_verdict != V.PASS:
        r.detail = where + r.detail
    return r


__all__ = ["DEFAULT_STEPS", "check_pattern", "step_seed", "valid_rows"]
