"""The differential replay protocol: capture with input A, replay with fresh inputs B_i copied into the same
buffers, compare with eager execution on B_i and with the independent reference.

Read `check` top to bottom: it is the protocol. Everything runs once per byte pattern (0xFF, 0x7F) inside
the backend's poisoned-allocation scope, so an output that depends on uninitialized memory shows up as
NaN or poison in one pattern or the other.

How a row's verdict is decided (`_verdict_row` in harness/verdict_rules.py), first failure wins:
  1. eager output holds NaN/Inf/poison                          -> uninitialized
  2. eager B now differs from eager B computed before the op ever saw A (first pattern, first replay:
     the hidden-state probe)                                     -> stale_replay, "state leaked from A"
  3. eager differs from the reference (per-dtype threshold)      -> eager_mismatch
  4. graph output holds NaN/Inf/poison where eager does not      -> uninitialized
  5. graph differs from the reference (per-dtype threshold)      -> stale_replay
  6. graph differs from eager: bit-exact, unless the case declares `replay_tolerance` (nondeterministic
     kernels, with a note)                                       -> stale_replay
Where a replay differs from eager (stale_replay, uninitialized), and for every case under `explain=True` or
`Case.launch_diff`, the launch diff (harness/launch_diff.py) captures the op once more with that B and names
the first kernel argument, grid or node the graph froze at capture; under explain a launch difference alone
makes the row stale_replay, since the graph then replays work eager B does not do.
A replay and an eager call of the same kernels on the same inputs give the same bits; where they do not,
something is stale. Random ops draw the same numbers both ways because replay and eager start from the same
generator state (`GraphBackend.rng_state`): graph-safe sampling passes, noise baked at capture does not.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch

from graphsafe import verdicts as V
from graphsafe.backends import GraphBackend, get_backend
from graphsafe.backends.base import flatten_tensors
from graphsafe.case import Case
from graphsafe.errors import (
    CaseError,
    FallbackEager,
    OutputTypeError,
)
from graphsafe.findings import HIDDEN_STATE, LAUNCH_DIFF, Finding
from graphsafe.hidden_state import PythonState, op_generators
from graphsafe.poison import PATTERNS, poison_outputs
from graphsafe.records import Result, Row
from graphsafe.tracebacks import with_user_frame
from graphsafe.verdict_rules import (
    DEVICE_FAULTS,
    EAGER_VS_REFERENCE,
    LEAK_DETAIL,
    _call_op,
    _capture_failure_row,
    _check_callable,
    _clone_all,
    _clone_outputs,
    _replay_error_row,
    _row_factory,
    _validate_pairs,
    _verdict_row,
    prepare_inputs,
    raised,
    seeds,
)

DEFAULT_REPLAYS = 3
# Recaptures may keep a little allocator state (segment rounding); more than this per check is a leak.
REBUILD_GROWTH_BOUND_BYTES = 64 << 20


def validate_definition(case: Case, backend: str | GraphBackend = "auto", *, seed: int = 0) -> int:
    """Step 1's checks on A and the first B without running the op: make_inputs returns tensors on the
    backend's device, A and B have the same names, shapes and dtypes, every dynamic input differs, and the op
    takes the inputs by name. Raises CaseError; returns the bytes of one input set (the runner bounds
    --replays and --live-graphs with it). A case that declares `sizes` is checked per size as it runs: 0."""
    if getattr(case, "sizes", None) is not None:
        return 0
    if case.buckets or case.make_module is not None:  # harness/engine.py checks these per bucket / module
        return 0
    be = backend if isinstance(backend, GraphBackend) else get_backend(backend)
    seed_a, seeds_b = seeds(seed, 1)

    def made(seed: int) -> dict[str, torch.Tensor]:
        try:
            return case.inputs(seed, be.device)
        except CaseError:
            raise
        except Exception as exc:  # make_inputs itself failed: the definition, not the op, is wrong
            raise CaseError(case.name, "make_inputs", f"raised {type(exc).__name__}: {exc}") from exc

    inputs_a = made(seed_a)
    _validate_pairs(case, be, seed_a, inputs_a, [(seeds_b[0], made(seeds_b[0]))])
    _check_callable(case, inputs_a)
    return sum(t.numel() * t.element_size() for t in inputs_a.values())


# What one check keeps for its second pattern (inputs of every seed, the reference's outputs per B seed): a
# small op's check would make each of them twice. Past this many bytes they are made anew per pattern, as
# large cases need: --replays 20 of a 64 MB input would otherwise hold 1.3 GB.
KEEP_BYTES = 64 << 20


class CheckStore:
    """Inputs per seed and reference outputs per B seed, made once per check and reused by its later
    patterns while they fit in KEEP_BYTES together. Kept tensors are made in `backend.kept_allocation()`:
    a GPU scope's poisoning pool ends with its pattern. Inputs are a function of the seed by the case
    contract (rows record their seeds so that `repro` can rerun them), the reference a function of the
    inputs; nothing here is ever handed to the op (it gets clones or copies), so a kept set stays as made."""

    def __init__(self, case: Case, be: GraphBackend) -> None:
        self._case, self._be = case, be
        self._inputs: dict[int, dict[str, torch.Tensor]] = {}
        self._references: dict[int, list[torch.Tensor]] = {}
        self._bytes = 0
        self._callable_checked = False

    def check_callable(self, inputs: dict[str, torch.Tensor]) -> None:
        """The op takes the inputs by name (`_check_callable`), once per check: every pattern passes the same
        names, and inspect.signature is slow (its time per check: reports/performance.md, `check_profile`)."""
        if not self._callable_checked:
            _check_callable(self._case, inputs)
            self._callable_checked = True

    def inputs(self, seed: int) -> dict[str, torch.Tensor]:
        kept = self._inputs.get(seed)
        if kept is not None:
            return kept
        with self._be.kept_allocation():
            made = self._case.inputs(seed, self._be.device)
        if self._keep(made.values()):
            self._inputs[seed] = made
        return made

    def kept(self, seed: int) -> bool:
        """Whether the inputs of `seed` are kept for the rest of the check."""
        return seed in self._inputs

    def reference(self, seed_b: int, inputs_b: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        """The reference's outputs on B (a clone of it: the oracle may write its arguments)."""
        kept = self._references.get(seed_b)
        if kept is not None:
            return kept
        assert self._case.reference is not None
        with self._be.kept_allocation(), torch.no_grad():
            made = list(flatten_tensors(self._case.reference(**_clone_all(inputs_b))))
        if self._keep(made):
            self._references[seed_b] = made
        return made

    def _keep(self, tensors: Iterable[torch.Tensor]) -> bool:
        size = sum(t.numel() * t.element_size() for t in tensors)
        if self._bytes + size > KEEP_BYTES:
            return False
        self._bytes += size
        return True


