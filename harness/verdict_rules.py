"""The rules that make one row of results: its verdict (first failure wins, in the order harness/protocol.py's
note gives), thresholds, the capture-failure classification, the row record, and the checks on a case's inputs.

Shared by the protocol (harness/protocol.py) and its engine-style loops (harness/engine.py), which import them
from here so that neither imports the other's module for them.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from graphsafe import findings as F
from graphsafe import verdicts as V
from graphsafe.backends import GraphBackend
from graphsafe.case import Case
from graphsafe.compare import Comparison, compare_and_differ, default_threshold, poison_values
from graphsafe.errors import (
    REFUSAL_ERRORS,
    CaptureError,
    CaptureSyncError,
    CaseError,
    FallbackEager,
    OutputTypeError,
    exception_chain,
)
from graphsafe.poison import op_call_poisoning, unfilled
from graphsafe.records import Row
from graphsafe.scan import bytes_differ_many, count_unwritten
from graphsafe.tracebacks import user_frame, with_user_frame

# torch raises AcceleratorError (torch >= 2.8) for asynchronous device errors such as an illegal address.
DEVICE_FAULTS: tuple[type[BaseException], ...] = tuple(
    t for t in (getattr(torch, "AcceleratorError", None),) if isinstance(t, type)
)

LEAK_DETAIL = "hidden state: "
EAGER_VS_REFERENCE = "eager vs reference: "


def seeds(base_seed: int, replays: int) -> tuple[int, range]:
    """Seed of A and of each B_i; recorded in every row so `repro --seed` reruns the same inputs."""
    return base_seed, range(base_seed + 1, base_seed + 1 + replays)


def _verdict_row(
    case: Case,
    row: Callable[..., Row],
    replay_index: int,
    seed_b: int,
    graph_out: list[torch.Tensor],
    eager_out: list[torch.Tensor],
    reference: list[torch.Tensor] | None,
    fresh: list[torch.Tensor] | None = None,
    inputs_seen: Sequence[tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]] = (),
    result: Any = None,
) -> Row:
    """Row verdict, first failure wins (the order is in the module note). `inputs_seen`: (inputs the op
    or the replay read, the inputs they were copied from) pairs: a passing row whose op changed an input that
    the case does not declare in Case.mutates is eager_mismatch. `result`: the op's return value as it gave
    it, which names the outputs in a failing row's finding (a namedtuple's fields)."""
    counts = {len(graph_out), len(eager_out)} | ({len(reference)} if reference is not None else set())
    if fresh is not None:
        counts.add(len(fresh))
    if len(counts) != 1:
        return row(
            V.EAGER_MISMATCH, replay_index, seed_b, detail="op, graph and reference return different counts"
        )
    thresholds = [_threshold(case, t) for t in eager_out]
    replay_thresholds = [_replay_threshold(case, t) for t in eager_out]
    # Every comparison of this row in one batch (one host synchronization on a GPU): graph vs eager, then
    # eager and graph vs the reference, then eager vs the fresh probe.
    groups = [list(zip(graph_out, eager_out, replay_thresholds, strict=True))]
    if reference is not None:
        groups.append(list(zip(eager_out, reference, thresholds, strict=True)))
        groups.append(list(zip(graph_out, reference, thresholds, strict=True)))
    if fresh is not None:
        groups.append(list(zip(eager_out, fresh, replay_thresholds, strict=True)))
    names, byte_pairs = _undeclared_writes(case, inputs_seen)
    flat, differ = compare_and_differ([pair for group in groups for pair in group], byte_pairs)
    modified = sorted({name for name, d in zip(names, differ, strict=True) if d})
    done = [_worst(flat[i * len(eager_out) : (i + 1) * len(eager_out)]) for i in range(len(groups))]
    vs_eager = done[0]
    if reference is not None:
        eager_cmp, graph_cmp = done[1], done[2]
    else:
        eager_cmp = _worst([_scan_unwritten(e, th) for e, th in zip(eager_out, thresholds, strict=True)])
        graph_cmp = vs_eager
    leaked = done[-1] if fresh is not None else None

    # Which check decided a failing row, and which group of comparisons shows it (None: no comparison).
    detector, decided = "", None
    if eager_cmp.uninitialized:
        verdict, detail = V.UNINITIALIZED, "eager output: " + _describe(eager_cmp)
        detector, decided = F.EAGER_OUTPUT, 1 if reference is not None else None
    elif leaked is not None and not leaked.ok and vs_eager.ok:
        # (When graph and eager differ too, the probe cannot tell leaked state from a value drawn anew on
        # every call, such as a host random number; the graph-vs-eager rule below names that case.)
        verdict = V.STALE_REPLAY
        detail = LEAK_DETAIL + (
            "eager on B after the op ran on A differs from eager on B before the op saw A, "
            "so state leaked from A into later calls: " + _describe(leaked)
        )
        detector, decided = F.HIDDEN_STATE, len(groups) - 1
    elif not eager_cmp.ok:
        verdict, detail = V.EAGER_MISMATCH, EAGER_VS_REFERENCE + _describe(eager_cmp)
        detector, decided = F.EAGER_VS_REFERENCE, 1
    elif graph_cmp.uninitialized or vs_eager.uninitialized:
        verdict = V.UNINITIALIZED
        detail = "graph output: " + _describe(graph_cmp if graph_cmp.uninitialized else vs_eager)
        detector, decided = F.GRAPH_OUTPUT, 2 if reference is not None and graph_cmp.uninitialized else 0
    elif reference is not None and not graph_cmp.ok:
        verdict, detail = V.STALE_REPLAY, "graph replay vs reference: " + _describe(graph_cmp)
        detector, decided = F.GRAPH_VS_REFERENCE, 2
    elif not vs_eager.ok:
        verdict, detail = V.STALE_REPLAY, "graph replay vs eager: " + _describe(vs_eager)
        detector, decided = F.GRAPH_VS_EAGER, 0
    elif modified:
        verdict, detail = V.EAGER_MISMATCH, f"op modified input(s) {modified} not declared in Case.mutates"
        detector = F.INPUT_MODIFIED
    else:
        verdict, detail = V.PASS, ""
    made = row(
        verdict,
        replay_index,
        seed_b,
        eager_error=eager_cmp.error if reference is not None else None,
        graph_error=graph_cmp.error,
        graph_vs_eager=vs_eager.error,
        threshold=graph_cmp.threshold,
        nonfinite=eager_cmp.nonfinite + graph_cmp.nonfinite,
        poisoned=eager_cmp.poisoned + graph_cmp.poisoned,
        detail=detail,
    )
    if verdict != V.PASS:  # the finding is measured for failing rows only: a passing check pays nothing
        n = len(eager_out)
        pairs = groups[decided] if decided is not None else []
        compared = flat[decided * n : (decided + 1) * n] if decided is not None else []
        finding = _finding(
            detector, pairs, compared, graph_out, eager_out, reference, fresh, result, modified
        )
        finding.apply(made)
    return made


def _finding(
    detector: str,
    pairs: Sequence[tuple[torch.Tensor, torch.Tensor, float]],
    comparisons: Sequence[Comparison],
    graph_out: Sequence[torch.Tensor],
    eager_out: Sequence[torch.Tensor],
    reference: Sequence[torch.Tensor] | None,
    fresh: Sequence[torch.Tensor] | None,
    result: Any,
    modified: Sequence[str],
) -> F.Finding:
    """The finding of a failing row (graphsafe.findings): the output the deciding check found worst, measured."""
    count = len(eager_out)
    labels = F.output_labels(result, count)
    if detector == F.INPUT_MODIFIED:  # the detail names the inputs
        return F.Finding(detector)
    if not comparisons:  # eager's own output holds NaN/poison and there is no reference to compare with
        scans = [_scan_unwritten(e, 0.0) for e in eager_out]
        i = next((k for k, c in enumerate(scans) if c.uninitialized), 0)
        values: list[tuple[str, torch.Tensor | None]] = [("eager", eager_out[i]), ("graph", graph_out[i])]
        return F.measure_unwritten(detector, "eager output", labels[i], count, eager_out[i], values)
    i = _worst_index(list(comparisons))
    actual, expected, _ = pairs[i]
    ref = reference[i] if reference is not None else None
    if detector == F.HIDDEN_STATE:
        assert fresh is not None
        values = [("eager on B after A", eager_out[i]), ("eager on B before A", fresh[i]), ("reference", ref)]
    else:
        values = [("graph", graph_out[i]), ("eager", eager_out[i]), ("reference", ref)]
    if detector in (F.EAGER_OUTPUT, F.GRAPH_OUTPUT):
        where = "eager output" if detector == F.EAGER_OUTPUT else "graph output"
        return F.measure_unwritten(detector, where, labels[i], count, actual, values)
    return F.measure(detector, labels[i], count, actual, expected, comparisons[i], values)


def _capture_failure_row(case: Case, exc: Exception, row: Callable[..., Row], seed: int) -> Row:
    """The case-level row for an exception out of `backend.capture` (warm-up included).

    An output the harness cannot compare is a case-definition error (CaseError on `op`), not a verdict."""
    for cause in exception_chain(exc, contexts=False):
        if isinstance(cause, OutputTypeError):
            raise CaseError(case.name, "op", str(cause)) from exc
    # Each detail ends with the op's line that raised ("at my_ops.py:42 in my_op", harness/tracebacks.py).
    if isinstance(exc, CaptureSyncError):
        made = row(V.CAPTURE_SYNC, -1, seed, detail=with_user_frame(str(exc), exc))
        return raised(made, exc, F.HOST_SYNC)
    if isinstance(exc, CaptureError):
        return raised(row(V.CAPTURE_ERROR, -1, seed, detail=with_user_frame(str(exc), exc)), exc)
    if isinstance(exc, FallbackEager):  # the first capture was allowed: declining a later one is inconsistent
        detail = f"the op's probe declined a later capture: {exc}"
        return raised(row(V.CAPTURE_ERROR, -1, seed, detail=with_user_frame(detail, exc)), exc)
    if isinstance(exc, REFUSAL_ERRORS):
        detail = with_user_frame(f"{type(exc).__name__}: {exc}", exc)
        return raised(row(V.REFUSED, -1, seed, detail=detail), exc)
    # The op failed eagerly during warm-up without a named refusal.
    detail = f"eager raised {type(exc).__name__}: {exc}"
    return raised(row(V.EAGER_MISMATCH, -1, seed, detail=with_user_frame(detail, exc)), exc)


def raised(made: Row, exc: BaseException, detector: str = F.EXCEPTION) -> Row:
    """`made` with the finding of an exception: the op of a host sync, and the user's line that raised."""
    op = F.sync_op(str(exc)) if detector == F.HOST_SYNC else ""
    F.exception_finding(detector, op, user_frame(exc)).apply(made)
    return made


