"""Every platform conformance case gets its expected verdict on the `gpu` backend (marked `gpu`).

Stress cases carry their own knobs (Case.rebuilds / Case.live_graphs, cases/platform/stress.py); cases that
expect `crash` or `timeout` (the isolation controls) run in a subprocess each, since they kill or hang the
process that runs them. Also checks node kinds directly: stream memops must be recorded as BATCH_MEM_OP nodes
and must not run during capture.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import torch

from graphsafe import REGISTRY, check
from graphsafe.suites import load_default_suites

pytestmark = pytest.mark.gpu

PROCESS_KILLING_VERDICTS = ("crash", "timeout")


def _platform_case_names(process_killing: bool) -> list[str]:
    if not torch.cuda.is_available():
        return ["<no gpu>"]
    load_default_suites()
    return sorted(
        c.name
        for c in REGISTRY.cases()
        if REGISTRY.origin(c.name).startswith("graphsafe.cases.platform")
        and (c.expect in PROCESS_KILLING_VERDICTS) == process_killing
    )


@pytest.fixture(autouse=True)
def _pool_contexts_closed_after_each_test():  # type: ignore[no-untyped-def]
    """A test that leaves a pool context open or forbids frees would make a later test abort in ~MemPool;
    fail the test that did it instead."""
    yield
    if torch.cuda.is_available():
        from graphsafe.backends.gpu import lifetime_state

        state = lifetime_state()
        assert state["open"] == 0 and not state["frees_forbidden"], state
        assert not torch.cuda.is_current_stream_capturing()


@pytest.mark.parametrize("name", _platform_case_names(process_killing=False))
def test_platform_case_gets_expected_verdict(name: str) -> None:
    """Method: graphsafe.check on the gpu backend (stress comes from the case's own rebuilds/live_graphs).
    Expected: case.expect."""
    case = REGISTRY.get(name)
    result = check(case, backend="gpu")
    assert result.verdict == case.expect, (
        f"{name}: {result.verdict} (expected {case.expect}): {result.detail}"
    )


def test_memops_are_graph_nodes_not_run_during_capture() -> None:
    """Method: capture the memop handshake, inspect node kinds and the flag before replay. Expected: >= 3
    batch_mem_op nodes (write, wait, write), flag still 0 after capture, replay right, flag 0 again after."""
    from graphsafe.kernels.platform.ops import memop_capture_probe

    probe = memop_capture_probe()
    kinds = probe["node_kinds"]
    assert "node_kinds_error" not in probe, probe
    assert isinstance(kinds, dict) and kinds.get("batch_mem_op", 0) >= 3, probe
    assert probe["flag_after_capture"] == 0, probe
    assert probe["ok"] and probe["flag_after_replay"] == 0, probe


def test_host_function_and_copy_node_kinds() -> None:
    """Method: capture host_affine through the backend. Expected: one host node and >= 2 memcpy nodes."""
    from graphsafe.backends import get_backend
    from graphsafe.kernels.platform import ops as P

    be = get_backend("gpu")
    x = torch.randn(4096, device="cuda")
    with be.poisoned_allocation(0xFF):
        graph = be.capture(lambda: P.host_affine(x))
        kinds = graph.node_kinds()
        graph.release()
    assert kinds is not None and kinds.get("host") == 1 and kinds.get("memcpy", 0) >= 2, kinds


_CHILD = """
import sys
from graphsafe import REGISTRY, check
from graphsafe.suites import load_default_suites
load_default_suites()
result = check(REGISTRY.get(sys.argv[1]), backend="gpu")
print("VERDICT", result.verdict, result.detail)
"""


@pytest.mark.parametrize("name", _platform_case_names(process_killing=True))
def test_isolation_control_kills_or_hangs_its_process(name: str) -> None:
    """Method: run the control in a child process with a 60 s deadline. Expected: abort -> SIGABRT; illegal
    address -> the child dies or reports the device fault; spin -> the deadline expires."""
    env = dict(os.environ, GRAPHSAFE_SPIN_LIMIT_S="120")
    cmd = [sys.executable, "-c", _CHILD, name]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    except subprocess.TimeoutExpired:
        assert name == "isolation_spin_forever", f"{name} hung"
        return
    assert name != "isolation_spin_forever", f"spin returned: {proc.stdout[-500:]} {proc.stderr[-500:]}"
    if name == "isolation_abort":
        assert proc.returncode == -signal.SIGABRT, (proc.returncode, proc.stderr[-2000:])
    else:
        text = proc.stdout + proc.stderr
        assert proc.returncode != 0 or "illegal memory access" in text, text[-2000:]
