"""Each case starts from the same process state: what a case changes process-wide is put back after it.

Workers run many cases in one process, as do `verify --no-isolate` and the pytest plugin. A case that left
the process changed decided the next case's verdict: after `os.chdir('/')` the next case was a `crash`
("harness error in worker: FileNotFoundError"), after `torch.set_default_dtype(torch.float64)` it was
`refused`, or it was silently checked at float64 with a 1e-12 threshold. `restored(case)` is the one context
manager every place that runs several cases in one process puts around each case. On leaving it puts back:

- the working directory and the environment variables (os.environ, set and unset);
- torch's default dtype, default device, grad mode and anomaly mode, CPU and CUDA autocast, deterministic
  algorithms and their warn_only, `torch.utils.deterministic.fill_uninitialized_memory`, the float32 matmul
  precision, the cuDNN, CUDA matmul, scaled-dot-product and oneDNN backend flags, and the thread count;
- the states of the CPU generator and of each initialized CUDA device's default generator (not named as a
  change: the protocol itself sets them, and a case may draw random numbers);
- monkeypatched module attributes: a public attribute of torch, torch.nn.functional, math or os that was
  rebound or deleted, and a function, class or module bound in a module the case's own functions (op,
  make_inputs, reference, prepare, make_module) come from. Data globals of those modules are the op's own
  state (the hidden-state probe's subject, and lazily filled caches): they are left alone. A rebinding by a
  library the case imported (the new value comes from a module first imported during the case) is kept and
  named: importing torch_geometric rebinds torch.index_select and torch.select, and a later case finds the
  library imported, patch and all, whether or not it ran alone; taking the patch back would make it differ.

The changes are returned (`Changes.note()`, one line naming the case and each change); the runners append the
note to the case's detail (results.csv `detail`, first row of the case) and print it on stderr. What cannot be
put back makes `Changes.unrestorable` non-empty, and a worker then exits after its result so that the next
case runs in a fresh one: a working directory that no longer exists, inference mode left on, a torch function
or dispatch mode left on the mode stack, a changed inter-op thread count (torch refuses to set it twice).

Cost: a snapshot and its comparison take 0.2-0.5 ms per case on the busy 2-core test box, where a small
case's check takes 4-15 ms (about 5%; a loop of 300 of each, same process): the module attributes are
compared as lists of values in C, the environment's bytes dictionary is copied whole.
Not covered: attributes of classes (torch.Tensor methods: torch itself rebinds some lazily), modules other
than those named above, signal handlers, sys.path and sys.modules, C-level state of extensions.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional

_MISSING = object()
_SHARED_MODULES: tuple[types.ModuleType, ...] = (torch, torch.nn.functional, math, os)
_CASE_FUNCTIONS = ("op", "make_inputs", "reference", "prepare", "make_module")


@dataclass(frozen=True)
class _Flag:
    name: str
    get: Callable[[], Any]
    put: Callable[[Any], None] | None  # None: it cannot be set back (the process must be replaced)


def _set_deterministic(value: tuple[bool, bool]) -> None:
    torch.use_deterministic_algorithms(value[0], warn_only=value[1])


def _set_fill(value: bool) -> None:
    torch.utils.deterministic.fill_uninitialized_memory = value  # type: ignore[attr-defined]


def _attribute_flag(name: str, owner: Any, attribute: str) -> _Flag:
    return _Flag(name, lambda: getattr(owner, attribute), lambda value: setattr(owner, attribute, value))


def _default_device() -> Any:
    context = getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None)
    return None if context is None else context.device


def _autocast(device: str) -> _Flag:
    def put(value: tuple[bool, torch.dtype]) -> None:
        torch.set_autocast_enabled(device, value[0])
        torch.set_autocast_dtype(device, value[1])

    return _Flag(
        f"{device} autocast",
        lambda: (torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)),
        put,
    )


def _set_grad(value: bool) -> None:
    torch.set_grad_enabled(value)


def _sdp(kind: str) -> _Flag:
    backends = torch.backends.cuda
    return _Flag(
        f"scaled-dot-product {kind} backend",
        getattr(backends, f"{kind}_sdp_enabled"),
        getattr(backends, f"enable_{kind}_sdp"),
    )


_FLAGS: tuple[_Flag, ...] = (
    _Flag("default dtype", torch.get_default_dtype, torch.set_default_dtype),
    _Flag("default device", _default_device, torch.set_default_device),
    _Flag("grad mode", torch.is_grad_enabled, _set_grad),
    _Flag("anomaly mode", torch.is_anomaly_enabled, torch.set_anomaly_enabled),
    _autocast("cpu"),
    _autocast("cuda"),
    _Flag(
        "deterministic algorithms (enabled, warn_only)",
        lambda: (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
        ),
        _set_deterministic,
    ),
    _Flag(
        "torch.utils.deterministic.fill_uninitialized_memory",
        lambda: torch.utils.deterministic.fill_uninitialized_memory,  # type: ignore[attr-defined]
        _set_fill,
    ),
    _Flag("float32 matmul precision", torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
    _attribute_flag("torch.backends.cudnn.enabled", torch.backends.cudnn, "enabled"),
    _attribute_flag("torch.backends.cudnn.benchmark", torch.backends.cudnn, "benchmark"),
    _attribute_flag("torch.backends.cudnn.deterministic", torch.backends.cudnn, "deterministic"),
    _attribute_flag("torch.backends.cudnn.allow_tf32", torch.backends.cudnn, "allow_tf32"),
    _attribute_flag("torch.backends.cuda.matmul.allow_tf32", torch.backends.cuda.matmul, "allow_tf32"),
    _attribute_flag(
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
        torch.backends.cuda.matmul,
        "allow_fp16_reduced_precision_reduction",
    ),
    _attribute_flag(
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
        torch.backends.cuda.matmul,
        "allow_bf16_reduced_precision_reduction",
    ),
    _sdp("flash"),
    _sdp("mem_efficient"),
    _sdp("math"),
    _sdp("cudnn"),
    _attribute_flag("torch.backends.mkldnn.enabled", torch.backends.mkldnn, "enabled"),
    _Flag("thread count (torch.get_num_threads)", torch.get_num_threads, torch.set_num_threads),
    # Detected only: no public way to set these back.
    _Flag("inter-op thread count", torch.get_num_interop_threads, None),
    _Flag("inference mode", torch.is_inference_mode_enabled, None),
    _Flag("torch function mode stack depth", torch._C._len_torch_function_stack, None),
    _Flag("torch dispatch mode stack depth", torch._C._len_torch_dispatch_stack, None),
)


def _environ_data() -> dict[Any, Any]:
    """The environment as os.environ keeps it (bytes on POSIX): copied in C, not decoded entry by entry."""
    data = getattr(os.environ, "_data", None)
    return data.copy() if isinstance(data, dict) else dict(os.environ)


def _decode(key: Any) -> str:
    return os.fsdecode(key) if isinstance(key, bytes) else str(key)


def _case_modules(case: Any) -> list[types.ModuleType]:
    """The modules the case's own functions are defined in (through functools.partial and decorators)."""
    found: dict[str, types.ModuleType] = {}
    for name in _CASE_FUNCTIONS:
        fn = getattr(case, name, None)
        for _ in range(8):  # partial of a partial, a decorated function: a few levels at most
            inner = getattr(fn, "func", None) or getattr(fn, "__wrapped__", None)
            if inner is None:
                break
            fn = inner
        module = sys.modules.get(getattr(fn, "__module__", None) or "")
        if module is not None and module not in _SHARED_MODULES:
            found[module.__name__] = module
    return list(found.values())