def _replay_error_row(
    exc: Exception, row: Callable[..., Row], replay_index: int, seed_b: int, where: str = ""
) -> Row:
    """Capture worked but the replay raised (the process lives on): the graph cannot run, which is neither a
    crash nor a capture failure."""
    made = row(
        V.REPLAY_ERROR,
        replay_index,
        seed_b,
        detail=with_user_frame(f"{where}replay raised {type(exc).__name__}: {exc}", exc),
    )
    return raised(made, exc)


def _call_op(case: Case, inputs: dict[str, torch.Tensor], *args: Any) -> Any:
    """Every call of the op (warm-up, capture, eager, the hidden-state probe) goes through here, inside the
    backend's factory fill where it asks for one (harness/poison.py `op_call_poisoning`): only the op's own
    factory results are filled, not the harness's bookkeeping around it."""
    with op_call_poisoning():
        return case.op(*args, **inputs)


def prepare_inputs(case: Case, inputs: dict[str, torch.Tensor]) -> None:
    """The case's host-side `prepare` hook on the tensors the next op call (replay or eager) will read."""
    if case.prepare is not None:
        with torch.no_grad():
            case.prepare(inputs)


def _row_factory(case: Case, be: GraphBackend, pattern: int, seed_a: int) -> Callable[..., Row]:
    def make(verdict: str, replay: int, seed: int, **values: Any) -> Row:
        base: dict[str, Any] = dict(
            eager_error=None,
            graph_error=None,
            graph_vs_eager=None,
            threshold=None,
            nonfinite=0,
            poisoned=0,
        )
        base.update(values)
        return Row(
            case=case.name,
            family=case.family,
            backend=be.name,
            device=str(be.device),
            pattern=f"0x{pattern:02x}",
            replay=replay,
            seed_a=seed_a,
            seed=seed,
            bit_exact=case.bit_exact,
            row_verdict=verdict,
            **base,
        )

    return make