class InputsOnDemand(Sequence[dict[str, torch.Tensor]]):
    """The B_i inputs, made (and checked against A) when first used, the last one held; the sets that fit in
    the check's store are made and checked together at the first use and kept. Holding every set regardless
    would take `replays` input sets at once (a 64 MB input with --replays 20: 1.3 GB more).

    `validated`: seeds of B already checked against A in this check (the second pattern uses the same seeds
    again; the check is of the case's definition, so once per seed is enough)."""

    def __init__(
        self,
        case: Case,
        be: GraphBackend,
        seed_a: int,
        inputs_a: dict[str, torch.Tensor],
        seeds_b: range,
        validated: set[int],
        store: CheckStore,
    ) -> None:
        self._case, self._be, self._seed_a, self._a, self._seeds = case, be, seed_a, inputs_a, seeds_b
        self._validated, self._store = validated, store
        self._last: tuple[int, dict[str, torch.Tensor]] | None = None

    def __len__(self) -> int:
        return len(self._seeds)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:  # type: ignore[override]
        index = range(len(self._seeds))[index]  # IndexError past the end ends iteration
        if self._last is None or self._last[0] != index:
            seed_b = self._seeds[index]
            made = self._store.inputs(seed_b)
            if seed_b not in self._validated:
                pending = [(seed_b, made)]
                # Later seeds that the store keeps are made now too, so that their checks against A share
                # this one batch (one host synchronization on a GPU instead of one per seed).
                for later in self._seeds[index + 1 :] if self._store.kept(seed_b) else ():
                    if later not in self._validated:
                        pending.append((later, self._store.inputs(later)))
                        if not self._store.kept(later):
                            break
                _validate_pairs(self._case, self._be, self._seed_a, self._a, pending)
                self._validated.update(seed for seed, _ in pending)
            self._last = (index, made)
        return self._last[1]


