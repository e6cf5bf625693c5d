"""The launch diff (harness/launch_diff.py): its comparison, the CPU dispatcher-record diff, the controls of
cases/launch_params.py, the native inspection's build, and (marked gpu) the same on a GPU.

Method, CPU: `compare` is fed recorded node descriptions (as launch_nodes.hip returns them) with one
difference each (a scalar argument, a grid, a kernel only B's capture has, a pointer into an input at another
offset, pointers into each capture's own memory, no parameter layout, a node that could not be read) and
must name that difference and no other; the torch-op controls run on the cpu backend and must be caught with
the finding FINDINGS gives, their fixed twins pass with "no launch difference" under explain. The native
sources compile with nvcc for sm_90 (and import: cudart is static) and with hipcc for gfx90a.
GPU (`-m gpu`, needs a device): every control of cases/launch_params.py gets its verdict and its GPU finding,
every fixed twin passes with no launch difference, every passing built-in GPU case reports no launch
difference under `verify --explain` (the diff's own false-alarm check), the sampling kernel draws the CPU
op's numbers, and `--sanitizer initcheck` appends its line. Each failure prints the finding it got.
"""

from __future__ import annotations

import csv
import pathlib
import shutil
import subprocess
import sys

import pytest
import torch

import graphsafe
from graphsafe import Case, CaseError, check, launch_diff, sanitizer
from graphsafe.case import REGISTRY
from graphsafe.cases import launch_params as controls
from graphsafe.launch_diff import Argument, Buffer, Capture, Launch, Word, compare, gpu_launches
from graphsafe.native import LAUNCH_NODES_SOURCE, build

REPO = pathlib.Path(__file__).resolve().parents[1]
KV_APPEND = (
    "_Z9kv_appendPKfS0_PfiiiPKi"  # kv_append(float const*, float const*, float*, int, int, int, int const*)
)


def _int(value: int, size: int = 4) -> bytes:
    return value.to_bytes(size, "little", signed=True)


def _kernel(
    symbol: str,
    args: list[tuple[int, bytes]] | None,
    *,
    grid: tuple[int, int, int] = (8, 1, 1),
    pointers: list[tuple[int, int, int, int]] = (),  # type: ignore[assignment]
    error: str = "",
) -> dict:
    """A kernel node as launch_nodes.hip describes it: args as (size, bytes) laid out one after another at
    their natural alignment."""
    if args is None:
        return {"kind": "kernel", "name": symbol, "function": 1, "grid": grid, "block": (128, 1, 1),
                "shared_bytes": 0, "params": None, "data": b"", "pointers": [], "error": error}  # fmt: skip
    params, data = [], b""
    for size, value in args:
        offset = (len(data) + size - 1) // size * size
        data = data.ljust(offset, b"\0") + value
        params.append((offset, size))
    return {"kind": "kernel", "name": symbol, "function": 1, "grid": grid, "block": (128, 1, 1),
            "shared_bytes": 0, "params": params, "data": data, "pointers": list(pointers), "error": error}  # fmt: skip


def _kv_node(cache: int, out: int, pos: int, *, grid: tuple[int, int, int] = (32, 1, 1)) -> dict:
    """kv_append(cache, new_row, out, rows, dim, pos, pos_dev): pointers at bytes 0, 8, 16."""
    args = [(8, _int(cache, 8)), (8, _int(0x7000, 8)), (8, _int(out, 8)), (4, _int(32)), (4, _int(16)),
            (4, _int(pos)), (8, _int(0, 8))]  # fmt: skip
    pointers = [(0, cache, 0x1000, 0x1000), (8, 0x7000, 0x7000, 0x100), (16, out, out & ~0xFFF, 0x1000)]
    return _kernel(KV_APPEND, args, grid=grid, pointers=pointers)


INPUTS = [Buffer("input", "cache", 0x1000, 0x800)]


