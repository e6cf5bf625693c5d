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
    import:X     the dotted path X imports: a module (`import:transformers`, looked up without importing it)
                 or an attribute of one (`import:transformers.cache_utils.StaticLayer.crop`, which imports the
                 module): an optional library, or a feature its older versions lack. Such a case stays
                 registered where the library is missing or too old, and is skipped with the reason
                 ("transformers 5.17.0 has no cache_utils.StaticLayer.crop"), so a run lists it instead of
                 losing it.

`unmet(requires, backend)` returns the first unmet requirement's reason (the pytest plugin's skip reason;
`graphsafe verify` names it and writes it to the run's skipped.csv).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import re
from collections.abc import Iterable

import torch

from graphsafe.errors import CaseError

_REQUIREMENT = re.compile(
    r"^(?:cpu|gpu|cuda|rocm|fp8|sm_(?P<major>[1-9]\d?)(?P<minor>\d)|devices>=(?P<count>[1-9]\d*)"
    r"|import:(?P<path>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*))$"
)
ALLOWED = (
    "cpu, gpu, cuda, rocm, fp8, sm_<major><minor> (e.g. sm_90), devices>=<N> (e.g. devices>=2), "
    "import:<module or module.attribute> (e.g. import:transformers)"
)
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
    if match["path"]:
        return _import_unmet(match["path"])
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


def _import_unmet(path: str) -> str | None:
    """Why `path` (a module, or module.attribute...) cannot be imported here; None when it can."""
    parts = path.split(".")
    top = parts[0]
    if importlib.util.find_spec(top) is None:
        return f"{top} is not installed"
    if len(parts) == 1:
        return None  # installed; not imported (torch_geometric's import alone takes seconds)
    module, depth = None, 0
    for depth in range(len(parts), 0, -1):  # the longest prefix that is a module
        name = ".".join(parts[:depth])
        try:
            if importlib.util.find_spec(name) is None:
                continue
        except ModuleNotFoundError:  # a parent of `name` is an attribute, not a package
            continue
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # the library is there but broken: a reason, never a crash of the run
            return f"importing {name} failed: {type(exc).__name__}: {exc}"
        break
    value: object = module
    for attribute in parts[depth:]:
        if not hasattr(value, attribute):
            return f"{top} {_version(top)} has no {'.'.join(parts[1:])}"
        value = getattr(value, attribute)
    return None


def _version(module: str) -> str:
    try:
        return importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        return str(getattr(importlib.import_module(module), "__version__", "of unknown version"))
