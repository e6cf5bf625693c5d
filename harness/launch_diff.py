"""The launch diff: why a replay differs from eager, read from what the graph launches.

Role: the graph captured with input A is compared, node by node, with a second capture of the same op made
with input B copied into the same static inputs (only inspected, never replayed): what that capture launches
is what eager B launches. A kernel argument, a grid or a block that differs between the two is a value the
graph froze at capture; a kernel only B's capture holds is work eager does that the graph never recorded.
The finding names the first difference in a kernel engineer's words:

    kernel `kv_append` (node 1 of 1): argument 3 (int) is 17 in the graph captured with A, 23 for B -- a value
    frozen at capture

On the GPU backend the nodes come from the graph API (harness/native/launch_nodes.hip): kind, kernel name,
grid, block, dynamic shared memory and each parameter's bytes, laid out by the runtime's parameter table
(cuFuncGetParamInfo / hipKernelGetParamInfo). On the CPU backend they come from the dispatcher record
(harness/backends/cpu.py): each recorded op with its frozen non-tensor arguments, named by the op's schema.

Pointers are compared as "the same buffer or not", never by address: a value inside a static input is that
input at an offset (both captures share the static inputs); inside a graph output, that output at an offset;
inside an allocation both captures use, that allocation; inside an allocation only one capture uses (its
private pool: workspaces, intermediates), the n-th such allocation in the order the graph first uses it.
Two pointers into each capture's own memory that still differ are workspace pointers that legitimately
differ per capture: they are named as such and never reported as a difference.

`compare` is pure Python over `Launch` records, so the comparison is tested without a GPU
(tests/test_launch_diff.py); `explain` makes the second capture and is called by the protocol for a case
whose replay differs from eager, and for every case under `--explain`, `check(..., explain=True)` or a
case declaring `launch_diff=True`. Nothing here runs for a passing case otherwise.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import difflib
import functools
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

# How a launch-diff finding sits in a row's detail: after this prefix, its lines joined by LINE_SEPARATOR
# (`lines_in_detail` reads them back). No line the diff writes contains the separator.
DETAIL_PREFIX = "launch diff: "
LINE_SEPARATOR = "; "
NO_DIFFERENCE = "no launch difference"
FROZEN = "a value frozen at capture"
MORE_SHOWN = 3  # differences listed after the first


# ------------------------------------------------------------------------------------------------ records


@dataclass(frozen=True)
class Word:
    """A piece of one argument: a plain value (`value`: bytes on the GPU, a Python value on the CPU) or a
    pointer (`pointer` set: its value, and the allocation it lies in as `base`, `size`)."""

    offset: int  # bytes from the start of the argument (the GPU); 0 on the CPU
    value: Any = None
    pointer: int | None = None
    base: int = 0
    size: int = 0


@dataclass(frozen=True)
class Argument:
    label: str  # "argument 3 (int)" on the GPU, "argument `index`" on the CPU
    words: tuple[Word, ...]
    size: int = 0  # bytes (GPU); 0 on the CPU
    text: str = ""  # the value as a person reads it, for a non-pointer argument ("" to render the words)


@dataclass
class Launch:
    """One node of a graph: a kernel launch (GPU), a recorded op (CPU) or another kind of node."""

    kind: str  # "kernel", "memset", ..., or "op" on the CPU
    key: str = ""  # what must match for two nodes to be the same work: the kernel's symbol, the op's name
    name: str = ""  # how a person reads it: the demangled kernel name, the op's name
    grid: tuple[int, ...] | None = None
    block: tuple[int, ...] | None = None
    shared_bytes: int | None = None
    arguments: tuple[Argument, ...] | None = None  # None: no parameter layout
    error: str = ""  # what could not be read

    @property
    def what(self) -> str:
        if self.kind == "kernel":
            return f"kernel `{self.name or '?'}`"
        if self.kind == "op":
            return f"op `{self.name}`"
        return f"a {self.kind} node"


@dataclass(frozen=True)
class Buffer:
    """A named device range both captures know about: a static input, or one capture's output."""

    role: str  # "input" or "output"
    name: str  # the input's name, or the output's index
    start: int
    nbytes: int