def _diff(a: list[dict], b: list[dict], out_a: int = 0x20000, out_b: int = 0x40000) -> launch_diff.LaunchDiff:
    return compare(
        Capture(gpu_launches(a), [*INPUTS, Buffer("output", "0", out_a, 0x800)]),
        Capture(gpu_launches(b), [*INPUTS, Buffer("output", "0", out_b, 0x800)]),
    )


# ------------------------------------------------------------------------------- the comparison (CPU)


def test_names_are_demangled_and_parameter_types_read() -> None:
    signature = launch_diff.demangle(KV_APPEND)
    assert signature.startswith("kv_append(float const*"), signature
    assert launch_diff.short_name(signature) == "kv_append"
    assert launch_diff.parameter_types(signature)[5] == "int"
    assert launch_diff.demangle("_kv_append_triton") == "_kv_append_triton"  # Triton names are plain
    local = launch_diff.demangle(  # as nvcc mangles a kernel in an anonymous namespace
        "_ZN50_GLOBAL__N__f6446b06_17_launch_params_hip_fdcf401c9kv_appendEPKfS1_PfiiiPKi"
    )
    assert launch_diff.short_name(local) == "kv_append", local


def test_identical_launches_differ_in_nothing_though_outputs_move() -> None:
    diff = _diff([_kv_node(0x1000, 0x20000, 5)], [_kv_node(0x1000, 0x40000, 5)])
    assert not diff.differs, diff.lines()
    assert diff.lines()[0] == launch_diff.NO_DIFFERENCE


def test_a_scalar_argument_frozen_at_capture_is_named() -> None:
    diff = _diff([_kv_node(0x1000, 0x20000, 17)], [_kv_node(0x1000, 0x40000, 23)])
    assert diff.differences == [
        "kernel `kv_append` (node 1 of 1): argument 5 (int) is 17 in the graph captured with A, 23 for B "
        "— a value frozen at capture"
    ]


def test_a_grid_from_the_capture_batch_is_named() -> None:
    diff = _diff(
        [_kv_node(0x1000, 0x20000, 5, grid=(8, 1, 1))], [_kv_node(0x1000, 0x40000, 5, grid=(12, 1, 1))]
    )
    assert diff.differences == ["kernel `kv_append` (node 1 of 1): grid (8,1,1) captured, (12,1,1) needed"]


def test_work_only_eager_b_does_is_named_where_it_falls() -> None:
    plan = _kernel("plan_kernel", [(4, _int(1))])
    diff = _diff([_kv_node(0x1000, 0x20000, 5)], [plan, _kv_node(0x1000, 0x40000, 5)])
    assert diff.differences == [
        "eager B runs kernel `plan_kernel` that the graph does not contain (work never recorded)"
    ]
    diff = _diff([plan, _kv_node(0x1000, 0x20000, 5)], [_kv_node(0x1000, 0x40000, 5)])
    assert diff.differences == ["the graph runs kernel `plan_kernel` (node 1 of 2) that eager B does not"]


def test_a_pointer_into_an_input_at_another_offset_is_frozen() -> None:
    diff = _diff([_kv_node(0x1000 + 128, 0x20000, 5)], [_kv_node(0x1000 + 448, 0x40000, 5)])
    assert diff.differences == [
        "kernel `kv_append` (node 1 of 1): argument 0 (float const*) is a pointer into input `cache` at byte 128 "
        "in the graph captured with A, a pointer into input `cache` at byte 448 for B — a pointer frozen at capture"
    ]


def test_pointers_into_each_captures_own_memory_match_by_order_or_are_named_legitimate() -> None:
    def node(work: int, base: int) -> dict:
        return _kernel("_Z4stepPf", [(8, _int(work, 8))], pointers=[(0, work, base, 0x1000)])

    same = _diff(
        [node(0x90010, 0x90000), node(0x91000, 0x91000)], [node(0xA0010, 0xA0000), node(0xA1000, 0xA1000)]
    )
    assert not same.differs and not same.legitimate, same.lines()
    swapped = _diff(
        [node(0x90010, 0x90000), node(0x91000, 0x91000)], [node(0xA1000, 0xA1000), node(0xA0010, 0xA0000)]
    )
    assert not swapped.differs, swapped.lines()
    assert len(swapped.legitimate) == 2 and "workspace pointer" in swapped.legitimate[0]
    assert any(line.startswith("not reported: kernel `step`") for line in swapped.lines())


