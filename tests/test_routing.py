"""Tests for kernels/common/routing.py: the sync-free block map equals a plain-Python construction, and only the
legacy builder trips a graph capture (CPU; the 2000-routing sweep takes about a second)."""

import random

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import graphsafe
from graphsafe.kernels.common import routing as r

RAGGED = [0, 7, 64, 1, 100, 0, 84, 0]  # aiter#5831's ragged groups, zero-token experts included
BLOCK_MS = (1, 4, 16, 32, 64, 128)


def _random_routing(rng: random.Random):
    num_experts = rng.randint(1, 16)
    block_m = rng.choice(BLOCK_MS)
    sizes = [0 if rng.random() < 0.3 else rng.randint(1, 3 * block_m) for _ in range(num_experts)]
    slack = rng.choice((0, 0, rng.randint(1, 50)))  # rows no expert claims: foreign experts, padding
    return sizes, sum(sizes) + slack, block_m


def _check(sizes, total_rows, block_m, dtype=torch.int32):
    got = r.block_map_from_group_sizes(torch.tensor(sizes, dtype=dtype), total_rows, block_m)
    want = r.block_map_reference(sizes, total_rows, block_m)
    assert got.dtype == torch.int32
    assert got.tolist() == [list(s) for s in want], (sizes, total_rows, block_m)


def test_2000_random_routings_match_plain_python():
    """Method: 2000 seeded random (sizes, total_rows, block_m) with ~30% zero-token experts and slack
    rows; failure scenario: an off-by-one in the searchsorted/cumsum walk or a missed zero-size expert."""
    rng = random.Random(5831)
    for _ in range(2000):
        _check(*_random_routing(rng))


@given(
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=32),
    slack=st.integers(0, 64),
    block_m=st.sampled_from(BLOCK_MS),
)
def test_property_block_map_matches_plain_python(sizes, slack, block_m):
    """Hypothesis over the same property (example count follows the active profile)."""
    _check(sizes, sum(sizes) + slack, block_m, dtype=torch.int64)


@pytest.mark.parametrize("block_m", BLOCK_MS)
def test_ragged_sizes_from_the_seed(block_m):
    _check(RAGGED, sum(RAGGED), block_m)
    _check(RAGGED, 2 * sum(RAGGED), block_m)  # half of the rows foreign


def test_static_bound_is_tight_for_worst_case():
    """Every expert ends in a 1-row partial block: blocks = cdiv(T, bm) + E - 1 <= the bound."""
    sizes = [33] * 8
    got = r.block_map_from_group_sizes(torch.tensor(sizes), 8 * 33, 32)
    assert got.shape == (r.cdiv(8 * 33, 32) + 8, 3)
    assert int((got[:, 0] >= 0).sum()) == 16


def test_all_zero_sizes_give_only_empty_slots():
    got = r.block_map_from_group_sizes(torch.zeros(4, dtype=torch.int32), 10, 4)
    assert (got == torch.tensor(r.EMPTY_SLOT, dtype=torch.int32)).all()


def test_oversized_group_sizes_never_reach_past_total_rows():
    got = r.block_map_from_group_sizes(torch.tensor([50, 50]), 60, 16)
    ends = got[:, 1] + got[:, 2]
    assert int(ends.max()) <= 60


def test_legacy_builder_agrees_on_the_real_slots():
    sizes = torch.tensor(RAGGED)
    legacy = r.block_map_from_group_sizes_legacy(sizes, sum(RAGGED), 16)
    fixed = r.block_map_from_group_sizes(sizes, sum(RAGGED), 16)
    assert torch.equal(legacy, fixed[: legacy.shape[0]])
    assert (fixed[legacy.shape[0] :, 0] == -1).all()


def _topk_reference(ids: list[list[int]], num_local: int, start: int):
    flat = [e for row in ids for e in row]
    local = [(e - start) if start <= e < start + num_local else num_local for e in flat]
    order = sorted(range(len(flat)), key=lambda i: (local[i], i))
    sizes = [local.count(e) for e in range(num_local)]
    return order, sizes


def test_route_topk_matches_plain_python_with_padding_and_foreign_experts():
    rng = random.Random(7)
    for _ in range(200):
        tokens, topk, num_local = rng.randint(1, 40), rng.randint(1, 4), rng.randint(1, 8)
        start = rng.choice((0, num_local))  # rank 0 or rank 1 of expert parallelism
        ids = [[rng.randint(-1, 2 * num_local - 1) for _ in range(topk)] for _ in range(tokens)]
        rows, sizes, bmap = r.route_topk(torch.tensor(ids), num_local, block_m=8, expert_start=start)
        want_rows, want_sizes = _topk_reference(ids, num_local, start)
        assert rows.tolist() == want_rows
        assert sizes.tolist() == want_sizes
        assert bmap.tolist() == [list(s) for s in r.block_map_reference(want_sizes, tokens * topk, 8)]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: r.block_map_from_group_sizes(torch.tensor([1.0]), 4, 4), "group_sizes dtype must be"),
        (lambda: r.block_map_from_group_sizes(torch.zeros(2, 2, dtype=torch.int32), 4, 4), "1-D tensor"),
        (lambda: r.block_map_from_group_sizes(torch.tensor([1]), 4, 0), "block_m must be a positive int"),
        (lambda: r.route_topk(torch.zeros(4, dtype=torch.int64), 2, 4), r"topk_ids must be 2-D"),
        (lambda: r.route_topk(torch.zeros(4, 1), 2, 4), "topk_ids dtype must be"),
    ],
)
def test_bad_input_is_refused_by_name(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def _harness_verdict(builder):
    def make_inputs(seed: int, device: torch.device):
        g = torch.Generator().manual_seed(seed)
        sizes = torch.randint(0, 40, (8,), generator=g).to(torch.int32)
        sizes[seed % 8] = 0  # a zero-token expert, different per seed
        return {"group_sizes": sizes.to(device)}

    case = graphsafe.Case(
        name=f"routing_{builder.__name__}",
        make_inputs=make_inputs,
        op=lambda group_sizes: builder(group_sizes, 8 * 40, 16),
        reference=lambda group_sizes: r.block_map_from_group_sizes(group_sizes, 8 * 40, 16),
        expect="pass",
    )
    return graphsafe.check(case, backend="cpu").verdict


def test_sync_free_builder_replays_under_the_cpu_graph_backend():
    assert _harness_verdict(r.block_map_from_group_sizes) == "pass"


def test_legacy_builder_is_caught_as_capture_sync():
    """Negative control: the .item() builder must be reported as a host sync during capture."""
    assert _harness_verdict(r.block_map_from_group_sizes_legacy) == "capture_sync"
