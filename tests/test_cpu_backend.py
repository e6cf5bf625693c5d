"""The CPU graph backend: what it records, replays, and refuses, like real capture."""

from __future__ import annotations

import pytest
import torch

from graphsafe import Case, check
from graphsafe.backends.cpu import CpuBackend, register_host_function_op
from graphsafe.errors import CaptureError, CaptureSyncError


def test_replay_recomputes_with_new_inputs_in_place() -> None:
    backend = CpuBackend()
    x = torch.ones(4)
    graph = backend.capture(lambda: torch.relu(x * 2 - 1))
    x.copy_(torch.tensor([0.0, 1.0, 2.0, 3.0]))
    graph.replay()
    assert torch.equal(graph.outputs[0], torch.tensor([0.0, 1.0, 3.0, 5.0]))


def test_views_follow_their_base() -> None:
    backend = CpuBackend()
    x = torch.arange(6.0).reshape(2, 3)
    graph = backend.capture(lambda: (x + 1).t()[0])
    x.add_(10)
    graph.replay()
    assert torch.equal(graph.outputs[0], torch.tensor([11.0, 14.0]))


@pytest.mark.parametrize(
    "op",
    [
        lambda x: x.sum().item(),
        lambda x: x.nonzero(),
        lambda x: x[x > 0],
        lambda x: x.tolist(),
        lambda x: bool(x.sum() > 0),
        lambda x: torch.repeat_interleave(x.long().abs()),
        lambda x: torch.unique(x),
    ],
    ids=["item", "nonzero", "bool_mask", "tolist", "bool", "repeat_interleave", "unique"],
)
def test_host_syncs_raise_capture_sync(op) -> None:  # type: ignore[no-untyped-def]
    """Failure scenario: host reads and data-dependent shapes; real capture rejects each of these."""
    x = torch.tensor([1.0, -2.0, 3.0])
    with pytest.raises(CaptureSyncError):
        CpuBackend().capture(lambda: op(x), warmup=0)


def test_repeat_interleave_with_output_size_is_allowed() -> None:
    x = torch.tensor([1, 2])
    graph = CpuBackend().capture(lambda: torch.repeat_interleave(x, output_size=3), warmup=0)
    assert graph.outputs[0].shape == (3,)


def test_other_capture_failures_are_capture_errors() -> None:
    def bad() -> torch.Tensor:
        raise RuntimeError("device lost")

    with pytest.raises(CaptureError) as info:
        CpuBackend().capture(bad, warmup=0)
    assert not isinstance(info.value, CaptureSyncError) and "device lost" in str(info.value)


def test_unrecorded_python_side_effects_run_once() -> None:
    """Documented limit and the seed-000 failure shape: plain Python runs at capture, never on replay."""
    calls = []
    x = torch.ones(2)

    def op() -> torch.Tensor:
        calls.append(1)
        return x + 1

    graph = CpuBackend().capture(op, warmup=0)
    graph.replay()
    graph.replay()
    assert len(calls) == 1


def test_empty_is_repoisoned_on_every_replay() -> None:
    backend = CpuBackend()
    with backend.poisoned_allocation(0xFF):
        graph = backend.capture(lambda: torch.empty(4), warmup=0)
        graph.outputs[0].fill_(1.0)
        graph.replay()
    assert torch.isnan(graph.outputs[0]).all()


def test_poisoned_allocation_restores_global_state() -> None:
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.utils.deterministic.fill_uninitialized_memory,
    )
    from graphsafe.poison import op_call_poisoning

    with CpuBackend().poisoned_allocation(0x7F):
        assert torch.are_deterministic_algorithms_enabled()
        with op_call_poisoning():  # a call of the op under test, as the protocol makes it
            t = torch.empty(2, dtype=torch.int32)
        assert (t == 0x7F7F7F7F).all()
        own = torch.empty(2, dtype=torch.int32)  # the harness's own tensor: torch's fill only
        assert (own == torch.iinfo(torch.int32).max).all()
    assert (
        torch.are_deterministic_algorithms_enabled(),
        torch.utils.deterministic.fill_uninitialized_memory,
    ) == before


# --- host-sync rules per op and argument (harness/backends/cpu.py, SYNC_RULES / FUNCTION_RULES) ----------
# Each pair: the form ATen's CUDA kernel runs without reading device data on the host, and the form that
# reads it. Both directions are checked: a capture-safe form flagged is as wrong as an unsafe form missed.