def test_a_pointer_that_leaves_an_input_for_own_memory_is_reported() -> None:
    a = _kernel("_Z4stepPf", [(8, _int(0x1010, 8))], pointers=[(0, 0x1010, 0x1000, 0x1000)])
    b = _kernel("_Z4stepPf", [(8, _int(0xA0010, 8))], pointers=[(0, 0xA0010, 0xA0000, 0x1000)])
    diff = _diff([a], [b])
    assert diff.differs and "a pointer into input `cache` at byte 16" in diff.differences[0], diff.lines()


def test_no_parameter_layout_is_said_never_guessed() -> None:
    diff = _diff([_kernel("_Z4stepPf", None)], [_kernel("_Z4stepPf", None)])
    assert not diff.differs
    assert diff.uncompared == ["could not compare the arguments of kernel `step`: no parameter layout"]
    failed = "cuFuncGetParamInfo is not available from this driver (CUDA 12.4+)"
    diff = _diff([_kernel("_Z4stepPf", None, error=failed)], [_kernel("_Z4stepPf", None, error=failed)])
    assert diff.uncompared == [f"kernel `step` (node 1 of 1): {failed}"]
    assert f"not compared: kernel `step` (node 1 of 1): {failed}" in diff.lines()


def test_the_finding_round_trips_through_a_detail() -> None:
    diff = _diff([_kv_node(0x1000, 0x20000, 17)], [_kv_node(0x1000, 0x40000, 23)])
    detail = "graph replay vs eager: error 1 (bit-exact); " + diff.detail()
    assert launch_diff.lines_in_detail(detail) == diff.lines()
    assert launch_diff.lines_in_detail("graph replay vs eager: error 1") == []


def test_a_nan_argument_frozen_twice_is_the_same() -> None:
    a = Launch(
        "op", "aten.mul", "aten.mul", arguments=(Argument("argument `other`", (Word(0, float("nan")),)),)
    )
    assert not compare(Capture([a]), Capture([a])).differs


# ---------------------------------------------------------------------- the CPU backend's record diff


def _cpu_controls() -> list[str]:
    return [name for name, (_, cpu) in controls.FINDINGS.items() if cpu is not None]


@pytest.mark.parametrize("name", _cpu_controls())
def test_cpu_controls_are_caught_with_their_finding(name: str) -> None:
    case = REGISTRY.get(name)
    result = check(case, "cpu")
    print(f"{name}: {result.verdict}: {result.detail}")
    assert result.verdict == case.expect == "stale_replay"
    lines = launch_diff.lines_in_detail(result.detail)
    _, wanted = controls.FINDINGS[name]
    assert lines and all(text in lines[0] for text in wanted), lines


@pytest.mark.parametrize("name", [n.replace(".buggy", ".fixed") for n in _cpu_controls()])
def test_cpu_fixed_twins_pass_with_no_launch_difference(name: str) -> None:
    result = check(REGISTRY.get(name), "cpu", explain=True)
    print(f"{name}: {result.verdict}: {result.detail}")
    assert result.verdict == "pass"
    assert launch_diff.lines_in_detail(result.detail)[0] == launch_diff.NO_DIFFERENCE


def test_nothing_extra_runs_for_a_passing_case_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(launch_diff, "explain", lambda *a, **k: calls.append(a) or launch_diff.LaunchDiff())
    result = check(REGISTRY.get("launch_params.op_position.fixed"), "cpu")
    assert result.verdict == "pass" and calls == [] and "launch diff" not in result.detail


