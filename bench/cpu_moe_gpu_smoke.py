"""GPU smoke test of the CPU/hybrid MoE handshake (issue 6, seed 000), for one device run: one process, one
line per step, never a hang.

Each step runs in a thread joined with a timeout, inside `cpu_moe.wait_guard` (past its deadline the guard
answers every live executor's GPU waits, so no wait-value can block the queue for good; a step that needed
it is a FAIL). A step that is still blocked at its timeout ends the script (exit 3: the device state is
unknown). Exit 0 iff every step is OK.

    timeout 300 python bench/cpu_moe_gpu_smoke.py [--only SUBSTRING]

Steps (expected: every line OK):
  build                         nvcc/g++ builds of the handshake, the executor and the poisoning allocator
  executor                      a memop executor for the seed's layer (E=8, H=512, I=256, batch 4, top_k 2)
  eager <mode>                  memop / hostfn / eager handshake outside capture vs the float64 reference,
                                and bit-equal to the executor run on CPU copies
  probe <mode>                  memop (native), memop (explicit batch-memop nodes), hostfn: ok, node kinds
  replay <mode>                 capture with A, 3 replays with new inputs: graph error <= 0.02, == eager
  overlap <mode>                the hybrid layer (shared expert in torch ops + CPU experts), overlap off and
                                on (on: the GPU part between enqueue_notify and enqueue_wait on one stream):
                                probe ok, the handshake's node kinds, 3 replays with new inputs against the
                                float64 layer reference (<= 0.02, graph == eager), on vs off bit-equal
                                (eager and replay), replay ms
  issue350                      FreeToken #350's tables on the gpu backend (harness.reproduce): every line as
                                the report says (main fails, the fix passes; BF16 per replay, per format)
  fault <name>                  graph API unsupported / delayed launch / unrecorded memop: probe unsafe,
                                eager right (delayed launch: the watchdog outlived it)
  fault overlap never answers   overlap on (the probe captures the split notify/wait), memop and hostfn, the
                                CPU ignores the probe slot: unsafe, the watchdog releases the split wait,
                                the GPU queue drains, eager right
  forced unrecorded             harness.check(case, "gpu"): fallback_eager by default, stale_replay forced
  case <name>                   every registered cpu_moe/issue350 case through harness.check on "gpu"
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from kernels import cpu_moe

E, H, INTER, T, K = 8, 512, 256, 4, 2
THRESHOLD = cpu_moe.THRESHOLDS["bf16"]
STEP_TIMEOUT_S = 60.0
GUARD_S = 20.0  # no single wait in a step may take this long: the guard then releases and the step fails

_COUNTS = {"OK": 0, "FAIL": 0}
_EXECUTORS: dict[str, cpu_moe.CpuMoeExecutor] = {}


def _print(status: str, name: str, detail: str) -> None:
    _COUNTS[status] = _COUNTS.get(status, 0) + 1
    print(f"{status:<4} {name:<34} {detail}", flush=True)


def _finish(code: int | None = None) -> None:
    ok, fail = _COUNTS.get("OK", 0), _COUNTS.get("FAIL", 0)
    print(f"SMOKE SUMMARY: {ok} OK, {fail} FAIL", flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    # os._exit: never wait on interpreter teardown (executor service threads, a blocked step thread).
    os._exit(code if code is not None else (0 if fail == 0 else 1))


def step(name: str, fn: Callable[[], tuple[bool, str]], timeout_s: float = STEP_TIMEOUT_S) -> bool:
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            with cpu_moe.wait_guard(GUARD_S) as guard:
                box["value"] = fn()
            box["releases"] = guard.releases
        except BaseException as exc:  # reported as FAIL with the exception
            box["error"] = exc
            box["where"] = traceback.format_exc(limit=-2).strip().splitlines()

    start = time.monotonic()
    thread = threading.Thread(target=target, name=f"smoke-{name}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    seconds = time.monotonic() - start
    if thread.is_alive():
        _print(
            "FAIL",
            name,
            f"timeout after {timeout_s:.0f} s, step still blocked: aborting (device state unknown)",
        )
        _finish(3)
    if "error" in box:
        exc = box["error"]
        where = " | ".join(line.strip() for line in box["where"][-3:])
        _print("FAIL", name, f"{type(exc).__name__}: {exc} [{where}] ({seconds:.1f} s)")
        return False
    ok, detail = box["value"]
    if box.get("releases"):
        ok, detail = False, f"the wait guard had to release GPU waits ({box['releases']}x); {detail}"
    _print("OK" if ok else "FAIL", name, f"{detail} ({seconds:.1f} s)")
    return ok


# ------------------------------------------------------------------------------------------------ helpers


def _bank() -> cpu_moe.ExpertBank:
    return cpu_moe.make_bank("bf16", E, H, INTER, seed=6)


_BANK: list[cpu_moe.ExpertBank] = []


def bank() -> cpu_moe.ExpertBank:
    if not _BANK:
        _BANK.append(_bank())
    return _BANK[0]


def inputs(seed: int, device: Any = "cuda") -> dict[str, torch.Tensor]:
    return cpu_moe.make_routing(seed, T, E, K, H, device, torch.bfloat16)


def rel_error(out: torch.Tensor, x: dict[str, torch.Tensor]) -> float:
    ref = cpu_moe.reference_moe(x["hidden"], x["expert_ids"], x["router_weights"], bank()).double().cpu()
    got = out.double().cpu()
    if not torch.isfinite(got).all():
        return float("inf")
    return float((got - ref).abs().max() / ref.abs().max())


def executor(mode: str, **faults: Any) -> cpu_moe.CpuMoeExecutor:
    return cpu_moe.CpuMoeExecutor(
        bank(), top_k=K, graph_sizes=(T,), mode=mode, device="cuda", faults=cpu_moe.Faults(**faults)
    )


def call(ex: cpu_moe.CpuMoeExecutor, x: dict[str, torch.Tensor], **kw: Any) -> torch.Tensor:
    return ex(x["hidden"], x["expert_ids"], x["router_weights"], **kw)


def eager_right(ex: cpu_moe.CpuMoeExecutor) -> tuple[bool, float]:
    x = inputs(77)
    out = call(ex, x)
    torch.cuda.synchronize()
    err = rel_error(out, x)
    return err <= THRESHOLD, err


def harness_case(ex: cpu_moe.CpuMoeExecutor, expect: str, force: bool = False) -> Any:
    from harness import Case

    return Case(
        name=f"smoke_{ex.mode}_{expect}",
        make_inputs=lambda seed, device: inputs(seed, device),
        op=lambda hidden, expert_ids, router_weights: ex(
            hidden, expert_ids, router_weights, force_capture=force
        ),
        reference=lambda hidden, expert_ids, router_weights: cpu_moe.reference_moe(
            hidden, expert_ids, router_weights, ex.bank
        ),
        tolerance=THRESHOLD,
        expect=expect,
    )


# -------------------------------------------------------------------------------------------------- steps


def s_build() -> tuple[bool, str]:
    from concurrent.futures import ThreadPoolExecutor

    from harness.backends.gpu import _load_poison_allocator

    def timed(fn: Callable[[], Any]) -> float:
        t0 = time.monotonic()
        fn()
        return time.monotonic() - t0

    with ThreadPoolExecutor(3) as pool:
        jobs = {
            "handshake": pool.submit(timed, cpu_moe.handshake_module),
            "executor": pool.submit(timed, cpu_moe.cpu_module),
            "poison_alloc": pool.submit(timed, _load_poison_allocator),
        }
        times = {k: f"{v.result():.1f}s" for k, v in jobs.items()}
    poison = _load_poison_allocator()
    props = torch.cuda.get_device_properties(0)
    detail = (
        f"{props.name} sm_{props.major}{props.minor}, torch {torch.__version__}, cuda {torch.version.cuda}; "
        f"builds {times}; poisoning allocator: {'ok' if 'allocator' in poison else poison.get('error')}"
    )
    return "allocator" in poison, detail


def s_executor() -> tuple[bool, str]:
    ex = executor("memop")
    _EXECUTORS["memop"] = ex
    return ex.device.type == "cuda" and ex.device.index is not None, (
        f"device {ex.device}, slots {ex.max_slots}, threads {ex.num_threads}, graphs_enabled {ex.graphs_enabled}"
    )


def s_eager(mode: str) -> Callable[[], tuple[bool, str]]:
    def run() -> tuple[bool, str]:
        ex = _EXECUTORS.get(mode) or executor(mode)
        _EXECUTORS[mode] = ex
        x = inputs(21)
        out = call(ex, x)
        torch.cuda.synchronize()
        err = rel_error(out, x)
        xc = {k: v.cpu() for k, v in x.items()}
        cpu = ex.forward_eager(xc["hidden"], xc["expert_ids"], xc["router_weights"])
        bitwise = torch.equal(out.cpu(), cpu)
        return (
            err <= THRESHOLD and bitwise,
            f"error {err:.6f} (<= {THRESHOLD}), bit-equal to CPU run: {bitwise}",
        )

    return run


def s_probe(key: str, mode: str, explicit: bool) -> Callable[[], tuple[bool, str]]:
    def run() -> tuple[bool, str]:
        ex = executor(mode)
        ex.explicit_memop_nodes = explicit
        _EXECUTORS[key] = ex
        result = cpu_moe.probe_and_enable(ex)
        err = "n/a" if result.error is None else f"{result.error:.6f}"
        return result.ok and ex.graphs_enabled, (
            f"ok={result.ok} ({result.reason}), error {err}, node kinds {result.node_kinds}"
        )

    return run


def s_replay(key: str) -> Callable[[], tuple[bool, str]]:
    def run() -> tuple[bool, str]:
        ex = _EXECUTORS[key]
        if not ex.graphs_enabled:
            return False, f"graphs disabled ({ex.disabled_reason})"
        static = inputs(100)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            call(ex, static)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = call(ex, static)
        parts, ok = [], True
        for i in range(3):
            b = inputs(101 + i)
            for name, t in b.items():
                static[name].copy_(t)
            out.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            g = out.clone()
            e = call(ex, b)
            torch.cuda.synchronize()
            ge, ee = rel_error(g, b), rel_error(e, b)
            equal = torch.equal(g, e)
            ok = ok and ge <= THRESHOLD and equal
            parts.append(f"r{i} graph {ge:.6f} eager {ee:.6f} equal {equal}")
        graph.reset()
        return ok, "; ".join(parts)

    return run


# The handshake's nodes in a captured layer (graph_node_kinds): memop mode, write/wait/write as batch-memop
# nodes whether fused or split; hostfn mode, one host node running the CPU layer (fused, overlap off) or the
# notify and wait host functions (split, overlap on). Plus 3 D2H and 1 H2D copies either way.
def _expected_kinds(mode: str, overlap: bool) -> dict[str, int]:
    if mode == "memop":
        return {"batch_mem_op": 3, "memcpy": 4}
    return {"host": 2 if overlap else 1, "memcpy": 4}


def s_overlap(mode: str, explicit: bool) -> Callable[[], tuple[bool, str]]:
    """The hybrid layer with overlap off, then on (on: the shared expert enqueued between the handshake's
    enqueue_notify and enqueue_wait on the caller's stream; kernels/cpu_moe_gpu.py `_gpu_overlapped`), captured
    with torch.cuda.graph as in s_replay."""

    def run() -> tuple[bool, str]:
        shared = cpu_moe.make_shared_expert(H, INTER, seed=8, device="cuda")
        probe_x = inputs(300)
        parts, ok, fixed, replayed = [], True, {}, {}
        for overlap in (False, True):
            ex = cpu_moe.CpuMoeExecutor(
                bank(), top_k=K, graph_sizes=(T,), mode=mode, device="cuda", shared=shared, overlap=overlap
            )
            ex.explicit_memop_nodes = explicit
            result = cpu_moe.probe_and_enable(ex)
            tag = "on" if overlap else "off"
            if not result.ok:
                ex.close()
                return False, f"overlap {tag}: probe failed ({result.reason})"
            static = inputs(200)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                call(ex, static)
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph(keep_graph=True)
            with torch.cuda.graph(graph):
                out = call(ex, static)
            kinds = dict(ex.handshake_lib.graph_node_kinds(graph.raw_cuda_graph()))
            expected = _expected_kinds(mode, overlap)
            kinds_ok = all(kinds.get(k) == v for k, v in expected.items()) and kinds.get("kernel", 0) > 0
            ok = ok and kinds_ok
            graph.instantiate()
            errs, equal_all, outs = [], True, []
            for i in range(3):
                b = inputs(201 + i)
                for name, t in b.items():
                    static[name].copy_(t)
                out.fill_(float("nan"))
                graph.replay()
                torch.cuda.synchronize()
                g = out.clone()
                outs.append(g)
                e = call(ex, b)
                torch.cuda.synchronize()
                ref = ex.reference(b["hidden"], b["expert_ids"], b["router_weights"]).double().cpu()
                ge = float((g.double().cpu() - ref).abs().max() / ref.abs().max())
                equal = torch.equal(g, e)
                equal_all = equal_all and equal
                ok = ok and ge <= THRESHOLD and equal
                errs.append(f"{ge:.5f}")
            replayed[overlap] = outs
            t0 = time.monotonic()
            for _ in range(20):
                graph.replay()
            torch.cuda.synchronize()
            replay_ms = (time.monotonic() - t0) / 20 * 1e3
            fixed[overlap] = call(ex, probe_x).double().cpu()
            torch.cuda.synchronize()
            graph.reset()
            ex.close()
            parts.append(
                f"{tag}: graph errors {errs} == eager {equal_all}, replay {replay_ms:.3f} ms, "
                f"kinds {kinds} (handshake {expected}: {kinds_ok})"
            )
        # Same CPU computation (bit-identical for any thread count), same GPU kernels, one add: the order
        # must not change a bit, eagerly or replayed.
        eager_equal = torch.equal(fixed[True], fixed[False])
        replay_equal = all(torch.equal(a, b) for a, b in zip(replayed[True], replayed[False], strict=True))
        diff = float((fixed[True] - fixed[False]).abs().max() / fixed[False].abs().max())
        ok = ok and eager_equal and replay_equal
        parts.append(
            f"on vs off: eager bit-equal {eager_equal} (diff {diff:.2e}), replays bit-equal {replay_equal}"
        )
        return ok, "; ".join(parts)

    return run


def s_issue350() -> tuple[bool, str]:
    from harness import reproduce

    loaded, outcome, backend = reproduce.reproduce("issue350", "gpu", isolate=False)
    for row in reproduce.render_text(loaded.report, outcome, backend).splitlines():
        print(f"     | {row}", flush=True)
    return outcome.exit_code == 0, reproduce.conclusion(outcome, backend)


def s_fault_unsupported() -> tuple[bool, str]:
    ex = executor("memop", graph_api_unsupported=True)
    result = cpu_moe.probe_and_enable(ex)
    right, err = eager_right(ex)
    ok = not result.ok and "unsupported" in result.reason and right
    ex.close()
    return ok, f"unsafe={not result.ok} ({result.reason}); eager error {err:.6f}"


def s_fault_delayed() -> tuple[bool, str]:
    ex = executor("memop", launch_delay_s=1.5, cpu_never_answers=True)
    result = cpu_moe.probe_and_enable(ex, deadline_s=0.3)
    wd = ex.last_watchdog
    joined = wd is not None and wd.join(30.0)
    torch.cuda.synchronize()  # returns: the late launch drained
    right, err = eager_right(ex)
    releases = wd.releases if wd else 0
    outlived = bool(wd and wd.drained_at and wd.drained_at - wd.started_at > 0.5)
    hung = wd.hung if wd else True
    ok = not result.ok and "deadline" in result.reason and joined and not hung and releases > 0
    ok = ok and outlived and right
    ex.close()
    return ok, (
        f"unsafe={not result.ok} ({result.reason}); watchdog releases {releases}, outlived the late launch "
        f"{outlived}; eager error {err:.6f}"
    )


def s_fault_overlap_never_answers(mode: str) -> Callable[[], tuple[bool, str]]:
    def run() -> tuple[bool, str]:
        shared = cpu_moe.make_shared_expert(H, INTER, seed=8, device="cuda")
        ex = cpu_moe.CpuMoeExecutor(
            bank(),
            top_k=K,
            graph_sizes=(T,),
            mode=mode,
            device="cuda",
            shared=shared,
            overlap=True,
            faults=cpu_moe.Faults(cpu_never_answers=True),
        )
        result = cpu_moe.probe_and_enable(ex, deadline_s=0.3)
        wd = ex.last_watchdog
        joined = wd is not None and wd.join(30.0)
        torch.cuda.synchronize()  # returns: the split wait was released and the replay drained
        x = inputs(77)
        out = call(ex, x)
        torch.cuda.synchronize()
        ref = ex.reference(x["hidden"], x["expert_ids"], x["router_weights"]).double().cpu()
        err = float((out.double().cpu() - ref).abs().max() / ref.abs().max())
        releases = wd.releases if wd else 0
        hung = wd.hung if wd else True
        ok = not result.ok and "deadline" in result.reason and joined and not hung and releases > 0
        ok = ok and err <= THRESHOLD
        ex.close()
        return ok, (
            f"unsafe={not result.ok} ({result.reason}); watchdog releases {releases}, hung {hung}; "
            f"eager layer error {err:.6f}"
        )

    return run


def s_fault_unrecorded() -> tuple[bool, str]:
    ex = executor("memop", unrecorded_memop=True)
    _EXECUTORS["unrecorded"] = ex
    result = cpu_moe.probe_and_enable(ex)
    right, err = eager_right(ex)
    ok = not result.ok and right
    return ok, f"unsafe={not result.ok} ({result.reason}); eager error {err:.6f}"


def s_forced_unrecorded() -> tuple[bool, str]:
    from harness import check

    ex = _EXECUTORS.get("unrecorded") or executor("memop", unrecorded_memop=True)
    default = check(harness_case(ex, "fallback_eager"), "gpu")
    forced = check(harness_case(ex, "stale_replay", force=True), "gpu")
    errors = [f"{r.graph_error:.3f}" for r in forced.rows if r.graph_error is not None][:3]
    ok = default.verdict == "fallback_eager" and forced.verdict == "stale_replay"
    return ok, f"default {default.verdict}; forced {forced.verdict} (graph errors {errors}: {forced.detail})"


def s_case(name: str) -> Callable[[], tuple[bool, str]]:
    def run() -> tuple[bool, str]:
        from harness import REGISTRY, check

        case = REGISTRY.get(name)
        result = check(case, "gpu")
        errors = [r.graph_error for r in result.rows if r.graph_error is not None]
        worst = max(errors, default=None)
        worst_s = "n/a" if worst is None else f"{worst:.4f}"
        detail = f"verdict {result.verdict}, expected {case.expect}; worst graph error {worst_s}"
        if result.verdict != case.expect:
            detail += f"; {result.detail}"
        return result.verdict == case.expect, detail

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run the steps whose name contains this")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        _print("FAIL", "device", "torch.cuda.is_available() is False: this smoke test needs a GPU")
        _finish(1)
    steps: list[tuple[str, Callable[[], tuple[bool, str]], float]] = [
        ("build", s_build, 300.0),
        ("executor", s_executor, STEP_TIMEOUT_S),
        ("eager memop", s_eager("memop"), STEP_TIMEOUT_S),
        ("eager hostfn", s_eager("hostfn"), STEP_TIMEOUT_S),
        ("eager eager", s_eager("eager"), STEP_TIMEOUT_S),
        ("probe memop", s_probe("p_memop", "memop", False), STEP_TIMEOUT_S),
        ("probe memop explicit", s_probe("p_explicit", "memop", True), STEP_TIMEOUT_S),
        ("probe hostfn", s_probe("p_hostfn", "hostfn", False), STEP_TIMEOUT_S),
        ("replay memop", s_replay("p_memop"), STEP_TIMEOUT_S),
        ("replay memop explicit", s_replay("p_explicit"), STEP_TIMEOUT_S),
        ("replay hostfn", s_replay("p_hostfn"), STEP_TIMEOUT_S),
        ("overlap memop", s_overlap("memop", False), STEP_TIMEOUT_S),
        ("overlap memop explicit", s_overlap("memop", True), STEP_TIMEOUT_S),
        ("overlap hostfn", s_overlap("hostfn", False), STEP_TIMEOUT_S),
        ("issue350", s_issue350, 120.0),
        ("fault graph api unsupported", s_fault_unsupported, STEP_TIMEOUT_S),
        ("fault delayed launch", s_fault_delayed, STEP_TIMEOUT_S),
        ("fault overlap never answers memop", s_fault_overlap_never_answers("memop"), STEP_TIMEOUT_S),
        ("fault overlap never answers hostfn", s_fault_overlap_never_answers("hostfn"), STEP_TIMEOUT_S),
        ("fault unrecorded memop", s_fault_unrecorded, STEP_TIMEOUT_S),
        ("forced unrecorded", s_forced_unrecorded, STEP_TIMEOUT_S),
    ]
    for name, fn, timeout_s in steps:
        if args.only in name or name in ("build", "executor"):
            step(name, fn, timeout_s)
    import cases.counterexamples.issue350
    import cases.cpu_moe  # noqa: F401
    from harness import REGISTRY

    names = [c.name for c in REGISTRY.cases() if c.name.startswith(("cpu_moe_", "issue350_"))]
    for name in names:
        # --only filters cases like steps ("--only overlap": the overlap steps and the overlap cases).
        if args.only in f"case {name}":
            step(f"case {name}", s_case(name), 120.0)
    _finish()


if __name__ == "__main__":
    main()
