"""Shape search: a case that declares its size space is checked over many sizes, and a failure is shrunk to
the smallest sizes that still fail.

Role: the seeds' bugs live at shape edges (T not a multiple of the block, an expert with no tokens, an f16
read past the end at some H); a hand-written shape list finds only the edges someone thought of. A case
declares `sizes={"T": range(1, 257), "E": range(1, 17)}` (a range, or any Hypothesis strategy of ints), and
`make_inputs(seed, device, *, T, E)` takes them as keyword arguments. `graphsafe.check` on such a case runs
`search`:

  0. sizes that failed in an earlier run come first, from the example database (`database_dir()`);
  1. a sweep, for at most 70% of the time budget (`_sweep_points`): the corners (each swept dimension at its
     smallest or largest value), then every value of each swept dimension with the other dimensions at their
     simplest values (a 0 raised to 1: at T = 0 no other dimension's edge can show) and, for its edge values,
     once more with the others at their aligned values (H = 256, T = 64: a kernel's vectorised path), round-
     robin over the dimensions, each dimension's values in `edges_first` order (small values interleaved with
     the block edges: the first multiple of 256, 128, ..., 8 with its neighbours, then the second, ...), then
     pairs of two dimensions' first values crossed, for what the budget leaves. A range, `st.integers(lo,
     hi)`, `st.sampled_from` of ints and their `.map` / `.filter` are swept alike (`sweepable`). Edges such as
     T % 64 == 33 sit at one value in 64 that random draws miss: 40 seeded runs of 300 Hypothesis examples
     over T in 1..256 (K, H beside it) missed T % 64 == 33 in 4, and 100 examples missed it in 25 of 40.
     With a fake check, 10 seeds each (reports/performance.md), the default
     counts find 33 of 36 listed edge bugs 10 times in 10, among them T % 64 == 33 only where H % 8 == 0 (0
     in 10 with simplest-value lines alone) and T % 128 == 97 in a space written with st.integers (1 in 10
     from Hypothesis's draws alone); two edges inside two ranges at once (T % 32 == 1 with H % 8 == 3: 1 in
     10) and an edge deep in 1..4096 (T % 128 == 97: 2-3 in 10) are left to Hypothesis's draws, and found by
     the nightly counts;
  2. where the sweep found nothing, Hypothesis generates sizes (`hypothesis.find`: combinations of
     dimensions, strategy dimensions; half of each swept dimension's draws from its edge values) and, at the
     first failure, shrinks it;
  3. a failure from any phase is minimised dimension by dimension over the ranges (the smallest value of
     each dimension, others fixed, that still fails, until nothing changes), so the report names the
     smallest failing sizes whichever phase found them (the sweep's first hit or a stored example is not
     shrunk by Hypothesis).

"Fails" means a verdict other than `pass`: for a case expected to pass that is the bug; a negative control
expects the verdict the search must find. Sizes a case cannot take are rejected with `hypothesis.assume(...)`
inside make_inputs (K <= E, say); they count as neither pass nor failure. So do sizes at which an input
cannot differ between A and every B (the protocol's CaseError for identical inputs): they are counted.

Budgets (`Budget`: nightly under HYPOTHESIS_PROFILE=graphsafe-nightly, as `make nightly` sets it, else default; each
overridable with GRAPHSAFE_SEARCH_EXAMPLES / GRAPHSAFE_SEARCH_SECONDS): sweep and generation stop at their
counts or the time cap (counted from the end of the first check), whichever comes first, and a passing
result counts what the cap left unchecked; shrinking a failure found in time may run past the cap, up to
`shrink_checks` checks. Sizes are explored with one replay per pattern (`EXPLORE_REPLAYS`); the smallest
failing size is checked again with the whole protocol. The result names the smallest failing sizes and a
one-line repro, `graphsafe repro NAME --sizes T=33,E=2 --seed S`.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import json
import os
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphsafe import profiles
from graphsafe import verdicts as V
from graphsafe.environment import positive_seconds, whole_number
from graphsafe.errors import CaseError
from graphsafe.records import Result

if TYPE_CHECKING:
    from graphsafe.backends import GraphBackend
    from graphsafe.case import Case

DATABASE_ENV = "GRAPHSAFE_SEARCH_DB"
# The protocol's CaseError for an input that is the same for seed A and a seed B (harness/protocol.py).
IDENTICAL_INPUTS = "is identical for seeds"
PROFILE_ENV = profiles.ENV  # the project's one profile switch (`make nightly` sets it to graphsafe-nightly)
NIGHTLY_PROFILE = profiles.NIGHTLY
EXAMPLES_ENV = "GRAPHSAFE_SEARCH_EXAMPLES"
SECONDS_ENV = "GRAPHSAFE_SEARCH_SECONDS"


@dataclasses.dataclass(frozen=True)
class Budget:
    """How much one case's search may spend; see the module note."""

    examples: int  # Hypothesis-generated sizes
    sweep: int  # checks of the sweep over range dimensions (corners, then edges_first order)
    seconds: float  # wall time for generation and sweep
    shrink_checks: int  # checks spent shrinking and minimising a failure


