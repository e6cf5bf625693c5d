"""graphsafe's harness: the public contract users' case files rely on.

    from harness import Case, register, check
    register(Case(name=..., make_inputs=..., op=..., reference=None, tolerance=None, expect="pass"))
    result = check(case, backend="auto")   # result.verdict, result.rows
    is_capturing()                         # inside an op: is a graph (or the cpu recorder) capturing now?

Extend this surface; never break it (README, "The public contract").
"""

from harness.backends import is_capturing
from harness.case import DEVICE_WAITS, REGISTRY, Case, register
from harness.errors import CaptureError, CaptureSyncError, CaseError, FallbackEager
from harness.protocol import check
from harness.records import Result, Row
from harness.verdicts import VERDICTS

__all__ = [
    "DEVICE_WAITS",
    "REGISTRY",
    "VERDICTS",
    "CaptureError",
    "CaptureSyncError",
    "Case",
    "CaseError",
    "FallbackEager",
    "Result",
    "Row",
    "check",
    "is_capturing",
    "register",
]
