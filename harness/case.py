"""Cases: the public `Case` record, its validation, the registry, and loading case files.

A case is data: how to make inputs for a seed, the op, an optional independent reference, a tolerance and
the verdict it is expected to get. Every problem with a case definition raises CaseError naming the case and
the field, so a user's case file fails with one clear line instead of a traceback deep in the protocol.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib
import importlib.util
import inspect
import math
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from graphsafe import requirements
from graphsafe.errors import CaseError
from graphsafe.sizes import validate_sizes
from graphsafe.suite_config import default_suites
from graphsafe.verdicts import SEVERITY, VERDICTS

USER_MODULE_PREFIX = "graphsafe_user_cases_"
# The documented case-name alphabet: safe unquoted in a shell, a pytest id, a file name and a Markdown cell.
CASE_NAME = re.compile(r"[A-Za-z0-9_./-]+")
InputFactory = Callable[[int, torch.device], Mapping[str, torch.Tensor]]


# The `exclusive` name of cases whose device work waits on the host (the built-in suite's CPU-expert
# handshakes, FreeToken issue #350's): one such case at a time in a run (Case.exclusive says why).
DEVICE_WAITS = "device_waits"


@dataclass(frozen=True)
class Case:
    """One graph-safety check. The first six fields are the public contract; the rest are optional extensions.

    name: unique identifier (also the pytest id and the `repro` argument).
    make_inputs(seed, device) -> dict[str, Tensor]: every input not in `static_inputs` must differ between seeds.
    op(**inputs) -> Tensor | tuple[Tensor, ...]: the code under test.
    reference(**inputs): an independent oracle; None compares graph replay with eager only.
    tolerance: relative-error threshold overriding the per-dtype default (say why in `note`).
    expect: the verdict this case should get ("pass" for correct ops, a failure verdict for negative controls).
    bit_exact: demand bitwise equality (eager vs reference, graph vs eager) instead of a tolerance.
    static_inputs: inputs that stay the same between A and B (weights); they are still copied in place.
    mutates: inputs the op is declared to write; others must come back unmodified.
    family: report grouping. Default: the name of the module that registered the case, relative to its suite
        (cases/platform/runtime_nodes.py in the suite `cases` gives `platform.runtime_nodes`), or a case file's
        stem. An unregistered case gets the same name for the module that defines make_inputs.
    note: why the tolerance or the expectation is what it is.
    deadline: seconds before an isolated run of this case is killed and gets `timeout` (default: the CLI's).
    replay_tolerance: relative-error threshold for graph replay vs eager, which are otherwise compared bit-exact;
        only for kernels that are nondeterministic run to run (atomics, split-K), and `note` must say why.
    rebuilds, live_graphs: stress this case always gets, whatever the run's --rebuilds/--live-graphs (the larger
        of the two applies); for cases that check the runtime's rebuild and live-graph behaviour themselves.
    sizes: a size space to search instead of one fixed shape, {"T": range(1, 257), "E": st.integers(1, 16)}
        (a range or a Hypothesis strategy of ints per name); make_inputs then takes them as keyword arguments,
        make_inputs(seed, device, *, T, E), and `check` searches the space and shrinks a failure to the
        smallest failing sizes (harness/search.py).
    requires: what the case needs from the machine, e.g. ("gpu", "sm_90", "fp8", "devices>=2")
        (graphsafe.requirements lists the vocabulary); where one is missing the pytest plugin skips the case
        with the reason.
    Engine-style extensions (harness/engine.py runs the last three; cases/engine_style.py has a buggy/fixed pair of each):
    prepare(inputs) -> None: a host-side step run on the inputs before the capture, before every replay (on
        the graph's static inputs, after B is copied in) and before every eager call (on its copy), as an
        engine runs FlashInfer's plan() or its attention-metadata preparation before each replay.
    buckets: capture sizes, (1, 2, 4, 8): one graph per bucket, all in one memory pool; make_inputs takes
        `rows` (make_inputs(seed, device, *, rows)); each replay copies fewer valid rows into a bucket's
        buffers (the padding rows of float inputs are poisoned) and compares the valid rows.
    make_module(device) -> nn.Module: a stateful module (buffers, caches) the op steps: op(module, **inputs).
        One capture of a step, then `steps` replays in a row against an eager copy of the module, comparing
        outputs and every buffer after each step.
    steps: decode steps per replay sequence of a make_module case (0: graphsafe.engine.DEFAULT_STEPS).
    exclusive: a name shared by cases that must not run at the same time as each other in one isolated run
        ("" none). For cases whose device work waits on the host: with several worker processes on one GPU,
        such cases slow each other down by an order of magnitude (on the H200 one CPU-expert handshake case
        alone takes 0.1-0.7 s: reports/performance.md). Other cases
        still run beside them, and the group starts as early as its
        summed time says (runner.longest_first). DEVICE_WAITS is the built-in suite's name for such cases,
        for users' cases too.
    launch_diff: run the launch diff (harness/launch_diff.py) on every check of this case, as `verify --explain`
        does for all: the graph captured with A is compared with a capture made for B, and a kernel argument,
        grid or node that differs fails the case (stale_replay) with a finding naming it, even where the
        outputs agree (a frozen value that happens to give the right output for these inputs).
    """

    name: str
    make_inputs: InputFactory
    op: Callable[..., Any]
    reference: Callable[..., Any] | None = None
    tolerance: float | None = None
    expect: str = "pass"
    bit_exact: bool = False
    static_inputs: tuple[str, ...] = ()
    mutates: tuple[str, ...] = ()
    family: str = ""
    note: str = ""
    deadline: float | None = None
    rebuilds: int = 0
    live_graphs: int = 0
    replay_tolerance: float | None = None
    requires: tuple[str, ...] = ()
    sizes: Mapping[str, Any] | None = dataclasses.field(default=None, hash=False)
    prepare: Callable[[dict[str, torch.Tensor]], None] | None = None
    buckets: tuple[int, ...] = ()
    make_module: Callable[[torch.device], torch.nn.Module] | None = None
    steps: int = 0
    exclusive: str = ""
    launch_diff: bool = False
    _family_given: bool = dataclasses.field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        label = self.name if isinstance(self.name, str) and self.name else "<unnamed>"
        if not isinstance(self.name, str) or not self.name.strip():
            raise CaseError(label, "name", f"must be a non-empty string, got {self.name!r}")
        if not CASE_NAME.fullmatch(self.name):
            bad = sorted({ch for ch in self.name if not CASE_NAME.fullmatch(ch)})
            raise CaseError(
                label,
                "name",
                f"may hold only letters, digits and _ . / - (no whitespace: it is a pytest id, a CLI argument, a make "
                f"variable and a shell word in repro commands); {''.join(bad)!r} is not allowed",
            )
        for field in ("make_inputs", "op"):
            if not callable(getattr(self, field)):
                raise CaseError(label, field, f"must be callable, got {type(getattr(self, field)).__name__}")
        if self.reference is not None and not callable(self.reference):
            raise CaseError(
                label, "reference", f"must be callable or None, got {type(self.reference).__name__}"
            )
        if self.tolerance is not None:
            ok_type = isinstance(self.tolerance, int | float) and not isinstance(self.tolerance, bool)
            if not ok_type or not math.isfinite(self.tolerance) or self.tolerance <= 0:
                raise CaseError(
                    label, "tolerance", f"must be a finite float > 0 or None, got {self.tolerance!r}"
                )
        if self.replay_tolerance is not None:
            value = self.replay_tolerance
            ok_type = isinstance(value, int | float) and not isinstance(value, bool)
            if not ok_type or not math.isfinite(value) or value <= 0:
                raise CaseError(
                    label, "replay_tolerance", f"must be a finite float > 0 or None, got {value!r}"
                )
            if not isinstance(self.note, str) or not self.note.strip():
                raise CaseError(
                    label,
                    "note",
                    "must say why replay and eager may differ when replay_tolerance is set (which kernel is "
                    "nondeterministic, and how)",
                )
        if not isinstance(self.expect, str) or self.expect not in VERDICTS:
            raise CaseError(
                label, "expect", f"unknown verdict {self.expect!r}; allowed values: {', '.join(SEVERITY)}"
            )
        if self.deadline is not None and (
            not isinstance(self.deadline, int | float)
            or isinstance(self.deadline, bool)
            or self.deadline <= 0
        ):
            raise CaseError(
                label, "deadline", f"must be a number of seconds > 0 or None, got {self.deadline!r}"
            )
        if not isinstance(self.exclusive, str) or (
            self.exclusive and not CASE_NAME.fullmatch(self.exclusive)
        ):
            raise CaseError(
                label,
                "exclusive",
                f"must be a name of letters, digits and _ . / - or '' (none), got {self.exclusive!r}",
            )
        for field in ("rebuilds", "live_graphs"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise CaseError(label, field, f"must be a whole number >= 0, got {value!r}")
        object.__setattr__(self, "requires", requirements.validate(label, self.requires))
        if self.sizes is not None:
            object.__setattr__(self, "sizes", validate_sizes(label, self.sizes, self.make_inputs))
        _validate_engine_fields(self, label)
        for field in ("bit_exact", "launch_diff"):
            if not isinstance(getattr(self, field), bool):
                raise CaseError(label, field, f"must be True or False, got {getattr(self, field)!r}")
        for field in ("static_inputs", "mutates"):
            value = getattr(self, field)
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                raise CaseError(label, field, f"must be a tuple of input names, got {value!r}")
            object.__setattr__(self, field, tuple(value))
        if not isinstance(self.family, str):
            raise CaseError(label, "family", f"must be a string, got {self.family!r}")
        object.__setattr__(self, "_family_given", bool(self.family))
        if not self.family:
            # Provisional: registration replaces it with the registering module's family.
            object.__setattr__(self, "family", _family_of_function(self.make_inputs))

    def inputs(self, seed: int, device: torch.device, **sizes: int) -> dict[str, torch.Tensor]:
        """Call make_inputs and check that it returned a dict of tensors with declared names (`sizes`: the
        `rows` of a bucketed case)."""
        if self.sizes is not None:
            raise CaseError(
                self.name,
                "sizes",
                "make_inputs takes the declared sizes: graphsafe.check searches them, "
                "graphsafe.search.bind(case, sizes) fixes them",
            )
        if self.buckets and "rows" not in sizes:
            raise CaseError(
                self.name, "buckets", "make_inputs takes rows=: call inputs(seed, device, rows=n)"
            )
        made = self.make_inputs(seed, device, **sizes)
        if not isinstance(made, Mapping):
            raise CaseError(
                self.name, "make_inputs", f"must return dict[str, Tensor], got {type(made).__name__}"
            )
        result: dict[str, torch.Tensor] = {}
        for key, value in made.items():
            if not isinstance(key, str):
                raise CaseError(self.name, "make_inputs", f"input names must be strings, got {key!r}")
            if not isinstance(value, torch.Tensor):
                raise CaseError(
                    self.name,
                    "make_inputs",
                    f"input {key!r} is {type(value).__name__}, not a Tensor "
                    "(bind non-tensor parameters in `op` with functools.partial or a closure)",
                )
            result[key] = value
        for field in ("static_inputs", "mutates"):
            unknown = [n for n in getattr(self, field) if n not in result]
            if unknown:
                raise CaseError(
                    self.name, field, f"names {unknown} are not inputs; inputs are {sorted(result)}"
                )
        return result


def _validate_engine_fields(case: Case, label: str) -> None:
    """prepare / buckets / make_module / steps (the engine-style extensions)."""
    if case.prepare is not None and not callable(case.prepare):
        raise CaseError(label, "prepare", f"must be callable or None, got {type(case.prepare).__name__}")
    buckets = case.buckets
    if isinstance(buckets, int) or not isinstance(buckets, tuple | list):
        raise CaseError(
            label, "buckets", f"must be a tuple of row counts such as (1, 2, 4, 8), got {buckets!r}"
        )
    if buckets:
        ok = all(isinstance(b, int) and not isinstance(b, bool) and b >= 1 for b in buckets)
        if not ok or len(set(buckets)) != len(buckets):
            raise CaseError(label, "buckets", f"must be distinct whole numbers >= 1, got {buckets!r}")
        try:
            inspect.signature(case.make_inputs).bind(0, None, rows=1)
        except TypeError:
            raise CaseError(
                label,
                "make_inputs",
                "must take the keyword `rows` in a bucketed case: make_inputs(seed, device, *, rows)",
            ) from None
        except ValueError:  # no signature to check (a builtin): the first call will tell
            pass
        if case.sizes is not None or case.make_module is not None:
            raise CaseError(label, "buckets", "cannot be combined with sizes or make_module")
        object.__setattr__(case, "buckets", tuple(sorted(buckets)))
    if case.make_module is not None and not callable(case.make_module):
        raise CaseError(
            label, "make_module", f"must be callable or None, got {type(case.make_module).__name__}"
        )
    steps = case.steps
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        raise CaseError(label, "steps", f"must be a whole number >= 0, got {steps!r}")
    if steps and case.make_module is None:
        raise CaseError(
            label, "steps", "applies to a case with make_module (a stateful module stepped in a loop)"
        )
    if case.make_module is not None and case.sizes is not None:
        raise CaseError(label, "make_module", "cannot be combined with sizes")


# Root modules of the suites loaded or configured in this process (graphsafe.suites adds them before importing
# a suite), so a module below one gets a family relative to it whichever way it was imported.
_SUITE_ROOTS: list[str] = []


def add_suite_root(module_name: str) -> None:
    if module_name not in _SUITE_ROOTS:
        _SUITE_ROOTS.append(module_name)


def belongs_to(origin: str, module_name: str) -> bool:
    """Is `origin` the module `module_name` or a module below it?"""
    return origin == module_name or origin.startswith(module_name + ".")


def family_of_module(module: str) -> str:
    """The report family of cases defined in `module` (see Case.family)."""
    if module.startswith(USER_MODULE_PREFIX):
        return module[len(USER_MODULE_PREFIX) :].rsplit("_", 1)[0]  # the file's stem, without the path digest
    if module == "__main__":
        main_file = getattr(sys.modules.get("__main__"), "__file__", None)
        return Path(main_file).stem if main_file else "user"
    for root in sorted(_suite_roots(), key=len, reverse=True):  # the innermost suite wins
        if module.startswith(root + "."):
            return module[len(root) + 1 :]
        if module == root:
            return root.rsplit(".", 1)[-1]
    return module.rsplit(".", 1)[-1] or "user"


_CONFIGURED_ROOTS_ADDED = [False]


def _suite_roots() -> list[str]:
    """Suite roots known so far plus the configured default suites, each under its module's own name (an
    editable install serves `graphsafe.cases` as the module `cases`, whose cases register as `cases.*`)."""
    if not _CONFIGURED_ROOTS_ADDED[0]:
        _CONFIGURED_ROOTS_ADDED[0] = True
        for name in default_suites():
            add_suite_root(name)
            # An unimportable suite fails where it is loaded, with its reason.
            with contextlib.suppress(Exception):
                add_suite_root(importlib.import_module(name).__name__)
    return _SUITE_ROOTS


def _family_of_function(fn: Callable[..., Any]) -> str:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return family_of_module(getattr(inspect.unwrap(fn), "__module__", None) or "user")


class Registry:
    """Name -> Case, in registration order. One process-wide instance backs `register`."""

    def __init__(self) -> None:
        self._cases: dict[str, Case] = {}
        self._origin: dict[str, str] = {}  # case name -> module that registered it

    def add(self, case: Case, origin: str = "") -> Case:
        if not isinstance(case, Case):
            raise CaseError(
                str(getattr(case, "name", "<unknown>")), "case", "register() takes a graphsafe.Case"
            )
        if case.name in self._cases and self._cases[case.name] is not case:
            raise CaseError(case.name, "name", "is already registered by another case; names must be unique")
        self._cases[case.name] = case
        self._origin.setdefault(case.name, origin)
        if origin and not case._family_given:
            object.__setattr__(case, "family", family_of_module(self._origin[case.name]))
        return case

    def origin(self, name: str) -> str:
        return self._origin.get(name, "")

    def get(self, name: str) -> Case:
        try:
            return self._cases[name]
        except KeyError:
            raise KeyError(f"no case named {name!r}; `graphsafe list` lists them") from None

    def names(self) -> list[str]:
        return list(self._cases)

    def cases(self) -> list[Case]:
        return list(self._cases.values())


REGISTRY = Registry()


def register(case: Case) -> Case:
    """Add a case to the process-wide registry; returns it so it can be used as an expression."""
    caller = sys._getframe(1).f_globals.get("__name__", "")
    return REGISTRY.add(case, origin=caller)


class CaseFileError(Exception):
    """A case file or module could not be loaded (CLI exit code 2)."""


# sha256 of each case file's bytes when this process loaded it, by resolved path: what the run's fingerprint
# records, so a file edited while the run goes is recorded as the version that ran, not the edited one.
_LOADED_DIGESTS: dict[str, str] = {}


def loaded_file_digests() -> dict[str, str]:
    """{resolved path: sha256 hex} of every case file or case module file loaded by this process so far."""
    return dict(_LOADED_DIGESTS)


def _remember_digest(path: Path, executing: bool) -> None:
    """`executing`: the file is about to run (its digest replaces any earlier one); else it ran before
    (an imported module), and a digest taken then is kept."""
    with contextlib.suppress(OSError):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if executing:
            _LOADED_DIGESTS[str(path.resolve())] = digest
        else:
            _LOADED_DIGESTS.setdefault(str(path.resolve()), digest)


def load_case_source(source: str) -> list[Case]:
    """Import a case file (path ending in .py) or module (dotted name) and return the cases it registered.

    A module imported earlier (the built-in suite, say) registered its cases then; they are found again by
    the module they belong to, so asking for a module twice gives the same cases.
    """
    before = set(REGISTRY.names())
    try:
        if source.endswith(".py") or "/" in source or Path(source).exists():
            module_name = _import_file(Path(source))
        else:
            importlib.import_module(source)
            module_name = source
            origin = getattr(getattr(sys.modules.get(source), "__spec__", None), "origin", None)
            if origin and Path(origin).is_file():
                _remember_digest(Path(origin), executing=False)
    except CaseError:
        raise
    except CaseFileError:
        raise
    except Exception as exc:  # any import-time failure of a user's file is a load error, with its reason
        raise CaseFileError(f"cannot load case source {source!r}: {type(exc).__name__}: {exc}") from exc
    found = [
        c
        for c in REGISTRY.cases()
        if c.name not in before or belongs_to(REGISTRY.origin(c.name), module_name)
    ]
    if not found:
        raise CaseFileError(
            f"case source {source!r} registered no cases (call graphsafe.register(Case(...)))"
        )
    return found


def _import_file(path: Path) -> str:
    if not path.is_file():
        raise CaseFileError(f"case file {str(path)!r} does not exist")
    # A stable synthetic name per file: the same file loaded twice is one module, two files never collide.
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]
    module_name = f"{USER_MODULE_PREFIX}{path.stem.replace('-', '_')}_{digest}"
    if module_name in sys.modules:
        return module_name
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise CaseFileError(f"case file {str(path)!r} is not an importable Python file")
    # The file's own imports (`from kernels import my_op` in the user's repository) resolve from its package
    # root, the first folder above it without an __init__.py: pytest's rule for test files. A console script
    # (`graphsafe verify`) starts with its bin folder on sys.path, not the working directory.
    root = path.resolve().parent
    while (root / "__init__.py").is_file() and root.parent != root:
        root = root.parent
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    module = importlib.util.module_from_spec(spec)
    _remember_digest(path, executing=True)  # the bytes exec_module reads next
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module_name
