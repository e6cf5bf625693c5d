"""Case requirements (`Case.requires`): what a case needs from the machine, and the skip reason where it is absent.

The vocabulary is small and closed, so a typo is a CaseError at definition time instead of a case that
silently never runs:

    cpu          the run uses the cpu backend (a case whose GPU form has no verdict measured on a GPU yet)
    gpu          the run uses the gpu backend (a CUDA or ROCm device)
    cuda, rocm   ... on an NVIDIA device / an AMD device
    sm_XY        an NVIDIA device of compute capability X.Y or newer (sm_90: H100/H200; sm_89: the first with fp8)
    fp8          the backend's device computes in float8 e4m3: NVIDIA sm_89+, AMD gfx94x/gfx95x (MI300, MI350),
                 or the cpu backend (torch's float8 dtypes run there)
    devices>=N   at least N visible GPUs

`unmet(requires, backend)` returns the first unmet requirement's reason (the pytest plugin's skip reason).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import torch

from graphsafe.errors import CaseError

_REQUIREMENT = re.compile(
    r"^(?:cpu|gpu|cuda|rocm|fp8|sm_(?P<major>[1-9]\d?)(?P<minor>\d)|devices>=(?P<count>[1-9]\d*))$"
)
ALLOWED = "cpu, gpu, cuda, rocm, fp8, sm_<major><minor> (e.g. sm_90), devices>=<N> (e.g. devices>=2)"
# AMD architectures with hardware float8 (CDNA3 gfx940-942, CDNA4 gfx950).
_ROCM_FP8_ARCHS = ("gfx94", "gfx95")
_FIRST_NVIDIA_FP8 = (8, 9)


def validate(label: str, requires: object) -> tuple[str, ...]:
    """`requires` as a tuple, or CaseError naming the case, the field and the allowed values."""
    if isinstance(requires, str) or not isinstance(requires, Iterable):
        raise CaseError(
            label, "requires", f"must be a tuple of requirements such as ('gpu', 'sm_90'), got {requires!r}"
        )
    values = tuple(requires)
    for value in values:
        if not isinstance(value, str) or not _REQUIREMENT.match(value):
            raise CaseError(label, "requires", f"unknown requirement {value!r}; allowed values: {ALLOWED}")
    return values


def unmet(requires: Iterable[str], backend: str) -> str | None:
    """Why this machine and resolved backend ("cpu" or "gpu") cannot run a case, or None when they can."""
    for requirement in requires:
        reason = _unmet_one(requirement, backend)
        if reason:
            return f"requires {requirement}: {reason}"
    return None


def _device_summary() -> str:
    if not torch.cuda.is_available():
        return "no GPU visible"
    if torch.version.hip:
        return f"AMD {torch.cuda.get_device_properties(0).gcnArchName}"
    major, minor = torch.cuda.get_device_capability()
    return f"NVIDIA sm_{major}{minor}"


def _unmet_one(requirement: str, backend: str) -> str | None:
    match = _REQUIREMENT.match(requirement)
    if match is None:  # validate() admitted it, so this is a harness bug, never a skip
        raise ValueError(f"unknown requirement {requirement!r}; allowed values: {ALLOWED}")
    if match["count"]:
        needed, found = int(match["count"]), torch.cuda.device_count() if torch.cuda.is_available() else 0
        return None if found >= needed else f"{found} GPU(s) visible"
    if requirement == "fp8" and backend == "cpu":
        return None
    if requirement == "cpu":
        return None if backend == "cpu" else f"the run uses the {backend} backend"
    if backend != "gpu":
        return f"the run uses the {backend} backend"
    is_rocm = bool(torch.version.hip)
    if requirement == "gpu":
        return None
    if requirement == "rocm":
        return None if is_rocm else f"found {_device_summary()}"
    if requirement == "fp8":
        if is_rocm:
            arch = torch.cuda.get_device_properties(0).gcnArchName
            return None if arch.startswith(_ROCM_FP8_ARCHS) else f"found {_device_summary()}"
        return (
            None if torch.cuda.get_device_capability() >= _FIRST_NVIDIA_FP8 else f"found {_device_summary()}"
        )
    if is_rocm:  # cuda, sm_XY
        return f"found {_device_summary()}"
    if requirement == "cuda":
        return None
    capability = (int(match["major"]), int(match["minor"]))
    return None if torch.cuda.get_device_capability() >= capability else f"found {_device_summary()}"
