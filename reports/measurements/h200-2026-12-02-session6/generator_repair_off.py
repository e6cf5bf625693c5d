"""An eager random op after a capture that did not end (a side stream forked and never joined), with the GPU
backend's generator repair (harness/backends/gpu.py `_generators_out_of_capture`) and with it switched off:
whether torch leaves the default generator in capture mode, as call D's make verify suggested.

    python3 reports/measurements/h200-2026-12-02-session6/generator_repair_off.py
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from harness.backends import get_backend  # noqa: E402
from harness.backends.gpu import GpuBackend  # noqa: E402
from harness.errors import CaptureError  # noqa: E402


def scenario(be: GpuBackend, with_random: bool) -> str:
    x = torch.ones(16, device="cuda")
    side = torch.cuda.Stream()

    def fork_without_join() -> torch.Tensor:
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            _ = x * 3
        return x + torch.rand_like(x) if with_random else x + 1

    with be.poisoned_allocation(0xFF):
        try:
            be.capture(fork_without_join)
            return "capture unexpectedly succeeded"
        except CaptureError:
            pass
        try:
            torch.rand(4, device="cuda")
            torch.cuda.synchronize()
            return "eager torch.rand after it: ok"
        except Exception as exc:  # noqa: BLE001 - the point is which error
            return f"eager torch.rand after it: {type(exc).__name__}: {str(exc)[:160]}"


be = get_backend("gpu")
print(f"torch {torch.__version__}")
print("repair on,  op draws no random number: ", scenario(be, False))
print("repair on,  op draws random numbers:   ", scenario(be, True))
GpuBackend._generators_out_of_capture = lambda self: None  # type: ignore[method-assign]
print("repair off, op draws no random number: ", scenario(be, False))
