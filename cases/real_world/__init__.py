"""Real-world conformance suite: public libraries' code called the way their users call it.

Each case's `note` gives its expected verdict and the library source line that decides it (a host read, a
data-dependent shape, or only device work). The libraries are optional (the `real-world` extra in
pyproject.toml: `pip install -e '.[real-world]'`); a module whose library is missing registers nothing and
says so: `SKIPPED` maps the module to the reason, and a RealWorldSkipWarning is raised at import.

Run it alone: `graphsafe verify --case graphsafe.cases.real_world` (add `--backend gpu` on a GPU).
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from types import ModuleType

SKIPPED: dict[str, str] = {}  # module registering no cases -> why


class RealWorldSkipWarning(UserWarning):
    """A real-world case module registered nothing because a library it calls is not installed."""


def optional_library(name: str, module: str) -> ModuleType | None:
    """Import `name` for the case module `module`; None, recorded in SKIPPED and warned, when it is absent."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        _skip(module, f"{name} is not installed ({exc})")
        return None


def installed_library(name: str, module: str) -> bool:
    """Whether `name` is installed, without importing it; when it is not, recorded in SKIPPED and warned as
    optional_library does. For a library the cases import only when their op first runs, because importing
    it costs more than the rest of the suites' loading (torch_geometric: 6-7 s on the H200, most of it
    torch._dynamo and sympy, reports/performance.md)."""
    if importlib.util.find_spec(name) is not None:
        return True
    _skip(module, f"{name} is not installed")
    return False


def lacks_feature(module: str, library: ModuleType, feature: str) -> None:
    """Record and warn, as for a missing library, that the installed `library` lacks `feature`, which the
    module's cases call; the module then registers nothing (its driver would raise inside the op, which the
    protocol reports as the op's own eager failure)."""
    version = getattr(library, "__version__", "of unknown version")
    _skip(module, f"{library.__name__} {version} has no {feature}")


def _skip(module: str, why: str) -> None:
    reason = f"{why}; install the extra: pip install -e '.[real-world]'"
    SKIPPED[module] = reason
    # stacklevel 3: the case module's line that asked for the library.
    warnings.warn(f"{module}: cases skipped: {reason}", RealWorldSkipWarning, stacklevel=3)


def _register_all() -> None:
    """Import every module of the suite, so that naming the package (`--case graphsafe.cases.real_world`) runs all of it."""
    import pkgutil

    for info in pkgutil.iter_modules(__path__, prefix=__name__ + "."):
        if not info.name.rsplit(".", 1)[-1].startswith(("_", "test_")):
            importlib.import_module(info.name)


_register_all()
