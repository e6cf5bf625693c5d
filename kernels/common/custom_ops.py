"""Register a kernel family's Python launcher as a torch operator at the dispatch keys directly.

Role: ``torch.library.custom_op`` runs its implementation under an autograd.Function shim, a dynamo-disable
frame and output-aliasing checks on every call: 25 us per call of a do-nothing op on the 2-core build
machine, against 5-15 us for the same function defined with ``torch.library.Library`` and registered at the
CPU and CUDA keys (ROCm builds of torch dispatch HIP tensors through the CUDA key). The kernel ops return
fresh tensors and have no gradient, so those layers buy them nothing. The schema is inferred from the
launcher's annotations exactly as custom_op infers it, the fake implementation is registered with
``torch.library.register_fake``, and every other device reaches the launcher through
CompositeExplicitAutograd, where it refuses the device by name. opcheck, torch.compile, the dispatcher's
modes and the harness's CPU backend see the same OpOverload as before.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

_LIBRARIES: dict[str, torch.library.Library] = {}
DEVICE_KEYS = ("CPU", "CUDA", "CompositeExplicitAutograd")


def define(qualname: str, impl: Callable, fake: Callable) -> torch._ops.OpOverload:
    """Define ``namespace::name`` with impl's inferred schema, register impl at DEVICE_KEYS and fake as its
    fake implementation; returns the op's default overload."""
    namespace, name = qualname.split("::")
    lib = _LIBRARIES.get(namespace)
    if lib is None:
        lib = _LIBRARIES[namespace] = torch.library.Library(namespace, "FRAGMENT")
    lib.define(name + torch.library.infer_schema(impl, mutates_args=()))
    for key in DEVICE_KEYS:
        lib.impl(name, impl, key)
    torch.library.register_fake(qualname, fake, lib=lib)
    return getattr(getattr(torch.ops, namespace), name).default