def _validate_pairs(
    case: Case,
    be: GraphBackend,
    seed_a: int,
    a: dict[str, torch.Tensor],
    pairs: Sequence[tuple[int, dict[str, torch.Tensor]]],
) -> None:
    """Each (seed_b, inputs) against A: the same names, shapes and dtypes, on the backend's device, and every
    dynamic input different; raises CaseError for the first pair that is not."""
    for seed_b, b in pairs:
        if set(a) != set(b):
            raise CaseError(
                case.name, "make_inputs", f"seeds {seed_a} and {seed_b} give different input names"
            )
        for name, ta in a.items():
            tb = b[name]
            if ta.device.type != be.device.type:
                raise CaseError(
                    case.name,
                    "make_inputs",
                    f"input {name!r} is on {ta.device}; use the `device` argument ({be.device})",
                )
            if ta.shape != tb.shape or ta.dtype != tb.dtype:
                raise CaseError(
                    case.name,
                    "make_inputs",
                    f"input {name!r} is {tuple(ta.shape)}/{ta.dtype} for seed {seed_a} but "
                    f"{tuple(tb.shape)}/{tb.dtype} for seed {seed_b}; B is copied into A's buffers, so shapes "
                    "and dtypes must match",
                )
    # Every dynamic input must differ between A and each B, compared as bytes in one batch.
    dynamic = [n for n, t in a.items() if n not in case.static_inputs and t.numel() > 0]
    checked = [(seed_b, name) for seed_b, _ in pairs for name in dynamic]
    differ = bytes_differ_many([(a[name], b[name]) for _, b in pairs for name in dynamic])
    for (seed_b, name), d in zip(checked, differ, strict=True):
        if not d:
            raise CaseError(
                case.name,
                "make_inputs",
                f"input {name!r} is identical for seeds {seed_a} and {seed_b}: a stale replay could not be "
                "seen; make it depend on the seed, or list it in static_inputs",
            )


