"""The `cpu` backend: an emulated graph recorded at the dispatcher, for machines without a GPU.

Capture runs the op once under a TorchDispatchMode that records every aten op with its tensor arguments (the
same tensor objects: storage identity stands for frozen device addresses) and its frozen non-tensor
arguments. Replay re-runs the record in order and writes each fresh result into the recorded output tensor,
so later nodes and the graph's outputs see new values exactly where a real graph would.

What it sees as a real graph would:
- host syncs and data-dependent shapes, judged per op and per argument by the rules below, each taken from
  what ATen's CUDA implementation of that op does (CaptureSyncError);
- the inside of opaque nodes: a custom op (torch.library, Python or C++) and a graph compiled by
  torch.compile (inductor) are each one node of the record, as their kernels are one unit to a real graph,
  but every op they issue while being captured is checked by the same rules;
- `empty*` re-poisoned on every replay.
What it does not see (harness/DESIGN.md, "Limits"): plain Python and pybind11 calls outside any op (they run
once, at capture, and never on replay: the unrecorded-handshake shape of FreeToken issue #350), streams,
events and other threads; for torch.compile it checks the C++ code inductor generates for the CPU, not the
Triton kernels or CUDA graphs a GPU build runs.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from graphsafe.backends.base import CapturedGraph, GraphBackend, flatten_tensors
from graphsafe.errors import CaptureError, CaptureSyncError, FallbackEager, exception_chain
from graphsafe.poison import BytePatternMode, deterministic_fill, fill_op_factories

aten = torch.ops.aten

# ---------------------------------------------------------------------------------------------------------
# Host-sync rules. The CPU backend runs ops on the CPU device, where ATen's kernels read tensors on the host
# freely; what matters is what the same call does on a GPU under capture. Each rule states the condition
# under which ATen's CUDA implementation reads device data on the host (a device-to-host copy into pageable
# memory, `.item()`, a stream synchronize) or sizes its output from device data: both end a real capture.
# The device modelled is an sm_90 GPU (the H200 the baselines come from). Paths are in the pytorch repository.
# ---------------------------------------------------------------------------------------------------------
SyncRule = Callable[[Sequence[Any], dict[str, Any]], "str | None"]


def _argument(args: Sequence[Any], kwargs: dict[str, Any], index: int, name: str, default: Any) -> Any:
    if name in kwargs:
        return kwargs[name]
    return args[index] if len(args) > index else default


def _always(reason: str) -> SyncRule:
    return lambda args, kwargs: reason


def _histc(args: Sequence[Any], kwargs: dict[str, Any]) -> str | None:
    # aten/src/ATen/native/cuda/SummaryOps.cu, _histc_cuda_template: `if (min == max && self.numel() > 0)`
    # the range is computed on the device and read on the host; an explicit range (transformers' grouped_mm
    # experts path calls histc(bins=E, min=0, max=E-1)) launches kernels only.
    low, high = _argument(args, kwargs, 2, "min", 0), _argument(args, kwargs, 3, "max", 0)
    if low == high and args[0].numel() > 0:
        return f"histc with min == max ({low}) reads the input's range on the host"
    return None


def _bincount(args: Sequence[Any], kwargs: dict[str, Any]) -> str | None:
    # aten/src/ATen/native/cuda/SummaryOps.cu, _bincount_cuda_template: the output length is
    # max(self.max().item() + 1, minlength), read on the host whatever minlength is (and self.min() is
    # copied to the host to check the sign); only a 1-d empty input returns before both reads.
    if args[0].dim() == 1 and args[0].numel() == 0:
        return None
    return "bincount reads max(input) on the host for its output length (minlength does not avoid it)"


def _repeat_interleave(args: Sequence[Any], kwargs: dict[str, Any]) -> str | None:
    # aten/src/ATen/native/Repeat.h, repeat_interleave_common: without output_size the total is
    # cumsum(repeats)[-1].item() and `(repeats >= 0).all().item()` is checked; with it, kernels only.
    if kwargs.get("output_size") is None:
        return "repeat_interleave without output_size reads the total repeat count on the host"
    return None


def _grouped_mm(args: Sequence[Any], kwargs: dict[str, Any]) -> str | None:
    # aten/src/ATen/native/cuda/GroupedBlas.cpp, _grouped_mm_cuda: on sm_90+ with bf16 inputs and output the
    # CUTLASS kernel reads offs on the device ("fast path, no d2h sync needed"); anything else runs
    # _grouped_mm_fallback (GroupedMMUtils.h), which copies offs to the host to slice the groups.
    mat_a, mat_b = args[0], args[1]
    offs = _argument(args, kwargs, 2, "offs", None)
    out_dtype = _argument(args, kwargs, 4, "out_dtype", None)
    bf16 = mat_a.dtype == mat_b.dtype == torch.bfloat16 and out_dtype in (None, torch.bfloat16)
    if offs is not None and not bf16:
        return "_grouped_mm off the bf16 fast path copies offs to the host (_grouped_mm_fallback)"
    return None


def _isin(args: Sequence[Any], kwargs: dict[str, Any]) -> str | None:
    # aten/src/ATen/native/TensorCompare.cpp, isin_Tensor_Tensor_out: numpy's heuristic picks the brute-force
    # kernel while test_elements.numel() < int(10 * elements.numel() ** 0.145); otherwise isin_sorting, which
    # without assume_unique calls at::_unique on both inputs (a host-read output size, see unique).
    elements, test = args[0], args[1]
    assume_unique = _argument(args, kwargs, 2, "assume_unique", False)
    if elements.numel() == 0 or assume_unique:
        return None
    if test.numel() < int(10.0 * float(elements.numel()) ** 0.145):
        return None
    return "isin with many test elements takes isin_sorting, which calls unique (a host-read output size)"


def _boolean_index(args: Sequence[Any], kwargs: dict[str, Any]) -> str | None:
    # aten/src/ATen/native/IndexingUtils.h, expandTensors: a bool/uint8 index becomes `index.nonzero()`
    # (a data-dependent shape, see nonzero) before index/index_put run; integer indices launch kernels only.
    for index in (args[1] if len(args) > 1 else None) or ():
        if isinstance(index, torch.Tensor) and index.dtype in (torch.bool, torch.uint8):
            return "boolean-mask indexing calls nonzero (a data-dependent output shape)"
    return None


_NONZERO = (
    "nonzero sizes its output from the count of nonzeros, copied to the host "
    "(aten/src/ATen/native/cuda/Nonzero.cu, nonzero_out_cuda); nonzero_static(size=...) does not"
)
_UNIQUE = (
    "unique sizes its output from the number of unique values, read on the host "
    "(aten/src/ATen/native/cuda/Unique.cu)"
)

# op -> rule. Ops not listed launch kernels only on the GPU, among them (checked against the same sources):
# nonzero_static (Nonzero.cu, nonzero_static_out_cuda: fixed size, padded with fill_value); histc with
# min != max; multinomial (aten/src/ATen/native/Distributions.cpp, multinomial: the checks on the
# probabilities are `_assert_async` device asserts and the sampling kernels take the generator's
# graph-safe Philox state); _assert_async (a device-side assert kernel); index/index_put with integer
# indices; searchsorted, bucketize, topk, sort, scatter/scatter_reduce/index_add with explicit sizes.
SYNC_RULES: dict[Any, SyncRule] = {
    # aten/src/ATen/native/cuda/CUDAScalar.cu, _local_scalar_dense_cuda: cudaMemcpyAsync to the host, then a
    # stream synchronize. `.item()`, `int(t)`, `float(t)`, `bool(t)` and `.tolist()` of one element end here.
    aten._local_scalar_dense.default: _always(
        ".item()/int()/float()/bool() reads a device value on the host"
    ),
    aten.item.default: _always(".item()/int()/float()/bool() reads a device value on the host"),
    aten.is_nonzero.default: _always("bool(tensor) reads a device value on the host (is_nonzero calls item)"),
    # aten/src/ATen/native/cuda/Equal.cpp, cuda_equal: `at::eq(self, src).all().item()`
    aten.equal.default: _always("torch.equal returns a host bool computed from device data"),
    # aten/src/ATen/native/TensorCompare.cpp, allclose: `at::isclose(...).all().item<uint8_t>()`, one op at the
    # dispatcher (CompositeExplicitAutograd), so its item() is not seen on its own
    aten.allclose.default: _always("torch.allclose returns a host bool computed from device data"),
    aten.nonzero.default: _always(_NONZERO),
    aten.nonzero.out: _always(_NONZERO),
    # aten/src/ATen/native/cuda/IndexKernel.cu, masked_select_out_cuda_impl: index_out with the mask
    aten.masked_select.default: _always("masked_select indexes with a boolean mask (a nonzero inside)"),
    aten.masked_select.out: _always("masked_select indexes with a boolean mask (a nonzero inside)"),
    aten._unique.default: _always(_UNIQUE),
    aten._unique2.default: _always(_UNIQUE),
    aten.unique_dim.default: _always(_UNIQUE),
    aten.unique_consecutive.default: _always(_UNIQUE),
    aten.unique_dim_consecutive.default: _always(_UNIQUE),
    aten.bincount.default: _bincount,
    aten.isin.Tensor_Tensor: _isin,
    aten.isin.Tensor_Tensor_out: _isin,
    aten.histc.default: _histc,
    aten.histc.out: _histc,
    aten.repeat_interleave.Tensor: _repeat_interleave,
    aten.repeat_interleave.self_Tensor: _repeat_interleave,
    aten._grouped_mm.default: _grouped_mm,
    # aten/src/ATen/native/BatchLinearAlgebra.cpp, _linalg_check_errors: reads the LAPACK/cuSOLVER info tensor
    # on the host to raise; torch.linalg.inv/cholesky/solve call it, their *_ex forms do not.
    aten._linalg_check_errors.default: _always(
        "_linalg_check_errors reads the solver's info on the host (use the linalg *_ex form)"
    ),
    # aten/src/ATen/native/nested/NestedTensorMath.cpp: a nested tensor's sizes live on the host, so
    # NestedTensor_nested_tensor_from_mask copies the mask's row lengths `.to(kCPU)`, and the left-aligned
    # check returns `sizes.equal(nums)` (a host bool). nn.TransformerEncoder's fast path with a padding mask
    # (enable_nested_tensor=True, eval, no grad) calls both.
    aten._nested_tensor_from_mask.default: _always(
        "a nested tensor from a mask copies its row lengths to the host"
    ),
    aten._nested_tensor_from_mask_left_aligned.default: _always(
        "the nested-tensor mask check returns a host bool computed from device data"
    ),
    aten.index.Tensor: _boolean_index,
    aten.index_put.default: _boolean_index,
    aten.index_put_.default: _boolean_index,
    aten._index_put_impl_.default: _boolean_index,
}

# Rules on torch-level calls, checked before the call decomposes into the aten ops the recorder sees. They are
# applied by replacing the functions for the duration of the capture (`_calls_checked`), not by a
# TorchFunctionMode: under any function mode `has_torch_function` is true and libraries take other paths
# (nn.TransformerEncoder leaves its fused fast path), so the capture would record code eager does not run.


def _one_hot(args: Sequence[Any], kwargs: dict[str, Any]) -> str | None:
    # aten/src/ATen/native/Onehot.cpp, one_hot: `num_classes == -1` reads self.max().item(); with an explicit
    # num_classes the CUDA path "relies on device asserts from scatter to avoid sync" (the CPU path reads
    # min and max on the host to check the range, which is why the waiver exists).
    if _argument(args, kwargs, 1, "num_classes", -1) == -1:
        return "one_hot without num_classes reads max(input) on the host"
    return None


# Copies between the host and the op's device. On the CPU backend both are the CPU, so the dispatcher sees at
# most a CPU copy; the call says what a GPU run would do. A pageable host<->device copy under capture is
# refused by torch ("Cannot copy between CPU and CUDA tensors during CUDA graph capture unless the CPU tensor
# is pinned", aten/src/ATen/native/cuda/Copy.cu), and outside capture a blocking copy synchronizes the stream.
_PAGEABLE_COPY = "a host<->device copy through pageable memory (a stream sync; refused under capture)"


def _is_host(device: Any) -> bool:
    # Only a literal "cpu" names the host for sure: a torch.device argument is usually another tensor's
    # `.device`, which is the GPU in a GPU run and the CPU here.
    return isinstance(device, str) and device.split(":")[0] == "cpu"


def _to_host(args: Sequence[Any], kwargs: dict[str, Any]) -> str | None:
    target = kwargs.get("device", args[1] if len(args) > 1 else None)
    return f"Tensor.to({target!r}) is {_PAGEABLE_COPY}" if _is_host(target) else None


def _copies_host_data(data: Any) -> bool:
    # A tensor is no host data; an empty sequence copies no bytes (copy_ returns before any transfer).
    return not isinstance(data, torch.Tensor) and not (isinstance(data, list | tuple) and not data)


def _host_data_to_device(args: Sequence[Any], kwargs: dict[str, Any]) -> str | None:
    device, data = kwargs.get("device"), args[0] if args else kwargs.get("data")
    if device is None or _is_host(device) or not _copies_host_data(data):
        return None
    return f"a tensor built from host data on device={device!r} is {_PAGEABLE_COPY}"


def _new_tensor(args: Sequence[Any], kwargs: dict[str, Any]) -> str | None:
    data = args[1] if len(args) > 1 else kwargs.get("data")
    if not _copies_host_data(data) or _is_host(kwargs.get("device")):
        return None
    return f"Tensor.new_tensor(host data) on the tensor's device is {_PAGEABLE_COPY}"


# (owner, attribute) -> rule. Callers that look the function up at call time (F.one_hot, torch.tensor, every
# Tensor method) are checked; a name imported before the capture (`from torch.nn.functional import one_hot`)
# keeps the original.
FUNCTION_RULES: dict[tuple[Any, str], SyncRule] = {
    (torch.nn.functional, "one_hot"): _one_hot,
    (torch.Tensor, "cpu"): _always(f"Tensor.cpu() is {_PAGEABLE_COPY}"),
    (torch.Tensor, "to"): _to_host,
    (torch, "tensor"): _host_data_to_device,
    (torch, "as_tensor"): _host_data_to_device,
    (torch.Tensor, "new_tensor"): _new_tensor,
}
# Functions whose CPU kernel reads its input on the host to validate it where the CUDA kernel does not: the
# `.item()` calls inside them are waived once their rule passed.
_HOST_CHECKS_WAIVED = frozenset({(torch.nn.functional, "one_hot")})

_SCALAR_READS = frozenset({aten._local_scalar_dense.default, aten.item.default})
# How a verdict that covers less than the op did says so (Row.limits, results.csv, the summary and the HTML).
LIMITS_PREFIX = "not fully checked on cpu: "
_ATEN_NAMESPACES = frozenset({"aten", "prims"})


def _is_custom_op(func: Any) -> bool:
    return isinstance(func, torch._ops.OpOverload) and func.namespace not in _ATEN_NAMESPACES


# Custom ops that stand for a host-function graph node (cudaLaunchHostFunc / hipLaunchHostFunc): a GPU graph
# runs their body on the host at every replay, on host memory, so the host reads inside are their purpose,
# not a sync. The recorder keeps them as one node and does not look inside.
_HOST_FUNCTION_OPS: set[str] = set()


def register_host_function_op(op: Any) -> None:
    """Declare that the custom op `op` (a torch.library custom op or its "namespace::name") models a
    host-function node: the CPU backend records it whole without checking its body for host reads."""
    name = op if isinstance(op, str) else getattr(op, "_qualname", None) or op._schema.name
    if "::" not in name:
        raise ValueError(f"register_host_function_op takes a custom op or 'namespace::name', got {op!r}")
    _HOST_FUNCTION_OPS.add(name)


def _host_sync_reason(func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> str | None:
    rule = SYNC_RULES.get(func)
    return rule(args, kwargs) if rule is not None else None


@dataclass
class _Fresh:
    """A new tensor an op returned at capture, and the view it had then: a later in-place metadata op of the
    graph (transpose_, unsqueeze_, as_strided_: nn.GRU's batch_first output) changes the recorded tensor's
    shape, which replay must undo before it writes this op's new value into it."""

    position: int  # in the op's flattened result
    tensor: torch.Tensor
    view: tuple[Any, ...] | None  # size, stride, storage offset when the op returned it (None: not strided)


@dataclass
class _Node:
    func: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    fresh_outputs: list[_Fresh]


def _fresh_output_positions(func: Any) -> set[int] | None:
    """Positions of returns that are new tensors (not views of or writes to an argument).

    None when the schema is unavailable (treat every tensor return as fresh).
    """
    schema = getattr(func, "_schema", None)
    if schema is None:
        return None
    fresh = set()
    for i, ret in enumerate(schema.returns):
        if ret.alias_info is None:
            fresh.add(i)
    return fresh


def _view(t: torch.Tensor) -> tuple[Any, ...] | None:
    if t.is_nested or t.layout != torch.strided:  # no strides to speak of (and no in-place view ops)
        return None
    return t.size(), t.stride(), t.storage_offset()


def _fresh_tensors(result: Any, positions: set[int] | None) -> list[_Fresh]:
    results = result if isinstance(result, tuple | list) else (result,)
    return [
        _Fresh(position, value, _view(value))
        for position, value in enumerate(results)
        if isinstance(value, torch.Tensor) and (positions is None or position in positions)
    ]


_RECORDING = threading.local()  # .depth: recorders entered on this thread (dispatch modes are per thread)


def is_recording() -> bool:
    """True on this thread while CpuBackend.capture records an op, including inside custom ops' bodies
    (the dispatcher pops the mode while an op it intercepted runs, so the mode stack alone cannot say)."""
    return getattr(_RECORDING, "depth", 0) > 0


# The kernel a custom op's body runs under on the CPU device: redispatching there skips the Python key the
# recorder sits on for the op itself, while every op the body issues comes back through it.
_CPU_KERNEL_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)


