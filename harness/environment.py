"""The environment variables graphsafe reads, in one table, and the checks a run makes of its environment
before any case runs.

`VARIABLES` is the one list: `check_environment` validates every user-set one up front (the CLI turns a bad
value into exit 2 naming the variable and its allowed values, instead of a case's `crash` when the value is
first read mid-run), and `markdown_table` renders it for the docs. The readers parse values with the same
functions (`whole_number`, `positive_seconds`), so a value the check lets through is one the reader accepts.
Internal variables (parent to worker, the Makefile's repro target) are listed but never validated: graphsafe
sets them itself.

`check_build_cache` finds a build cache that cannot be written before any case runs. A run must be able to
replace a cache entry that fails its content check (harness/native/build.py), and a read-only cache turned
every case that builds a library into that case's verdict (an `eager_mismatch` "Read-only file system" for
each of the 11 cpu_moe cases), so a run with such a cache stops with a usage error naming the path rather
than falling back to a private cache: a fallback would rebuild every library on every run (cold builds take
6-24 s per family, reports/performance.md) and hide a misconfigured CI cache behind a warning.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PREFIX = "GRAPHSAFE_"


@dataclass(frozen=True)
class Variable:
    name: str
    meaning: str
    allowed: str  # the allowed values, as a usage error names them
    # None when the value is allowed, else what is wrong with it; None for internal variables.
    check: Callable[[str], str | None] | None = None
    internal: bool = False  # set by graphsafe (or its Makefile) for itself: never validated


def whole_number(name: str, text: str, minimum: int = 1) -> int:
    """`text` as a whole number >= minimum; ValueError naming the variable and the allowed values."""
    if not text.strip().isdigit() or int(text) < minimum:
        raise ValueError(f"{name}={text!r}: allowed values: a whole number >= {minimum}")
    return int(text)


def positive_seconds(name: str, text: str) -> float:
    """`text` as a finite number of seconds > 0; ValueError naming the variable and the allowed values."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name}={text!r}: allowed values: a finite number of seconds > 0")
    return value


def _parses(parse: Callable[[str, str], object], name: str) -> Callable[[str], str | None]:
    def check(text: str) -> str | None:
        try:
            parse(name, text)
        except ValueError:
            return "not allowed"
        return None

    return check


def _executable(text: str) -> str | None:
    return None if shutil.which(text) else "no such executable"


def _folder_path(text: str) -> str | None:
    path = Path(text).expanduser()
    return "names a file, not a folder" if path.exists() and not path.is_dir() else None


# An nvcc target (sm_90, sm_90a, sm_100f, compute_90) or a ROCm one (gfx942, gfx90a): what device_arch gives.
_ARCH = re.compile(r"(sm|compute)_[0-9]+[af]?|gfx[0-9a-f]+")


def _arch(text: str) -> str | None:
    return None if _ARCH.fullmatch(text) else "not an architecture name"


def _one_of(*values: str) -> Callable[[str], str | None]:
    return lambda text: None if text in values else "not allowed"