# default: 170 sweep checks and 30 Hypothesis examples, 200 checks for a passing search. T % 64 == 33 comes at
# the 77th sweep point with T in 1..256 and H in 1..128 (the 93rd with K in 1..8 too, the 157th with T in
# 1..4096 and H in 1..8192), T % 128 == 97 at the 133rd (149th; 275th in the large space, found there by
# Hypothesis's edge draws 2-4 times in 10). A sweep of 170 against 150 with 50 examples found T % 64 == 33 in
# the large space and on its aligned path there 10 times in 10 instead of 8 and 3, at the same number of checks
# (reports/performance.md). The counts decide what is explored; the seconds are a
# cap for a machine far slower than expected, and a result says when the cap cut a phase short. On the H200
# with 8 workers (`make verify`) a size's check took 50-140 ms and the searched cases checked 98-196 of their
# 200 sizes under a 10 s cap (reports/performance.md), so 30 s. nightly explores
# forty times as many checks.
PROFILES: dict[str, Budget] = {
    "default": Budget(examples=30, sweep=170, seconds=30.0, shrink_checks=300),
    "nightly": Budget(examples=2000, sweep=6000, seconds=600.0, shrink_checks=2000),
}
# Replays per pattern while exploring sizes: the shape-edge bugs a search is for (a row left unwritten at
# T % 64 == 33, an expert without tokens, a read past the end at some H) show on the first replay, and one
# replay instead of three makes each size's check about half as long. The smallest failing size is checked
# again with the run's whole protocol (its replays, rebuilds and live graphs), which the result reports.
EXPLORE_REPLAYS = 1
# The sweep may spend this share of the time budget; Hypothesis gets the rest (and whatever the sweep left).
# Most of it: the sweep's points found what random draws missed, and the heaviest searched case of the suite,
# moe_gemm's, took 8.5-18 s for its 200 sizes under `make verify` on the H200 (reports/performance.md), so its
# 170 sweep points may need half of the 30 s cap there.
SWEEP_TIME_SHARE = 0.7


def budget_from_env() -> Budget:
    """The budget of this run: nightly under HYPOTHESIS_PROFILE=graphsafe-nightly, else default (the dev and ci
    profiles of the harness's own tests), then the GRAPHSAFE_SEARCH_EXAMPLES / _SECONDS overrides."""
    budget = PROFILES["nightly" if os.environ.get(PROFILE_ENV) == NIGHTLY_PROFILE else "default"]
    examples = os.environ.get(EXAMPLES_ENV)
    if examples:
        count = whole_number(EXAMPLES_ENV, examples)
        budget = dataclasses.replace(budget, examples=count, sweep=3 * count)
    seconds = os.environ.get(SECONDS_ENV)
    if seconds:
        budget = dataclasses.replace(budget, seconds=positive_seconds(SECONDS_ENV, seconds))
    return budget


