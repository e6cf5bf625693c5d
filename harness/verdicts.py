"""The fixed verdict vocabulary (harness/DESIGN.md, "Verdicts") and how row verdicts combine into a case
verdict.

Users' case files name these strings in `expect=`; never rename one.
"""

from __future__ import annotations

PASS = "pass"
STALE_REPLAY = "stale_replay"  # graph differs from eager (bit-exact unless declared); or state leaked from A
UNINITIALIZED = "uninitialized"  # NaN/Inf/poison in the output where a finite value is expected
CAPTURE_SYNC = "capture_sync"  # host sync or data-dependent shape during capture
CAPTURE_ERROR = "capture_error"  # any other capture failure
REPLAY_ERROR = "replay_error"  # capture worked, but replaying the graph raised (the process lives on)
EAGER_MISMATCH = "eager_mismatch"  # eager disagrees with the reference, or the op modified an input
CRASH = "crash"  # the process running the case died
TIMEOUT = "timeout"  # the case ran past its deadline
# The case's own code failed while the case ran: its reference or make_inputs raised, or the op returned
# something no comparison can take (a definition error found only at run time). The op was not judged, so
# no verdict about the op fits: eager_mismatch would blame an op whose output nothing disagreed with.
BROKEN_CASE = "broken_case"
REFUSED = (
    "refused"  # the op rejected its inputs with a named error (ValueError/TypeError/NotImplementedError)
)
FALLBACK_EAGER = "fallback_eager"  # a fail-closed probe disabled graphs and eager was right

# Most severe first: the case verdict is the most severe of its rows. Process-level failures outrank
# everything because nothing after them ran; capture failures outrank value checks for the same reason.
SEVERITY: tuple[str, ...] = (
    CRASH,
    TIMEOUT,
    BROKEN_CASE,
    CAPTURE_SYNC,
    CAPTURE_ERROR,
    REPLAY_ERROR,
    REFUSED,
    UNINITIALIZED,
    EAGER_MISMATCH,
    STALE_REPLAY,
    FALLBACK_EAGER,
    PASS,
)
VERDICTS: frozenset[str] = frozenset(SEVERITY)


def worst(verdicts: list[str]) -> str:
    """The most severe verdict of a non-empty list."""
    if not verdicts:
        raise ValueError("worst() needs at least one verdict")
    return min(verdicts, key=SEVERITY.index)
