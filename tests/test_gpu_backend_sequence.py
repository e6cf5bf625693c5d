"""The gpu backend's pool and graph lifetime, step by step in ONE process, in a fixed order.

Method: each step runs after the previous ones in the same process, as the harness's worker runs case after
case, so a step that leaves the backend in a bad state (an open pool context, a pool freed while a graph
still uses it, a capture left open) breaks the steps after it. One test runs every step in order and keeps
going after a failing step (later steps show whether the process is still usable); a step that aborts the
process (a C++ assertion such as torch 2.11's `captures_underway.empty()` in ~MemPool) kills the test, and
the last "START" line it printed (pytest -s) names the step. Each line ends with the backend's lifetime
state (open pool contexts, pools alive, releases not yet destroyed).
Expected: every step OK.
"""

from __future__ import annotations

import gc
import time
import traceback
from collections.abc import Callable

import pytest
import torch

pytestmark = pytest.mark.gpu


def _state() -> str:
    from graphsafe.backends.gpu import lifetime_state

    s = lifetime_state()
    forbidden = f" FORBIDDEN({s['frees_forbidden']})" if s["frees_forbidden"] else ""
    return (
        f"[open={s['open']} alive={s['pools_alive']} pending={s['pools_pending']}+{s['graphs_pending']}g "
        f"kept={s['kept_forever']} reserved={torch.cuda.memory_reserved() >> 20}MiB{forbidden}]"
    )