def _bindable(value: Any) -> bool:
    """Functions, classes and modules: what a monkeypatch rebinds (module note)."""
    return isinstance(value, type | types.ModuleType) or callable(value)


@dataclass
class Changes:
    """What a case changed in its process: each entry "what (before -> after)"."""

    case: str
    changed: list[str] = field(default_factory=list)
    unrestorable: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.changed or self.unrestorable)

    def note(self) -> str:
        """One line for the case's detail and stderr ("" when nothing changed)."""
        if not self:
            return ""
        parts = []
        if self.changed:
            parts.append(f"case {self.case!r} changed the process state: " + "; ".join(self.changed))
            parts.append("put back before the next case")
        if self.unrestorable:
            parts.append(
                f"case {self.case!r} left what could not be put back: " + "; ".join(self.unrestorable)
            )
        return ", ".join(parts)


class _Attributes:
    """A module's attribute names and values, in its dictionary's order. Comparing the values as a list is
    one C loop with identity first and no hashing: 35 us for torch's 1500 attributes on the 2-core test
    box, against 61 us for comparing dictionaries."""

    def __init__(self, module: types.ModuleType) -> None:
        self.module = module
        namespace = vars(module)
        self.names = list(namespace)
        self.values = list(namespace.values())


class _Snapshot:
    def __init__(self, case: Any) -> None:
        self.cwd = os.getcwd()
        self.flags = [flag.get() for flag in _FLAGS]
        self.environ = _environ_data()
        self.cpu_rng = torch.get_rng_state()
        self.cuda_rng = (
            [g.get_state() for g in torch.cuda.default_generators] if torch.cuda.is_initialized() else None
        )
        self.cuda_device = torch.cuda.current_device() if torch.cuda.is_initialized() else None
        self.shared = [_Attributes(m) for m in _SHARED_MODULES]
        self.own = [_Attributes(m) for m in _case_modules(case)]
        self.modules_before = len(sys.modules)
        self._imported: set[str] | None = None

    def restore(self, changes: Changes) -> None:
        self._cwd(changes)
        self._environ(changes)
        for flag, before in zip(_FLAGS, self.flags, strict=True):
            self._flag(flag, before, changes)
        torch.set_rng_state(self.cpu_rng)
        if self.cuda_rng is not None:
            for generator, state in zip(torch.cuda.default_generators, self.cuda_rng, strict=False):
                generator.set_state(state)
        if self.cuda_device is not None and torch.cuda.current_device() != self.cuda_device:
            changes.changed.append(
                f"current CUDA device ({self.cuda_device} -> {torch.cuda.current_device()})"
            )
            torch.cuda.set_device(self.cuda_device)
        for attributes in self.shared:
            self._attributes(attributes, changes, public_only=True)
        for attributes in self.own:
            self._attributes(attributes, changes, public_only=False)

    def _cwd(self, changes: Changes) -> None:
        try:
            now = os.getcwd()
        except OSError as exc:  # the case removed the directory it moved into
            now = f"<{exc.strerror}>"
        if now == self.cwd:
            return
        try:
            os.chdir(self.cwd)
        except OSError as exc:
            changes.unrestorable.append(f"working directory {self.cwd!r} ({exc.strerror})")
            return
        changes.changed.append(f"working directory ({self.cwd!r} -> {now!r})")

    def _environ(self, changes: Changes) -> None:
        now = _environ_data()
        if now == self.environ:
            return
        for key in sorted(set(now) | set(self.environ), key=_decode):
            before, after = self.environ.get(key, _MISSING), now.get(key, _MISSING)
            if before == after:
                continue
            name = _decode(key)
            if before is _MISSING:
                del os.environ[name]
                changes.changed.append(f"environment variable {name} (set by the case)")
            else:
                os.environ[name] = _decode(before)
                how = "unset by the case" if after is _MISSING else "changed"
                changes.changed.append(f"environment variable {name} ({how})")

    def _flag(self, flag: _Flag, before: Any, changes: Changes) -> None:
        try:
            now = flag.get()
        except Exception as exc:  # a getter that fails now (a backend torn down) cannot be compared
            changes.unrestorable.append(f"{flag.name} ({type(exc).__name__}: {exc})")
            return
        if now == before:
            return
        if flag.put is None:
            changes.unrestorable.append(f"{flag.name} ({before!r} -> {now!r})")
            return
        try:
            flag.put(before)
        except Exception as exc:
            changes.unrestorable.append(f"{flag.name} ({before!r} -> {now!r}: {type(exc).__name__}: {exc})")
            return
        changes.changed.append(f"{flag.name} ({before!r} -> {now!r})")

    def _attributes(self, before: _Attributes, changes: Changes, *, public_only: bool) -> None:
        module = before.module
        current = vars(module)
        try:
            if list(current.values()) == before.values:  # in C, identity first: the common case costs little
                return
        except Exception:
            pass  # a changed value whose == raises (a tensor): compared one by one below
        for name, value in zip(before.names, before.values, strict=True):
            after = current.get(name, _MISSING)
            if after is value or name.startswith("__"):
                continue
            if public_only and name.startswith("_"):
                continue
            if not public_only and not _bindable(value):
                continue
            patcher = getattr(after, "__module__", None)
            if isinstance(patcher, str) and patcher in self._imported_since():
                # A library the case imported patched it at import (torch_geometric rebinds
                # torch.index_select): kept, since a later case finds the library imported either way, and
                # the case alone in a fresh process sees the same.
                changes.changed.append(f"{module.__name__}.{name} (rebound by {patcher} on import: kept)")
                continue
            setattr(module, name, value)
            change = "deleted" if after is _MISSING else "rebound"
            changes.changed.append(f"{module.__name__}.{name} ({change})")

    def _imported_since(self) -> set[str]:
        """Modules first imported since the snapshot: sys.modules keeps insertion order."""
        if self._imported is None:
            self._imported = set(list(sys.modules)[self.modules_before :])
        return self._imported


_settled = False


def _settle() -> None:
    """Once per process, before the first snapshot: import what every check imports on its first call, so
    that the changes those imports make are not blamed on (and taken back from) the first case.
    torch.use_deterministic_algorithms, which every check calls (graphsafe.poison.deterministic_fill), imports
    torch._inductor.config; that import wraps torch.manual_seed (torch._dynamo) and sets
    TORCHINDUCTOR_CACHE_DIR in the environment."""
    global _settled
    if not _settled:
        import torch._inductor.config  # noqa: F401

        _settled = True


@contextlib.contextmanager
def restored(case: Any) -> Iterator[Changes]:
    """Put back, on leaving, what the case changed in this process (module note); the yielded Changes is
    filled then."""
    _settle()
    changes = Changes(getattr(case, "name", str(case)))
    snapshot = _Snapshot(case)
    try:
        yield changes
    finally:
        snapshot.restore(changes)


__all__ = ["Changes", "restored"]
