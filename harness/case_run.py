"""One case in a process that runs many (a worker, `verify --no-isolate`, the pytest plugin): the one place
that runs `check` there.

- The case starts from the process state the one before it found, and what it changed is put back after it
  (graphsafe.process_state); the note naming what it changed goes into its detail and onto stderr.
- Processes it started that left the process's group are ended with it (graphsafe.processes).
- A failure of the case's own code at run time is that case's verdict, `broken_case`, and the run goes on:
  a reference or make_inputs that raises, an op whose output no comparison takes (the protocol's CaseError,
  found only when the case runs), or an exception escaping the protocol from a frame of the user's code.
  The detail names the field and the user's line. Definition errors found before any case runs (the
  runner's `validate_definition` pass) still stop a run, as pytest stops at a collection error.
- An exception from graphsafe's own machinery (no user frame in its traceback) is raised to the caller,
  which reports it as a harness error, never as the case's make_inputs, op or reference.
"""

from __future__ import annotations

import sys
import traceback
from dataclasses import dataclass
from typing import Any

from graphsafe import verdicts as V
from graphsafe.backends import GraphBackend, resolve_backend_name
from graphsafe.case import Case
from graphsafe.errors import CaseError
from graphsafe.process_state import restored
from graphsafe.processes import CaseProcesses
from graphsafe.protocol import check
from graphsafe.records import Result, case_level_result
from graphsafe.tracebacks import user_frame, with_user_frame

_FIELDS = ("make_inputs", "reference", "op", "prepare", "make_module")


@dataclass
class CaseRun:
    result: Result
    # Something the case changed could not be put back: a worker exits after this result and a fresh one
    # takes the next case.
    replace_process: bool = False


def run_case(case: Case, backend: str | GraphBackend, **options: Any) -> CaseRun:
    """`check(case, backend, **options)` as the module note describes."""
    processes = CaseProcesses()
    with restored(case) as changes:
        try:
            result = check(case, backend, **options)
        except CaseError as exc:
            result = broken_case(case, backend, exc)
        except Exception as exc:
            field = _raising_field(case, exc)
            if not field and not user_frame(exc):
                raise  # graphsafe's own machinery failed: the caller names it as such
            problem = f"raised {type(exc).__name__}: {exc}"
            result = broken_case(case, backend, CaseError(case.name, field or "case code", problem), exc)
        finally:
            ended = processes.end_escaped()
    notes = [changes.note()] if changes else []
    if ended:
        notes.append(
            f"ended {len(ended)} process{'es' * (len(ended) != 1)} the case started outside its process group "
            f"and left running (pid {', '.join(map(str, ended[:8]))}{', ...' if len(ended) > 8 else ''})"
        )
    if notes:
        add_note(result, "; ".join(notes))
        print(f"graphsafe: {case.name}: {'; '.join(notes)}", file=sys.stderr, flush=True)
    return CaseRun(result, bool(changes.unrestorable))


def add_note(result: Result, note: str) -> None:
    """Append `note` to the case's detail and to its first row's (results.csv keeps row details)."""
    result.detail = f"{result.detail}; {note}" if result.detail else note
    if result.rows:
        first = result.rows[0]
        first.detail = f"{first.detail}; {note}" if first.detail else note


def broken_case(
    case: Case, backend: str | GraphBackend, error: CaseError, cause: BaseException | None = None
) -> Result:
    """The `broken_case` result: one case-level row whose detail is the error, at the user's line."""
    name = backend.name if isinstance(backend, GraphBackend) else resolve_backend_name(backend)
    detail = with_user_frame(str(error), cause if cause is not None else error)
    return case_level_result(case.name, case.family, case.expect, name, V.BROKEN_CASE, detail)


def _raising_field(case: Case, exc: BaseException) -> str:
    """The case field whose function is on the exception's traceback (outermost first), or ""."""
    codes = {}
    for field in _FIELDS:
        fn = getattr(case, field, None)
        for _ in range(8):  # through functools.partial and decorators
            code = getattr(fn, "__code__", None)
            if code is not None:
                codes[code] = field
            inner = getattr(fn, "func", None) or getattr(fn, "__wrapped__", None)
            if inner is None:
                break
            fn = inner
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        found = codes.get(frame.f_code)
        if found:
            return found
    return ""


__all__ = ["CaseRun", "add_note", "broken_case", "run_case"]