def database_dir() -> Path:
    """Where found failing sizes are kept between runs: $GRAPHSAFE_SEARCH_DB, else .hypothesis/graphsafe in
    the working directory (Hypothesis's own default folder)."""
    explicit = os.environ.get(DATABASE_ENV)
    return Path(explicit) if explicit else Path(".hypothesis") / "graphsafe"


# ------------------------------------------------------------------------------------ the declared space


def strategy(sizes: Mapping[str, Any], *, edge_biased: bool = False) -> Any:
    """The Hypothesis strategy of one size assignment (a dict). `edge_biased`: each swept dimension draws
    half of its values from its block edges (`edge_values`), so that random combinations put two dimensions'
    edges together more often than uniform draws do (the generation phase; shrinking works as before)."""
    from hypothesis import strategies as st

    def one(space: Any) -> Any:
        if isinstance(space, range):
            uniform = st.integers(space.start, space.stop - 1) if space.step == 1 else st.sampled_from(space)
        else:
            uniform = space
        values = sweepable(space) if edge_biased else None
        if values is not None:
            return st.one_of(uniform, st.sampled_from(edge_values(values)))
        return uniform

    return st.fixed_dictionaries({name: one(space) for name, space in sizes.items()})


# A bounded strategy dimension is swept like a range up to this many values; a wider one (st.integers(1, 2**31))
# is left to Hypothesis's draws alone.
MAX_SWEPT_STRATEGY_VALUES = 1 << 16


def sweepable(space: Any) -> Sequence[int] | None:
    """The ordered values a dimension's sweep walks, or None for a dimension only Hypothesis draws: a range as
    it is; `st.integers(lo, hi)` as range(lo, hi + 1), `st.sampled_from([...])` and `st.just(v)` of ints as
    their sorted values, `st.one_of(...)` (or `a | b`) of such strategies as the union of theirs, and a
    strategy's `.filter(f)` or `.map(f)` as the values it can produce (f applied to each), so that a
    size space written with strategies gets the same sweep, corners and minimisation as one written with
    ranges. A strategy this cannot read (a composite, a predicate or function that raises) is left to
    Hypothesis."""
    if isinstance(space, range):
        return space
    inner = getattr(space, "wrapped_strategy", space)  # st.integers and friends return a lazy wrapper
    kind = type(inner).__name__
    values: list[Any] | None = None
    try:
        if kind == "IntegersStrategy":
            lo, hi = getattr(inner, "start", None), getattr(inner, "end", None)
            if isinstance(lo, int) and isinstance(hi, int) and 0 < hi - lo + 1 <= MAX_SWEPT_STRATEGY_VALUES:
                return range(lo, hi + 1)
        elif kind in ("SampledFromStrategy", "JustStrategy") and not getattr(inner, "_transformations", ()):
            values = list(getattr(inner, "elements", ()))
        elif kind == "OneOfStrategy":
            branches = [sweepable(branch) for branch in getattr(inner, "original_strategies", ())]
            if branches and all(branch is not None for branch in branches):
                values = [v for branch in branches if branch is not None for v in branch]
        elif kind == "FilteredStrategy":
            base = sweepable(getattr(inner, "filtered_strategy", None))
            conditions = tuple(getattr(inner, "flat_conditions", ()))
            if base is not None and conditions:
                values = [v for v in base if all(condition(v) for condition in conditions)]
        elif kind == "MappedStrategy":
            base = sweepable(getattr(inner, "mapped_strategy", None))
            pack = getattr(inner, "pack", None)
            if base is not None and callable(pack):
                values = [pack(v) for v in base]
    except Exception:  # a user's predicate or function: whatever it raises, the draws stay Hypothesis's
        return None
    if values and all(type(v) is int for v in values) and len(values) <= MAX_SWEPT_STRATEGY_VALUES:
        return tuple(sorted(set(values)))
    return None