@dataclass
class Capture:
    """One capture's nodes and the buffers its pointers are read against."""

    nodes: list[Launch]
    buffers: list[Buffer] = field(default_factory=list)


@dataclass
class LaunchDiff:
    """The comparison's outcome. `differences` in graph order, first first; `legitimate` named but not
    reported; `uncompared` what could not be compared and why; `summary` what was compared."""

    differences: list[str] = field(default_factory=list)
    legitimate: list[str] = field(default_factory=list)
    uncompared: list[str] = field(default_factory=list)
    summary: str = ""
    failed: str = ""  # the diff itself could not be made (the second capture failed, say): why

    @property
    def differs(self) -> bool:
        return bool(self.differences)

    def lines(self) -> list[str]:
        """The finding as plain lines: the first difference (or that there is none), what else differs,
        what was left out on purpose, what could not be compared, and what was compared."""
        if self.failed:
            return [f"could not be made: {self.failed}"]
        out = [self.differences[0]] if self.differences else [NO_DIFFERENCE]
        more = self.differences[1 : 1 + MORE_SHOWN]
        out += [f"also: {d}" for d in more]
        if len(self.differences) > 1 + MORE_SHOWN:
            out.append(f"and {len(self.differences) - 1 - MORE_SHOWN} more differences")
        out += [f"not reported: {item}" for item in self.legitimate]
        out += [f"not compared: {item}" for item in self.uncompared]
        if self.summary:
            out.append(self.summary)
        return [line.replace(LINE_SEPARATOR, ", ") for line in out]

    def detail(self) -> str:
        return DETAIL_PREFIX + LINE_SEPARATOR.join(self.lines())


def lines_in_detail(detail: str) -> list[str]:
    """The launch-diff lines a row's or result's detail carries ([] when none)."""
    at = detail.find(DETAIL_PREFIX)
    if at < 0:
        return []
    return [line for line in detail[at + len(DETAIL_PREFIX) :].split(LINE_SEPARATOR) if line]


# ------------------------------------------------------------------------------------------- comparison


