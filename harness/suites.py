"""Suites: the packages of case modules a run loads when it is given no --case.

The harness ships no cases and imports none: which suites are the default comes from configuration
(graphsafe.suite_config: the graphsafe.suites entry points), so the layers run one way (cases import the harness, never the reverse).

A suite is a module; when it is a package, every module below it is imported too, except private modules
(``_x``), tests (``test_x``) and ``conftest``. Importing a module registers its cases (``graphsafe.register``).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Sequence

from graphsafe.case import REGISTRY, Case, CaseFileError, add_suite_root, belongs_to
from graphsafe.suite_config import ENTRY_POINT_GROUP, default_suites

_SKIPPED_PREFIXES = ("_", "test_", "conftest")


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
            f"no case source given and no installed suite (entry points {ENTRY_POINT_GROUP!r}): is graphsafe "
            "installed (`pip install -e .` in a checkout)? Else pass --case FILE_OR_MODULE"
        )
    return load_suites(modules)


__all__ = ["default_suites", "load_default_suites", "load_suites"]