def format_sizes(sizes: Mapping[str, int]) -> str:
    """`T=33,K=1`, the form `--sizes` takes."""
    return ",".join(f"{name}={value}" for name, value in sizes.items())


def parse_sizes(text: str, declared: Mapping[str, Any] | None = None) -> dict[str, int]:
    """Parse `T=33,K=1`; with `declared`, every declared size must be given and none other.

    Raises ValueError naming what is wrong (the CLI reports it as a usage error for --sizes).
    """
    sizes: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name.isidentifier():
            raise ValueError(f"--sizes: {part!r} is not NAME=INT (e.g. T=33,K=1)")
        try:
            sizes[name] = int(value)
        except ValueError:
            raise ValueError(f"--sizes: {name}={value!r} is not a whole number") from None
    if declared is not None:
        missing = [n for n in declared if n not in sizes]
        unknown = [n for n in sizes if n not in declared]
        if missing or unknown:
            raise ValueError(
                f"--sizes: the case declares {', '.join(declared)}"
                + (f"; missing {', '.join(missing)}" if missing else "")
                + (f"; unknown {', '.join(unknown)}" if unknown else "")
            )
        for name, size in sizes.items():
            space = declared[name]
            values = sweepable(space)
            if values is not None and size not in values:
                raise ValueError(f"--sizes: {name}={size} is outside its declared {space!r}")
        return {name: sizes[name] for name in declared}
    return sizes


def bind(case: Case, sizes: Mapping[str, int]) -> Case:
    """The case at fixed sizes: make_inputs with the sizes bound, no size space, the same name and family."""
    return dataclasses.replace(
        case, make_inputs=functools.partial(case.make_inputs, **sizes), sizes=None, family=case.family
    )


# ---------------------------------------------------------------------------------------------- search


class _Rejected(Exception):
    """Sizes the case cannot take (hypothesis.assume in make_inputs)."""


@dataclasses.dataclass
class _Search:
    case: Case
    run_check: Callable[[Case], Result]
    budget: Budget
    started: float = dataclasses.field(default_factory=time.monotonic)
    results: dict[tuple[tuple[str, int], ...], Result | None] = dataclasses.field(default_factory=dict)
    checks: int = 0
    shrink_checks: int = 0
    failure: dict[str, int] | None = None
    skipped: int = 0
    sweep_cut: int = 0  # sweep points the time cap left unchecked
    identical: int = 0  # sizes whose A and B inputs could not differ (see run)

    def out_of_time(self, share: float = 1.0) -> bool:
        # The cap counts from the end of the first check (`run`): before it, nothing has been spent.
        return self.checks > 0 and time.monotonic() - self.started > share * self.budget.seconds

    def run(self, sizes: Mapping[str, int], *, shrinking: bool = False) -> Result | None:
        """The result at these sizes (None: rejected sizes); memoised, so the same sizes are checked once."""
        from hypothesis.errors import UnsatisfiedAssumption

        key = tuple(sizes.items())
        if key in self.results:
            return self.results[key]
        self.checks += 1
        if shrinking:
            self.shrink_checks += 1
        try:
            result: Result | None = self.run_check(bind(self.case, sizes))
        except UnsatisfiedAssumption:
            result = None
        except CaseError as exc:
            if exc.field == "make_inputs" and IDENTICAL_INPUTS in str(exc):
                # A discrete input at a tiny size (one top-k id of two experts) cannot differ between A and
                # every B: those sizes cannot show a stale replay, so they are skipped and counted.
                self.identical += 1
                result = None
            else:
                raise CaseError(self.case.name, exc.field, f"at sizes {format_sizes(sizes)}: {exc}") from exc
        self.results[key] = result
        if self.checks == 1:
            # The clock starts after the first check: it pays for what every later check reuses (the kernel
            # library's build on a cold cache, lazy device and module initialisation).
            self.started = time.monotonic()
        return result

    def fails(self, sizes: Mapping[str, int], *, shrinking: bool = False) -> bool:
        result = self.run(sizes, shrinking=shrinking)
        return result is not None and result.verdict != V.PASS


