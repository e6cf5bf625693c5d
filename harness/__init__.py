"""graphsafe: the public contract users' case files rely on.

    from graphsafe import Case, register, check
    register(Case(name=..., make_inputs=..., op=..., reference=None, tolerance=None, expect="pass"))
    result = check(case, backend="auto")   # result.verdict, result.rows
    is_capturing()                         # inside an op: is a graph (or the cpu recorder) capturing now?

Extend this surface; never break it (README, "The public contract").
"""

from importlib.metadata import PackageNotFoundError, version

from graphsafe.backends import is_capturing
from graphsafe.case import DEVICE_WAITS, REGISTRY, Case, register
from graphsafe.errors import CaptureError, CaptureSyncError, CaseError, FallbackEager
from graphsafe.protocol import check
from graphsafe.records import Result, Row
from graphsafe.verdicts import VERDICTS

try:
    __version__ = version("graphsafe")
except PackageNotFoundError:  # the source tree imported without any install: no metadata to read
    __version__ = "0+unknown"

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
    "__version__",
    "check",
    "is_capturing",
    "register",
]