def check(
    case: Case,
    backend: str | GraphBackend = "auto",
    *,
    replays: int = DEFAULT_REPLAYS,
    seed: int = 0,
    patterns: Sequence[int] = PATTERNS,
    rebuilds: int = 0,
    live_graphs: int = 0,
    sizes: Mapping[str, int] | None = None,
    explain: bool = False,
) -> Result:
    """Run the protocol for one case; returns its verdict and one row per pattern x replay.

    A case that declares `sizes` is checked at the given `sizes`, or, without them, over its size space
    (harness/search.py: the result is the smallest failing sizes', or a pass over every size tried).
    `explain`: run the launch diff for this case even when it passes (module note; `graphsafe verify
    --explain`); a case declaring `launch_diff=True` always gets it."""
    if replays < 1:
        raise ValueError(f"replays must be >= 1, got {replays}")
    be = backend if isinstance(backend, GraphBackend) else get_backend(backend)
    if sizes is not None and case.sizes is None:
        raise CaseError(case.name, "sizes", f"sizes {dict(sizes)} given, but the case declares no size space")
    if case.sizes is not None:
        from graphsafe import search

        def at_sizes(bound: Case) -> Result:
            return check(
                bound,
                be,
                replays=replays,
                seed=seed,
                patterns=patterns,
                rebuilds=rebuilds,
                live_graphs=live_graphs,
                explain=explain,
            )

        def explore(bound: Case) -> Result:  # harness/search.py EXPLORE_REPLAYS says why fewer replays
            return check(
                bound, be, replays=min(replays, search.EXPLORE_REPLAYS), seed=seed, patterns=patterns
            )

        if sizes is not None:
            return at_sizes(search.bind(case, search.parse_sizes(search.format_sizes(sizes), case.sizes)))
        return search.search(case, be, explore, seed=seed, confirm=at_sizes)
    rebuilds, live_graphs = max(rebuilds, case.rebuilds), max(live_graphs, case.live_graphs)
    rows: list[Row] = []
    validated: set[int] = set()  # seeds of B whose inputs were checked against A (InputsOnDemand)
    store = CheckStore(case, be)  # inputs and references made once for both patterns
    for index, pattern in enumerate(patterns):
        try:
            with be.poisoned_allocation(pattern), be.generators_followed(op_generators(case.op)):
                if case.buckets or case.make_module is not None:
                    from graphsafe import engine  # the engine-style loops (buckets, stateful modules)

                    rows.extend(engine.check_pattern(case, be, pattern, replays, seed))
                    continue
                rows.extend(
                    _check_pattern(
                        case,
                        be,
                        pattern,
                        replays,
                        seed,
                        rebuilds,
                        live_graphs,
                        probe_hidden_state=index == 0,
                        validated=validated,
                        store=store,
                        explain=explain or case.launch_diff,
                    )
                )
        except DEVICE_FAULTS as exc:
            # An illegal address or a device-side assert poisons the whole context: nothing after it in this
            # process is trustworthy, so the case is a crash and the runner retires the worker.
            rows.append(
                _row_factory(case, be, pattern, seed)(V.CRASH, -1, seed, detail=f"device fault: {exc}")
            )
            break
    _explain_leak(rows)
    if (explain or case.launch_diff) and (case.buckets or case.make_module is not None) and rows:
        from graphsafe.launch_diff import DETAIL_PREFIX

        note = DETAIL_PREFIX + "not run: an engine-style case (buckets, a stateful module) is not compared"
        rows[0].detail = f"{rows[0].detail}; {note}" if rows[0].detail else note
    verdict = V.worst([r.row_verdict for r in rows])  # SEVERITY ranks fallback_eager above pass
    details = [r.detail for r in rows if r.row_verdict == verdict and r.detail]
    return Result(case.name, case.expect, verdict, be.name, rows, details[0] if details else "")


