"""Real-world conformance suite: public libraries' code called the way their users call it.

Each case's `note` gives its expected verdict and the library source line that decides it (a host read, a
data-dependent shape, or only device work). The libraries are optional (the `real-world` extra in
pyproject.toml: `pip install 'graphsafe[real-world]'`, or `pip install -e '.[real-world]'` in a checkout).
Their cases register whether or not the library is installed, and name it in `requires`
(`import:transformers`, or `import:<module>.<attribute>` for a feature older versions lack): where it is
missing or too old, a run skips them with that reason and lists them, never losing them silently (a nightly
comparison counts a case that vanished as a regression). `SKIPPED` names the parts of a module that are not
cases here at all (implementations that need hub downloads).

Run it alone: `graphsafe verify --case graphsafe.cases.real_world` (add `--backend gpu` on a GPU).
"""

from __future__ import annotations

import importlib

SKIPPED: dict[str, str] = {}  # "<module>:<part>" left out of the suite -> why


def _register_all() -> None:
    """Import every module of the suite, so that naming the package (`--case graphsafe.cases.real_world`) runs all of it."""
    import pkgutil

    for info in pkgutil.iter_modules(__path__, prefix=__name__ + "."):
        if not info.name.rsplit(".", 1)[-1].startswith(("_", "test_")):
            importlib.import_module(info.name)


_register_all()