def _key(name: str) -> bytes:
    return b"graphsafe-sizes:" + name.encode()


def _stored_failures(db: Any, name: str, declared: Mapping[str, Any]) -> list[dict[str, int]]:
    found = []
    for raw in db.fetch(_key(name)):
        try:
            sizes = json.loads(raw.decode())
        except (UnicodeDecodeError, json.JSONDecodeError):
            db.delete(_key(name), raw)
            continue
        if isinstance(sizes, dict) and list(sizes) == list(declared):
            found.append({k: int(v) for k, v in sizes.items()})
        else:  # the case's size space changed since: the example no longer applies
            db.delete(_key(name), raw)
    return sorted(found, key=lambda s: tuple(s.values()))


def _hypothesis_phase(s: _Search, seed: int, db: Any) -> dict[str, int] | None:
    from hypothesis import HealthCheck, Phase, find, settings
    from hypothesis.errors import NoSuchExample

    sizes_space = s.case.sizes
    assert sizes_space is not None

    def condition(sizes: dict[str, int]) -> bool:
        key = tuple(sizes.items())
        if key not in s.results:
            found_before = s.failure is not None
            if not found_before and s.out_of_time():
                s.skipped += 1
                return False
            if found_before and s.shrink_checks >= s.budget.shrink_checks:
                return False
        result = s.run(sizes, shrinking=s.failure is not None)
        if result is None:
            from hypothesis import reject

            reject()
        failed = result.verdict != V.PASS
        if failed and s.failure is None:
            s.failure = dict(sizes)
        return failed

    config = settings(
        max_examples=s.budget.examples,
        database=db,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        # No explain phase: it reruns the failing example with parts varied to annotate a traceback nobody
        # reads here, and costs more checks than the search and the shrink together.
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    )
    try:
        return dict(
            find(
                strategy(sizes_space, edge_biased=True),
                condition,
                settings=config,
                random=random.Random(seed),
                database_key=_key(s.case.name),
            )
        )
    except NoSuchExample:
        return None


def _simplest(sizes_space: Mapping[str, Any], seed: int) -> dict[str, int]:
    from hypothesis import HealthCheck, Phase, find, settings

    # Generate and shrink only: the explain phase would vary the found example to annotate a traceback, which
    # took a large share of a search of moe_combine's T, K, H on the CPU backend and checks nothing.
    config = settings(
        max_examples=10,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate, Phase.shrink],
    )
    return dict(find(strategy(sizes_space), lambda _: True, settings=config, random=random.Random(seed)))


