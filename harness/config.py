"""[tool.graphsafe] in a repository's pyproject.toml: its cases and per-repository defaults, read by the CLI
and the pytest plugin alike.

Found as pytest finds its own: from the working directory upwards, the first pyproject.toml that has a
[tool.graphsafe] table is the configuration (one without the table is passed over, so a sub-package's own
pyproject.toml does not hide the repository's); none found: the defaults below, relative to the working
directory. Paths in the table are relative to the folder of the pyproject.toml that holds it. Command-line
flags override the table.

    [tool.graphsafe]
    cases = ["tests/graphsafe_cases.py", "mypkg.graph_cases"]  # files or module names
    backend = "auto"                   # auto | cpu | gpu                  (--backend)
    replays = 3                        # whole number >= 1                 (--replays)
    seed = 0                           # whole number >= 0                 (--seed)
    runs-dir = "graphsafe-runs"        # one <time>-<host>/ folder per run (--report-dir names one run's folder)
    baseline = "graphsafe-baselines"   # folder of <platform>.csv, or one .csv   (report baseline/nightly --baseline)

`cases`: `graphsafe verify` and `graphsafe list` without --case run these instead of the built-in suite, and
the pytest plugin collects them. A module name is imported with the table's folder first on the import path
(in the run's worker processes too). An unknown key or a bad value is a ConfigError that names the file, the
key and the allowed values (the CLI exits 2, pytest stops with a usage error).

Nothing here imports torch: the pytest plugin reads this at start-up.
"""

from __future__ import annotations

import os
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONFIG_FILE = "pyproject.toml"
TABLE = "tool.graphsafe"
# The --backend choices (graphsafe.backends.BACKEND_NAMES, which imports torch; a test keeps the two equal).
BACKENDS = ("auto", "cpu", "gpu")
# The largest --replays (graphsafe.cli takes it from here): a count above it is a typo or a probe, never a plan.
MAX_REPEATS = 1_000_000
DEFAULT_RUNS_DIR = "graphsafe-runs"
DEFAULT_BASELINE = "graphsafe-baselines"
KEYS = ("cases", "backend", "replays", "seed", "runs-dir", "baseline")
_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class ConfigError(Exception):
    """A [tool.graphsafe] table (or the pyproject.toml holding it) that cannot be used; the message names the
    file, the key and what is allowed."""


@dataclass(frozen=True)
class Settings:
    """The configuration in force: the table's values, or the defaults where it has none."""

    path: Path | None  # the pyproject.toml that holds the table; None: no table found
    cases: tuple[str, ...] = ()  # absolute file paths and module names
    backend: str | None = None
    replays: int | None = None
    seed: int | None = None
    runs_dir: Path = Path(DEFAULT_RUNS_DIR)
    baseline: Path = Path(DEFAULT_BASELINE)

    @property
    def root(self) -> Path | None:
        return None if self.path is None else self.path.parent

    def put_case_modules_on_path(self) -> None:
        """Make the table's module names importable: its folder first on sys.path, and on PYTHONPATH for the
        worker processes a run starts."""
        if self.root is None or all(_is_file_source(s) for s in self.cases):
            return
        root = str(self.root)
        if root not in sys.path:
            sys.path.insert(0, root)
        parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        if root not in parts:
            os.environ["PYTHONPATH"] = os.pathsep.join([root, *parts])


def find(start: Path | None = None) -> Path | None:
    """The first pyproject.toml with a [tool.graphsafe] table in `start` (default: the working directory) or
    a folder above it; None when there is none."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / CONFIG_FILE
        if candidate.is_file() and _table(candidate) is not None:
            return candidate
    return None


def load(start: Path | None = None) -> Settings:
    """The settings in force for a run started in `start` (default: the working directory)."""
    path = find(start)
    if path is None:
        base = (start or Path.cwd()).resolve()
        return Settings(path=None, runs_dir=base / DEFAULT_RUNS_DIR, baseline=base / DEFAULT_BASELINE)
    table = _table(path)
    assert table is not None  # find() returned it for having one
    return parse(table, path)


def parse(table: dict[str, Any], path: Path) -> Settings:
    """Check a [tool.graphsafe] table read from `path` and resolve its paths against path's folder."""
    where = f"{path} [{TABLE}]"
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise ConfigError(
            f"{where}: unknown key {', '.join(map(repr, unknown))}; allowed keys: {', '.join(KEYS)}"
        )
    root = path.parent.resolve()
    return Settings(
        path=path.resolve(),
        cases=_cases(table.get("cases", []), root, where),
        backend=_choice(table, "backend", BACKENDS, where),
        replays=_whole(table, "replays", 1, MAX_REPEATS, where),
        seed=_whole(table, "seed", 0, None, where),
        runs_dir=root / _path_text(table, "runs-dir", DEFAULT_RUNS_DIR, where),
        baseline=root / _path_text(table, "baseline", DEFAULT_BASELINE, where),
    )


def _table(path: Path) -> dict[str, Any] | None:
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    table = data.get("tool", {}).get("graphsafe") if isinstance(data.get("tool"), dict) else None
    if table is not None and not isinstance(table, dict):
        raise ConfigError(f"{path}: [{TABLE}] must be a table, got {type(table).__name__}")
    return table


def _is_file_source(source: str) -> bool:
    return source.endswith(".py") or "/" in source or os.sep in source


def _cases(value: object, root: Path, where: str) -> tuple[str, ...]:
    allowed = (
        'a list of case files (relative to this pyproject.toml) or module names, e.g. ["tests/cases.py"]'
    )
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{where}: cases = {value!r}: must be {allowed}")
    sources: list[str] = []
    for source in value:
        if _is_file_source(source):
            file = (root / source).resolve()
            if not file.is_file():
                raise ConfigError(f"{where}: cases: {source!r} is not a file (looked for {file})")
            sources.append(str(file))
        elif _MODULE_NAME.match(source):
            sources.append(source)
        else:
            raise ConfigError(
                f"{where}: cases: {source!r} is neither a .py file nor a module name; {allowed}"
            )
    return tuple(dict.fromkeys(sources))


def _choice(table: dict[str, Any], key: str, allowed: tuple[str, ...], where: str) -> str | None:
    value = table.get(key)
    if value is None or value in allowed:
        return value
    raise ConfigError(f"{where}: {key} = {value!r}: allowed values: {', '.join(allowed)}")


def _whole(table: dict[str, Any], key: str, minimum: int, maximum: int | None, where: str) -> int | None:
    value = table.get(key)
    if value is None:
        return None
    in_range = isinstance(value, int) and not isinstance(value, bool) and value >= minimum
    if not in_range or (maximum is not None and value > maximum):
        bound = f">= {minimum}" + ("" if maximum is None else f" and <= {maximum}")
        raise ConfigError(f"{where}: {key} = {value!r}: must be a whole number {bound}")
    return int(value)


def _path_text(table: dict[str, Any], key: str, default: str, where: str) -> str:
    value = table.get(key, default)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: {key} = {value!r}: must be a path (relative to this pyproject.toml)")
    return value


__all__ = ["BACKENDS", "KEYS", "ConfigError", "Settings", "find", "load", "parse"]
