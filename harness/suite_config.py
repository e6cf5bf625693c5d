"""Which suites a run loads when it names no case source: read from configuration, never from an import.

Two places name suites, first match wins:

1. the entry-point group ``graphsafe.suites`` of installed distributions (each entry's value is a module
   name, e.g. ``builtin = "graphsafe.cases"``): how an installed graphsafe, or a plugin, offers its suite;
2. ``[tool.graphsafe] default-suites = ["cases"]`` in the pyproject.toml next to the harness package: a
   checkout run with ``PYTHONPATH=.`` and nothing installed.

Kept apart from harness.suites (which imports the suites) so the case registry can ask which modules are
suite roots without importing anything.
"""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path


class SuiteConfigError(ValueError):
    """[tool.graphsafe] default-suites is unreadable or not a list of module names (CLI exit code 2)."""


ENTRY_POINT_GROUP = "graphsafe.suites"
PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
_SKIPPED_PREFIXES = ("_", "test_", "conftest")


def default_suites() -> list[str]:
    """Module names of the default suites (module note); empty when neither place names any."""
    from_entry_points = [
        ep.value.split(":", 1)[0] for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    ]
    if from_entry_points:
        return list(dict.fromkeys(from_entry_points))
    return _suites_from_pyproject(PYPROJECT)


def _suites_from_pyproject(path: Path) -> list[str]:
    if not path.is_file():
        return []
    try:
        config = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SuiteConfigError(f"cannot read {path}: {exc}") from exc
    value = config.get("tool", {}).get("graphsafe", {}).get("default-suites", [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise SuiteConfigError(
            f"{path}: [tool.graphsafe] default-suites must be a list of module names, got {value!r}"
        )
    return value


__all__ = ["ENTRY_POINT_GROUP", "PYPROJECT", "SuiteConfigError", "default_suites"]
