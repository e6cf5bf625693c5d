"""The result records: one `Row` per replay of one poison pattern, one `Result` per case.

They live apart from the protocol engine so that reports, the runner and users' tools can read and write
results without importing the engine that produces them.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Row:
    """One line of results.csv: one replay of one pattern (replay -1: a case-level event)."""

    case: str
    family: str
    backend: str
    device: str
    pattern: str
    replay: int
    seed_a: int
    seed: int
    eager_error: float | None
    graph_error: float | None
    graph_vs_eager: float | None
    threshold: float | None
    bit_exact: bool
    nonfinite: int
    poisoned: int
    row_verdict: str
    detail: str = ""
    capture_ms: float | None = None
    replay_ms: float | None = None
    eager_ms: float | None = None
    phase: str = "replay"
    # "" when the backend checked everything the op ran; else "not fully checked on <backend>: <reason>"
    # (e.g. the cpu backend cannot run what torch.compile(mode="reduce-overhead") adds on a GPU).
    limits: str = ""
    # The finding (graphsafe.findings), filled only for rows that are not pass: which output (a namedtuple
    # field's name, else its index), how many elements mismatch, the first mismatching index with the values
    # there, the state that carried over (attribute paths, globals), the check that decided the verdict (the
    # key of the cause table), and the finding's lines as one text.
    output: str = ""
    mismatches: int | None = None
    first_mismatch: str = ""
    carried_state: str = ""
    detector: str = ""
    finding: str = ""


@dataclass
class Result:
    case: str
    expected: str
    verdict: str
    backend: str
    rows: list[Row] = field(default_factory=list)
    detail: str = ""
    # Wall seconds from handing the case to its worker to its result (None where not timed); the run's
    # times.csv, not results.csv, records it.
    seconds: float | None = None
    # When the case was handed to its worker (time.monotonic()) and which worker ran it (None in-process):
    # times.csv's start and worker columns, the run's timeline.
    started_at: float | None = None
    worker: int | None = None

    @property
    def ok(self) -> bool:
        return self.verdict == self.expected


def case_level_result(
    case: str, family: str, expected: str, backend: str, verdict: str, detail: str
) -> Result:
    """A result for a case that produced no rows of its own (crash, timeout)."""
    row = Row(
        case=case,
        family=family,
        backend=backend,
        device="",
        pattern="",
        replay=-1,
        seed_a=0,
        seed=0,
        eager_error=None,
        graph_error=None,
        graph_vs_eager=None,
        threshold=None,
        bit_exact=False,
        nonfinite=0,
        poisoned=0,
        row_verdict=verdict,
        detail=detail,
    )
    return Result(case, expected, verdict, backend, [row], detail)
