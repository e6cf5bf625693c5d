"""Which suites a run loads when it names no case source: read from configuration, never from an import.

The entry-point group ``graphsafe.suites`` of installed distributions names them (each entry's value is a
module name, e.g. ``builtin = "graphsafe.cases"``): how graphsafe offers its built-in suite (an editable
install of a checkout included), or a plugin its own.

Kept apart from graphsafe.suites (which imports the suites) so the case registry can ask which modules are
suite roots without importing anything.
"""

from __future__ import annotations

import importlib.metadata

ENTRY_POINT_GROUP = "graphsafe.suites"


def default_suites() -> list[str]:
    """Module names of the default suites; empty when no installed distribution names any."""
    names = [ep.value.split(":", 1)[0] for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)]
    return list(dict.fromkeys(names))


__all__ = ["ENTRY_POINT_GROUP", "default_suites"]
