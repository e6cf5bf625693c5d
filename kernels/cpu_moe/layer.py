"""CPU/hybrid MoE, the layer: CpuMoeExecutor, the executor's core (executor.py) with its forward through the
handshake of its mode, on the CPU backend (cpu_handshake.py) or on a GPU (gpu_handshake.py).
"""

from __future__ import annotations

import torch

from graphsafe.kernels.cpu_moe.cpu_handshake import cpu_forward
from graphsafe.kernels.cpu_moe.executor import ExecutorCore
from graphsafe.kernels.cpu_moe.gpu_handshake import gpu_forward


class CpuMoeExecutor(ExecutorCore):
    """One MoE layer whose experts run on CPU threads; call it like an op: layer(hidden, ids, weights).

    Construction and state: ExecutorCore. Under capture a layer whose graphs are not enabled raises
    FallbackEager (policy "fallback") or UnsafeExecutorCapture (policy "strict"); `force_capture=True`
    captures anyway (the counterexamples' buggy arm: what an engine without the probe would do).
    """

    def __call__(
        self,
        hidden: torch.Tensor,
        expert_ids: torch.Tensor,
        router_weights: torch.Tensor,
        *,
        force_capture: bool = False,
    ) -> torch.Tensor:
        self.validate(hidden, expert_ids, router_weights)
        if self.device.type == "cuda":
            with torch.cuda.device(hidden.device):
                return gpu_forward(self, hidden, expert_ids, router_weights, force_capture=force_capture)
        return cpu_forward(self, hidden, expert_ids, router_weights, force_capture=force_capture)