def _block_multiples(lo: int, hi: int) -> Iterator[int]:
    """The multiples of each power of two from the largest down to 8 inside lo..hi + 1, in rounds: every block
    size's first multiple (256, 128, 64, 32, 16, 8), then every block size's second, and so on. In 1..4096,
    32 is then the 8th multiple, where taking each block size's multiples all at once put it after every
    multiple of 64 (T = 33 was the 194th block edge, now the 23rd)."""
    blocks = []
    block = 1 << max(hi - lo, 1).bit_length()
    while block >= 8:
        blocks.append(block)
        block //= 2
    # The next multiple of each block size still inside the range (the first at or above lo, and above 0).
    pending = {b: -(-max(lo, 1) // b) * b for b in blocks}
    while pending:
        for b, m in list(pending.items()):
            yield m
            if m + b <= hi + 1:
                pending[b] = m + b
            else:
                del pending[b]


def _block_edges(space: range) -> list[int]:
    """A step-1 range's ends, then each block multiple (`_block_multiples`) with its neighbours m - 1, m + 1."""
    lo, hi = space.start, space.stop - 1
    edges = [hi, hi - 1]
    for m in _block_multiples(lo, hi):
        edges += [m, m - 1, m + 1]
    return [e for e in dict.fromkeys(edges) if lo <= e <= hi]


# A sweep of at most this many values (a sampled list, a stepped range) counts every value as an edge.
FEW_VALUES = 16


def _edges_in(values: Sequence[int]) -> tuple[int, ...]:
    """`_edges_of` of the values as a range or tuple (its cache needs a hashable key)."""
    return _edges_of(values if isinstance(values, (range, tuple)) else tuple(values))


@functools.lru_cache(maxsize=64)
def _edges_of(values: range | tuple[int, ...]) -> tuple[int, ...]:
    """The block edges of a swept dimension: a step-1 range's `_block_edges`; for other ascending values (a
    stepped range, a sampled list, a mapped or filtered strategy's values) the largest two, then each block
    multiple among them with the values just below and above it (T = 30, 32, 34 among the even token counts).
    Kept per dimension (ranges and tuples are hashable): a search asks for them from its sweep order, its
    edge set and its Hypothesis strategy, and 1..10^7 takes seconds."""
    if isinstance(values, range) and values.step == 1:
        return tuple(_block_edges(values))
    ordered = list(values)
    edges = ordered[-1:-3:-1]
    for m in _block_multiples(ordered[0], ordered[-1]):
        i = bisect.bisect_left(ordered, m)
        at = i < len(ordered) and ordered[i] == m
        if at:
            edges.append(m)
        if i > 0:
            edges.append(ordered[i - 1])
        after = i + 1 if at else i
        if after < len(ordered):
            edges.append(ordered[after])
    return tuple(dict.fromkeys(edges))


def edge_values(values: Sequence[int]) -> list[int]:
    """The values a kernel's path changes at: the eight smallest (a count of 1..8 rows, experts or lanes) and
    the block edges among the values of a step-1 range longer than 2, or of any other sweep longer than
    FEW_VALUES; every value of a shorter one (its values were chosen)."""
    long_range = isinstance(values, range) and values.step == 1 and len(values) > 2
    if not long_range and len(values) <= FEW_VALUES:
        return list(values)
    return list(dict.fromkeys([*values[:8], *_edges_in(values)]))


def edges_first(space: Sequence[int]) -> list[int]:
    """Every value of a swept dimension once, in the sweep's order: the smallest values ascending, interleaved
    with the block edges among the values (`_edges_in`), where kernels change path. Ascending alone
    reaches T = 97 in 1..256 after 97 values of T, past the default budget with three dimensions; the block
    edges that the seeds' bugs sat on come within its first 50 values here."""
    values = list(space)
    if len(values) <= 2:
        return values
    # Alternately the next small value and the next edge not taken yet.
    ordered: list[int] = []
    seen: set[int] = set()
    queues = (iter(values), iter(_edges_in(space)))
    while len(ordered) < len(values):
        for queue in queues:
            value = next((v for v in queue if v not in seen), None)
            if value is not None:
                ordered.append(value)
                seen.add(value)
    return ordered


def aligned_value(values: Sequence[int]) -> int:
    """The value with the most trailing zero bits (0 excluded), the largest among equals: where a kernel takes
    its aligned, vectorised path (H = 256 in 1..264, T = 64 in 0..96, K = 8 in 1..8)."""
    nonzero = [v for v in values if v != 0] or list(values)
    return max(nonzero, key=lambda v: ((v & -v).bit_length() if v else 0, v))


# Corners (every swept dimension at its smallest or largest value) are checked first up to this many swept
# dimensions (2^4 = 16 checks); with more, only all-smallest and all-largest. Edges that need two dimensions at
# once (H == 32 and E == 16 at the top of both ranges) are missed by a one-dimension-at-a-time sweep, and
# Hypothesis's random draws hit such a pair once in hundreds.
MAX_CORNER_DIMS = 4


def _sweep_points(sizes: Mapping[str, Any], base: dict[str, int]) -> Iterator[dict[str, int]]:
    """The sweep's points in order (a generator: the pair phase of a wide space is far larger than any budget).

    1. The corners.
    2. Each swept dimension's values in edges_first order, round-robin over the dimensions, at two bases for
       the other dimensions: their simplest values with a 0 raised to 1 (a dimension at 0, no tokens, leaves
       nothing for another dimension's edge to act on), and, for the line's edge values, their aligned values
       (`aligned_value`). A tail bug inside a kernel's aligned path (rows past T % 64 == 33 lost only where H
       is a multiple of 8, so that the vectorised path runs) shows at neither simplest H = 1 nor at T = 1.
    3. Pairs of dimensions: the first edges_first values of two dimensions crossed, in growing squares
       (i, j < 1, 2, 3, ...), round-robin over the pairs, the others at their simplest: edges of two dimensions
       at once (T % 32 == 1 with H % 8 == 3), for what the budget leaves (the nightly profile's)."""
    swept = {name: values for name, space in sizes.items() if (values := sweepable(space)) is not None}
    line_base = {**base, **{n: 1 for n, values in swept.items() if base.get(n) == 0 and 1 in values}}
    aligned_base = {**line_base, **{n: aligned_value(values) for n, values in swept.items()}}
    names = list(swept)
    if len(names) <= MAX_CORNER_DIMS:
        picks = sorted(itertools.product((0, 1), repeat=len(names)), key=lambda p: (sum(p), p))
    else:
        picks = [(0,) * len(names), (1,) * len(names)]
    for pick in picks:
        yield {
            **base,
            **{n: swept[n][-1] if top else swept[n][0] for n, top in zip(names, pick, strict=True)},
        }
    orders = {name: edges_first(values) for name, values in swept.items()}
    edges = {name: set(edge_values(values)) for name, values in swept.items()}
    for depth in range(max((len(o) for o in orders.values()), default=0)):
        for name, order in orders.items():
            if depth < len(order):
                value = order[depth]
                yield {**line_base, name: value}
                if value in edges[name]:
                    yield {**aligned_base, name: value}
    pairs = list(itertools.combinations(names, 2))
    for side in range(1, max((len(o) for o in orders.values()), default=0)):
        for first, second in pairs:
            a, b = orders[first], orders[second]
            if side >= max(len(a), len(b)):
                continue
            # The square's new border: (side, 0..side) and (0..side - 1, side).
            border = [(side, j) for j in range(side + 1)] + [(i, side) for i in range(side)]
            for i, j in border:
                if i < len(a) and j < len(b):
                    yield {**line_base, first: a[i], second: b[j]}


def _sweep_phase(s: _Search, base: dict[str, int]) -> dict[str, int] | None:
    assert s.case.sizes is not None
    done = 0
    points = _sweep_points(s.case.sizes, base)
    for point in points:
        if done >= s.budget.sweep:
            return None
        if s.out_of_time(SWEEP_TIME_SHARE):
            # The points the budget would still have checked: the unchecked ones among the next ones.
            left = s.budget.sweep - done
            ahead = {tuple(point.items())} | {tuple(p.items()) for p in itertools.islice(points, 4 * left)}
            s.sweep_cut = min(left, len(ahead - set(s.results)))
            return None
        if tuple(point.items()) not in s.results:
            done += 1
        if s.fails(point):
            return point
    return None


def _minimise(s: _Search, failing: dict[str, int]) -> dict[str, int]:
    """Smallest value of each swept dimension (the others fixed) that still fails, until nothing changes."""
    assert s.case.sizes is not None
    swept = {name: values for name, space in s.case.sizes.items() if (values := sweepable(space)) is not None}
    current = dict(failing)
    changed = True
    while changed:
        changed = False
        for name, values in swept.items():
            for value in values:
                if value >= current[name] or s.shrink_checks >= s.budget.shrink_checks:
                    break
                candidate = {**current, name: value}
                if s.fails(candidate, shrinking=True):
                    current, changed = candidate, True
                    break
    return current


def search(
    case: Case,
    backend: GraphBackend,
    run_check: Callable[[Case], Result],
    *,
    seed: int = 0,
    budget: Budget | None = None,
    confirm: Callable[[Case], Result] | None = None,
) -> Result:
    """Search `case`'s size space; `run_check(bound_case)` is graphsafe.check at fixed sizes (the protocol a
    size is explored with), `confirm(bound_case)` the whole protocol the smallest failing size is reported
    with (default: run_check)."""
    from hypothesis.database import DirectoryBasedExampleDatabase

    assert case.sizes is not None
    budget = budget or budget_from_env()
    db = DirectoryBasedExampleDatabase(str(database_dir()))
    s = _Search(case, run_check, budget)

    failing: dict[str, int] | None = None
    phase = ""
    for stored in _stored_failures(db, case.name, case.sizes):
        if s.fails(stored):
            failing, phase = stored, "the example database"
            break
        db.delete(_key(case.name), json.dumps(stored).encode())
    if failing is None and any(sweepable(v) is not None for v in case.sizes.values()):
        failing, phase = _sweep_phase(s, _simplest(case.sizes, seed)), "the sweep"
    if failing is None:
        failing, phase = _hypothesis_phase(s, seed, db), "Hypothesis"
    if failing is None and s.failure is not None:
        failing = s.failure  # found, but the shrink budget ran out before Hypothesis confirmed a minimum
    if failing is None:
        return _passed(case, backend, s)
    first = dict(failing)
    smallest = _minimise(s, first)
    db.save(_key(case.name), json.dumps(smallest).encode())
    result = s.results[tuple(smallest.items())]
    assert result is not None
    unconfirmed = ""
    if confirm is not None:
        # More replays and the stress phases add rows; with the same seeds they repeat the failing ones, unless
        # the op is not deterministic: then the exploring check's failure is reported, and that it did not recur.
        confirmed = confirm(bind(case, smallest))
        if confirmed.verdict != V.PASS:
            result = confirmed
        else:
            unconfirmed = "; the whole protocol's check at these sizes passed (a failure that does not recur)"
    text = format_sizes(smallest)
    shrunk = f", shrunk from {format_sizes(first)}" if first != smallest else ""
    note = (
        f"smallest failing sizes {text} (found by {phase}{shrunk}; {s.checks} sizes checked{unconfirmed}); "
        f"repro: graphsafe repro {case.name} --sizes {text} --seed {seed}"
    )
    for row in result.rows:
        row.detail = f"sizes {text}: {row.detail}" if row.detail else f"sizes {text}"
    return dataclasses.replace(result, detail=f"{note}; {result.detail}" if result.detail else note)


def _describe(name: str, space: Any) -> str:
    """`T in 1..256` for a step-1 range or bounded st.integers, the values of a short sweep, else the name."""
    values = sweepable(space)
    if isinstance(values, range) and values.step == 1:
        return f"{name} in {values.start}..{values.stop - 1}"
    if values is not None:
        shown = ", ".join(map(str, values[:8])) + (", ..." if len(values) > 8 else "")
        return f"{name} in {{{shown}}}"
    return name


def _passed(case: Case, backend: GraphBackend, s: _Search) -> Result:
    checked = [(dict(k), r) for k, r in s.results.items() if r is not None]
    cut = []
    if s.sweep_cut:
        cut.append(f"{s.sweep_cut} sweep points")
    if s.skipped:
        cut.append(f"{s.skipped} Hypothesis examples")
    skipped = f", not checked for the time cap ({s.budget.seconds:g} s): {' and '.join(cut)}" if cut else ""
    if s.identical:
        skipped += f", {s.identical} skipped (an input could not differ between A and B at those sizes)"
    dims = ", ".join(_describe(name, space) for name, space in (case.sizes or {}).items())
    note = f"{len(checked)} sizes checked ({dims}){skipped}: every verdict pass"
    if not checked:
        raise CaseError(
            case.name, "sizes", "every size tried was rejected by make_inputs (hypothesis.assume)"
        )
    sizes, result = checked[0]
    for row in result.rows:
        row.detail = f"sizes {format_sizes(sizes)}; {note}"
    return dataclasses.replace(result, detail=note)