def _explain_leak(rows: list[Row]) -> None:
    """Once the hidden-state probe saw state leak from A, a later eager call that disagrees with the reference
    shows that leak, not a wrong kernel: those rows say so and share the leak's verdict. A live-graph row
    says which graph and round first ("live graph 0/32, round 0: eager vs reference: ..."): under
    `--live-graphs` the leak's eager mismatch was left as the case's verdict."""
    if not any(r.detail.startswith(LEAK_DETAIL) for r in rows):
        return
    for r in rows:
        live_eager = r.phase == "live" and f": {EAGER_VS_REFERENCE}" in r.detail
        if r.row_verdict == V.EAGER_MISMATCH and (r.detail.startswith(EAGER_VS_REFERENCE) or live_eager):
            r.row_verdict = V.STALE_REPLAY
            r.detail = "after state leaked from A (hidden-state probe), " + r.detail
            r.detector = HIDDEN_STATE


def _check_pattern(
    case: Case,
    be: GraphBackend,
    pattern: int,
    replays: int,
    base_seed: int,
    rebuilds: int,
    live_graphs: int,
    *,
    probe_hidden_state: bool,
    validated: set[int],
    store: CheckStore,
    explain: bool = False,
) -> list[Row]:
    seed_a, seeds_b = seeds(base_seed, replays)
    row = _row_factory(case, be, pattern, seed_a)

    # 1. A and fresh B_i, validated: same shapes, every dynamic input different, the op callable with them.
    inputs_a = store.inputs(seed_a)
    inputs_b = InputsOnDemand(case, be, seed_a, inputs_a, seeds_b, validated, store)
    inputs_b[0]  # made before the generator state below is taken, as every later B is
    store.check_callable(inputs_a)

    # 1b. The hidden-state probe: eager B_0 before the op has seen A, from the generator state replay 0 and
    # its eager call will start from too. The probe's changes to the op's Python state are undone, so the
    # warm-up with A below is still the op's first call (harness/hidden_state.py).
    rng_start = be.rng_state()
    probed = _fresh_eager(case, be, inputs_b[0], rng_start) if probe_hidden_state else None
    fresh, probe_state = probed if probed is not None else (None, None)

    # 2. Static buffers hold A; `inputs_a` stays pristine.
    static = _clone_all(inputs_a)

    # 3. Warm up and capture. Capture executes nothing on GPUs: outputs are graph-owned static buffers.
    prepare_inputs(case, static)
    start = time.perf_counter()
    try:
        graph = be.capture(functools.partial(_call_op, case, static))
    except FallbackEager as exc:
        why = f"graphs disabled by the op's probe: {exc}"
        return _eager_only_rows(case, be, row, seeds_b, inputs_b, why, store)
    except DEVICE_FAULTS:
        raise
    except Exception as exc:
        return [_capture_failure_row(case, exc, row, seed_a)]
    capture_ms = (time.perf_counter() - start) * 1e3

    rows = []
    rngs = []  # the generator state each replay and its eager call started from (the launch diff's B)
    try:
        for i, (seed_b, b) in enumerate(zip(seeds_b, inputs_b, strict=True)):
            first = i == 0
            rngs.append(rng_start if first else be.rng_state())
            r = _replay_and_compare(
                case,
                be,
                graph,
                static,
                b,
                row,
                i,
                seed_b,
                store,
                rng=rngs[-1],
                fresh=fresh if first else None,
                python_state=probe_state,
            )
            r.capture_ms = capture_ms if i == 0 else None
            r.limits = getattr(graph, "limits", "")  # what this backend's capture could not check
            rows.append(r)
        # The launch diff once per check (the first pattern): a failing replay's cause, or on request.
        if probe_hidden_state and (explain or any(r.row_verdict in _REPLAY_DIFFERS for r in rows)):
            _explain_launches(case, be, graph, static, inputs_b, rows, rngs, explain)
    finally:
        graph.release(reclaim_now=False)  # the scope's end frees it, with the eager pool, after one wait

    # 7. Optional stress; each phase captures and releases graphs of its own.
    if rebuilds:
        rows.extend(_rebuild_rows(case, be, static, inputs_b, seeds_b, row, rebuilds, store))
    if live_graphs:
        rows.extend(_live_graph_rows(case, be, inputs_a, inputs_b, seeds_b, row, live_graphs, store))
    return rows