VARIABLES: tuple[Variable, ...] = (
    Variable(
        "GRAPHSAFE_CACHE_DIR",
        "where built native libraries (and per-machine timings) are kept; default "
        "$XDG_CACHE_HOME/graphsafe/build, else ~/.cache/graphsafe/build",
        "a folder graphsafe can create and write",
        _folder_path,
    ),
    Variable(
        "GRAPHSAFE_ARCH",
        "the GPU architecture to compile for instead of the visible device's (compile-only checks)",
        "an nvcc or ROCm target: sm_<NN> with an optional a or f suffix (sm_90a), compute_<NN>, gfx<id> (gfx942)",
        _arch,
    ),
    Variable(
        "GRAPHSAFE_NVCC",
        "the nvcc to build CUDA sources with (default: nvcc on PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)",
        "an executable: a path, or a name on PATH",
        _executable,
    ),
    Variable(
        "GRAPHSAFE_HIPCC",
        "the hipcc to build HIP sources with (default: hipcc on PATH, $ROCM_PATH/bin, /opt/rocm/bin)",
        "an executable: a path, or a name on PATH",
        _executable,
    ),
    Variable(
        "GRAPHSAFE_SEARCH_EXAMPLES",
        "Hypothesis examples per size search (the sweep gets three times as many)",
        "a whole number >= 1",
        _parses(whole_number, "GRAPHSAFE_SEARCH_EXAMPLES"),
    ),
    Variable(
        "GRAPHSAFE_SEARCH_SECONDS",
        "the time cap of one case's size search",
        "a finite number of seconds > 0",
        _parses(positive_seconds, "GRAPHSAFE_SEARCH_SECONDS"),
    ),
    Variable(
        "GRAPHSAFE_SEARCH_DB",
        "where failing sizes found by a search are kept between runs (default .hypothesis/graphsafe)",
        "a folder path",
        _folder_path,
    ),
    Variable(
        "GRAPHSAFE_SPIN_LIMIT_S",
        "the watchdog of the built-in spinning-kernel control (kernels/platform): seconds before it lets go",
        "a finite number of seconds > 0",
        _parses(positive_seconds, "GRAPHSAFE_SPIN_LIMIT_S"),
    ),
    Variable(
        "GRAPHSAFE_REQUIRE_BROWSER",
        "graphsafe's own tests: 1 makes a missing headless browser a failure (CI), not a skip",
        "1 or 0",
        _one_of("0", "1"),
    ),
    Variable("GRAPHSAFE_RESULT_FD", "a worker's answer pipe (set by the runner)", "", internal=True),
    Variable("GRAPHSAFE_WORKER_LOAD", "what a worker loads (set by the runner)", "", internal=True),
    Variable("GRAPHSAFE_PARENT_PID", "the run a worker belongs to (set by the runner)", "", internal=True),
    Variable("GRAPHSAFE_REPRO_CASE", "`make repro CASE=...` (checked by the Makefile)", "", internal=True),
    Variable("GRAPHSAFE_REPRO_SEED", "`make repro SEED=...` (checked by the Makefile)", "", internal=True),
)
BY_NAME: dict[str, Variable] = {v.name: v for v in VARIABLES}


def environment_problems(environ: dict[str, str] | None = None) -> list[str]:
    """One message per user-set variable whose value is not allowed, naming it and the allowed values. An
    empty value counts as unset, as every reader takes it."""
    env = dict(os.environ) if environ is None else environ
    problems = []
    for variable in VARIABLES:
        value = env.get(variable.name)
        if not value or variable.internal or variable.check is None:
            continue
        why = variable.check(value)
        if why is not None:
            problems.append(f"{variable.name}={value!r}: {why}; allowed values: {variable.allowed}")
    return problems


def unknown_variables(environ: dict[str, str] | None = None) -> list[str]:
    """GRAPHSAFE_* names set here that graphsafe does not read (a typo, or a variable of another version)."""
    env = dict(os.environ) if environ is None else environ
    return sorted(n for n in env if n.startswith(PREFIX) and n not in BY_NAME)


def check_build_cache(root: Path) -> str | None:
    """None when `root` (the build cache) exists or can be made, and a file can be created in it; else a
    message naming the path, the reason and what to do."""
    where = (
        f"GRAPHSAFE_CACHE_DIR={os.environ['GRAPHSAFE_CACHE_DIR']!r}"
        if os.environ.get("GRAPHSAFE_CACHE_DIR")
        else f"the build cache {str(root)!r}"
    )
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".graphsafe-write-check-", dir=root)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        return (
            f"{where} cannot be written ({reason}{': ' + exc.filename if exc.filename else ''}): "
            "graphsafe builds and, when a cached library fails its content check, rebuilds native libraries "
            "there; set GRAPHSAFE_CACHE_DIR to a folder you can write"
        )
    return None


def before_a_run() -> tuple[list[str], list[str]]:
    """(errors, warnings) about this process's environment for a command that runs cases: the variables'
    values and the build cache (errors), GRAPHSAFE_* names graphsafe does not read (warnings)."""
    from graphsafe.native.build import cache_dir

    errors = environment_problems()
    if not any(e.startswith("GRAPHSAFE_CACHE_DIR=") for e in errors):
        cache = check_build_cache(cache_dir())
        if cache is not None:
            errors.append(cache)
    known = ", ".join(v.name for v in VARIABLES if not v.internal)
    warnings = [
        f"{name} is set but graphsafe does not read it (it reads {known})" for name in unknown_variables()
    ]
    return errors, warnings


def markdown_table() -> str:
    """The user-set variables as a Markdown table (name, meaning, allowed values), for the docs."""
    lines = ["| variable | what it sets | allowed values |", "|---|---|---|"]
    lines += [f"| `{v.name}` | {v.meaning} | {v.allowed} |" for v in VARIABLES if not v.internal]
    return "\n".join(lines)


__all__ = [
    "VARIABLES",
    "Variable",
    "before_a_run",
    "check_build_cache",
    "environment_problems",
    "markdown_table",
    "positive_seconds",
    "unknown_variables",
    "whole_number",
]
