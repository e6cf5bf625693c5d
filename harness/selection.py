"""Selecting cases with `-k`: the same expressions as pytest's `-k`, over the same keywords the pytest plugin
gives a case's test item (its name and its family).

    -k silu                    name or family contains "silu" (case-insensitive)
    -k "moe_gemm and not fp8"  pytest's and / or / not / parentheses
    -k "moe_gemm.*.ragged*"    a pattern with * ? [ is a glob on the case name

The parser is pytest's own (`_pytest.mark.expression`; pytest is a dependency), so the two spell and bind
expressions identically.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable

from _pytest.mark.expression import Expression

from graphsafe.case import Case

_GLOB_CHARS = "*?["


def keywords(case: Case) -> tuple[str, ...]:
    """The names `-k` identifiers match against (the pytest plugin adds the family to each item's keywords)."""
    return (case.name, case.family)


def compile_selector(pattern: str) -> Callable[[Case], bool]:
    """A predicate for `-k PATTERN`; ValueError naming the pattern when it is not a valid expression."""
    if any(ch in pattern for ch in _GLOB_CHARS):
        return lambda case: fnmatch.fnmatch(case.name, pattern)
    try:
        expression = Expression.compile(pattern)
    except Exception as exc:  # pytest 9 raises SyntaxError, pytest 8 its own ParseError (an Exception)
        # Case names hold only letters, digits and _ . / - (graphsafe.case), all identifier characters of pytest's
        # grammar, so any name is a valid one-word expression and the old substring match is its special case.
        raise ValueError(f"-k {pattern!r} is not a valid expression: {exc}") from None

    def selected(case: Case) -> bool:
        names = [name.lower() for name in keywords(case)]

        def matcher(identifier: str, /, **arguments: str | int | bool | None) -> bool:
            # pytest's `name(key=value)` form selects by marker arguments; cases have none.
            return not arguments and any(identifier.lower() in name for name in names)

        return expression.evaluate(matcher)

    return selected
