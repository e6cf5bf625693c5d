"""Register a kernel family's ops with torch's dispatcher: Python launchers at the dispatch keys directly, or a
C++ kernel that the family's module registers at the device key.

Role: ``torch.library.custom_op`` runs its implementation under an autograd.Function shim, a dynamo-disable
frame and output-aliasing checks on every call: several times the host time of a do-nothing op defined with
``torch.library.Library`` and registered at the CPU and CUDA keys (ROCm builds of torch dispatch HIP tensors
through the CUDA key). The kernel ops return fresh tensors and have no gradient, so those layers buy them
nothing. The schema is inferred from the launcher's annotations exactly as custom_op infers it and the fake
implementation is registered with ``torch.library.register_fake``; opcheck, torch.compile, the dispatcher's
modes and the harness's CPU backend see one OpOverload either way.

Two forms (``define``):
  * a Python launcher (``native=False``) at CPU, CUDA and CompositeExplicitAutograd, where it refuses other
    devices by name;
  * a family with a dispatcher unit (``native=True``; kernels/common/gs_torch.h): ``impl`` sits only at
    CompositeExplicitAutograd, where the dispatcher sends a call while the device key has no kernel of its own.
    It is the loader: it checks the arguments, loads the device's module, asks it to register its C++ kernel
    (``register_native``) and calls the op again, which the dispatcher now sends to C++. Every later call on
    that kind of device goes to C++ directly. A C++ kernel asks Python only for a signature it has not seen,
    through the family's planner op (``define_planner``).
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable

import torch

_LIBRARIES: dict[str, torch.library.Library] = {}
DEVICE_KEYS = ("CPU", "CUDA", "CompositeExplicitAutograd")
_REGISTERING = threading.Lock()


def _library(namespace: str) -> torch.library.Library:
    lib = _LIBRARIES.get(namespace)
    if lib is None:
        lib = _LIBRARIES[namespace] = torch.library.Library(namespace, "FRAGMENT")
    return lib


def define(qualname: str, impl: Callable, fake: Callable, *, native: bool = False) -> torch._ops.OpOverload:
    """Define ``namespace::name`` with impl's inferred schema, register impl (at DEVICE_KEYS, or for a native op
    at CompositeExplicitAutograd only: module note) and fake as its fake implementation; returns the op's
    default overload."""
    namespace, name = qualname.split("::")
    lib = _library(namespace)
    lib.define(name + torch.library.infer_schema(impl, mutates_args=()))
    for key in DEVICE_KEYS[-1:] if native else DEVICE_KEYS:
        lib.impl(name, impl, key)
    torch.library.register_fake(qualname, fake, lib=lib)
    return getattr(getattr(torch.ops, namespace), name).default


def define_planner(qualname: str, planner: Callable, schema: str) -> torch._ops.OpOverload:
    """Define the op a C++ kernel calls for a signature it has not seen: ``planner`` checks the arguments
    (ValueError naming the argument and the allowed values) and returns what C++ needs as a list of ints.
    ``schema`` is given (``(...) -> int[]``): torch infers no schema for a list return. Registered at
    CompositeExplicitAutograd: the same Python function for every device."""
    namespace, name = qualname.split("::")
    lib = _library(namespace)
    lib.define(name + schema)
    lib.impl(name, planner, "CompositeExplicitAutograd")
    return getattr(getattr(torch.ops, namespace), name).default


def register_native(qualname: str, module: types.ModuleType, device: torch.device) -> None:
    """Have ``module`` (a family's built module with a dispatcher unit) register its C++ kernel for ``qualname``
    at ``device``'s key, unless the key has a kernel already (the dispatcher is the record). Before it does,
    the stream its kernel would launch on is compared with torch's current stream: a torch build whose device
    guard names another stream (or none) is refused here, with the two handles, instead of launching on the
    wrong stream."""
    key = "CPU" if device.type == "cpu" else "CUDA"
    with _REGISTERING:
        if torch._C._dispatch_has_kernel_for_dispatch_key(qualname, key):
            return
        if device.type == "cuda":
            index = device.index if device.index is not None else torch.cuda.current_device()
            ours, torchs = module.dispatch_stream(index), torch._C._cuda_getCurrentRawStream(index)
            if ours != torchs:
                raise RuntimeError(
                    f"{qualname}: the C++ kernel would launch on stream {ours:#x}, torch's current stream is "
                    f"{torchs:#x}; this torch build's device guard does not name its streams as expected"
                )
        module.register_dispatch()
        if not torch._C._dispatch_has_kernel_for_dispatch_key(qualname, key):
            raise RuntimeError(f"{qualname}: {module.__name__}.register_dispatch() left no kernel at {key}")
