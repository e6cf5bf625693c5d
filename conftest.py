"""Repository-wide pytest setup: the default Hypothesis profile and hardware skips (graphsafe's pytest plugin
comes from its entry point, which `make setup`'s editable install registers).

No seeding or global switches at import time beyond profile registration: a test that needs them sets them
in a fixture, so the order in which modules are imported never changes a result. Out-of-memory is a
failure, not a skip; there are no reruns.
"""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import settings

from graphsafe import profiles
from graphsafe.pytest_plugin import spread_xdist_workers


def pytest_configure(config: pytest.Config) -> None:
    # graphsafe-dev: quick local iteration; graphsafe-ci: what `make test` runs on 2 cores; graphsafe-nightly:
    # `make nightly`. Hypothesis's own configure hook runs after this one, so --hypothesis-profile still wins.
    profiles.register()
    settings.load_profile(os.environ.get(profiles.ENV, profiles.CI if os.environ.get("CI") else profiles.DEV))
    # These tests import torch anyway: give each xdist worker its share of the cores (and GPU) at once.
    spread_xdist_workers(config)


def _device_count() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip hardware-marked tests where the hardware is absent, with the reason in the report."""
    devices = _device_count()
    is_rocm = bool(getattr(torch.version, "hip", None))
    reasons = {
        "gpu": None if devices else "needs a CUDA or ROCm device",
        "cuda": None if devices and not is_rocm else "needs an NVIDIA device",
        "rocm": None if devices and is_rocm else "needs an AMD device",
        "multi_gpu": None if devices >= 2 else f"needs 2 devices, found {devices}",
        "nightly": None if profiles.is_nightly() else "runs in `make nightly`",
    }
    for item in items:
        for marker, reason in reasons.items():
            if reason and item.get_closest_marker(marker):
                item.add_marker(pytest.mark.skip(reason=reason))
                break
