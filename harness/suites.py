"""Suites: the packages of case modules a run loads when it is given no --case.

The harness ships no cases and imports none: what "the built-in suite" is comes from configuration, so the
layers run one way (cases import the harness, never the reverse). Two places name suites, first match wins:

1. the entry-point group ``graphsafe.suites`` of installed distributions (each entry's value is a module
   name, e.g. ``builtin = "graphsafe.cases"``): how an installed graphsafe, or a plugin, offers its suite;
2. ``[tool.graphsafe] default-suites = ["cases"]`` in the pyproject.toml next to the harness package: a
   checkout run with ``PYTHONPATH=.`` and nothing installed.

A suite is a module; when it is a package, every module below it is imported too, except private modules
(``_x``), tests (``test_x``) and ``conftest``. Importing a module registers its cases (``harness.register``).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
import tomllib
from collections.abc import Sequence
from pathlib import Path

from harness.case import REGISTRY, Case, CaseFileError, add_suite_root, belongs_to

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
        raise CaseFileError(f"cannot read {path}: {exc}") from exc
    value = config.get("tool", {}).get("graphsafe", {}).get("default-suites", [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise CaseFileError(
            f"{path}: [tool.graphsafe] default-suites must be a list of module names, got {value!r}"
        )
    return value


def load_suites(modules: Sequence[str]) -> list[Case]:
    """Import every suite module (and the modules below it) and return the cases they registered, in
    registration order. A module that cannot be imported is a CaseFileError naming it and why."""
    roots: list[str] = []
    for name in modules:
        try:
            root = importlib.import_module(name)
        except Exception as exc:
            raise CaseFileError(f"cannot load suite {name!r}: {type(exc).__name__}: {exc}") from exc
        # The module's own name: an alias (an editable install maps graphsafe.cases to cases) registers its
        # cases under the real name.
        real = root.__name__
        add_suite_root(real)
        roots.append(real)
        for info in pkgutil.walk_packages(getattr(root, "__path__", []), prefix=real + "."):
            if info.name.rsplit(".", 1)[-1].startswith(_SKIPPED_PREFIXES):
                continue
            try:
                importlib.import_module(info.name)
            except Exception as exc:
                raise CaseFileError(f"cannot load {info.name!r}: {type(exc).__name__}: {exc}") from exc
    return [c for c in REGISTRY.cases() if any(belongs_to(REGISTRY.origin(c.name), r) for r in roots)]


def load_default_suites() -> list[Case]:
    """The cases of the default suites; CaseFileError when no suite is configured."""
    modules = default_suites()
    if not modules:
        raise CaseFileError(
            f"no case source given and no default suite configured (entry points {ENTRY_POINT_GROUP!r}, "
            f"or [tool.graphsafe] default-suites in {PYPROJECT}); pass --case FILE_OR_MODULE"
        )
    return load_suites(modules)


__all__ = ["ENTRY_POINT_GROUP", "default_suites", "load_default_suites", "load_suites"]
