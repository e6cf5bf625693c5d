"""A case's declared size space (`Case.sizes`): the check a Case definition runs on it.

Kept apart from the search itself (harness/search.py) so that `Case` validates its fields without importing
the search, which in turn works on `Case`s.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Mapping
from typing import Any

from graphsafe.errors import CaseError


def validate_sizes(label: str, sizes: Any, make_inputs: Callable[..., Any]) -> dict[str, Any]:
    """Check a Case's `sizes` field; returns it as a plain dict. Raises CaseError naming the field."""
    if not isinstance(sizes, Mapping) or not sizes:
        raise CaseError(
            label,
            "sizes",
            f"must be a non-empty dict of size name -> range or Hypothesis strategy of ints, got {sizes!r}",
        )
    checked: dict[str, Any] = {}
    for name, space in sizes.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise CaseError(
                label, "sizes", f"size names must be identifiers (keyword arguments), got {name!r}"
            )
        if isinstance(space, range):
            if len(space) == 0:
                raise CaseError(label, "sizes", f"size {name!r} has an empty range {space!r}")
        elif not is_strategy(space):
            raise CaseError(
                label,
                "sizes",
                f"size {name!r} must be a range or a Hypothesis strategy, got {type(space).__name__}",
            )
        checked[name] = space
    try:
        inspect.signature(make_inputs).bind(0, None, **dict.fromkeys(checked, 1))
    except TypeError as exc:
        raise CaseError(
            label,
            "make_inputs",
            f"must accept the declared sizes as keyword arguments: make_inputs(seed, device, "
            f"{', '.join(f'{n}=...' for n in checked)}): {exc}",
        ) from exc
    except ValueError:  # no signature to check (a builtin): the first call says what is wrong
        pass
    return checked


def is_strategy(value: Any) -> bool:
    # A strategy object exists only once Hypothesis is imported: a suite of range-only size spaces (the
    # built-in one) registers its cases without importing Hypothesis in every worker.
    strategies = sys.modules.get("hypothesis.strategies")
    return strategies is not None and isinstance(value, strategies.SearchStrategy)