def compare(a: Capture, b: Capture, *, a_label: str = "A", b_label: str = "B") -> LaunchDiff:
    """Compare the graph captured with A (`a`) with the capture made for B (`b`), node by node.

    Nodes are matched by kind and kernel (op) identity in graph order (difflib's longest matching blocks):
    a node only B's capture has is work eager B does that the graph lacks; one only the graph has is work the
    graph replays that eager B does not. Matched kernels are compared by grid, block, dynamic shared memory
    and each argument."""
    diff = LaunchDiff()
    pointers = _PointerNames(a, b)
    n_a = len(a.nodes)
    found: list[tuple[int, str]] = []  # (position in A's order, sentence)
    keys_a = [(n.kind, n.key) for n in a.nodes]
    keys_b = [(n.kind, n.key) for n in b.nodes]
    matcher = difflib.SequenceMatcher(None, keys_a, keys_b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for i, j in zip(range(i1, i2), range(j1, j2), strict=True):
                for sentence in _compare_pair(
                    a.nodes[i], b.nodes[j], i, n_a, pointers, diff, a_label, b_label
                ):
                    found.append((i, sentence))
            continue
        for i in range(i1, i2):
            node = a.nodes[i]
            found.append(
                (i, f"the graph runs {node.what} (node {i + 1} of {n_a}) that eager {b_label} does not")
            )
        for j in range(j1, j2):
            node = b.nodes[j]
            found.append(
                (
                    i1,
                    f"eager {b_label} runs {node.what} that the graph does not contain (work never recorded)",
                )
            )
    found.sort(key=lambda item: item[0])  # stable: within a node, the order the checks ran
    diff.differences = [sentence for _, sentence in found]
    launches = sum(1 for n in a.nodes if n.kind in ("kernel", "op"))
    unit = "op" if a.nodes and all(n.kind == "op" for n in a.nodes) else "kernel"
    diff.summary = (
        f"compared: the graph captured with {a_label} ({_count(n_a, 'node')}, {_count(launches, unit)}) with a "
        f"capture for {b_label} ({_count(len(b.nodes), 'node')})"
    )
    return diff


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def _compare_pair(
    x: Launch,
    y: Launch,
    index: int,
    count: int,
    pointers: _PointerNames,
    diff: LaunchDiff,
    a_label: str,
    b_label: str,
) -> list[str]:
    where = f"{x.what} (node {index + 1} of {count})"
    if x.error or y.error:
        why = x.error or y.error
        diff.uncompared.append(f"{where}: {why}")
        if x.arguments is None or y.arguments is None:
            return _launch_shape(x, y, where)
    found = _launch_shape(x, y, where)
    if x.kind not in ("kernel", "op"):
        return found
    if x.arguments is None or y.arguments is None:
        if not (x.error or y.error):
            diff.uncompared.append(f"could not compare the arguments of {x.what}: no parameter layout")
        return found
    if len(x.arguments) != len(y.arguments):
        found.append(f"{where}: {len(x.arguments)} arguments captured, {len(y.arguments)} for {b_label}")
        return found
    for arg_a, arg_b in zip(x.arguments, y.arguments, strict=True):
        outcome = _compare_argument(arg_a, arg_b, pointers)
        if outcome is None:
            continue
        sentence, legitimate = outcome
        if legitimate:
            diff.legitimate.append(f"{where}: {arg_a.label} {sentence}")
        else:
            found.append(f"{where}: {arg_a.label} {sentence}")
    return found


def _launch_shape(x: Launch, y: Launch, where: str) -> list[str]:
    found = []
    if x.grid is not None and y.grid is not None and x.grid != y.grid:
        found.append(f"{where}: grid {_dims(x.grid)} captured, {_dims(y.grid)} needed")
    if x.block is not None and y.block is not None and x.block != y.block:
        found.append(f"{where}: block {_dims(x.block)} captured, {_dims(y.block)} needed")
    if x.shared_bytes is not None and y.shared_bytes is not None and x.shared_bytes != y.shared_bytes:
        found.append(
            f"{where}: dynamic shared memory {x.shared_bytes} bytes captured, {y.shared_bytes} needed"
        )
    return found


def _dims(d: tuple[int, ...]) -> str:
    return "(" + ",".join(str(v) for v in d) + ")"


def _compare_argument(a: Argument, b: Argument, pointers: _PointerNames) -> tuple[str, bool] | None:
    """None when the two arguments are the same; else (what differs, whether it is a legitimate per-capture
    difference)."""
    if len(a.words) != len(b.words) or any(
        (wa.pointer is None) != (wb.pointer is None) or wa.offset != wb.offset
        for wa, wb in zip(a.words, b.words, strict=False)
    ):
        return (
            f"is {_render(a, pointers, 'a')} in the graph captured with A, {_render(b, pointers, 'b')} for B",
            False,
        )
    legitimate = True
    differs = False
    for wa, wb in zip(a.words, b.words, strict=True):
        if wa.pointer is None:
            if not _same_value(wa.value, wb.value):
                differs, legitimate = True, False
            continue
        name_a, name_b = pointers.name("a", wa), pointers.name("b", wb)
        if name_a == name_b:
            continue
        differs = True
        if not (name_a[0] == name_b[0] == "own"):
            legitimate = False
    if not differs:
        return None
    if legitimate:
        return "is a workspace pointer into each capture's own memory (differs per capture by design)", True
    what = "a pointer frozen at capture" if all(w.pointer is not None for w in a.words) else FROZEN
    return (
        f"is {_render(a, pointers, 'a')} in the graph captured with A, {_render(b, pointers, 'b')} for B — {what}",
        False,
    )


def _same_value(a: Any, b: Any) -> bool:
    """Equality of two plain argument values, NaN equal to NaN (a float argument frozen as NaN twice is the
    same argument)."""
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b) if type(a) is type(b) else False


def _render(arg: Argument, pointers: _PointerNames, side: str) -> str:
    if arg.text and all(w.pointer is None for w in arg.words):
        return arg.text
    parts = []
    for w in arg.words:
        if w.pointer is not None:
            parts.append(pointers.describe(side, w))
        elif isinstance(w.value, bytes | bytearray):
            parts.append(_bytes_text(bytes(w.value)))
        else:
            parts.append(repr(w.value))
    if len(parts) == 1:
        return parts[0]
    return "{" + ", ".join(parts) + "}"