# Row verdicts that say the replay differs from eager, whose cause the launch diff looks for.
_REPLAY_DIFFERS = (V.STALE_REPLAY, V.UNINITIALIZED)


def _explain_launches(
    case: Case,
    be: GraphBackend,
    graph: Any,
    static: dict[str, torch.Tensor],
    inputs_b: Sequence[dict[str, torch.Tensor]],
    rows: list[Row],
    rngs: list[tuple[torch.Tensor, ...]],
    requested: bool,
) -> None:
    """The launch diff (harness/launch_diff.py) of `graph` against a capture made with the B of the first
    failing replay (replay 0 when none failed), written into that row's detail; a launch difference found
    on request turns a passing row into stale_replay. The op's Python state and the generators are put
    back afterwards, so the rest of the check runs as it would have without the diff."""
    from graphsafe import launch_diff

    index = next((i for i, r in enumerate(rows) if r.row_verdict != V.PASS), 0)
    b, rng = inputs_b[index], rngs[index]
    saved_rng = be.rng_state()

    def capture_b() -> Any:
        state = PythonState(case.op)
        try:
            with torch.no_grad():
                for name, t in b.items():
                    static[name].copy_(t)
            prepare_inputs(case, static)
            be.set_rng_state(rng)
            return be.capture(functools.partial(_call_op, case, static), warmup=0)
        finally:
            state.restore()

    try:
        diff = launch_diff.explain(graph, static, capture_b, reraise=DEVICE_FAULTS)
    finally:
        be.set_rng_state(saved_rng)
    r = rows[index]
    r.detail = f"{r.detail}; {diff.detail()}" if r.detail else diff.detail()
    if diff.differs:
        # The first launch difference is what the graph froze at capture: the finding's carried state.
        Finding.add_state(r, diff.lines()[:1])
        if requested and r.row_verdict == V.PASS:
            r.row_verdict, r.detector = V.STALE_REPLAY, LAUNCH_DIFF


def _replay_and_compare(
    case: Case,
    be: GraphBackend,
    graph: Any,
    static: dict[str, torch.Tensor],
    inputs_b: dict[str, torch.Tensor],
    row: Callable[..., Row],
    replay_index: int,
    seed_b: int,
    store: CheckStore,
    *,
    rng: tuple[torch.Tensor, ...] | None = None,
    fresh: list[torch.Tensor] | None = None,
    python_state: PythonState | None = None,
) -> Row:
    rng = be.rng_state() if rng is None else rng
    try:
        replay_ms = _replay(be, graph, static, inputs_b, rng, case)
    except DEVICE_FAULTS:
        raise
    except Exception as exc:
        return _replay_error_row(exc, row, replay_index, seed_b)
    return _compare_replay(
        case,
        be,
        graph,
        static,
        inputs_b,
        row,
        replay_index,
        seed_b,
        replay_ms,
        store,
        rng=rng,
        fresh=fresh,
        python_state=python_state,
    )