_IDS = torch.tensor([0, 3, 1, 1, 2, 0, 3, 3])
_X = torch.tensor([0.5, -1.0, 2.0, 0.0, 1.5, -0.25, 3.0, 0.75])
_TOTAL = int(_IDS.sum())

_PADDING = torch.tensor([[False] * 8, [False] * 6 + [True] * 2])
_padded_encoder = torch.nn.TransformerEncoder(
    torch.nn.TransformerEncoderLayer(d_model=4, nhead=2, dim_feedforward=8, batch_first=True),
    num_layers=1,
    enable_nested_tensor=False,
).eval()

SYNCING = {
    "histc_default_range": lambda: torch.histc(_X, bins=4),
    "histc_min_equals_max": lambda: torch.histc(_X, bins=4, min=1.0, max=1.0),
    "bincount": lambda: torch.bincount(_IDS),
    "bincount_minlength": lambda: torch.bincount(_IDS, minlength=4),
    "one_hot_inferred_classes": lambda: torch.nn.functional.one_hot(_IDS),
    "repeat_interleave_no_output_size": lambda: torch.repeat_interleave(_IDS),
    "repeat_interleave_tensor_no_output_size": lambda: _X.repeat_interleave(_IDS),
    "nonzero": lambda: torch.nonzero(_X),
    "where_one_argument": lambda: torch.where(_X > 0),
    "argwhere": lambda: torch.argwhere(_X),
    "masked_select": lambda: torch.masked_select(_X, _X > 0),
    "boolean_mask_index": lambda: _X[_X > 0],
    "boolean_mask_index_put": lambda: _X.clone().index_put_((_X > 0,), torch.tensor(0.0)),
    "unique": lambda: torch.unique(_IDS),
    "unique_consecutive": lambda: torch.unique_consecutive(_IDS),
    "item": lambda: _X.sum().item(),
    "float_of_tensor": lambda: float(_X.max()),
    "equal": lambda: torch.equal(_X, _X),
    "allclose": lambda: _X * (1.0 if torch.allclose(_X, _X) else 2.0),
    "linalg_inv_checks_errors": lambda: torch.linalg.inv(torch.eye(2) + _X[:4].reshape(2, 2) * 0.1),
    "tensor_cpu": lambda: _X.cpu() + 1,
    "nested_tensor_from_mask": lambda: torch._nested_tensor_from_mask(
        _X.reshape(2, 4, 1).expand(2, 4, 2).contiguous(),
        torch.tensor([[True] * 4, [True, True, False, False]]),
    ).to_padded_tensor(0.0),
    "device_module_synchronize": lambda: (torch.get_device_module(_X.device).synchronize(), _X + 1)[1],
    "isin_many_test_elements": lambda: torch.isin(_IDS, torch.arange(64)),
    "tensor_to_cpu_string": lambda: _X.to("cpu") + 1,
    "torch_tensor_on_the_inputs_device": lambda: _X + torch.tensor([1.0] * 8, device=_X.device),
    "as_tensor_on_the_inputs_device": lambda: _X + torch.as_tensor([1.0] * 8, device=_X.device),
    "new_tensor_from_host_data": lambda: _X + _X.new_tensor([1.0] * 8),
    "grouped_mm_fp32": lambda: torch._grouped_mm(
        torch.ones(8, 16), torch.ones(2, 16, 8), offs=torch.tensor([3, 8], dtype=torch.int32)
    ),
}
CAPTURE_SAFE = {
    "histc_explicit_range": lambda: torch.histc(_IDS.float(), bins=4, min=0, max=3),
    "bincount_empty": lambda: torch.bincount(torch.zeros(0, dtype=torch.int64)),
    "one_hot_explicit_classes": lambda: torch.nn.functional.one_hot(_IDS, num_classes=4),
    "one_hot_positional_classes": lambda: torch.nn.functional.one_hot(_IDS, 4),
    "repeat_interleave_output_size": lambda: torch.repeat_interleave(_IDS, output_size=_TOTAL),
    "repeat_interleave_tensor_output_size": lambda: _X.repeat_interleave(_IDS, output_size=_TOTAL),
    "repeat_interleave_int": lambda: _X.repeat_interleave(2),
    "nonzero_static": lambda: torch.nonzero_static(_X, size=8),
    "where_three_arguments": lambda: torch.where(_X > 0, _X, 0.0),
    "masked_fill": lambda: _X.masked_fill(_X > 0, 0.0),
    "isclose_all_as_a_tensor": lambda: torch.isclose(_X, _X).all(),
    "integer_index": lambda: _X[_IDS],
    "multinomial": lambda: torch.multinomial(_X.abs(), 2),
    "multinomial_replacement": lambda: torch.multinomial(_X.abs(), 4, replacement=True),
    "assert_async": lambda: (torch._assert_async(_X.abs().sum() >= 0), _X + 1)[1],
    "linalg_inv_ex": lambda: torch.linalg.inv_ex(torch.eye(2) + _X[:4].reshape(2, 2) * 0.1),
    "grouped_mm_bf16": lambda: torch._grouped_mm(
        torch.ones(8, 16, dtype=torch.bfloat16),
        torch.ones(2, 16, 8, dtype=torch.bfloat16),
        offs=torch.tensor([3, 8], dtype=torch.int32),
    ),
    "scatter_add_sized": lambda: torch.zeros(4).scatter_add(0, _IDS, _X),
    "tensor_to_the_inputs_device": lambda: _X.to(_IDS.device) + 1,
    "isin_few_test_elements": lambda: torch.isin(_IDS, torch.tensor([1, 3])),
    "isin_many_test_elements_assume_unique": lambda: torch.isin(_IDS, torch.arange(64), assume_unique=True),
    "tensor_to_dtype": lambda: _X.to(torch.float64),
    "host_constant_without_device": lambda: _X * torch.tensor(2.0),
    "as_tensor_of_a_tensor": lambda: torch.as_tensor(_X, device=_X.device) + 1,
    "empty_tensor_literal_on_the_inputs_device": lambda: torch.cat([_X, torch.tensor([], device=_X.device)]),
    "fused_transformer_encoder_with_padding_mask": lambda: _padded_encoder(
        _X.reshape(1, 8, 1).expand(2, 8, 4).contiguous(), src_key_padding_mask=_PADDING
    ),
}


