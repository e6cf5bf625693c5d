"""graphsafe's Hypothesis profiles, and the check of HYPOTHESIS_PROFILE that the CLI makes before a run.

Three profiles, named under graphsafe's own prefix so they never replace a user's `dev`, `ci` or `nightly`:

    graphsafe-dev      10 examples: quick local iteration
    graphsafe-ci       25 examples, derandomized: what `make test` runs in CI (2 cores)
    graphsafe-nightly  500 examples: `make nightly`; it also switches graphsafe.search to its nightly budget

`HYPOTHESIS_PROFILE` is the one switch. The pytest plugin registers the three when a run names one of them
(HYPOTHESIS_PROFILE or --hypothesis-profile) or has imported Hypothesis already, and loads the one named in
HYPOTHESIS_PROFILE; importing Hypothesis costs 1-3 s on a 2-core machine, which a pytest run that asks
nothing of it must not pay (Hypothesis's own pytest plugin waits the same way). `graphsafe verify` reads the
variable for the shape-search budget and refuses a name that is neither graphsafe's nor registered with
Hypothesis (a typo would otherwise run the default budget silently).
"""

from __future__ import annotations

import os

ENV = "HYPOTHESIS_PROFILE"
DEV = "graphsafe-dev"
CI = "graphsafe-ci"
NIGHTLY = "graphsafe-nightly"
NAMES = (DEV, CI, NIGHTLY)


def register() -> None:
    """Register the three profiles with Hypothesis (imports it; registering again replaces them alike)."""
    from hypothesis import HealthCheck, settings

    settings.register_profile(DEV, max_examples=10, deadline=None)
    settings.register_profile(
        CI, max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
    )
    settings.register_profile(
        NIGHTLY,
        max_examples=500,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
        print_blob=True,
    )


def is_nightly() -> bool:
    return os.environ.get(ENV) == NIGHTLY


def check_env() -> None:
    """ValueError naming HYPOTHESIS_PROFILE and the allowed values when it names no known profile."""
    name = os.environ.get(ENV)
    if not name or name in NAMES:
        return
    from hypothesis import settings
    from hypothesis.errors import InvalidArgument

    try:
        settings.get_profile(name)
    except InvalidArgument:
        # Hypothesis offers no public list of its profiles; the names it registers itself are `default` and `ci`.
        registered = sorted(set(getattr(settings, "_profiles", {})) - set(NAMES))
        raise ValueError(
            f"{ENV}={name!r} is not a Hypothesis profile; allowed values: {', '.join([*NAMES, *registered])}"
        ) from None


__all__ = ["CI", "DEV", "ENV", "NAMES", "NIGHTLY", "check_env", "is_nightly", "register"]