def _replay(
    be: GraphBackend,
    graph: Any,
    static: dict[str, torch.Tensor],
    inputs_b: dict[str, torch.Tensor],
    rng: tuple[torch.Tensor, ...],
    case: Case | None = None,
) -> float:
    """Steps 4-5: poison the outputs, copy B into the static inputs in place, run the case's `prepare` hook
    on them, replay from the generator state `rng`, synchronize; returns the replay's own time in ms (device
    time between two marks, so the copies queued before it are not counted and need no wait of their own)."""
    # 4. Poison the outputs: only what this replay writes may survive.
    poison_outputs(graph.outputs)
    # 5. Copy B into the static inputs in place, replay, synchronize.
    with torch.no_grad():
        for name, t in inputs_b.items():
            static[name].copy_(t)
    if case is not None:
        prepare_inputs(case, static)
    be.set_rng_state(rng)
    start = be.mark()
    graph.replay()
    end = be.mark()
    # The replay must be complete before anything else runs on the host: an op's host code (a CPU expert,
    # a pinned-memory handshake like FreeToken issue #350's) would otherwise meet the replay still running.
    be.synchronize()
    return be.elapsed_ms(start, end)


def _fresh_eager(
    case: Case, be: GraphBackend, inputs_b: dict[str, torch.Tensor], rng: tuple[torch.Tensor, ...]
) -> tuple[list[torch.Tensor] | None, PythonState]:
    """Eager B before the op saw A, and the snapshot of the op's Python state taken before it, which is put
    back afterwards (a failing row's finding asks it what changed since). None when eager raised (the warm-up
    with A meets the same failure and names it)."""
    state = PythonState(case.op)
    try:
        be.set_rng_state(rng)
        probe_inputs = _clone_all(inputs_b)
        prepare_inputs(case, probe_inputs)
        with torch.no_grad():
            out = _clone_outputs(flatten_tensors(_call_op(case, probe_inputs)))
        be.synchronize()
    except DEVICE_FAULTS:
        raise
    except Exception:  # an OutputTypeError too: the capture below names it (one place decides)
        return None, state
    finally:
        state.restore()
        be.set_rng_state(rng)
    return out, state