def _bytes_text(data: bytes) -> str:
    """A parameter's bytes as a kernel engineer reads them: an integer for 1, 2, 4 or 8 bytes (with the float
    it would be where that reads better), hex otherwise."""
    if len(data) in (1, 2, 4, 8):
        as_int = int.from_bytes(data, "little", signed=True)
        if len(data) == 4 and abs(as_int) >= 1 << 24:
            return f"{as_int} (as float {struct.unpack('<f', data)[0]:.6g})"
        if len(data) == 8 and abs(as_int) >= 1 << 53:
            return f"{as_int} (as double {struct.unpack('<d', data)[0]:.6g})"
        return str(as_int)
    return "0x" + data.hex()


class _PointerNames:
    """What a pointer of either capture points to, as a name both captures share (module note)."""

    def __init__(self, a: Capture, b: Capture) -> None:
        self._buffers = {"a": a.buffers, "b": b.buffers}
        bases = {side: self._bases(capture) for side, capture in (("a", a), ("b", b))}
        self._shared = set(bases["a"]) & set(bases["b"])
        self._own = {
            side: {base: i for i, base in enumerate(b for b in order if b not in self._shared)}
            for side, order in bases.items()
        }

    @staticmethod
    def _bases(capture: Capture) -> list[int]:
        seen: dict[int, None] = {}
        for node in capture.nodes:
            for arg in node.arguments or ():
                for w in arg.words:
                    if w.pointer is not None and _buffer_of(capture.buffers, w.pointer) is None:
                        seen.setdefault(w.base, None)
        return list(seen)

    def name(self, side: str, w: Word) -> tuple[Any, ...]:
        assert w.pointer is not None
        hit = _buffer_of(self._buffers[side], w.pointer)
        if hit is not None:
            buffer, offset = hit
            return (buffer.role, buffer.name, offset)
        if w.base in self._shared:
            return ("buffer", w.base, w.pointer - w.base)
        return ("own", self._own[side].get(w.base, -1), w.pointer - w.base)

    def describe(self, side: str, w: Word) -> str:
        kind, which, offset = self.name(side, w)
        at = f" at byte {offset}" if offset else ""
        if kind == "input":
            return f"a pointer into input `{which}`{at}"
        if kind == "output":
            return f"a pointer into output {which}{at}"
        if kind == "buffer":
            return f"a pointer into an allocation both captures use{at}"
        return f"a pointer into the capture's own allocation #{which + 1}{at}"


def _buffer_of(buffers: Iterable[Buffer], pointer: int) -> tuple[Buffer, int] | None:
    for buffer in buffers:
        if buffer.start <= pointer < buffer.start + max(buffer.nbytes, 1):
            return buffer, pointer - buffer.start
    return None


# ------------------------------------------------------------------------------- GPU: nodes from the API


def gpu_launches(records: Sequence[Mapping[str, Any]]) -> list[Launch]:
    """The dicts of graphsafe.native.graph_launch_nodes as Launch records (launch_nodes.hip says what each
    field holds)."""
    out = []
    for record in records:
        kind = str(record.get("kind", "unknown"))
        error = str(record.get("error", "") or "")
        if kind != "kernel":
            out.append(Launch(kind=kind, key=kind, error=error))
            continue
        symbol = str(record.get("name", "") or "")
        function = int(record.get("function", 0) or 0)
        signature = demangle(symbol) if symbol else ""
        name = short_name(signature) if signature else f"<function 0x{function:x}>"
        types = parameter_types(signature)
        layout = record.get("params")
        arguments: tuple[Argument, ...] | None = None
        if layout is not None:
            data = bytes(record.get("data", b""))
            pointer_at = {int(p[0]): (int(p[1]), int(p[2]), int(p[3])) for p in record.get("pointers", ())}
            arguments = tuple(
                _gpu_argument(i, int(offset), int(size), data, pointer_at, types)
                for i, (offset, size) in enumerate(layout)
            )
        out.append(
            Launch(
                kind="kernel",
                key=symbol or f"0x{function:x}",
                name=name,
                grid=tuple(int(v) for v in record.get("grid", ())),
                block=tuple(int(v) for v in record.get("block", ())),
                shared_bytes=int(record.get("shared_bytes", 0)),
                arguments=arguments,
                error=error,
            )
        )
    return out