def test_a_launch_difference_fails_a_passing_case_only_on_request() -> None:
    """The frozen sampler on peaked distributions: its outputs agree (pass); with launch_diff=True the frozen
    offset is found (stale_replay)."""
    from graphsafe.cases.counterexamples import sglang_omni_419_frozen_sampler_seed as sampler

    outputs_only = sampler.outputs_only(sampler.EXPLAINED_BUGGY)
    assert check(outputs_only, "cpu").verdict == "pass"
    result = check(outputs_only, "cpu", explain=True)
    print(result.detail)
    assert result.verdict == "stale_replay"
    assert "argument `offset`" in launch_diff.lines_in_detail(result.detail)[0]


def test_launch_diff_field_must_be_a_bool() -> None:
    with pytest.raises(CaseError, match="launch_diff"):
        Case("bad.launch_diff", lambda s, d: {}, lambda: None, launch_diff="yes")  # type: ignore[arg-type]


def test_verify_explain_and_sanitizer_flags(tmp_path: pathlib.Path) -> None:
    """`verify --explain` writes the finding into results.csv; `--sanitizer initcheck` on the cpu backend adds
    a one-line note to the first failing case and changes no verdict or exit code."""
    run = subprocess.run(
        [sys.executable, "-m", "graphsafe", "verify", "--backend", "cpu", "--explain", "--sanitizer", "initcheck",
         "-k", "launch_params.op_position", "--no-isolate", "--report-dir", str(tmp_path / "run")],
        capture_output=True, text=True, cwd=REPO, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    rows = list(csv.DictReader((tmp_path / "run" / "results.csv").read_text().splitlines()))
    details = {r["case"]: " ".join(x["detail"] for x in rows if x["case"] == r["case"]) for r in rows}
    assert "launch diff: op `aten.select.int`" in details["launch_params.op_position.buggy"]
    assert "initcheck: not run" in details["launch_params.op_position.buggy"]
    assert "launch diff: no launch difference" in details["launch_params.op_position.fixed"]
    assert "initcheck" not in details["launch_params.op_position.fixed"]


# ------------------------------------------------------------------------------------------ sanitizer

SANITIZER_OUTPUT = """\
========= COMPUTE-SANITIZER
========= Uninitialized __global__ memory read of size 4 bytes
=========     at scale_valid_rows_kernel(const float *, float *, int, const int *)+0x70
=========     by thread (0,0,0) in block (1,0,0)
=========     Address 0x7f00 is out of bounds
========= Uninitialized __global__ memory read of size 4 bytes
=========     at run_plan_kernel(const float *, float *, int, const int *, int, const int *)+0x40
=========     by thread (3,0,0) in block (0,0,0)
graphsafe sanitizer: x: capture with seed 0, replay and eager with seed 1 ran
========= ERROR SUMMARY: 2 errors
"""


def test_sanitizer_output_becomes_one_line() -> None:
    line = sanitizer.summarize("initcheck", SANITIZER_OUTPUT, 0)
    assert line.startswith("initcheck: 2 errors in the rerun; first: Uninitialized __global__ memory read")
    assert "at scale_valid_rows_kernel(" in line and "by thread (0,0,0) in block (1,0,0)" in line
    assert "initcheck: 0 errors" in sanitizer.summarize("initcheck", "========= ERROR SUMMARY: 0 errors\n", 0)
    assert "no summary: Traceback" in sanitizer.summarize("initcheck", "boom\nTraceback\n", 1)


def test_sanitizer_without_the_tool_is_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    result = graphsafe.Result("c", "pass", "stale_replay", "gpu", [], "graph replay vs eager: error 1")
    monkeypatch.setattr(sanitizer, "find_tool", lambda: None)
    monkeypatch.setattr(torch.version, "hip", None)
    line = sanitizer.second_opinion(result, "initcheck", "gpu", [])
    assert line.startswith("initcheck: not run: compute-sanitizer is not installed")
    sanitizer.annotate(result, line)
    assert result.detail == f"graph replay vs eager: error 1; {line}"


# ------------------------------------------------------------------------------------ native builds


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_launch_nodes_compiles_with_nvcc_for_sm_90(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GRAPHSAFE_CACHE_DIR", str(tmp_path))
    module = build.build_extension(
        "graphsafe_launch_nodes", [LAUNCH_NODES_SOURCE], backend="cuda", arch="sm_90"
    )
    with pytest.raises(ValueError, match="graph handle is null"):  # imported: cudart is linked statically
        module.launch_nodes(0)


@pytest.mark.skipif(shutil.which("hipcc") is None, reason="hipcc not installed")
def test_launch_nodes_compiles_with_hipcc_for_gfx90a(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sysconfig

    import pybind11

    monkeypatch.setenv("GRAPHSAFE_CACHE_DIR", str(tmp_path))
    library = build.build_shared_library(
        "graphsafe_launch_nodes",
        [LAUNCH_NODES_SOURCE],
        [pybind11.get_include(), sysconfig.get_paths()["include"]],
        backend="hip",
        arch="gfx90a",
    )
    assert library.is_file()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_launch_params_family_compiles_with_nvcc_for_sm_90(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from graphsafe.kernels.common import native

    monkeypatch.setenv("GRAPHSAFE_CACHE_DIR", str(tmp_path))
    module = native.build(controls.L.FAMILY_DIR, "launch_params", "cuda", arch="sm_90")
    assert module.ROWS_PER_BLOCK == 4
    for seed, offset, row in ((123, 12847, 0), (0, 0, 7), (2**40 + 3, 2**33 + 5, 5)):  # host twin of the draw
        assert module.philox_uniform(seed, offset, row) == controls.L.philox_uniform(seed, offset, row)


# ------------------------------------------------------------------------------------------------ GPU


def _gpu_controls() -> list[str]:
    return [name for name, (gpu, _) in controls.FINDINGS.items() if gpu is not None]


@pytest.mark.gpu
@pytest.mark.parametrize("name", _gpu_controls())
def test_gpu_controls_are_caught_with_their_finding(name: str) -> None:
    case = REGISTRY.get(name)
    result = check(case, "gpu")
    print(f"{name}: {result.verdict}: {result.detail}")
    assert result.verdict == case.expect == "stale_replay", result.detail
    lines = launch_diff.lines_in_detail(result.detail)
    wanted, _ = controls.FINDINGS[name]
    assert lines and all(text in lines[0] for text in wanted), f"wanted {wanted} in the first line of {lines}"


@pytest.mark.gpu
@pytest.mark.parametrize("name", [n.replace(".buggy", ".fixed") for n in _gpu_controls()])
def test_gpu_fixed_twins_pass_with_no_launch_difference(name: str) -> None:
    result = check(REGISTRY.get(name), "gpu", explain=True)
    print(f"{name}: {result.verdict}: {result.detail}")
    assert result.verdict == "pass", result.detail
    assert launch_diff.lines_in_detail(result.detail)[0] == launch_diff.NO_DIFFERENCE, result.detail


@pytest.mark.gpu
def test_gpu_sampling_kernel_draws_the_cpu_ops_numbers() -> None:
    probs = torch.softmax(torch.randn(8, 64, generator=torch.Generator().manual_seed(5)), dim=-1)
    for seed, offset in ((123, 12847), (7, 2**33 + 1)):
        on_cpu = controls.L.sample_rows(probs, None, seed, offset)
        on_gpu = controls.L.sample_rows(probs.cuda(), None, seed, offset).cpu()
        assert torch.equal(on_cpu, on_gpu), (on_cpu, on_gpu)
        for row in range(8):
            assert controls.L.lib().philox_uniform(seed, offset, row) == controls.L.philox_uniform(
                seed, offset, row
            )


@pytest.mark.gpu
def test_gpu_launch_nodes_describe_a_kernel() -> None:
    """A captured kv_append: its name, grid, seven parameters, and its three pointers in allocations."""
    from graphsafe.backends import get_backend

    be = get_backend("gpu")
    cache, new_row = torch.randn(32, 16, device="cuda"), torch.randn(16, device="cuda")
    graph = be.capture(lambda: controls.L.kv_append(cache, new_row, pos=5, pos_dev=None))
    try:
        records = graph.launch_nodes()
        kernels = [r for r in records if r["kind"] == "kernel" and "kv_append" in r["name"]]
        assert len(kernels) == 1, records
        node = gpu_launches(kernels)[0]
        print(node)
        assert node.name == "kv_append" and node.grid == (32, 1, 1) and node.block == (16, 1, 1)
        assert node.arguments is not None and len(node.arguments) == 7
        assert node.arguments[5].words[0].value == _int(5)
        assert node.arguments[0].words[0].pointer == cache.data_ptr()
        assert node.arguments[6].words[0].pointer is None  # a null pointer is a value
    finally:
        graph.release()


@pytest.mark.gpu
def test_gpu_counterexample_is_caught_only_by_the_launch_diff() -> None:
    from graphsafe.cases.counterexamples import sglang_omni_419_frozen_sampler_seed as sampler

    plain = check(sampler.outputs_only(sampler.EXPLAINED_BUGGY), "gpu")
    print(f"outputs only: {plain.verdict}: {plain.detail}")
    assert plain.verdict == "pass"
    explained = check(sampler.EXPLAINED_BUGGY, "gpu")
    print(f"launch diff: {explained.verdict}: {explained.detail}")
    assert explained.verdict == "stale_replay"
    assert "kernel `sample_rows`" in launch_diff.lines_in_detail(explained.detail)[0]
    assert check(sampler.EXPLAINED_FIXED, "gpu").verdict == "pass"


@pytest.mark.gpu
def test_gpu_explain_reports_no_launch_difference_for_every_passing_builtin_case(
    tmp_path: pathlib.Path,
) -> None:
    """The launch diff's false-alarm check: `verify --explain` over the built-in suite on the GPU; every case
    expected to pass still passes, with "no launch difference" (named legitimate differences allowed)."""
    run = subprocess.run(
        [sys.executable, "-m", "graphsafe", "verify", "--backend", "gpu", "--explain", "--jobs", "auto",
         "--report-dir", str(tmp_path / "run")],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=1800,
    )  # fmt: skip
    print(run.stdout[-4000:], run.stderr[-4000:])
    rows = list(csv.DictReader(
        line for line in (tmp_path / "run" / "results.csv").read_text().splitlines() if not line.startswith("#")
    ))  # fmt: skip
    expected_pass = {r["case"] for r in rows if r["expected"] == "pass"}
    offenders, unverified, clean = {}, {}, 0
    for name in sorted(expected_pass):
        mine = [r for r in rows if r["case"] == name]
        findings = [f for f in (launch_diff.lines_in_detail(r["detail"]) for r in mine) if f]
        verdict = mine[0]["verdict"]
        first = findings[0][0] if findings else ""
        if verdict == "pass" and first == launch_diff.NO_DIFFERENCE:
            clean += 1
        elif verdict == "pass" and (not first or first.startswith(("not run:", "could not be made:"))):
            unverified[name] = first or "no launch-diff line (a size search that passed every size)"
        else:
            offenders[name] = (verdict, findings[0] if findings else [])
    for name, why in unverified.items():
        print(f"not compared: {name}: {why}")
    for name, (verdict, lines) in offenders.items():
        print(f"FALSE ALARM? {name}: {verdict}: {lines}")
    print(f"{clean} of {len(expected_pass)} passing cases: no launch difference")
    assert not offenders, f"{len(offenders)} of {len(expected_pass)} passing cases: {sorted(offenders)}"
    # A diff that could never be made (no compiler, an old driver) must not pass this check by default.
    assert clean >= 0.8 * len(expected_pass), (
        f"only {clean} of {len(expected_pass)} passing cases were compared"
    )


@pytest.mark.gpu
def test_gpu_sanitizer_second_opinion_is_a_line() -> None:
    result = check(REGISTRY.get("launch_params.kernel_grid.buggy"), "gpu")
    line = sanitizer.second_opinion(result, "initcheck", "gpu", [])
    print(line)
    assert line.startswith("initcheck: ")
    if sanitizer.find_tool() is not None:
        assert "error" in line, line  # it ran: a count of errors, or why it ended without a summary