def _compare_replay(
    case: Case,
    be: GraphBackend,
    graph: Any,
    static: dict[str, torch.Tensor],
    inputs_b: dict[str, torch.Tensor],
    row: Callable[..., Row],
    replay_index: int,
    seed_b: int,
    replay_ms: float,
    store: CheckStore,
    *,
    rng: tuple[torch.Tensor, ...],
    fresh: list[torch.Tensor] | None = None,
    python_state: PythonState | None = None,
) -> Row:
    """Step 6: the replay's outputs against eager on a clone of B (from the generator state the replay
    started from), the independent reference, and (`fresh`) eager B before the op saw A. `python_state`: the
    hidden-state probe's snapshot, asked what the op's calls changed when the row fails on values."""
    graph_out = _clone_outputs(graph.outputs)
    eager_inputs = _clone_all(inputs_b)
    be.set_rng_state(rng)
    # Eager is timed between two marks and not waited for here: the comparisons' batch below is queued
    # after it on the same stream and its one wait covers both (a fault in eager surfaces there, as a
    # device fault). One wait fewer per replay: on an H200 shared by 8 worker processes each wait costs
    # about 1 ms (reports/performance.md).
    start = be.mark()
    try:
        prepare_inputs(case, eager_inputs)
        with torch.no_grad():
            result = _call_op(case, eager_inputs)
            eager_out = list(flatten_tensors(result))
        end = be.mark()
    except DEVICE_FAULTS:
        raise
    except OutputTypeError as exc:
        raise CaseError(case.name, "op", str(exc)) from exc
    except Exception as exc:
        made = row(
            V.EAGER_MISMATCH,
            replay_index,
            seed_b,
            detail=with_user_frame(f"eager raised {type(exc).__name__}: {exc}", exc),
        )
        return raised(made, exc)
    reference = None
    if case.reference is not None:
        try:
            reference = store.reference(seed_b, inputs_b)
        except DEVICE_FAULTS:
            raise
        except Exception as exc:  # the oracle itself is broken: a case-definition error, not a verdict
            raise CaseError(case.name, "reference", f"raised {type(exc).__name__}: {exc}") from exc

    # The replay's static inputs and eager's clones against B (eager never touches `static`), in the
    # comparisons' batch.
    seen = ((static, inputs_b), (eager_inputs, inputs_b))
    r = _verdict_row(case, row, replay_index, seed_b, graph_out, eager_out, reference, fresh, seen, result)
    r.replay_ms, r.eager_ms = replay_ms, be.elapsed_ms(start, end)
    if python_state is not None and r.row_verdict in (V.STALE_REPLAY, V.EAGER_MISMATCH) and r.output:
        # Which attribute, global or closure cell the op's calls changed: the state that carried over.
        Finding.add_state(r, python_state.changes())
    return r


def _eager_only_rows(
    case: Case,
    be: GraphBackend,
    row: Callable[..., Row],
    seeds_b: Sequence[int],
    inputs_b: Sequence[dict[str, torch.Tensor]],
    why: str,
    store: CheckStore,
) -> list[Row]:
    """Graphs were disabled by a fail-closed probe: the op must still be right eagerly."""
    rows = []
    for i, (seed_b, b) in enumerate(zip(seeds_b, inputs_b, strict=True)):
        try:
            eager_inputs = _clone_all(b)
            prepare_inputs(case, eager_inputs)
            with torch.no_grad():
                eager_out = list(flatten_tensors(_call_op(case, eager_inputs)))
            be.synchronize()
        except DEVICE_FAULTS:
            raise
        except Exception as exc:  # as in _replay_and_compare: eager that raises is wrong, not a harness error
            rows.append(
                raised(
                    row(
                        V.EAGER_MISMATCH,
                        i,
                        seed_b,
                        detail=with_user_frame(f"{why}; eager raised {type(exc).__name__}: {exc}", exc),
                    ),
                    exc,
                )
            )
            continue
        reference = store.reference(seed_b, b) if case.reference is not None else None
        r = _verdict_row(case, row, i, seed_b, eager_out, eager_out, reference)
        if r.row_verdict == V.PASS:
            r.row_verdict = V.FALLBACK_EAGER
        r.detail = f"{why}; {r.detail}" if r.detail else why
        r.graph_error = None
        rows.append(r)
    return rows


