"""Fresh state for the hidden-state probe: undo what one eager call left in the op's Python-level state.

The protocol computes eager B once before the op ever sees input A (the fresh result) and again after the
capture with A and the replays; the two must match, or state leaked from A into later calls. A cache filled
on the first call and never refreshed makes every later call a pure function of the FIRST input, so the probe
must not be that first call: `PythonState` snapshots the state the op can reach from Python (the globals of
the modules its functions come from, the attributes of the objects it is bound to), and `restore` puts back
what the probe changed, so the protocol's own first call (the warm-up with A) meets the state the probe met.

What it restores: names bound, rebound or deleted in those namespaces (data only: functions, classes and
modules are left alone, so lazily defined helpers and registrations stay), the contents of dict/list/set
values changed in place, and the values of tensors written in place (up to MAX_TENSOR_BYTES each and
MAX_TOTAL_TENSOR_BYTES in all).
`op_generators` finds the torch.Generator objects in the same places, for the protocol's replay-vs-eager
generator restore (GraphBackend.generators_followed).
What it cannot see: state held in C++ (an extension's statics, a custom op's C++ cache), in other modules the
op reaches only through imports, and state filled by an earlier case in the same process.
"""

from __future__ import annotations

import functools
import inspect
import types
from typing import Any

import torch

# Namespaces of these packages are never snapshotted: their state is not the op's cache, and copying
# torch's module dicts on every check would cost more than the probe.
_LIBRARY_PACKAGES = frozenset({"torch", "builtins", "functools", "numpy", "typing", "math"})
# graphsafe's own modules are the harness, not the op; its kernels and cases are op code like a user's.
_HARNESS_PACKAGE = (__package__ or __name__).partition(".")[0]
_OP_CODE_PACKAGES = (f"{_HARNESS_PACKAGE}.kernels", f"{_HARNESS_PACKAGE}.cases")
# A module-level weight table is read, not written, by a correct op; cloning big ones on every case would
# cost time for nothing. State that leaks from A is a scale, a table of offsets, a cached noise vector.
MAX_TENSOR_BYTES = 16 << 20
# All copies of one snapshot together: a module holding many mid-sized tensors (a weight table) must not
# double the process's memory on every check. Past the bound, later tensors are not restored.
MAX_TOTAL_TENSOR_BYTES = 256 << 20
_SEARCH_DEPTH = 3
# A module's globals hold the interpreter's builtins dict (about 150 entries, shared by every module): not
# the op's state, and walking it cost nearly all of a snapshot's time.
_BUILTINS = "__builtins__"


def _is_code(value: Any) -> bool:
    return isinstance(
        value,
        types.ModuleType
        | types.FunctionType
        | types.BuiltinFunctionType
        | types.MethodType
        | type
        | functools.partial
        | torch._ops.OpOverloadPacket
        | torch._ops.OpOverload,
    )


def _namespaces(op: Any, cells: list[Any] | None = None) -> list[dict[str, Any]]:
    """The dicts holding the op's Python state: module globals and instance attributes, outside libraries.
    The closure cells of the op's functions holding data are appended to `cells`."""
    found: dict[int, dict[str, Any]] = {}
    pending: list[tuple[Any, int]] = [(op, 0)]
    seen: set[int] = set()
    while pending:
        fn, depth = pending.pop()
        if id(fn) in seen or depth > _SEARCH_DEPTH:
            continue
        seen.add(id(fn))
        if isinstance(fn, functools.partial):
            pending.append((fn.func, depth + 1))
            pending.extend((v, depth + 1) for v in (*fn.args, *fn.keywords.values()) if callable(v))
            continue
        owner = getattr(fn, "__self__", None)
        if owner is not None and not isinstance(owner, types.ModuleType):
            _add_instance(found, owner)
        plain = types.FunctionType | types.MethodType | types.BuiltinFunctionType
        if not isinstance(fn, plain) and hasattr(fn, "__dict__"):
            _add_instance(found, fn)  # a callable object (an nn.Module, say): its attributes and its code
            call = inspect.getattr_static(type(fn), "__call__", None)
            if isinstance(call, types.FunctionType):
                pending.append((call, depth + 1))
            forward = getattr(fn, "forward", None)
            if callable(forward):
                pending.append((forward, depth + 1))
            continue
        fn = inspect.unwrap(fn) if callable(fn) else fn
        func = getattr(fn, "__func__", fn)
        module_globals = getattr(func, "__globals__", None)
        if isinstance(module_globals, dict) and not _is_library(module_globals.get("__name__", "")):
            found.setdefault(id(module_globals), module_globals)
        for cell in getattr(func, "__closure__", None) or ():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if callable(value) and not isinstance(value, type):
                pending.append((value, depth + 1))
            elif cells is not None and not _is_code(value):
                cells.append(cell)
    return list(found.values())


