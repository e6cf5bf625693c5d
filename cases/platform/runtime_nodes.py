"""Conformance of single graph node kinds: kernel, memcpy (pinned host), memset, event/fork-join, host, memop.

Each positive case checks that one kind of node re-executes on every replay with the inputs of that replay;
each `*_control` reproduces the failure shape and must get the failure verdict it names. GPU-only: the cases
register only when `torch.cuda.is_available()` at import; on the CPU backend they do not exist.
Node kinds themselves (memops recorded as BATCH_MEM_OP nodes, not run during capture) are checked by
tests/test_platform_cases.py through GpuCapturedGraph.node_kinds() and graphsafe.kernels.platform.ops.memop_capture_probe().
"""

from __future__ import annotations

import torch

from graphsafe import Case, register
from graphsafe.cases.platform._shared import WarmupSnapshot, affine_reference, vector_inputs

if torch.cuda.is_available():
    from graphsafe.kernels.platform import ops as P

    # --- kernel nodes ----------------------------------------------------------------------------------
    K_IN, K_OUT = 256, 128

    def _mlp_inputs(seed: int, device: torch.device) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        return {
            "x": torch.randn(64, K_IN, generator=g).to(device),
            "w": torch.randn(K_IN, K_OUT, generator=g).to(device) / K_IN**0.5,
            "b": torch.randn(K_OUT, generator=g).to(device),
        }

    def mlp(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ w + b) * 2 + 1

    def mlp_reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (torch.relu(x.double() @ w.double() + b.double()) * 2 + 1).float()

    _mlp_snapshot = WarmupSnapshot()

    def mlp_frozen_input(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return mlp(_mlp_snapshot.source(x), w, b)

    _MLP_TOL = 1e-4  # fp32 matmul K=256 vs float64 (TF32 off by default): ~1e-6 relative; 100x margin
    register(
        Case(
            "platform_kernel_nodes",
            _mlp_inputs,
            mlp,
            mlp_reference,
            tolerance=_MLP_TOL,
            note="matmul, add, relu, affine kernel nodes; every input changes between replays",
        )
    )
    register(
        Case(
            "platform_kernel_nodes_frozen_input_control",
            _mlp_inputs,
            mlp_frozen_input,
            mlp_reference,
            tolerance=_MLP_TOL,
            expect="stale_replay",
            note="negative control: kernels read a copy of input A made at warm-up instead of the live input",
        )
    )

    # --- memcpy nodes with pinned host memory (ROCm/hip#3902) ----------------------------------------------
    register(
        Case(
            "platform_memcpy_pinned_roundtrip",
            vector_inputs,
            lambda x: P.copy_roundtrip(x) * 2 + 1,
            affine_reference,
            note="D2H into a pinned buffer and H2D back: the pinned buffer is rewritten on every replay",
        )
    )
    register(
        Case(
            "platform_host_staging_at_enqueue_control",
            vector_inputs,
            P.host_affine_at_enqueue,
            affine_reference,
            expect="stale_replay",
            note="negative control: the host step runs at enqueue (after a sync eagerly); under capture it "
            "reads the graph slot's untouched host buffer, so the H2D node replays a constant",
        )
    )

    # --- memset nodes ----------------------------------------------------------------------------------------
    register(
        Case(
            "platform_memset_nodes",
            vector_inputs,
            P.memset_add,
            affine_reference,
            note="y = memset(0) then y += 2x+1: y is poisoned before each replay, so only a replayed memset "
            "gives finite output",
        )
    )
    register(
        Case(
            "platform_memset_unrecorded_control",
            vector_inputs,
            P.memset_add_control,
            affine_reference,
            expect="uninitialized",
            note="negative control: under capture the memset goes to a non-capturing stream; replay adds "
            "into the poisoned output",
        )
    )

    # --- events and a two-stream fork/join inside one capture ------------------------------------------------
    def fork_join(x: torch.Tensor) -> torch.Tensor:
        main = torch.cuda.current_stream()
        side = P.side_stream("fork_join")
        forked = torch.cuda.Event()
        forked.record(main)
        side.wait_event(forked)
        with torch.cuda.stream(side):
            doubled = x * 2
        joined = torch.cuda.Event()
        joined.record(side)
        plus_one = x * 0 + 1
        main.wait_event(joined)
        doubled.record_stream(main)
        return doubled + plus_one

    def fork_without_join(x: torch.Tensor) -> torch.Tensor:
        main = torch.cuda.current_stream()
        side = P.side_stream("fork_without_join")  # its own stream: a failed capture may leave it unusable
        side.wait_stream(main)
        with torch.cuda.stream(side):
            scratch = x * 3
        scratch.record_stream(main)
        return x * 2 + 1

    register(
        Case(
            "platform_event_fork_join",
            vector_inputs,
            fork_join,
            affine_reference,
            note="event record/wait fork a side stream and join it back inside one capture",
        )
    )
    register(
        Case(
            "platform_fork_unjoined_control",
            vector_inputs,
            fork_without_join,
            affine_reference,
            expect="capture_error",
            note="negative control: a forked stream never joined; the runtime refuses to end the capture "
            "(cudaErrorStreamCaptureUnjoined)",
        )
    )

    # --- host-function nodes (ROCm/TheRock#7877) -------------------------------------------------------------
    register(
        Case(
            "platform_host_function_nodes",
            vector_inputs,
            P.host_affine,
            affine_reference,
            note="D2H, host function 2h+1, H2D: the host node must run on every replay. ROCm releases that "
            "refuse hipLaunchHostFunc under capture (TheRock#7877) give capture_error here: a finding",
        )
    )
    register(
        Case(
            "platform_host_function_refused_control",
            vector_inputs,
            P.host_affine_refused,
            affine_reference,
            expect="capture_error",
            note="control: the launcher refuses under capture as TheRock#7877 does; must be capture_error, "
            "never a crash",
        )
    )

    # --- stream memops (FreeToken issue #350's handshake; rocm-systems#8911) -----------------------------------------------------------
    register(
        Case(
            "platform_memop_handshake",
            vector_inputs,
            P.memop_affine,
            affine_reference,
            note="write flag=1, wait flag==1, y = 2x+flag, write flag=0 as graph nodes, token consumed "
            "inside the graph",
        )
    )
    register(
        Case(
            "platform_memop_unrecorded_control",
            vector_inputs,
            P.memop_affine_control,
            affine_reference,
            expect="stale_replay",
            note="negative control (the ROCm failure shape): memops issued on a non-capturing stream run "
            "during capture and are not recorded; replay computes 2x, finite and wrong",
        )
    )
