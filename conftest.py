"""Repository-wide pytest setup: Hypothesis profiles, the graph-backend option, and hardware skips in one place.

No seeding or global switches at import time beyond profile registration (CONVENTIONS.md #8): fixtures do
that. Out-of-memory is a failure, not a skip; there are no reruns.
"""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

# dev: quick local iteration; ci: what `make test` runs on 2 cores; nightly: `make nightly`.
settings.register_profile("dev", max_examples=10, deadline=None)
settings.register_profile(
    "ci", max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "nightly", max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--graph-backend",
        default="auto",
        choices=("auto", "cpu", "gpu"),
        help="graph backend for registry-generated case tests (auto: the GPU when present)",
    )


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
        "nightly": None if os.environ.get("HYPOTHESIS_PROFILE") == "nightly" else "runs in `make nightly`",
    }
    for item in items:
        for marker, reason in reasons.items():
            if reason and item.get_closest_marker(marker):
                item.add_marker(pytest.mark.skip(reason=reason))
                break


@pytest.fixture
def graph_backend(request: pytest.FixtureRequest) -> str:
    from harness.backends import resolve_backend_name

    return resolve_backend_name(request.config.getoption("--graph-backend"))