@pytest.mark.parametrize("name", sorted(SYNCING))
def test_forms_that_read_device_data_on_the_host_are_capture_sync(name: str) -> None:
    with pytest.raises(CaptureSyncError):
        CpuBackend().capture(SYNCING[name], warmup=0)


@pytest.mark.parametrize("name", sorted(CAPTURE_SAFE))
def test_capture_safe_forms_are_not_flagged(name: str) -> None:
    graph = CpuBackend().capture(CAPTURE_SAFE[name], warmup=0)
    assert graph.limits == ""


def test_one_hot_waiver_covers_only_its_own_range_check() -> None:
    """The CPU-only range check inside one_hot is waived; an `.item()` right after it is still a sync."""
    with pytest.raises(CaptureSyncError):
        CpuBackend().capture(lambda: torch.nn.functional.one_hot(_IDS, num_classes=4).sum().item(), warmup=0)


# --- custom ops: one node, inside checked -------------------------------------------------------------


@torch.library.custom_op("graphsafe_test::scale_by_max_item", mutates_args=())
def _scale_by_max_item(x: torch.Tensor) -> torch.Tensor:
    """Negative control: its Python body reads a device value on the host."""
    return x * float(x.abs().max())


@torch.library.custom_op("graphsafe_test::scale_by_max", mutates_args=())
def _scale_by_max(x: torch.Tensor) -> torch.Tensor:
    """Fixed twin: the same arithmetic kept on the device."""
    return x * x.abs().max()


def test_host_sync_inside_a_custom_op_body_is_seen() -> None:
    x = torch.tensor([1.0, -2.0, 3.0])
    with pytest.raises(CaptureSyncError, match=r"item|_local_scalar_dense"):
        CpuBackend().capture(lambda: _scale_by_max_item(x), warmup=0)


def test_custom_op_is_one_node_and_replays_with_new_inputs() -> None:
    x = torch.tensor([1.0, -2.0, 3.0])
    graph = CpuBackend().capture(lambda: _scale_by_max(x) + 1, warmup=0)
    assert graph.node_kinds() == {"graphsafe_test.scale_by_max.default": 1, "aten.add.Tensor": 1}
    x.copy_(torch.tensor([2.0, 0.5, -4.0]))
    graph.replay()
    assert torch.equal(graph.outputs[0], x * 4.0 + 1)


# --- torch.compile: compiled and run under the recorder -----------------------------------------------