class _Recorder(TorchDispatchMode):
    """Records aten ops as nodes; custom ops and compiled graphs as opaque nodes whose inside is checked."""

    def __init__(self) -> None:
        super().__init__()
        self.nodes: list[_Node] = []
        self.opaque_depth = 0  # > 0 while an opaque node's body runs: check its ops, record none of them
        self.waived: list[str] = []  # host reads the CUDA kernel of the enclosing function does not make
        self.host_function_depth = 0  # > 0 inside a host-function op: host code by design, no rules apply
        self.compiled_graphs = 0
        self.limits: list[str] = []

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        # torch.compile'd functions run their compiled graph under this mode instead of falling back to
        # eager (torch/_dynamo/convert_frame.py skips frames while a mode without this flag is active).
        return True

    def __enter__(self) -> _Recorder:
        _RECORDING.depth = getattr(_RECORDING, "depth", 0) + 1
        try:
            return super().__enter__()
        except BaseException:
            _RECORDING.depth -= 1
            raise

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)
        finally:
            _RECORDING.depth -= 1

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        reason = _host_sync_reason(func, args, kwargs)
        if reason is not None and not (self.waived and func in _SCALAR_READS):
            raise CaptureSyncError(f"{func}: {reason}")
        if _is_custom_op(func) and func._schema.name in _HOST_FUNCTION_OPS:
            self.host_function_depth += 1
            try:
                result = func(*args, **kwargs)
            finally:
                self.host_function_depth -= 1
        elif _is_custom_op(func):
            result = self._custom_op(func, args, kwargs)
        else:
            result = func(*args, **kwargs)
        if self.opaque_depth == 0:
            self.nodes.append(
                _Node(func, tuple(args), dict(kwargs), _fresh_tensors(result, _fresh_output_positions(func)))
            )
        return result

    def _custom_op(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        """Run a custom op's CPU kernel with this mode active, so the ops its body issues are checked."""
        self.opaque_depth += 1
        try:
            with self:
                return func.redispatch(_CPU_KERNEL_KEYS, *args, **kwargs)
        finally:
            self.opaque_depth -= 1

    def opaque_call(self, name: str, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        """Run `fn(*args)` as one node (checked inside, recorded whole); replay calls it again."""
        self.opaque_depth += 1
        try:
            result = fn(*args)
        finally:
            self.opaque_depth -= 1
        if self.opaque_depth == 0:
            self.nodes.append(_Node(_OpaqueCall(name, fn), args, {}, _fresh_tensors(result, None)))
        return result


@dataclass
class _OpaqueCall:
    name: str
    fn: Callable[..., Any]

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)

    def __str__(self) -> str:
        return self.name


@contextlib.contextmanager
def _calls_checked(recorder: _Recorder) -> Iterator[None]:
    """Replace the functions in FUNCTION_RULES by checking wrappers for the duration of the capture."""
    originals = {key: getattr(*key) for key in FUNCTION_RULES}

    def checked(key: tuple[Any, str], original: Callable[..., Any]) -> Callable[..., Any]:
        rule, label = FUNCTION_RULES[key], key[1]

        def call(*args: Any, **kwargs: Any) -> Any:
            # Dynamo traces this wrapper when a compiled function calls it: it then sees the original.
            if recorder.host_function_depth or torch.compiler.is_compiling():
                return original(*args, **kwargs)
            reason = rule(args, kwargs)
            if reason is not None:
                raise CaptureSyncError(f"{label}: {reason}")
            if key not in _HOST_CHECKS_WAIVED:
                return original(*args, **kwargs)
            recorder.waived.append(label)
            try:
                return original(*args, **kwargs)
            finally:
                recorder.waived.pop()

        return call

    try:
        for key, original in originals.items():
            setattr(*key, checked(key, original))
        yield
    finally:
        for key, original in originals.items():
            setattr(*key, original)


@contextlib.contextmanager
def _compiled_graphs_recorded(recorder: _Recorder) -> Iterator[None]:
    """Make each inductor-compiled graph that runs during capture one opaque node of the record.

    Inductor's generated C++ kernels take raw pointers, so the dispatcher sees none of them (only its extern
    calls such as mm.out): recorded op by op, a replay would skip them. Recorded as one call of the compiled
    graph on the same input tensors, a replay reruns all of it, like the kernels of a captured CUDA graph.
    """
    try:
        from torch._inductor.output_code import CompiledFxGraph
    except ImportError:  # a torch without inductor compiles nothing to record
        yield
        return
    original = CompiledFxGraph.__call__

    def call(graph: Any, inputs: Sequence[Any]) -> Any:
        recorder.compiled_graphs += 1
        # Set for a graph compiled with mode="reduce-overhead" whose tensors are on the CPU: what that mode
        # adds on a GPU (CUDA graph trees) did not run here.
        reason = getattr(graph, "disabled_cudagraphs_reason", None)
        if reason:
            recorder.limits.append(
                f"torch.compile asked for CUDA graphs, which inductor builds for CUDA tensors only ({reason.strip()})"
            )
        args = tuple(inputs)
        if isinstance(inputs, list):
            inputs.clear()  # inductor's boxed convention: the callee frees the caller's list
        return recorder.opaque_call("inductor compiled graph", lambda *a: original(graph, list(a)), args)

    CompiledFxGraph.__call__ = call  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        CompiledFxGraph.__call__ = original  # type: ignore[method-assign]


class CpuGraph(CapturedGraph):
    def __init__(
        self, nodes: list[_Node], outputs: tuple[torch.Tensor, ...], pattern: int | None, limits: str = ""
    ) -> None:
        self.nodes = nodes
        self.outputs = outputs
        self.pattern = pattern
        self.limits = limits  # what this capture could not check on the CPU ("" when it checked everything)

    def replay(self) -> None:
        # Factory ops re-poison on replay, as fill_uninitialized_memory's fill does inside a real graph (it is
        # captured as a node and runs on every replay).
        fill = BytePatternMode(self.pattern) if self.pattern is not None else None
        with torch.no_grad(), deterministic_fill():
            if fill is not None:
                fill.__enter__()
            try:
                for node in self.nodes:
                    result = node.func(*node.args, **node.kwargs)
                    results = result if isinstance(result, tuple | list) else (result,)
                    for fresh in node.fresh_outputs:
                        value, recorded = results[fresh.position], fresh.tensor
                        if fresh.view is not None and _view(recorded) != fresh.view:
                            recorded.as_strided_(*fresh.view)  # a later node changed its view; it will again
                        if value.data_ptr() != recorded.data_ptr() or value.stride() != recorded.stride():
                            recorded.copy_(value)
            finally:
                if fill is not None:
                    fill.__exit__(None, None, None)

    def node_kinds(self) -> dict[str, int]:
        kinds: dict[str, int] = {}
        for node in self.nodes:
            kinds[str(node.func)] = kinds.get(str(node.func), 0) + 1
        return kinds

    def release(self, *, reclaim_now: bool = True) -> None:
        self.nodes = []


class CpuBackend(GraphBackend):
    name = "cpu"

    def __init__(self) -> None:
        self.device = torch.device("cpu")
        self._pattern: int | None = None

    def capture(self, fn: Callable[[], Any], *, warmup: int = 1) -> CapturedGraph:
        # Warm-up under no_grad as capture and the protocol's eager runs are: a torch.compile'd op then
        # compiles here, once, for the grad mode it is captured in (dynamo guards on it).
        # The byte fill wraps warm-up and recording from outside the recorder, so that the recorder records
        # each factory op and CpuGraph.replay fills it again; the op-call fill would sit inside the recorder.
        fill = BytePatternMode(self._pattern) if self._pattern is not None else contextlib.nullcontext()
        with torch.no_grad(), fill, fill_op_factories(None):
            for _ in range(warmup):
                fn()
        recorder = _Recorder()
        try:
            with (
                fill,
                fill_op_factories(None),
                torch.no_grad(),
                _host_reads_refused(recorder),
                _compiled_graphs_recorded(recorder),
                recorder,
                _calls_checked(recorder),
            ):
                result = fn()
        except (CaptureError, FallbackEager):
            raise
        except Exception as exc:  # whatever else the op raised under capture is a capture failure
            if _looks_like_sync(exc):
                raise CaptureSyncError(f"{type(exc).__name__}: {exc}") from exc
            raise CaptureError(f"{type(exc).__name__}: {exc}") from exc
        try:
            outputs = flatten_tensors(result)
        except TypeError as exc:
            raise CaptureError(str(exc)) from exc
        limits = "; ".join(dict.fromkeys(recorder.limits))
        return CpuGraph(recorder.nodes, outputs, self._pattern, f"{LIMITS_PREFIX}{limits}" if limits else "")

    def poisoned_allocation(self, pattern: int) -> contextlib.AbstractContextManager[None]:
        return _CpuPoison(self, pattern)

    def describe(self) -> str:
        return "cpu (dispatcher-recorded emulated graph; no streams, events or threads)"


# Tensor methods that read data on the host without passing the dispatcher (tolist copies element by element
# in C++; numpy shares the buffer): a real capture would sync on each.
_HOST_READ_METHODS = ("tolist", "numpy", "__array__")
# Device-wide waits. Device-generic code calls torch.get_device_module(x.device).synchronize(), which is
# torch.cpu.synchronize (a no-op) on this backend and cudaDeviceSynchronize on a GPU, illegal while a stream
# captures (CUDA programming guide, stream capture: synchronizing a capturing stream or the device is
# cudaErrorStreamCaptureUnsupported).
_HOST_WAITS = tuple(
    (module, "synchronize")
    for module in (torch.cpu, torch.cuda, getattr(torch, "accelerator", None))
    if module
)


@contextlib.contextmanager
def _host_reads_refused(recorder: _Recorder) -> Iterator[None]:
    """Make host reads and device waits that bypass the dispatcher raise CaptureSyncError during capture,
    except inside a host-function op (host code at replay by design)."""
    saved_methods = {name: getattr(torch.Tensor, name) for name in _HOST_READ_METHODS}
    saved_waits = [(module, name, getattr(module, name)) for module, name in _HOST_WAITS]

    def refuse(message: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def refused(*args: Any, **kwargs: Any) -> Any:
            if recorder.host_function_depth:
                return original(*args, **kwargs)
            raise CaptureSyncError(message)

        return refused

    try:
        for name, method in saved_methods.items():
            setattr(torch.Tensor, name, refuse(f"Tensor.{name}() reads device data on the host", method))
        for module, name, function in saved_waits:
            setattr(
                module, name, refuse(f"{module.__name__}.{name}() waits for the device on the host", function)
            )
        yield
    finally:
        for name, method in saved_methods.items():
            setattr(torch.Tensor, name, method)
        for module, name, function in saved_waits:
            setattr(module, name, function)


def _looks_like_sync(exc: BaseException) -> bool:
    # A CaptureSyncError raised inside a custom op's Python implementation may arrive wrapped.
    return any(isinstance(cause, CaptureSyncError) for cause in exception_chain(exc))


class _CpuPoison(contextlib.AbstractContextManager[None]):
    """Context manager: deterministic fill plus byte-pattern fill of factory results, for one pattern."""

    def __init__(self, backend: CpuBackend, pattern: int) -> None:
        self.backend = backend
        self.pattern = pattern
        self._fill = deterministic_fill()
        self._mode = fill_op_factories(pattern)  # eager calls of the op; capture() fills its own

    def __enter__(self) -> None:
        self.backend._pattern = self.pattern
        self._fill.__enter__()
        self._mode.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)
        self._fill.__exit__(*exc)
        self.backend._pattern = None