def _rebuild_rows(
    case: Case,
    be: GraphBackend,
    static: dict[str, torch.Tensor],
    inputs_b: Sequence[dict[str, torch.Tensor]],
    seeds_b: Sequence[int],
    row: Callable[..., Row],
    rebuilds: int,
    store: CheckStore,
) -> list[Row]:
    """Recapture `rebuilds` times, checking a replay after each; fail when device memory keeps growing."""
    rows = []
    be.synchronize()
    baseline = be.memory_in_use()
    for r in range(rebuilds):
        try:
            graph = be.capture(functools.partial(_call_op, case, static), warmup=0)
        except DEVICE_FAULTS:
            raise
        except Exception as exc:  # a recapture may fail where the first capture did not
            failed = _capture_failure_row(case, exc, row, seeds_b[r % len(inputs_b)])
            failed.phase, failed.detail = "rebuild", f"rebuild {r}/{rebuilds}: {failed.detail}"
            rows.append(failed)
            break
        b_index = r % len(inputs_b)
        try:
            res = _replay_and_compare(
                case, be, graph, static, inputs_b[b_index], row, r, seeds_b[b_index], store
            )
        finally:
            graph.release()
        res.phase = "rebuild"
        if res.row_verdict != V.PASS or r == rebuilds - 1:
            rows.append(res)
        if res.row_verdict != V.PASS:
            break
    be.synchronize()
    growth = be.memory_in_use() - baseline
    if growth > REBUILD_GROWTH_BOUND_BYTES:
        rows.append(
            row(
                V.CAPTURE_ERROR,
                -1,
                seeds_b[0],
                detail=f"device memory grew by {growth >> 20} MiB over {rebuilds} rebuilds "
                f"(bound {REBUILD_GROWTH_BOUND_BYTES >> 20} MiB)",
                phase="rebuild",
            )
        )
    return rows


def _live_graph_rows(
    case: Case,
    be: GraphBackend,
    inputs_a: dict[str, torch.Tensor],
    inputs_b: Sequence[dict[str, torch.Tensor]],
    seeds_b: Sequence[int],
    row: Callable[..., Row],
    live_graphs: int,
    store: CheckStore,
) -> list[Row]:
    """Keep `live_graphs` graphs alive at once (each with its own static buffers), replay them interleaved.

    A runtime that lets one graph's pool or parameters leak into another's shows up as a stale replay.
    """
    graphs: list[tuple[Any, dict[str, torch.Tensor]]] = []
    try:
        for g in range(live_graphs):
            static = _clone_all(inputs_a)
            try:
                graphs.append((be.capture(functools.partial(_call_op, case, static), warmup=0), static))
            except DEVICE_FAULTS:
                raise
            except Exception as exc:  # capturing one more graph while the others are alive may fail
                failed = _capture_failure_row(case, exc, row, seeds_b[0])
                failed.phase, failed.detail = "live", f"live graph {g}/{live_graphs}: {failed.detail}"
                return [failed]
        rows = []
        for turn in range(2):  # two rounds, each graph with another B than in the round before
            # Replay every graph first, then compare them all: a graph whose outputs or parameters share
            # memory with another's (a cached output buffer, a shared pool replayed out of order, a parameter
            # slot reused past its capacity) then shows the other graph's values.
            b_indices = [(g + turn) % len(inputs_b) for g in range(len(graphs))]
            times, states = [], []
            for g, ((graph, static), b) in enumerate(zip(graphs, b_indices, strict=True)):
                states.append(be.rng_state())
                try:
                    times.append(_replay(be, graph, static, inputs_b[b], states[-1], case))
                except DEVICE_FAULTS:
                    raise
                except Exception as exc:
                    failed = _replay_error_row(exc, row, g, seeds_b[b])
                    failed.phase, failed.detail = "live", f"live graph {g}/{live_graphs}: {failed.detail}"
                    return [failed]
            for g, ((graph, static), b, ms, rng) in enumerate(
                zip(graphs, b_indices, times, states, strict=True)
            ):
                res = _compare_replay(
                    case, be, graph, static, inputs_b[b], row, g, seeds_b[b], ms, store, rng=rng
                )
                res.phase = "live"
                if res.row_verdict != V.PASS:
                    res.detail = f"live graph {g}/{live_graphs}, round {turn}: {res.detail}"
                    return [res]
        rows.append(
            row(
                V.PASS,
                -1,
                seeds_b[0],
                detail=f"{live_graphs} live graphs, 2 interleaved rounds",
                phase="live",
            )
        )
        return rows
    finally:
        for graph, _ in graphs:
            graph.release()


# ----------------------------------------------------------------------------------------------- helpers
