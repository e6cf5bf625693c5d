"""Findings: what a person acts on when a case is not as expected.

A verdict is a name; a finding says what to fix: which output (name or index, shape, dtype), how much (the
error against the threshold, how many elements mismatch and what share, the greatest absolute and relative
difference, the first mismatching index with the graph, eager and reference values, in the words of
torch.testing.assert_close's message), what carried state (the attribute, global or closure cell the
hidden-state probe saw change), for a host sync the op and the user's line, and one line "likely cause ->
what to try" from CAUSES, the table the README shows too (`causes_markdown`).

The evidence is measured only for rows that are not pass (the verdict rules call `measure` and the others
once a row failed), so a passing check pays nothing for it. A row keeps it in its finding columns
(results.csv: output, mismatches, first_mismatch, carried_state, detector, finding); `failure_block` renders a
case's finding from those columns, for the terminal (`graphsafe verify`), the pytest failure and summary.md,
so the three say the same words.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from graphsafe import verdicts as V
from graphsafe.compare import Comparison, poison_values
from graphsafe.scan import DENOMINATOR_EPS, unpoisoned

# --------------------------------------------------------------------------------------- the cause table

# Detectors: which check decided a row's verdict. A row names one in its `detector` column.
HIDDEN_STATE = "hidden_state"  # eager on B after the op saw A differs from eager on B before (the probe)
GRAPH_VS_EAGER = "graph_vs_eager"
GRAPH_VS_REFERENCE = "graph_vs_reference"
EAGER_VS_REFERENCE = "eager_vs_reference"
EAGER_OUTPUT = "eager_output"  # NaN/Inf/poison in eager's output
GRAPH_OUTPUT = "graph_output"  # NaN/Inf/poison in the replay's output only
INPUT_MODIFIED = "input_modified"  # the op wrote an input it does not declare in Case.mutates
HOST_SYNC = "host_sync"
EXCEPTION = "exception"  # the op, its capture or its replay raised
PROCESS = "process"  # the worker died or ran past its deadline
NOT_DETECTED = "not_detected"  # a negative control that passed
LAUNCH_DIFF = (
    "launch_diff"  # the graph captured with A launches differently from one captured for B (--explain)
)


@dataclass(frozen=True)
class Cause:
    verdict: str  # the verdict the case got
    detector: str  # "" matches any detector of that verdict
    cause: str
    fix: str


_FROZEN_AT_CAPTURE = (
    "the graph replays a value frozen at capture: a Python number, branch or cache computed from input A, a "
    "tensor the op rebinds (self.x = new tensor) instead of writing in place, or a launch sized for A"
)
_KEEP_IN_DEVICE_TENSORS = (
    "keep every value that changes between calls in a device tensor the graph reads and update it in place "
    "(copy_) before replay; never rebind a tensor a captured graph reads"
)

# One table, read top to bottom: the first row whose verdict and detector match gives the line. The README's
# "verdict -> likely cause -> what to try" table is rendered from it (`causes_markdown`). The launch diff
# (graphsafe.launch_diff) puts the first launch difference it found in a finding's carried state.
CAUSES: tuple[Cause, ...] = (
    Cause(
        V.STALE_REPLAY,
        LAUNCH_DIFF,
        "a kernel argument, launch shape or node was fixed at capture: the graph captured with A launches "
        "differently from a capture made for B (the carried state above), even where B's outputs happen to agree",
        "pass the value through a device tensor the graph reads (updated in place before replay), size the "
        "grid for the largest input and mask the rest, and run per-call host work (a plan, an RNG offset) "
        "inside the captured code or copy its results into the graph's buffers before every replay",
    ),
    Cause(
        V.STALE_REPLAY,
        HIDDEN_STATE,
        "state left by one call changes the next: a cache or attribute filled from the first input and "
        "reused (the carried state above, where the probe could see it)",
        "recompute it from the inputs on every call, or key the cache by what it depends on (values, not "
        "only shapes); state the op must keep belongs in a tensor input declared in Case.mutates",
    ),
    Cause(V.STALE_REPLAY, GRAPH_VS_REFERENCE, _FROZEN_AT_CAPTURE, _KEEP_IN_DEVICE_TENSORS),
    Cause(V.STALE_REPLAY, GRAPH_VS_EAGER, _FROZEN_AT_CAPTURE, _KEEP_IN_DEVICE_TENSORS),
    Cause(
        V.STALE_REPLAY,
        "",
        "the graph replays something fixed at capture",
        "read the replay table with graphsafe repro; keep changing values in device tensors",
    ),
    Cause(
        V.UNINITIALIZED,
        EAGER_OUTPUT,
        "the op leaves part of its output unwritten (torch.empty, then a kernel that skips a tail, a mask "
        "or a grid sized too small); those elements hold whatever memory held",
        "write every element (cover the whole grid, handle the tail), or allocate with torch.zeros where "
        "unwritten means zero",
    ),
    Cause(
        V.UNINITIALIZED,
        GRAPH_OUTPUT,
        "the replay writes less than eager does: work skipped under capture (a branch or a grid decided "
        "from input A), or an output buffer that eager fills and the graph does not",
        "size launches and loops for every input the graph will see (or from device-side sizes), and write "
        "the whole output in the captured code",
    ),
    Cause(
        V.EAGER_MISMATCH,
        INPUT_MODIFIED,
        "the op writes an input the case does not declare, so a caller's tensor changes under it",
        "write into a new output tensor, or declare the input in Case.mutates if writing it is intended",
    ),
    Cause(
        V.EAGER_MISMATCH,
        EXCEPTION,
        "the op raised when called eagerly",
        "fix the line named above; graphsafe repro reruns the case with the same seeds",
    ),
    Cause(
        V.EAGER_MISMATCH,
        "",
        "the op is wrong without any graph (or the reference, or its tolerance, is)",
        "fix the op first: graphsafe repro shows eager against the reference; if the op is right, fix "
        "the reference or set Case.tolerance with a note saying why",
    ),
    Cause(
        V.CAPTURE_SYNC,
        "",
        "a host synchronization under capture: .item(), .tolist(), .cpu(), a data-dependent shape "
        "(nonzero, a boolean mask), print of a tensor, or torch.cuda.synchronize at the line above",
        "keep the value on the device (torch.where, masks, device-side sizes), size outputs from shapes "
        "known before capture, or move the host read out of the captured region",
    ),
    Cause(
        V.CAPTURE_ERROR,
        "",
        "the op does something capture does not allow (an allocation or a call the graph cannot record, "
        "work on another stream not joined back)",
        "fix the line named above; an op that cannot be captured can raise graphsafe.FallbackEager from a "
        "probe so engines run it eagerly",
    ),
    Cause(
        V.REPLAY_ERROR,
        "",
        "the graph captured, but replaying it raised: it refers to memory or objects gone since capture",
        "keep every tensor the graph reads alive and at the same address for the graph's life",
    ),
    Cause(
        V.BROKEN_CASE,
        "",
        "the case's own code failed while it ran: its reference or make_inputs raised, or the op returned "
        "something no comparison takes (not a tensor, or a shape the reference does not have); the op was "
        "not judged",
        "fix the line of the case file named above (graphsafe repro reruns it with the same seeds); the "
        "other cases of the run are unaffected",
    ),
    Cause(
        V.REFUSED,
        "",
        "the op rejected the case's inputs with ValueError, TypeError or NotImplementedError",
        "if the inputs are valid, support them; else fix make_inputs, or set expect='refused'",
    ),
    Cause(
        V.CRASH,
        "",
        "the process running the case died (a segfault, an abort, an illegal address or device-side assert)",
        "rerun with graphsafe repro ... --no-isolate under compute-sanitizer or gdb; the worker's last "
        "stderr lines are above",
    ),
    Cause(
        V.TIMEOUT,
        "",
        "the case ran past its deadline: a hang (a host wait on device work that never comes) or a slow case",
        "rerun with graphsafe repro; if it is only slow, raise Case.deadline or --deadline",
    ),
    Cause(
        V.FALLBACK_EAGER,
        "",
        "the op's probe disabled graphs, and eager was right",
        "if the op should be captured, find why its probe declines; else set expect='fallback_eager'",
    ),
    Cause(
        V.PASS,
        NOT_DETECTED,
        "a negative control passed: the fault it carries was not detected (or the op was fixed)",
        "if the op is fixed, set expect='pass'; else make A and B differ in what the fault depends on",
    ),
)


def cause_for(verdict: str, detector: str) -> Cause | None:
    """The first row of CAUSES for this verdict and detector (a row with detector "" matches any; detector ""
    takes the verdict's first row)."""
    for cause in CAUSES:
        if cause.verdict == verdict and (not detector or cause.detector in ("", detector)):
            return cause
    return None


def cause_line(verdict: str, detector: str) -> str:
    cause = cause_for(verdict, detector)
    return f"likely cause -> what to try: {cause.cause} -> {cause.fix}" if cause else ""


def causes_markdown() -> str:
    """CAUSES as the README's Markdown table."""
    lines = ["| verdict | found by | likely cause | what to try |", "|---|---|---|---|"]
    for c in CAUSES:
        lines.append(
            f"| `{c.verdict}` | {f'`{c.detector}`' if c.detector else 'any'} | {c.cause} | {c.fix} |"
        )
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------- measuring


@dataclass
class Finding:
    """The evidence of one failing row, as results.csv's finding columns keep it."""

    detector: str
    lines: list[str] = field(default_factory=list)
    output: str = ""  # which output: a namedtuple field's name, else the index in return order
    mismatches: int | None = None
    first_mismatch: str = ""  # "(0, 3): graph 1.5, eager 0.25, reference 0.25"
    carried_state: list[str] = field(default_factory=list)

    def apply(self, row: Any) -> None:
        """Write the finding into a Row's finding fields."""
        row.detector = self.detector
        row.output = self.output
        row.mismatches = self.mismatches
        row.first_mismatch = self.first_mismatch
        self.add_state(row, self.carried_state)
        row.finding = "\n".join(self.lines)

    @staticmethod
    def add_state(row: Any, paths: Sequence[str]) -> None:
        """Add what carried state (attribute paths, globals, a kernel argument) to a row's finding."""
        if not paths:
            return
        row.carried_state = "; ".join(dict.fromkeys([*filter(None, row.carried_state.split("; ")), *paths]))
        lines = [line for line in row.finding.split("\n") if line and not line.startswith(_STATE_PREFIX)]
        row.finding = "\n".join([*lines, _STATE_PREFIX + row.carried_state])


_STATE_PREFIX = "carried state: "


def output_labels(result: Any, count: int) -> list[str]:
    """Names of an op's flattened outputs (graphsafe.backends.base.flatten_tensors' order): a namedtuple's
    field names ("logits", "cache.k" when nested), else indices ("0", "1", "1.0" when nested)."""
    labels: list[str] = []

    def walk(value: Any, prefix: str) -> None:
        if isinstance(value, torch.Tensor):
            labels.append(prefix or "0")
            return
        if isinstance(value, tuple | list):
            fields = getattr(value, "_fields", None)
            for i, item in enumerate(value):
                name = str(fields[i]) if fields else str(i)
                walk(item, f"{prefix}.{name}" if prefix else name)

    if result is not None:
        walk(result, "")
    if len(labels) != count:  # no structure given, or it does not match: indices
        labels = [str(i) for i in range(count)]
    return labels


def _index_text(index: Sequence[int]) -> str:
    return "(" + ", ".join(str(i) for i in index) + ("," if len(index) == 1 else "") + ")"


def _value_text(t: torch.Tensor, index: Sequence[int]) -> str:
    value = t[tuple(index)] if t.dim() else t
    item = value.item() if not t.is_complex() else complex(value.item())
    if isinstance(item, float):
        return f"{item:.6g}"
    return str(item)


def _output_line(label: str, count: int, t: torch.Tensor) -> str:
    dtype = str(t.dtype).removeprefix("torch.")
    name = f"output {label}" if label.isdigit() else f"output {label!r}"
    return f"{name} (of {count}): shape {tuple(t.shape)}, {dtype}"


def _share(count: int, total: int) -> str:
    return f"{count} / {total} ({100.0 * count / total:.1f}%)" if total else f"{count} / 0"


# The first line of a value finding: what differed from what.
WHAT_DIFFERED = {
    HIDDEN_STATE: "eager on B after the op ran on A differs from eager on B before the op saw A: state leaked "
    "from A into later calls",
    GRAPH_VS_EAGER: "the graph replay on B differs from eager on B",
    GRAPH_VS_REFERENCE: "the graph replay on B differs from the reference (eager on B agrees with it)",
    EAGER_VS_REFERENCE: "eager on B differs from the reference",
}


def measure(
    detector: str,
    label: str,
    count: int,
    actual: torch.Tensor,
    expected: torch.Tensor,
    comparison: Comparison,
    values: Sequence[tuple[str, torch.Tensor | None]],
) -> Finding:
    """The finding of an output that differs from what `detector` compared it with: mismatched elements, the
    greatest absolute and relative difference against what the threshold allows, and the first mismatching
    index with each of `values` there (graph, eager, reference)."""
    lines = [WHAT_DIFFERED.get(detector, detector), _output_line(label, count, actual)]
    first = ""
    with unpoisoned():
        a, e = actual.detach(), expected.detach()
        if a.shape != e.shape or a.dtype != e.dtype:
            lines.append(comparison.detail)
            return Finding(detector, lines, label, comparison.mismatches)
        if a.is_complex():
            a, e = torch.view_as_real(a.resolve_conj()), torch.view_as_real(e.resolve_conj())
        a64, e64 = a.double().cpu(), e.double().cpu()
        finite = torch.isfinite(a64) & torch.isfinite(e64)
        diff = torch.where(finite, (a64 - e64).abs(), torch.zeros_like(a64))
        peak_ref = (
            float(torch.where(torch.isfinite(e64), e64.abs(), torch.zeros_like(e64)).amax())
            if e64.numel()
            else 0.0
        )
        rel = (
            diff / e64.abs()
        )  # inf where the reference is 0 and the difference is not, as assert_close has it
        rel = torch.where(finite & (diff > 0), rel, torch.zeros_like(rel))
        abs_max = float(diff.amax()) if diff.numel() else 0.0
        rel_max = float(rel.amax()) if rel.numel() else 0.0
    threshold = comparison.threshold
    if threshold == 0.0:
        rule, allowed = "bit-exact equality required", "up to 0 allowed"
    else:
        bound = threshold * (peak_ref + DENOMINATOR_EPS)
        rule = f"threshold {threshold:g}"
        allowed = (
            f"up to {bound:.3g} allowed: threshold {threshold:g} x largest expected magnitude {peak_ref:.3g}"
        )
    error = "inf (NaN/Inf found)" if math.isinf(comparison.error) else f"{comparison.error:.6g}"
    lines.append(f"error {error}, {rule} (error = largest abs difference / largest abs expected)")
    lines.append(f"Mismatched elements: {_share(comparison.mismatches, a.numel())}")
    lines.append(f"Greatest absolute difference: {abs_max:.6g} ({allowed})")
    lines.append(f"Greatest relative difference: {rel_max:.6g}")
    if comparison.nonfinite or comparison.poisoned:
        lines.append(f"NaN/Inf: {comparison.nonfinite}, poison values: {comparison.poisoned}")
    if comparison.first_indices:
        index = comparison.first_indices[0]
        shown = [(name, t) for name, t in values if t is not None and t.shape == actual.shape]
        with unpoisoned():
            first = f"{_index_text(index)}: " + ", ".join(
                f"{name} {_value_text(t, index)}" for name, t in shown
            )
        lines.append(f"First mismatch at index {first}")
    return Finding(detector, lines, label, comparison.mismatches, first)


def measure_unwritten(
    detector: str,
    where: str,
    label: str,
    count: int,
    out: torch.Tensor,
    values: Sequence[tuple[str, torch.Tensor | None]],
) -> Finding:
    """The finding of an output holding NaN/Inf or poison values: how many, and where the first one is."""
    lines = [_output_line(label, count, out)]
    with unpoisoned():
        o = out.detach()
        if o.is_complex():
            o = torch.view_as_real(o.resolve_conj())
        if o.is_floating_point():
            nonfinite = ~torch.isfinite(o.float() if o.element_size() == 1 else o)
        else:
            nonfinite = torch.zeros(o.shape, dtype=torch.bool, device=o.device)
        poison = torch.zeros_like(nonfinite)
        for value in poison_values(out.dtype):
            poison |= (o.float() if o.element_size() == 1 and o.is_floating_point() else o) == value
        bad = nonfinite | poison
        n_nonfinite, n_poison, n_bad = (int(m.sum()) for m in (nonfinite, poison & ~nonfinite, bad))
        first_index = [int(i) for i in bad.nonzero()[0].tolist()] if n_bad else []
        if out.is_complex() and first_index:
            first_index = first_index[:-1]
        first = ""
        if first_index:
            shown = [(name, t) for name, t in values if t is not None and t.shape == out.shape]
            first = f"{_index_text(first_index)}: " + ", ".join(
                f"{name} {_value_text(t, first_index)}" for name, t in shown
            )
    lines.append(
        f"{where}: {_share(n_bad, o.numel())} elements hold NaN/Inf or a poison value "
        f"({n_nonfinite} NaN/Inf, {n_poison} poison values: memory the op never wrote)"
    )
    if first:
        lines.append(f"First at index {first}")
    return Finding(detector, lines, label, n_bad, first)


def exception_finding(detector: str, op_call: str = "", user_line: str = "") -> Finding:
    """The finding of a failure that raised: the op or call that did (a host sync's), the user's line."""
    lines = []
    if op_call:
        lines.append(f"op: {op_call}")
    if user_line:
        lines.append(f"line: {user_line.removeprefix('at ')}")
    return Finding(detector, lines)


# A host sync's message starts with what synced: "aten._local_scalar_dense.default: ...", "one_hot: ...",
# "Tensor.tolist() reads ...", "torch.cuda.synchronize() waits ..." (graphsafe.backends.cpu); a GPU capture's
# starts with the runtime's exception type, which names no op.
_SYNC_OP = re.compile(r"^([A-Za-z_][\w.]*(?:\(\))?)(?::| reads| waits)")
_SCALAR_READS = {
    "aten._local_scalar_dense.default": "Tensor.item(), or bool/int/float of a tensor",
    "aten.item.default": "Tensor.item()",
}


def sync_op(message: str) -> str:
    """The op or call a host-sync message names ("" when it names none)."""
    found = _SYNC_OP.match(message)
    if not found or found.group(1).endswith(("Error", "Exception")):
        return ""
    op = found.group(1)
    return f"{op} ({_SCALAR_READS[op]})" if op in _SCALAR_READS else op


# --------------------------------------------------------------------------------------- rendering


def _text(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(value)


def representative_row(rows: Sequence[Mapping[str, Any]], verdict: str) -> Mapping[str, Any] | None:
    """The row a case's finding comes from: the first with the case's verdict (the first pattern's first replay
    for a stale replay, where the hidden-state probe ran), else None."""
    return next((r for r in rows if _text(r.get("row_verdict")) == verdict), None)


def finding_lines(verdict: str, expected: str, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """A case's finding, one plain-text line each (no Markdown), from its rows' columns (Row fields or a
    results.csv's normalized columns): the evidence, then "likely cause -> what to try"."""
    if verdict == expected:
        return []
    if verdict == V.PASS:
        lines = [f"the check passed every replay: no {expected} was detected"]
        return [*lines, cause_line(V.PASS, NOT_DETECTED)]
    row = representative_row(rows, verdict)
    if row is None:
        return [f"verdict {verdict}, expected {expected}"]
    detail, finding, detector = (
        _text(row.get("detail")),
        _text(row.get("finding")),
        _text(row.get("detector")),
    )
    lines = []
    # A value finding opens with what differed and measures it; the detail would only say it again shorter.
    if detail and not _text(row.get("output")):
        first, _, rest = detail.partition("\n")
        lines.append(_shorten(first))
        if not finding and rest:  # a crash's quoted stderr: its last lines
            lines += [f"  {line}" for line in rest.splitlines()[-8:]]
    lines += [line for line in finding.split("\n") if line]
    if expected != V.PASS:
        lines.append(f"expected {expected}, got {verdict}")
    line = cause_line(verdict, detector or _default_detector(verdict))
    return [*lines, line] if line else lines


_DETAIL_CHARS = 400


def _shorten(text: str) -> str:
    return text if len(text) <= _DETAIL_CHARS else text[: _DETAIL_CHARS - 1] + "…"


def _default_detector(verdict: str) -> str:
    return PROCESS if verdict in (V.CRASH, V.TIMEOUT) else ""


def failure_block(
    case: str,
    verdict: str,
    expected: str,
    rows: Sequence[Mapping[str, Any]],
    repro: str = "",
    finding: Sequence[str] | None = None,
) -> list[str]:
    """A failing case as the terminal and the pytest failure show it: a heading, the finding indented (given,
    or from `rows`), the command that reproduces it."""
    lines = [f"FAIL {case}: {verdict}, expected {expected}"]
    shown = finding if finding is not None else finding_lines(verdict, expected, rows)
    lines += [f"  {line}" for line in shown]
    if repro:
        lines.append(f"  reproduce: {repro}")
    return lines


def rows_as_mappings(rows: Iterable[Any]) -> list[Mapping[str, Any]]:
    """Row dataclasses (or mappings) as mappings of their fields."""
    import dataclasses

    return [r if isinstance(r, Mapping) else dataclasses.asdict(r) for r in rows]


__all__ = [
    "CAUSES",
    "Cause",
    "Finding",
    "cause_for",
    "cause_line",
    "causes_markdown",
    "exception_finding",
    "failure_block",
    "finding_lines",
    "measure",
    "measure_unwritten",
    "output_labels",
    "representative_row",
    "sync_op",
]