@pytest.mark.slow
def test_compiled_graph_runs_under_capture_and_replays_whole() -> None:
    """Inductor's C++ kernels take raw pointers; recorded op by op, a replay would skip them (stale)."""
    from torch._dynamo.utils import counters

    @torch.compile(dynamic=False)
    def fused(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ w + 1).sum(-1) * 2

    x, w = torch.randn(4, 8), torch.randn(8, 8)
    before = counters["stats"]["calls_captured"]
    graph = CpuBackend().capture(lambda: fused(x, w))
    assert counters["stats"]["calls_captured"] > before  # dynamo really compiled it
    assert graph.node_kinds() == {"inductor compiled graph": 1}
    x.copy_(torch.randn(4, 8))
    graph.replay()
    with torch.no_grad():
        assert torch.equal(graph.outputs[0], fused(x, w))
    assert graph.limits == ""


@pytest.mark.slow
def test_compiled_graph_runs_under_the_poisoning_scope_too() -> None:
    """The protocol captures inside poisoned_allocation, whose byte-pattern mode must not send dynamo to eager."""

    @torch.compile(dynamic=False)
    def scaled(x: torch.Tensor) -> torch.Tensor:
        return (x * 3).cos().cumsum(0)

    backend = CpuBackend()
    x = torch.randn(16)
    with backend.poisoned_allocation(0xFF):
        graph = backend.capture(lambda: scaled(x))
        assert graph.node_kinds() == {"inductor compiled graph": 1}
        x.copy_(torch.randn(16))
        graph.replay()
    with torch.no_grad():
        assert torch.equal(graph.outputs[0], scaled(x))


@pytest.mark.slow
def test_reduce_overhead_on_cpu_is_marked_not_fully_checked() -> None:
    @torch.compile(mode="reduce-overhead", dynamic=False)
    def scan(x: torch.Tensor) -> torch.Tensor:
        return (x.sin() + 1).cumsum(0)

    graph = CpuBackend().capture(lambda: scan(torch.ones(5)))
    assert graph.limits.startswith("not fully checked on cpu: ") and "CUDA graphs" in graph.limits


@torch.library.custom_op("graphsafe_test::host_function_reads", mutates_args=())
def _host_function_reads(x: torch.Tensor) -> torch.Tensor:
    """Stands for a host-function node: reads its (host) input at replay, legitimately."""
    return x * float(x.abs().max())


register_host_function_op(_host_function_reads)


def test_declared_host_function_op_is_recorded_whole_without_inside_checks() -> None:
    x = torch.tensor([1.0, -2.0, 3.0])
    graph = CpuBackend().capture(lambda: _host_function_reads(x), warmup=0)
    x.copy_(torch.tensor([1.0, 4.0, 0.0]))
    graph.replay()
    assert torch.equal(graph.outputs[0], torch.tensor([4.0, 16.0, 0.0]))


def test_host_function_declaration_names_what_it_takes() -> None:
    with pytest.raises(ValueError, match="namespace::name"):
        register_host_function_op("no_namespace")


def test_capture_takes_the_code_path_eager_takes() -> None:
    """Checking calls must not change which path a library takes: nn.TransformerEncoder's fused fast path is
    skipped whenever has_torch_function is true (under any TorchFunctionMode), so a capture through a mode
    would record the slow path while eager runs the fused kernel (a false stale_replay)."""
    src = _X.reshape(1, 8, 1).expand(2, 8, 4).contiguous()
    graph = CpuBackend().capture(lambda: _padded_encoder(src, src_key_padding_mask=_PADDING), warmup=0)
    assert "aten._transformer_encoder_layer_fwd.default" in graph.node_kinds()


def test_in_place_view_ops_after_a_fresh_output_replay_with_new_inputs() -> None:
    """nn.GRU(batch_first=True) stacks its steps and then transposes the stack in place: at replay the stack's
    new value must go into the recorded tensor as it was before the transpose_, which then runs again."""

    def op(x: torch.Tensor) -> torch.Tensor:
        y = torch.stack([x, x * 2])
        y.transpose_(0, 1)
        y.unsqueeze_(0)
        return y

    x = torch.arange(6.0).reshape(3, 2)
    graph = CpuBackend().capture(lambda: op(x), warmup=0)
    for scale in (3.0, -1.0):
        x.mul_(scale)
        graph.replay()
        assert torch.equal(graph.outputs[0], op(x))
        assert graph.outputs[0].shape == (1, 3, 2, 2)


def test_gru_batch_first_is_graph_safe_on_the_cpu_backend() -> None:
    torch.manual_seed(0)
    gru = torch.nn.GRU(8, 8, batch_first=True)

    def op(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return gru(x)[0]

    case = Case(
        "gru_batch_first",
        lambda seed, device: {"x": torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(seed))},
        op,
    )
    result = check(case, "cpu")
    assert result.verdict == "pass", result.detail