def _check_callable(case: Case, inputs: dict[str, torch.Tensor]) -> None:
    """An op whose parameters do not match the input names is a case-definition error, not a `refused` op."""
    try:
        signature = inspect.signature(case.op)
    except (TypeError, ValueError):  # builtins and some C++ callables publish no signature: nothing to check
        return
    try:
        signature.bind(**inputs)
    except TypeError as exc:
        raise CaseError(
            case.name,
            "op",
            f"cannot be called with the inputs of make_inputs ({', '.join(sorted(inputs))}): {exc}",
        ) from exc


def _replay_threshold(case: Case, out: torch.Tensor) -> float:
    """Graph vs eager: bit-exact unless the case declares `replay_tolerance` for nondeterministic kernels
    (atomics, split-K); integer and boolean outputs stay bit-exact either way."""
    if case.bit_exact or case.replay_tolerance is None:
        return 0.0
    if not (out.dtype.is_floating_point or out.dtype.is_complex):
        return 0.0
    return float(case.replay_tolerance)


def _threshold(case: Case, out: torch.Tensor) -> float:
    # Integer and boolean outputs (ids, counts, masks) are always bit-exact: a tolerance meant for the float
    # outputs of the same op must not let an off-by-one id through.
    if case.bit_exact or not (out.dtype.is_floating_point or out.dtype.is_complex):
        return 0.0
    if case.tolerance is not None:
        return float(case.tolerance)
    return default_threshold(out.dtype)


def _badness(c: Comparison) -> tuple[int, float]:
    ratio = c.error / c.threshold if c.threshold > 0 else math.inf if c.mismatches else 0.0
    return (0 if c.ok else 1, ratio)


def _worst(comparisons: list[Comparison]) -> Comparison:
    if not comparisons:
        return Comparison(error=0.0, threshold=0.0, nonfinite=0, poisoned=0, mismatches=0)
    return max(comparisons, key=_badness)


def _worst_index(comparisons: list[Comparison]) -> int:
    """The index `_worst` picks (the first of equals, as max() takes it)."""
    return max(range(len(comparisons)), key=lambda i: _badness(comparisons[i]))


def _scan_unwritten(out: torch.Tensor, threshold: float) -> Comparison:
    """With no reference, eager is the yardstick: it must at least be finite and free of poison values."""
    nonfinite, poisoned = count_unwritten(out, poison_values(out.dtype))
    return Comparison(error=0.0, threshold=threshold, nonfinite=nonfinite, poisoned=poisoned, mismatches=0)


def _describe(c: Comparison) -> str:
    parts = []
    if c.detail:
        parts.append(c.detail)
    if c.nonfinite:
        parts.append(f"{c.nonfinite} NaN/Inf where a finite value is expected")
    if c.poisoned:
        parts.append(f"{c.poisoned} poison-pattern values")
    if not parts:
        limit = "bit-exact" if c.threshold == 0.0 else f"threshold {c.threshold:g}"
        parts.append(f"error {c.error:.6g} ({limit}), {c.mismatches} mismatching elements")
    if c.first_indices:
        parts.append(f"first at {c.first_indices}")
    return "; ".join(parts)


def _clone_all(inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    with unfilled():  # each clone is written whole by its copy
        return {name: t.clone() for name, t in inputs.items()}


def _clone_outputs(outputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    with unfilled():
        return [t.clone() for t in outputs]


def _undeclared_writes(
    case: Case, pairs: Sequence[tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]]
) -> tuple[list[str], list[tuple[torch.Tensor, torch.Tensor]]]:
    """For each (actual, expected) pair of input sets, every input not in Case.mutates as (name, byte pair):
    the byte comparisons that show an input the op wrote although the case does not declare it."""
    names, byte_pairs = [], []
    for actual, expected in pairs:
        for name, t in expected.items():
            if name in case.mutates or t.numel() == 0:
                continue
            names.append(name)
            byte_pairs.append((actual[name], t))
    return names, byte_pairs