def _add_instance(found: dict[int, dict[str, Any]], obj: Any) -> None:
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict) and not _is_library(type(obj).__module__):
        found.setdefault(id(attrs), attrs)


def _is_library(module_name: str) -> bool:
    top = module_name.split(".", 1)[0]
    if top == _HARNESS_PACKAGE:
        return not any(module_name == p or module_name.startswith(p + ".") for p in _OP_CODE_PACKAGES)
    return top in _LIBRARY_PACKAGES


class PythonState:
    """A snapshot of the op's Python-level state; `restore()` undoes every change made since."""

    def __init__(self, op: Any) -> None:
        cells: list[Any] = []
        self._spaces = [(ns, dict(ns)) for ns in _namespaces(op, cells)]
        self._cells = [(cell, cell.cell_contents) for cell in cells]
        self._containers: list[tuple[Any, Any]] = []
        self._tensors: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._tensor_bytes = 0
        for _, saved in self._spaces:
            for name, value in saved.items():
                if name != _BUILTINS:
                    self._remember(value, depth=0)
        for _, value in self._cells:
            self._remember(value, depth=0)

    def _remember(self, value: Any, depth: int) -> None:
        if isinstance(value, torch.Tensor):
            size = value.numel() * value.element_size()
            if (
                value.layout == torch.strided
                and size <= MAX_TENSOR_BYTES
                and self._tensor_bytes + size <= MAX_TOTAL_TENSOR_BYTES
            ):
                self._tensors.append((value, value.detach().clone()))
                self._tensor_bytes += size
            return
        if isinstance(value, dict):
            self._containers.append((value, dict(value)))
            items: Any = value.values()
        elif isinstance(value, list):
            self._containers.append((value, list(value)))
            items = value
        elif isinstance(value, set):
            self._containers.append((value, set(value)))
            return
        elif isinstance(value, tuple):
            items = value
        else:
            return
        if depth < 1:
            for item in items:
                self._remember(item, depth + 1)

    def restore(self) -> None:
        with torch.no_grad():
            for tensor, copy in self._tensors:
                tensor.copy_(copy)
        for container, saved in self._containers:
            if isinstance(container, dict) and _dict_changed(container, saved):
                container.clear()
                container.update(saved)
            elif isinstance(container, list) and _list_changed(container, saved):
                container[:] = saved
            elif isinstance(container, set) and container != saved:
                container.clear()
                container.update(saved)
        for cell, value in self._cells:
            if cell.cell_contents is not value:  # a `nonlocal` rebound by the op
                cell.cell_contents = value
        for ns, snapshot in self._spaces:
            for name in [n for n in ns if n not in snapshot]:
                if not _is_code(ns[name]):
                    del ns[name]
            for name, value in snapshot.items():
                now = ns.get(name, _MISSING)
                if now is not value and not (_is_code(value) or _is_code(now)):
                    ns[name] = value


def op_generators(op: Any) -> list[torch.Generator]:
    """The torch.Generator objects the op can reach from Python (the namespaces `PythonState` snapshots, and
    the dicts, lists and tuples in them, one level down: a per-request table of generators), each once."""
    cells: list[Any] = []
    values: list[Any] = [v for ns in _namespaces(op, cells) for k, v in ns.items() if k != _BUILTINS]
    values += [cell.cell_contents for cell in cells]
    found: dict[int, torch.Generator] = {}
    for value in values:
        inner = (
            value.values() if isinstance(value, dict) else value if isinstance(value, list | tuple) else ()
        )
        for candidate in (value, *inner):
            if isinstance(candidate, torch.Generator):
                found.setdefault(id(candidate), candidate)
    return list(found.values())


def _dict_changed(now: dict[Any, Any], saved: dict[Any, Any]) -> bool:
    return now.keys() != saved.keys() or any(now[k] is not saved[k] for k in saved)


def _list_changed(now: list[Any], saved: list[Any]) -> bool:
    return len(now) != len(saved) or any(a is not b for a, b in zip(now, saved, strict=True))


_MISSING = object()
