"""Named mutants of the detectors and verdict rules: each must be killed by a test AND by the built-in controls.

`make mutants` (or `python tests/mutants.py [--report FILE] [NAME ...]`) copies the working tree to a
temporary directory, checks that the killing tests pass and every control gets its expected verdict there
unmutated (a kill of a check that already fails would prove nothing), then for each mutant applies one
targeted text replacement and runs
  * its killing tests (pytest): killed when they fail;
  * `graphsafe verify --backend cpu` on the control modules (cases/controls.py,
    cases/trust_controls.py): killed when some case no longer gets its expected verdict, or verify exits
    non-zero (its read-back of results.csv fails a writer that records another verdict or status).
It prints both counts ("N of M killed by tests, K of M by the built-in suite") and names each mutant the
suite did not kill, with the reason where it cannot.
A replacement that does not match exactly once fails the run: the detector moved and its mutant must follow.

Why a script of named mutants and not a mutation-testing library (mutmut, cosmic-ray): those generate every
operator swap in the files they are pointed at, thousands for harness/protocol.py alone, and rerun the tests
for each; at 10-30 s per run on CPU that is hours. What the project needs is narrower and stronger: one
mutant per detector and verdict rule, each removing exactly what that rule exists for, checked by both the
unit tests and the built-in negative controls: 32 mutants in 42 minutes on a 2-core CPU shared with other
jobs (load average 8-18), 10-60 s each after the unmutated tree's checks.

`suite=False` marks mutants that the built-in suite cannot kill on the cpu backend, with the reason.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CONTROL_MODULES = ("graphsafe.cases.controls", "graphsafe.cases.trust_controls")


@dataclass(frozen=True)
class Mutant:
    name: str
    rule: str  # the detector or verdict rule this mutant switches off
    path: str
    old: str
    new: str
    tests: tuple[str, ...]  # pytest arguments: files or node ids, optionally with -k
    suite: bool = True  # expected to be killed by the built-in controls on the cpu backend
    why_not_suite: str = ""
    more: tuple[tuple[str, str, str], ...] = ()  # further (path, old, new) edits of the same mutant

    def edits(self) -> tuple[tuple[str, str, str], ...]:
        return ((self.path, self.old, self.new), *self.more)


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "no_reference_graph_vs_itself",
        "graph replay vs eager compares the graph with itself (the old no-reference survivor)",
        "harness/verdict_rules.py",
        "groups = [list(zip(graph_out, eager_out, replay_thresholds, strict=True))]",
        "groups = [list(zip(graph_out, graph_out, replay_thresholds, strict=True))]",
        ("tests/test_trust.py", "-k", "stale_scale"),
    ),
    Mutant(
        "verdict_from_last_row",
        "the case verdict is the worst row, not the last (the old survivor)",
        "harness/protocol.py",
        "verdict = V.worst([r.row_verdict for r in rows])",
        "verdict = rows[-1].row_verdict",
        ("tests/test_trust.py", "-k", "worst_row"),
    ),
    Mutant(
        "output_poisoning_off",
        "graph outputs are poisoned before each replay",
        "harness/poison.py",
        '    """Overwrite every graph output before a replay so that only what the replay writes survives."""\n',
        '    """Overwrite every graph output before a replay so that only what the replay writes survives."""\n'
        "    return\n",
        ("tests/test_protocol.py", "-k", "not_written_by_replay"),
    ),
    Mutant(
        "nan_counting_off",
        "NaN/Inf where a finite value is expected is counted (never a wildcard)",
        "harness/scan.py",
        "        nonfinite_mask = ~torch.isfinite(out) & torch.isfinite(ref)\n",
        "        nonfinite_mask = torch.zeros(out.shape, dtype=torch.bool, device=out.device)\n",
        ("tests/test_compare.py", "-k", "nan or inf"),
        more=(("harness/scan.py", "nonfinite = int((~torch.isfinite(flat)).sum())", "nonfinite = 0"),),
    ),
    Mutant(
        "poison_pattern_check_off",
        "finite poison bit patterns (0x7F fills, -1, INT_MAX) are counted",
        "harness/compare.py",
        "    if dtype.is_complex:\n        # Compared as",
        "    return ()\n    if dtype.is_complex:\n        # Compared as",
        ("tests/test_compare.py", "-k", "poison"),
    ),
    Mutant(
        "host_sync_detection_off",
        "the cpu backend refuses host syncs under capture",
        "harness/backends/cpu.py",
        "    rule = SYNC_RULES.get(func)\n    return rule(args, kwargs) if rule is not None else None",
        "    return None",
        ("tests/test_controls.py", "-k", "item_in_routing"),
    ),
    Mutant(
        "input_modification_check_off",
        "an undeclared write to an input is eager_mismatch",
        "harness/verdict_rules.py",
        "modified = sorted({name for name, d in zip(names, differ, strict=True) if d})",
        "modified: list[str] = []",
        ("tests/test_controls.py", "-k", "modifies_input"),
    ),
    Mutant(
        "ab_differ_check_off",
        "inputs A and B must differ (else a stale replay is invisible)",
        "harness/verdict_rules.py",
        "    for (seed_b, name), d in zip(checked, differ, strict=True):\n        if not d:",
        "    for (seed_b, name), d in zip(checked, differ, strict=True):\n        if False:",
        ("tests/test_protocol.py", "-k", "bad_inputs"),
        suite=False,
        why_not_suite="the check raises a case-definition error (exit 2), which no registered case can expect",
    ),
    Mutant(
        "byte_fill_off",
        "empty* results hold the pattern's bytes (the cpu backend's scope, the op's calls on the gpu backend)",
        "harness/poison.py",
        "            fill_bytes(result, self.pattern)",
        "            pass",
        ("tests/test_trust.py", "-k", "finite_poison_pattern or fmax"),
    ),
    Mutant(
        "own_generators_off",
        "replay and eager also start from the same state of the op's own generators (generator=g)",
        "harness/protocol.py",
        "be.generators_followed(op_generators(case.op))",
        "be.generators_followed(())",
        ("tests/test_trust.py", "-k", "own_generator"),
    ),
    Mutant(
        "deadline_off",
        "a case past its deadline is killed and gets timeout",
        "harness/runner.py",
        "elif case is not None and deadline is not None and now - worker.started > deadline:",
        "elif False:",
        ("tests/test_trust.py", "-k", "deadline"),
    ),
    Mutant(
        "replay_vs_eager_decides_off",
        "graph replay vs eager decides the verdict (bit-exact unless declared)",
        "harness/verdict_rules.py",
        "    elif not vs_eager.ok:\n",
        "    elif False:\n",
        ("tests/test_trust.py", "-k", "stale_scale or tolerance"),
    ),
    Mutant(
        "hidden_state_probe_off",
        "eager B before A vs eager B after capture and replay",
        "harness/protocol.py",
        "probed = _fresh_eager(case, be, inputs_b[0], rng_start) if probe_hidden_state else None",
        "probed = None",
        ("tests/test_trust.py", "-k", "first_call_cache or leaked"),
    ),
    Mutant(
        "python_state_restore_off",
        "the probe's changes to the op's Python state are undone (so A stays the op's first call)",
        "harness/hidden_state.py",
        "    def restore(self) -> None:\n",
        "    def restore(self) -> None:\n        return\n",
        ("tests/test_trust.py", "-k", "first_call_cache or leaked or restore"),
    ),
    Mutant(
        "leak_explained_off",
        "eager mismatches after a leak are named as the leak (stale_replay)",
        "harness/protocol.py",
        "    if not any(r.detail.startswith(LEAK_DETAIL) for r in rows):\n        return\n",
        "    return\n",
        ("tests/test_trust.py", "-k", "first_call_cache_with_reference"),
    ),
    Mutant(
        "rng_restore_off",
        "replay and eager start from the same generator state",
        "harness/backends/base.py",
        "    def set_rng_state(self, state: tuple[torch.Tensor, ...]) -> None:\n",
        "    def set_rng_state(self, state: tuple[torch.Tensor, ...]) -> None:\n        return\n",
        ("tests/test_trust.py", "-k", "sampling or dropout"),
    ),
    Mutant(
        "replay_error_is_crash",
        "an exception at replay is replay_error, not crash",
        "harness/verdict_rules.py",
        "    made = row(\n        V.REPLAY_ERROR,\n        replay_index,",
        "    made = row(\n        V.CRASH,\n        replay_index,",
        ("tests/test_trust.py", "-k", "replay_error"),
        suite=False,
        why_not_suite="no built-in case raises at replay on both backends (the cpu-only TransformerEncoder "
        "padding-mask case belongs to the real-world suite)",
    ),
    Mutant(
        "pageable_copy_is_capture_error",
        "a copy to pageable memory under capture is capture_sync",
        "harness/backends/gpu.py",
        '    r"|Cannot copy between CPU and CUDA tensors during CUDA graph capture"\n',
        "",
        ("tests/test_trust.py", "-k", "pageable"),
        suite=False,
        why_not_suite="the message exists on CUDA only; control_bincount_under_capture kills it on the H200",
    ),
    Mutant(
        "first_output_only",
        "every output of a row is compared, not only the first (an op returning a tuple)",
        "harness/verdict_rules.py",
        "done = [_worst(flat[i * len(eager_out) : (i + 1) * len(eager_out)]) for i in range(len(groups))]",
        "done = [_worst(flat[i * len(eager_out) : i * len(eager_out) + 1]) for i in range(len(groups))]",
        ("tests/test_controls.py", "-k", "one_of_three or three_outputs"),
    ),
    Mutant(
        "bf16_threshold_times_ten",
        "bf16 outputs are held to 0.02, not only to gross errors",
        "harness/compare.py",
        "    torch.bfloat16: 2e-2,\n",
        "    torch.bfloat16: 2e-1,\n",
        ("tests/test_compare.py", "tests/test_controls.py", "-k", "default_thresholds or bf16"),
    ),
    Mutant(
        "int_outputs_under_float_tolerance",
        "integer outputs stay bit-exact when the case declares a float tolerance",
        "harness/verdict_rules.py",
        "    if case.bit_exact or not (out.dtype.is_floating_point or out.dtype.is_complex):\n",
        "    if case.bit_exact:\n",
        ("tests/test_controls.py", "-k", "int_ids or int_control"),
    ),
    Mutant(
        "torch_path_ignores_nan",
        "the scan's torch path (float64, non-contiguous outputs) sees NaN in its reductions",
        "harness/scan.py",
        "    low, high = torch.aminmax(t)\n",
        "    low, high = torch.aminmax(t.nan_to_num(nan=0.0))\n",
        ("tests/test_trust.py", "-k", "nan_in"),
    ),
    Mutant(
        "torch_path_finite_check_off",
        "a non-finite maximum in the scan's torch path goes to the exact pass, which counts the NaN",
        "harness/scan.py",
        "    if not (math.isfinite(max_diff) and math.isfinite(max_ref)):\n        return None\n",
        "",
        ("tests/test_trust.py", "-k", "nan_in"),
    ),
    Mutant(
        "int_max_poison_off",
        "an integer output holding the dtype's max (what output poisoning writes) is unwritten",
        "harness/compare.py",
        "        values.add(torch.iinfo(dtype).max)\n",
        "        pass\n",
        ("tests/test_compare.py", "tests/test_trust.py", "-k", "int_poison or int_output_written_once"),
    ),
    Mutant(
        "int_minus_one_poison_off",
        "an integer output holding -1 (0xFF bytes) where the reference does not is unwritten",
        "harness/compare.py",
        "    for byte in (0xFF, 0x7F):\n",
        "    for byte in (0x7F,):\n",
        ("tests/test_trust.py", "-k", "0xff_only"),
    ),
    Mutant(
        "tensor_state_restore_off",
        "the hidden-state probe puts back the values of tensors the op wrote in place",
        "harness/hidden_state.py",
        "                self._tensors.append((value, value.detach().clone(), where))\n",
        "                pass\n",
        ("tests/test_trust.py", "-k", "restore_undoes or tensor_state or in_tensor"),
    ),
    Mutant(
        "boolean_mask_index_not_sync",
        "boolean-mask indexing under capture is capture_sync on the cpu backend",
        "harness/backends/cpu.py",
        '            return "boolean-mask indexing calls nonzero (a data-dependent output shape)"\n',
        "            return None\n",
        ("tests/test_cpu_backend.py", "tests/test_controls.py", "-k", "boolean_mask"),
    ),
    Mutant(
        "status_column_always_ok",
        "results.csv's status column says FAIL where a verdict differs from its expectation",
        "harness/reports/results.py",
        '        status = "ok" if result.ok else "FAIL"\n',
        '        status = "ok"\n',
        ("tests/test_results_readback.py", "-k", "writer_records"),
    ),
    Mutant(
        "verdict_column_is_expected",
        "results.csv's verdict column holds the verdict the case got, not the one it expected",
        "harness/reports/results.py",
        "record.update(verdict=result.verdict, expected=result.expected, status=status)",
        "record.update(verdict=result.expected, expected=result.expected, status=status)",
        ("tests/test_results_readback.py", "-k", "writer_records"),
    ),
    Mutant(
        "results_read_back_off",
        "verify reads its results.csv back and checks its writer on a known failure (exit 3 on a disagreement)",
        "harness/cli.py",
        "    misrecorded = check_written(run_dir, results)\n",
        "    misrecorded: list[str] = []\n",
        ("tests/test_results_readback.py", "-k", "disagrees"),
        suite=False,
        why_not_suite="equivalent for the suite: with an honest writer there is nothing to find; the writer's "
        "mutants above show it biting",
    ),
    Mutant(
        "unsupported_output_not_case_error",
        "an output the harness cannot compare is a CaseError on `op`",
        "harness/verdict_rules.py",
        '            raise CaseError(case.name, "op", str(cause)) from exc\n',
        "            break\n",
        ("tests/test_trust.py", "-k", "cannot_compare"),
        suite=False,
        why_not_suite="a case-definition error stops the run (exit 2): no registered case can expect it",
    ),
    Mutant(
        "uncallable_op_not_case_error",
        "an op that cannot take its inputs is a CaseError on `op`, not `refused`",
        "harness/verdict_rules.py",
        "        signature.bind(**inputs)\n",
        "        pass\n",
        ("tests/test_trust.py", "-k", "cannot_take_its_inputs"),
        suite=False,
        why_not_suite="a case-definition error stops the run (exit 2): no registered case can expect it",
    ),
)


def _copy_tree(dest: Path, ref: str | None) -> None:
    """The working tree (tracked and untracked, not ignored), or the commit `ref` when given."""
    if ref is not None:
        dest.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", ref], cwd=REPO, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        return
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout.splitlines()
    for rel in files:
        src = REPO / rel
        if not src.is_file():  # deleted in the working tree, or a submodule
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)


def _import_root(tree: Path) -> Path:
    """A folder where `graphsafe` is the copy's harness/ with its kernels/ and cases/ as graphsafe.kernels and
    graphsafe.cases (the layout `make setup`'s editable install gives the checkout). On PYTHONPATH it is found
    before that install's finder, which comes last on sys.meta_path: the mutated copy is what runs."""
    package = tree.parent / f"{tree.name}-import" / "graphsafe"  # beside the tree: copying a tree copies none
    if not package.is_dir():
        package.mkdir(parents=True)
        for entry in (tree / "harness").iterdir():
            if entry.name != "__pycache__":
                (package / entry.name).symlink_to(entry)
        for name in ("kernels", "cases"):
            (package / name).symlink_to(tree / name)
    return package.parent


def _env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(_import_root(tree))
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _run_tests(tree: Path, args: tuple[str, ...]) -> tuple[bool, str]:
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-n", "0", *args]
    proc = subprocess.run(cmd, cwd=tree, env=_env(tree), capture_output=True, text=True, timeout=600)
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    errors = [line[:300] for line in lines if line.startswith(("E ", "ERROR", "FAILED"))]
    return proc.returncode == 0, " / ".join(errors[-3:]) or (lines[-1][:300] if lines else "")


def _run_controls(tree: Path) -> tuple[bool, list[str]]:
    """(every control got its expected verdict, the cases that did not)."""
    report = tree / "_mutant_run"
    shutil.rmtree(report, ignore_errors=True)
    cmd = [sys.executable, "-m", "graphsafe", "verify", "--backend", "cpu", "--report-dir", str(report)]
    for module in CONTROL_MODULES:
        cmd += ["--case", module]
    proc = subprocess.run(cmd, cwd=tree, env=_env(tree), capture_output=True, text=True, timeout=900)
    results = report / "results.csv"
    if not results.exists():
        return False, [f"verify exited {proc.returncode} without results: {proc.stderr.strip()[-300:]}"]
    wrong: dict[str, str] = {}
    with results.open() as fh:
        for row in csv.DictReader(fh):
            if row["verdict"] != row["expected"]:
                wrong[row["case"]] = f"{row['case']} ({row['verdict']}, expected {row['expected']})"
    found = sorted(wrong.values())
    if (
        proc.returncode != 0 and not found
    ):  # e.g. its read-back of results.csv (exit 3) found the writer lying
        last = proc.stderr.strip().splitlines()[-1:] or [""]
        found = [f"verify exited {proc.returncode}: {last[0][:300]}"]
    return not wrong and proc.returncode == 0, found


def _apply(tree: Path, mutant: Mutant) -> None:
    for rel, old, new in mutant.edits():
        path = tree / rel
        text = path.read_text()
        count = text.count(old)
        if count != 1:
            raise SystemExit(f"mutant {mutant.name}: its target text occurs {count} times in {rel}")
        path.write_text(text.replace(old, new))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--report", type=Path, help="also write the Markdown table here")
    parser.add_argument("--ref", help="mutate this commit (git archive) instead of the working tree")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.names or m.name in args.names]
    unknown = set(args.names) - {m.name for m in MUTANTS}
    if unknown:
        parser.error(f"unknown mutants {sorted(unknown)}; known: {', '.join(m.name for m in MUTANTS)}")

    with tempfile.TemporaryDirectory(prefix="graphsafe-mutants-") as tmp:
        base = Path(tmp) / "base"
        _copy_tree(base, args.ref)
        for mutant in chosen:  # every target must exist before anything runs
            for rel, old, _ in mutant.edits():
                if (base / rel).read_text().count(old) != 1:
                    raise SystemExit(f"mutant {mutant.name}: target text not found exactly once in {rel}")
        print("unmutated tree: killing tests and controls must pass first", flush=True)
        failures = []
        for mutant in chosen:
            ok, last = _run_tests(base, mutant.tests)
            if not ok:
                failures.append(f"{mutant.name}: {' '.join(mutant.tests)}: {last}")
        controls_ok, wrong = _run_controls(base)
        if failures or not controls_ok:
            print("the unmutated tree fails; mutants would prove nothing:", *failures, *wrong, sep="\n  ")
            return 2

        rows = []
        for mutant in chosen:
            start = time.monotonic()
            tree = Path(tmp) / mutant.name
            shutil.copytree(base, tree)
            _apply(tree, mutant)
            tests_pass, last = _run_tests(tree, mutant.tests)
            controls_pass, wrong = _run_controls(tree) if mutant.suite else (True, [])
            shutil.rmtree(tree, ignore_errors=True)
            killed_by_test = not tests_pass
            killed_by_suite = not controls_pass
            ok = killed_by_test and (killed_by_suite or not mutant.suite)
            rows.append((mutant, killed_by_test, killed_by_suite, wrong, ok))
            print(
                f"{mutant.name:<36} test {'killed' if killed_by_test else 'SURVIVED'}; suite "
                f"{('killed' if killed_by_suite else 'SURVIVED') if mutant.suite else 'n/a'}"
                f" ({time.monotonic() - start:.0f} s) {'; '.join(wrong[:3])}",
                flush=True,
            )

    table = [
        "| mutant | rule switched off | killing tests | test | built-in controls | controls with a wrong verdict |",
        "|---|---|---|---|---|---|",
    ]
    for mutant, by_test, by_suite, wrong, _ in rows:
        suite_cell = (
            ("killed" if by_suite else "**survived**") if mutant.suite else f"n/a: {mutant.why_not_suite}"
        )
        table.append(
            f"| `{mutant.name}` | {mutant.rule} | `{' '.join(mutant.tests)}` | "
            f"{'killed' if by_test else '**survived**'} | {suite_cell} | {', '.join(wrong) or '-'} |"
        )
    text = "\n".join(table) + "\n\n" + summary(rows) + "\n"
    print(text)
    if args.report:
        args.report.write_text(text)
    return 0 if all(ok for *_, ok in rows) else 1


def summary(rows: list[tuple[Mutant, bool, bool, list[str], bool]]) -> str:
    """Both counts, then each mutant the built-in suite did not kill: a survivor, or one it cannot reach
    (with the reason)."""
    total = len(rows)
    by_tests = sum(by_test for _, by_test, *_ in rows)
    by_suite = sum(by_suite and mutant.suite for mutant, _, by_suite, *_ in rows)
    line = f"{by_tests} of {total} killed by tests, {by_suite} of {total} by the built-in suite"
    not_by_suite = [
        f"{mutant.name} ({mutant.why_not_suite})" if not mutant.suite else f"{mutant.name} (SURVIVED)"
        for mutant, _, by_suite, *_ in rows
        if not (by_suite and mutant.suite)
    ]
    if not_by_suite:
        line += "; not killed by the suite: " + "; ".join(not_by_suite)
    survived_tests = [mutant.name for mutant, by_test, *_ in rows if not by_test]
    if survived_tests:
        line += "; SURVIVED the tests: " + ", ".join(survived_tests)
    return line


if __name__ == "__main__":
    sys.exit(main())
