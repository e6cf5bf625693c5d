"""Fresh state for the hidden-state probe: undo what one eager call left in the op's Python-level state.

The protocol computes eager B once before the op ever sees input A (the fresh result) and again after the
capture with A and the replays; the two must match, or state leaked from A into later calls. A cache filled
on the first call and never refreshed makes every later call a pure function of the FIRST input, so the probe
must not be that first call: `PythonState` snapshots the state the op can reach from Python (the globals of
the modules its functions come from, the attributes of the objects it is bound to or names as globals, and
of their nn.Module children), and `restore` puts back what the probe changed, so the protocol's own first call
(the warm-up with A) meets the state the probe met. `changes` names what differs from the snapshot by its
path (`slot_cases.model.attn._slot_cache`, `my_ops._SCALE`, a closure variable): once a check found state
carried from one call to the next, the finding says where it lives (graphsafe.findings).

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


# A route says how a namespace was reached, to name what changed in it (`PythonState.changes`) only when a
# finding needs the name: ("module", globals) | ("object", obj, parent route or None, attribute) |
# ("cell", function, variable). Building a tuple per namespace costs next to nothing on a passing check.
Route = tuple[Any, ...]
# nn.Module children are followed this deep and this many in all: a submodule's cache (model.attn._slot_cache)
# is state like its parent's; a model of thousands of modules must not make every check copy all their dicts.
_MODULE_DEPTH = 8
MAX_NAMESPACES = 512


def _namespaces(op: Any, cells: list[tuple[Any, Route]] | None = None) -> list[tuple[dict[str, Any], Route]]:
    """The dicts holding the op's Python state, each with its route: module globals and instance attributes
    (nn.Module children included), outside libraries. The closure cells of the op's functions holding data
    are appended to `cells`."""
    found: dict[int, tuple[dict[str, Any], Route]] = {}
    pending: list[tuple[Any, int, Route | None]] = [(op, 0, None)]
    seen: set[int] = set()
    while pending:
        fn, depth, route = pending.pop()
        if id(fn) in seen or depth > _SEARCH_DEPTH:
            continue
        seen.add(id(fn))
        if isinstance(fn, functools.partial):
            pending.append((fn.func, depth + 1, None))
            pending.extend((v, depth + 1, None) for v in (*fn.args, *fn.keywords.values()) if callable(v))
            continue
        owner = getattr(fn, "__self__", None)
        if owner is not None and not isinstance(owner, types.ModuleType):
            _add_instance(found, owner, ("object", owner, None, ""))
        plain = types.FunctionType | types.MethodType | types.BuiltinFunctionType
        if not isinstance(fn, plain) and hasattr(fn, "__dict__"):
            # a callable object (an nn.Module, say): its attributes and its code
            _add_instance(found, fn, route or ("object", fn, None, ""))
            call = inspect.getattr_static(type(fn), "__call__", None)
            if isinstance(call, types.FunctionType):
                pending.append((call, depth + 1, None))
            forward = getattr(fn, "forward", None)
            if callable(forward):
                pending.append((forward, depth + 1, None))
            continue
        fn = inspect.unwrap(fn) if callable(fn) else fn
        func = getattr(fn, "__func__", fn)
        module_globals = getattr(func, "__globals__", None)
        if isinstance(module_globals, dict) and not _is_library(module_globals.get("__name__", "")):
            if id(module_globals) not in found:
                found[id(module_globals)] = (module_globals, ("module", module_globals))
            # Objects the function names as globals (`model(x)` in `def op(x)`): their attributes are state.
            code = getattr(func, "__code__", None)
            for name in getattr(code, "co_names", ()):
                value = module_globals.get(name)
                if isinstance(value, torch.nn.Module) or (
                    type(value).__module__ == module_globals.get("__name__") and not _is_code(value)
                ):
                    pending.append((value, depth + 1, ("object", value, ("module", module_globals), name)))
        code = getattr(func, "__code__", None)
        free = getattr(code, "co_freevars", ())
        for index, cell in enumerate(getattr(func, "__closure__", None) or ()):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            variable = free[index] if index < len(free) else "?"
            if callable(value) and not isinstance(value, type):
                pending.append((value, depth + 1, ("object", value, ("cell", func, variable), "")))
            elif cells is not None and not _is_code(value):
                cells.append((cell, ("cell", func, variable)))
    return list(found.values())


def _add_instance(found: dict[int, tuple[dict[str, Any], Route]], obj: Any, route: Route) -> None:
    attrs = getattr(obj, "__dict__", None)
    if not isinstance(attrs, dict) or len(found) >= MAX_NAMESPACES:
        return
    if not _is_library(type(obj).__module__) and id(attrs) not in found:
        found[id(attrs)] = (attrs, route)
    if isinstance(obj, torch.nn.Module):  # library or not, its children may be the op's own modules
        _add_children(found, obj, route, 0)


def _add_children(
    found: dict[int, tuple[dict[str, Any], Route]], module: torch.nn.Module, route: Route, depth: int
) -> None:
    if depth >= _MODULE_DEPTH:
        return
    for name, child in module.__dict__.get("_modules", {}).items():
        if child is None or len(found) >= MAX_NAMESPACES:
            continue
        child_route = ("object", child, route, name)
        attrs = child.__dict__
        if id(attrs) not in found:
            found[id(attrs)] = (attrs, child_route)
        _add_children(found, child, child_route, depth + 1)


def _is_library(module_name: str) -> bool:
    top = module_name.split(".", 1)[0]
    if top == _HARNESS_PACKAGE:
        return not any(module_name == p or module_name.startswith(p + ".") for p in _OP_CODE_PACKAGES)
    return top in _LIBRARY_PACKAGES


# Where a remembered value sits: (namespace index, or -1 - cell index; the name in it; the key inside the
# value when it was found in a dict, list or tuple, else None).
_Where = tuple[int, str, Any]
# A child module's bookkeeping (its parameters: weights a correct op reads; its children, hooks and flags) is
# not copied on every check: only its own attributes and registered buffers (a cache registered as a buffer).
# Copying all of it made a snapshot and restore of a model with three Linear/ReLU children take 505 us, against
# 240-300 us without it and 180-200 us when children were not followed at all (the 2-core box, torch 2.13).
_CHILD_SKIPPED = frozenset(vars(torch.nn.Module())) - {"_buffers"}
# The values `_remember` keeps a copy of (or looks into); any other value is kept by identity alone.
_REMEMBERED = (torch.Tensor, dict, list, set, tuple)


class PythonState:
    """A snapshot of the op's Python-level state; `restore()` undoes every change made since, `changes()` names
    them (for a finding: which attribute, global or closure cell carried state from one call to the next)."""

    def __init__(self, op: Any) -> None:
        cells: list[tuple[Any, Route]] = []
        self._spaces = [(ns, dict(ns), route) for ns, route in _namespaces(op, cells)]
        self._cells = [(cell, cell.cell_contents, route) for cell, route in cells]
        self._containers: list[tuple[Any, Any, _Where]] = []
        self._tensors: list[tuple[torch.Tensor, torch.Tensor, _Where]] = []
        self._tensor_bytes = 0
        for index, (_, saved, route) in enumerate(self._spaces):
            child = route[0] == "object" and route[2] is not None and isinstance(route[1], torch.nn.Module)
            skipped = _CHILD_SKIPPED if child else ()
            for name, value in saved.items():
                # The type test first: most globals are plain values, and a call per value cost more.
                if isinstance(value, _REMEMBERED) and name != _BUILTINS and name not in skipped:
                    self._remember(value, 0, (index, name, None))
        for index, (_, value, _) in enumerate(self._cells):
            if isinstance(value, _REMEMBERED):
                self._remember(value, 0, (-1 - index, "", None))

    def _remember(self, value: Any, depth: int, where: _Where) -> None:
        if isinstance(value, torch.Tensor):
            size = value.numel() * value.element_size()
            if (
                value.layout == torch.strided
                and size <= MAX_TENSOR_BYTES
                and self._tensor_bytes + size <= MAX_TOTAL_TENSOR_BYTES
            ):
                self._tensors.append((value, value.detach().clone(), where))
                self._tensor_bytes += size
            return
        if isinstance(value, dict):
            self._containers.append((value, dict(value), where))
            items: Any = value.items()
        elif isinstance(value, list):
            self._containers.append((value, list(value), where))
            items = enumerate(value)
        elif isinstance(value, set):
            self._containers.append((value, set(value), where))
            return
        elif isinstance(value, tuple):
            items = enumerate(value)
        else:
            return
        if depth < 1:
            for key, item in items:
                self._remember(item, depth + 1, (where[0], where[1], key))

    def restore(self) -> None:
        with torch.no_grad():
            for tensor, copy, _ in self._tensors:
                tensor.copy_(copy)
        for container, saved, _ in self._containers:
            if isinstance(container, dict) and _dict_changed(container, saved):
                container.clear()
                container.update(saved)
            elif isinstance(container, list) and _list_changed(container, saved):
                container[:] = saved
            elif isinstance(container, set) and container != saved:
                container.clear()
                container.update(saved)
        for cell, value, _ in self._cells:
            if cell.cell_contents is not value:  # a `nonlocal` rebound by the op
                cell.cell_contents = value
        for ns, snapshot, _ in self._spaces:
            for name in [n for n in ns if n not in snapshot]:
                if not _is_code(ns[name]):
                    del ns[name]
            for name, value in snapshot.items():
                now = ns.get(name, _MISSING)
                if now is not value and not (_is_code(value) or _is_code(now)):
                    ns[name] = value

    def changes(self) -> list[str]:
        """What differs now from the snapshot, one phrase each ("slot_cases.model.attn._slot_cache (bound
        since the snapshot)"), by attribute path, global or closure variable. Called for a finding only: it
        compares every remembered tensor."""
        found: list[str] = []
        for ns, snapshot, route in self._spaces:
            label = self._label(route)
            for name in ns:
                if name not in snapshot and not _is_code(ns[name]):
                    found.append(f"{label}.{name} (set by the op's calls: {_kind(ns[name])})")
            for name, value in snapshot.items():
                now = ns.get(name, _MISSING)
                if name == _BUILTINS or _is_code(value) or _is_code(now) or now is value:
                    continue
                what = "deleted" if now is _MISSING else f"rebound: {_kind(now)}"
                found.append(f"{label}.{name} ({what})")
        for cell, value, route in self._cells:
            if cell.cell_contents is not value:
                found.append(f"{self._label(route)} (rebound: {_kind(cell.cell_contents)})")
        for container, saved, where in self._containers:
            changed = (
                _dict_changed(container, saved)
                if isinstance(container, dict)
                else _list_changed(container, saved)
                if isinstance(container, list)
                else container != saved
            )
            if changed:
                found.append(f"{self._where(where)} (contents changed)")
        for tensor, copy, where in self._tensors:
            if not _same_bits(tensor, copy):
                found.append(f"{self._where(where)} (tensor written in place)")
        return list(dict.fromkeys(found))

    def _where(self, where: _Where) -> str:
        index, name, key = where
        if index >= 0:
            text = f"{self._label(self._spaces[index][2])}.{name}"
        else:
            text = self._label(self._cells[-1 - index][2])
        return text if key is None else f"{text}[{key!r}]"

    def _label(self, route: Route) -> str:
        kind = route[0]
        if kind == "module":
            return _module_label(route[1])
        if kind == "cell":
            func, variable = route[1], route[2]
            return f"{getattr(func, '__qualname__', 'op')} closure variable {variable!r}"
        obj, parent, attribute = route[1], route[2], route[3]
        if parent is not None:
            base = self._label(parent)
            return f"{base}.{attribute}" if attribute else base
        for ns, _, ns_route in self._spaces:  # a global bound to the object names it best
            if ns_route[0] == "module":
                name = next((n for n, v in ns.items() if v is obj and n != _BUILTINS), None)
                if name is not None:
                    return f"{_module_label(ns)}.{name}"
        return type(obj).__name__


def _module_label(module_globals: dict[str, Any]) -> str:
    """A module as a user knows it: a case file by its file name, else by its import name."""
    from graphsafe.case import USER_MODULE_PREFIX

    name = str(module_globals.get("__name__", "?"))
    if name.startswith(USER_MODULE_PREFIX) or name == "__main__":
        file = module_globals.get("__file__")
        if isinstance(file, str):
            return file.rsplit("/", 1)[-1].removesuffix(".py")
    return name


def _kind(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return f"a {type(value).__name__}"


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    return torch.equal(a.detach().reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def op_generators(op: Any) -> list[torch.Generator]:
    """The torch.Generator objects the op can reach from Python (the namespaces `PythonState` snapshots, and
    the dicts, lists and tuples in them, one level down: a per-request table of generators), each once."""
    cells: list[tuple[Any, Route]] = []
    values: list[Any] = [v for ns, _ in _namespaces(op, cells) for k, v in ns.items() if k != _BUILTINS]
    values += [cell.cell_contents for cell, _ in cells]
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