def _gpu_argument(
    index: int,
    offset: int,
    size: int,
    data: bytes,
    pointer_at: Mapping[int, tuple[int, int, int]],
    types: Sequence[str],
) -> Argument:
    label = f"argument {index}" + (f" ({types[index]})" if index < len(types) else "")
    words: list[Word] = []
    plain = bytearray()
    plain_start = 0
    at = offset
    end = offset + size
    while at < end:
        hit = pointer_at.get(at) if at + 8 <= end else None
        if hit is not None:
            if plain:
                words.append(Word(plain_start - offset, bytes(plain)))
                plain = bytearray()
            value, base, length = hit
            words.append(Word(at - offset, pointer=value, base=base, size=length))
            at += 8
            continue
        if not plain:
            plain_start = at
        plain += data[at : at + 1] if at < len(data) else b"\0"
        at += 1
    if plain:
        words.append(Word(plain_start - offset, bytes(plain)))
    return Argument(label, tuple(words), size)


@functools.cache
def _cxa_demangle() -> Any:
    path = ctypes.util.find_library("stdc++")
    with contextlib.suppress(OSError, AttributeError):
        lib = ctypes.CDLL(path or "libstdc++.so.6")
        fn = lib.__cxa_demangle
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        return fn
    return None


def demangle(symbol: str) -> str:
    """The C++ signature of a mangled kernel symbol (libstdc++'s __cxa_demangle); the symbol itself when it
    is not mangled (a Triton kernel's plain name) or cannot be demangled."""
    fn = _cxa_demangle()
    if fn is None or not symbol.startswith("_Z"):
        return symbol
    status = ctypes.c_int(0)
    raw = fn(symbol.encode(), None, None, ctypes.byref(status))
    if not raw or status.value != 0:
        return symbol
    try:
        return ctypes.string_at(raw).decode(errors="replace")
    finally:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.free(ctypes.c_void_p(raw))


def _split_top(text: str, sep: str = ",") -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    if tail:
        parts.append(tail)
    return parts


def _parameter_list_start(signature: str) -> int:
    """Index of the '(' that opens the parameter list (the last top-level one), -1 when none."""
    depth = 0
    for i in range(len(signature) - 1, -1, -1):
        ch = signature[i]
        if ch == ")":
            depth += 1
        elif ch == "(":
            depth -= 1
            if depth == 0:
                return i
    return -1


def parameter_types(signature: str) -> list[str]:
    """The parameter types of a demangled signature, `kv_append(float*, int)` -> ["float*", "int"]."""
    start = _parameter_list_start(signature)
    if start < 0 or not signature.endswith(")"):
        return []
    inner = signature[start + 1 : -1]
    return [] if inner in ("", "void") else _split_top(inner)


def short_name(signature: str, limit: int = 60) -> str:
    """A kernel's name without its parameter list, template arguments shortened past `limit` characters:
    `void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)` -> `at::native::vectorized_el...<...>`."""
    start = _parameter_list_start(signature)
    name = signature[:start] if start > 0 else signature
    if name.startswith("void "):
        name = name[len("void ") :]
    name = name.replace(
        "(anonymous namespace)::", ""
    )  # a file-local kernel: its name is what the source says
    if len(name) > limit and "<" in name:
        name = name[: name.index("<")] + "<...>"
    return name


def tensor_buffers(static: Mapping[str, torch.Tensor], outputs: Sequence[torch.Tensor]) -> list[Buffer]:
    """The static inputs (by name) and a capture's outputs (by index) as device ranges."""
    buffers = [
        Buffer("input", name, t.data_ptr(), t.numel() * t.element_size())
        for name, t in static.items()
        if isinstance(t, torch.Tensor)
    ]
    buffers += [
        Buffer("output", str(i), t.data_ptr(), t.numel() * t.element_size()) for i, t in enumerate(outputs)
    ]
    return buffers


# ------------------------------------------------------------------------------ CPU: the dispatcher record