def test_gpu_backend_lifetime_sequence() -> None:
    from graphsafe.backends import get_backend
    from graphsafe.errors import CaptureError, CaptureSyncError

    be = get_backend("gpu")
    print(f"INFO {be.describe()}", flush=True)
    x = torch.arange(4096, device="cuda", dtype=torch.float32)
    failures: list[str] = []

    def step(name: str, fn: Callable[[], str]) -> None:
        print(f"START {name}", flush=True)
        start = time.perf_counter()
        try:
            detail, ok = fn(), True
        except Exception as exc:  # keep going: later steps show whether the process is still usable
            detail, ok = f"{type(exc).__name__}: {exc}", False
            traceback.print_exc()
            failures.append(f"{name}: {detail}")
        ms = (time.perf_counter() - start) * 1e3
        print(f"{'OK  ' if ok else 'FAIL'} {name} ({ms:.0f} ms): {detail} {_state()}", flush=True)

    def capture_ok() -> str:
        with be.poisoned_allocation(0xFF):
            g = be.capture(lambda: x * 2 + 1)
            x.add_(1)
            g.replay()
            be.synchronize()
            assert torch.equal(g.outputs[0], x * 2 + 1), "replay did not follow the new input"
            g.release()  # inside the scope, where a pool freed under an open context aborts the process
        return "capture, replay with new input, release inside the scope"

    def capture_sync_then_capture() -> str:
        with be.poisoned_allocation(0xFF):
            try:
                be.capture(lambda: x * x.sum().item())
                raise AssertionError(".item() under capture was not refused")
            except CaptureSyncError as exc:
                why = str(exc)[:60]
            assert not torch.cuda.is_current_stream_capturing()
            g = be.capture(lambda: x + 1)
            g.replay()
            be.synchronize()
            assert torch.equal(g.outputs[0], x + 1)
            g.release()
        with be.poisoned_allocation(0x7F):  # a second scope in the same process, as the next case gets
            g = be.capture(lambda: x - 1)
            g.replay()
            be.synchronize()
            assert torch.equal(g.outputs[0], x - 1)
            g.release()
        return f"capture_sync ({why}), then captures in this and the next scope"

    def unjoined_fork_then_capture() -> str:
        side = torch.cuda.Stream()

        def fork_without_join() -> torch.Tensor:
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                _ = x * 3
            return x + 1

        with be.poisoned_allocation(0xFF):
            try:
                be.capture(fork_without_join)
                raise AssertionError("unjoined fork was not refused")
            except CaptureSyncError as exc:
                raise AssertionError(f"unjoined fork classified as capture_sync: {exc}") from exc
            except CaptureError as exc:
                why = str(exc)[:60]
            g = be.capture(lambda: x * 5)
            g.replay()
            be.synchronize()
            assert torch.equal(g.outputs[0], x * 5)
            g.release()
        return f"capture_end failed ({why}); next capture and scope exit fine"

    def release_after_scope() -> str:
        with be.poisoned_allocation(0xFF):
            kept = be.capture(lambda: x * 7)
            dropped = be.capture(lambda: x * 8)
            del dropped  # no release(): __del__ only hands it over
            gc.collect()
        kept.replay()
        be.synchronize()
        assert torch.equal(kept.outputs[0], x * 7)
        kept.release()  # outside any scope
        return "graph released after its scope closed; a dropped graph reclaimed at the scope exit"

    def rebuild_20() -> str:
        with be.poisoned_allocation(0xFF):
            be.capture(lambda: x * 2).release()
            be.synchronize()
            base = be.memory_in_use()
            for i in range(20):
                g = be.capture(lambda i=i: torch.ones(4 << 20, device="cuda") * i + x.sum(), warmup=0)
                g.replay()
                g.release()
            be.synchronize()
            growth = be.memory_in_use() - base
        assert growth < 64 << 20, f"reserved memory grew by {growth >> 20} MiB over 20 rebuilds"
        return f"20 capture/replay/release of a 16 MiB op: growth {growth >> 20} MiB"

    def live_32() -> str:
        with be.poisoned_allocation(0x7F):
            graphs = []
            inputs = []
            for i in range(32):
                xi = torch.full((1024,), float(i), device="cuda")
                inputs.append(xi)
                graphs.append(be.capture(lambda xi=xi: xi * 2 + 1, warmup=0))
            for turn in range(2):
                for i, g in enumerate(graphs):
                    inputs[i].fill_(float(i + 100 * turn))
                    g.replay()
                be.synchronize()
                for i, g in enumerate(graphs):
                    assert torch.equal(g.outputs[0], inputs[i] * 2 + 1), f"graph {i} turn {turn} stale"
            for g in graphs:
                g.release()
        return "32 live graphs, each with its own pool, replayed interleaved twice"

    def node_kinds_kernel() -> str:
        with be.poisoned_allocation(0xFF):

            def chain() -> torch.Tensor:
                y = x.clone()
                for _ in range(7):
                    y.add_(1)
                return y

            g = be.capture(chain)
            kinds = g.node_kinds()
            g.release()
        assert kinds is not None and kinds.get("kernel", 0) >= 8, kinds
        return f"kernel graph node kinds {kinds}"

    def node_kinds_memop() -> str:
        from graphsafe.kernels.platform.ops import memop_capture_probe

        probe = memop_capture_probe()
        assert "node_kinds_error" not in probe, probe
        kinds = probe["node_kinds"]
        assert isinstance(kinds, dict) and kinds.get("batch_mem_op", 0) >= 3, probe
        assert probe["ok"] and probe["flag_after_capture"] == 0 and probe["flag_after_replay"] == 0, probe
        return f"memop graph {probe}"

    def protocol_one_case() -> str:
        from graphsafe import Case, check
        from graphsafe.cases.platform._shared import affine_reference, vector_inputs

        case = Case("smoke_affine", vector_inputs, lambda x: x * 2 + 1, affine_reference, rebuilds=5)
        result = check(case, be)
        assert result.verdict == "pass", (result.verdict, result.detail)
        return f"graphsafe.check with 5 rebuilds: {result.verdict}, {len(result.rows)} rows"

    step("capture ok", capture_ok)
    step("capture_sync then next capture ok", capture_sync_then_capture)
    step("failed capture_end (unjoined fork) then next capture ok", unjoined_fork_then_capture)
    step("pool release after eager scope", release_after_scope)
    step("rebuild 20x", rebuild_20)
    step("32 live graphs", live_32)
    step("node kinds of a kernel graph", node_kinds_kernel)
    step("node kinds of a memop graph", node_kinds_memop)
    step("protocol check of one case after all of the above", protocol_one_case)

    assert not failures, f"{len(failures)} step(s) failed: " + "; ".join(failures)
