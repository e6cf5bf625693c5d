"""graphsafe: the public contract users' case files rely on.

    from graphsafe import Case, register, check
    register(Case(name=..., make_inputs=..., op=..., reference=None, tolerance=None, expect="pass"))
    result = check(case, backend="auto")   # result.verdict, result.rows
    is_capturing()                         # inside an op: is a graph (or the cpu recorder) capturing now?

Extend this surface; never break it (README, "Commands" and "Your first case").

The names load on first use (PEP 562 module __getattr__), not at `import graphsafe`: the pytest plugin is
loaded by every pytest run in an environment where graphsafe is installed, and importing the contract's
modules imports torch (seconds), which a run that asks nothing of graphsafe must not pay.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# Public name -> the module that defines it.
_HOMES = {
    "is_capturing": "graphsafe.backends",
    "DEVICE_WAITS": "graphsafe.case",
    "REGISTRY": "graphsafe.case",
    "Case": "graphsafe.case",
    "register": "graphsafe.case",
    "CaptureError": "graphsafe.errors",
    "CaptureSyncError": "graphsafe.errors",
    "CaseError": "graphsafe.errors",
    "FallbackEager": "graphsafe.errors",
    "check": "graphsafe.protocol",
    "Result": "graphsafe.records",
    "Row": "graphsafe.records",
    "VERDICTS": "graphsafe.verdicts",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'graphsafe' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})


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