def cpu_launches(nodes: Sequence[Any]) -> list[Launch]:
    """The CPU backend's recorded nodes (graphsafe.backends.cpu CpuGraph.nodes) as Launch records: each op
    with its arguments named by the op's schema; tensors as pointers into their storage."""
    return [_cpu_launch(node) for node in nodes]


def _cpu_launch(node: Any) -> Launch:
    func = node.func
    name = str(func)
    schema = getattr(func, "_schema", None)
    names = [a.name for a in schema.arguments] if schema is not None else []
    arguments: list[Argument] = []
    for i, value in enumerate(node.args):
        label = f"argument `{names[i]}`" if i < len(names) else f"argument {i}"
        arguments.append(_cpu_argument(label, value))
    for key, value in node.kwargs.items():
        arguments.append(_cpu_argument(f"argument `{key}`", value))
    return Launch(kind="op", key=name, name=name, arguments=tuple(arguments))


def _cpu_argument(label: str, value: Any) -> Argument:
    words: list[Word] = []
    for item in value if isinstance(value, list | tuple) else (value,):
        if isinstance(item, torch.Tensor):
            words.append(_tensor_word(item))
        else:
            words.append(Word(0, _plain(item)))
    text = "" if any(w.pointer is not None for w in words) else repr(_plain(value))
    return Argument(label, tuple(words), 0, text)


def _tensor_word(t: torch.Tensor) -> Word:
    try:
        storage = t.untyped_storage()
        base, size = storage.data_ptr(), storage.nbytes()
    except (RuntimeError, NotImplementedError):  # a tensor without storage (meta, a subclass): by value
        return Word(0, f"tensor{tuple(t.shape)}")
    return Word(0, pointer=t.data_ptr(), base=base, size=size)


def _plain(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, torch.SymInt | torch.SymFloat | torch.SymBool):
        return str(value)
    return value


# --------------------------------------------------------------------------------------------- explain


def capture_of(graph: Any, static: Mapping[str, torch.Tensor]) -> Capture | str:
    """A captured graph's nodes and buffers, or why they cannot be read."""
    from graphsafe.backends.cpu import CpuGraph

    if isinstance(graph, CpuGraph):
        return Capture(cpu_launches(graph.nodes), tensor_buffers(static, graph.outputs))
    try:
        records = graph.launch_nodes()
    except Exception as exc:  # no compiler, an old runtime: the diff says what it could not do
        return f"the graph's nodes could not be read: {type(exc).__name__}: {exc}"
    if records is None:
        return "this backend cannot list its graphs' launches (torch without CUDAGraph(keep_graph=True))"
    return Capture(gpu_launches(records), tensor_buffers(static, graph.outputs))


def explain(
    graph_a: Any,
    static: dict[str, torch.Tensor],
    capture_b: Callable[[], Any],
    *,
    reraise: tuple[type[BaseException], ...] = (),
) -> LaunchDiff:
    """Compare `graph_a` with a second capture made by `capture_b()` (which copies B into `static`, runs the
    case's prepare hook and captures the op; the protocol supplies it). The second graph is only inspected,
    and released before returning. Exceptions of the `reraise` types (device faults) propagate; any other
    failure becomes the diff's `failed` reason."""
    a = capture_of(graph_a, static)
    if isinstance(a, str):
        return LaunchDiff(failed=a)
    try:
        graph_b = capture_b()
    except reraise:
        raise
    except Exception as exc:  # the op cannot be captured with B: say so instead of a comparison
        return LaunchDiff(failed=f"capturing the op again with B failed: {type(exc).__name__}: {exc}")
    try:
        b = capture_of(graph_b, static)
        if isinstance(b, str):
            return LaunchDiff(failed=b)
        return compare(a, b)
    finally:
        graph_b.release()


__all__ = [
    "DETAIL_PREFIX",
    "NO_DIFFERENCE",
    "Argument",
    "Buffer",
    "Capture",
    "Launch",
    "LaunchDiff",
    "Word",
    "capture_of",
    "compare",
    "cpu_launches",
    "demangle",
    "explain",
    "gpu_launches",
    "lines_in_detail",
    "parameter_types",
    "short_name",
    "tensor_buffers",
]
