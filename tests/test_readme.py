"""README.md is run, not trusted: its case files are run and print the failures it shows, its tables that the
code generates are the code's, every `graphsafe` and `make` line it shows parses, and its configuration
example loads. A README that drifts from the tool fails here, not in a user's first five minutes."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from graphsafe import cli, config, environment, findings

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)


def _blocks(lang: str) -> list[str]:
    return [body for kind, body in FENCE.findall(README.read_text(encoding="utf-8")) if kind == lang]


def _between_markers(name: str) -> str:
    text = README.read_text(encoding="utf-8")
    found = re.search(rf"^<!-- {name}: [^\n]*-->\n(.*?)^<!-- /{name} -->$", text, re.S | re.M)
    assert found, f"README.md has no <!-- {name}: ... --> ... <!-- /{name} --> section"
    return found.group(1).strip()


def _case_files() -> list[tuple[str, str, str]]:
    """(file name, source, the text block after it that shows its failure) for each README python block
    that opens with `# <name>.py`."""
    text = README.read_text(encoding="utf-8")
    fences = [(m.group(1), m.group(2)) for m in FENCE.finditer(text)]
    found = []
    for i, (kind, body) in enumerate(fences):
        named = re.match(r"# (\w+\.py)\n", body)
        if kind == "python" and named:
            shown = next((b for k, b in fences[i + 1 :] if k == "text"), "")
            found.append((named.group(1), body, shown))
    return found


def test_the_cause_table_is_the_one_findings_uses() -> None:
    """Method: the README's cause table against graphsafe.findings.causes_markdown(). Expected: equal, so a
    failure's "likely cause" line and the README's table never disagree."""
    assert _between_markers("causes") == findings.causes_markdown().strip()


def test_the_environment_table_is_the_one_graphsafe_checks() -> None:
    assert _between_markers("environment") == environment.markdown_table().strip()


def test_the_exit_code_table_lists_every_exit_code_the_cli_has() -> None:
    """Method: the codes in the README's exit-code table against 0 and every EXIT_* constant of graphsafe.cli.
    Expected: the same set."""
    shown = {int(code) for code in re.findall(r"^\| (\d+) \|", _between_markers("exit codes"), re.M)}
    defined = {0} | {value for name, value in vars(cli).items() if name.startswith("EXIT_")}
    assert shown == defined


def _command_lines() -> list[str]:
    """Every `graphsafe ...` command shown in a shell or YAML block, continuation lines joined, comments,
    environment assignments and `|| ...` tails removed."""
    commands = []
    for body in _blocks("sh") + _blocks("yaml"):
        for line in body.replace("\\\n", " ").splitlines():
            line = re.sub(r"^\s*(- )?(run: )?", "", line)
            line = re.sub(r"^(\w+=\S+ )+", "", line)
            line = line.split(" #", 1)[0].split(" || ", 1)[0].strip()
            if line.startswith("graphsafe "):
                commands.append(line)
    return commands


def test_every_graphsafe_command_shown_parses() -> None:
    """Method: each `graphsafe ...` line of the README through graphsafe's own argument parser. Expected: no
    usage error (an unknown flag, a bad choice), and more than a handful of lines checked."""
    lines = _command_lines()
    assert len(lines) >= 5, lines
    parser = cli.build_parser(config.Settings(path=None))
    for line in lines:
        argv = shlex.split(line)[1:]
        try:
            parser.parse_args(argv)
        except SystemExit as exc:  # --version prints and exits 0
            if exc.code == 0:
                continue
            pytest.fail(f"README command does not parse (exit {exc.code}): {line}")


def test_every_make_target_shown_exists() -> None:
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M))
    shown = {m for body in _blocks("sh") for m in re.findall(r"^make ([\w-]+)", body, re.M)}
    assert shown and shown <= targets, shown - targets


def test_the_configuration_example_loads(tmp_path: Path) -> None:
    """Method: the README's [tool.graphsafe] block as a pyproject.toml, read by graphsafe's loader.
    Expected: no error, and its case path resolved against the file's folder."""
    (toml,) = _blocks("toml")
    (tmp_path / "pyproject.toml").write_text(toml, encoding="utf-8")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "graph_cases.py").write_text(
        "", encoding="utf-8"
    )  # the table names it: it must exist
    settings = config.load(tmp_path)
    assert settings.path == (tmp_path / "pyproject.toml").resolve()
    assert [str(c) for c in settings.cases] == [str(tmp_path.resolve() / "tests" / "graph_cases.py")]


def test_every_python_block_compiles() -> None:
    blocks = _blocks("python")
    assert blocks
    for body in blocks:
        compile(body, "README.md", "exec")


def _normalise(line: str) -> str:
    # The run's length and its folder's name differ from run to run.
    line = re.sub(r" in [0-9.]+s; report: ", " in <time>; report: ", line)
    return re.sub(r"report: graphsafe-runs/\S+$", "report: graphsafe-runs/<run>", line.rstrip())


@pytest.mark.slow
@pytest.mark.parametrize("name", [name for name, _, _ in _case_files()])
def test_each_case_file_prints_the_failure_the_readme_shows(name: str, tmp_path: Path) -> None:
    """Method: write the README's case file into an empty folder and run `graphsafe verify --backend cpu
    --case FILE` there. Expected: exit 1 (one buggy case, one fixed twin), and every line of the failure the
    README shows after the file is printed, in that order."""
    source, shown = next((s, t) for n, s, t in _case_files() if n == name)
    (tmp_path / name).write_text(source, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHSAFE_", "HYPOTHESIS_"))}
    env["GRAPHSAFE_CACHE_DIR"] = os.environ.get("GRAPHSAFE_CACHE_DIR", str(tmp_path / "cache"))
    run = subprocess.run(
        [sys.executable, "-m", "graphsafe", "verify", "--backend", "cpu", "--case", name],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    printed = [_normalise(line) for line in run.stdout.splitlines()]
    expected = [_normalise(line) for line in shown.splitlines()]
    assert expected, f"README shows no output after {name}"
    at = 0
    for line in expected:
        assert line in printed[at:], (
            f"README line not printed (in this order):\n{line}\n\nprinted:\n{run.stdout}"
        )
        at = printed.index(line, at) + 1


def test_every_test_the_readme_cites_exists() -> None:
    """Method: each `test_...` name in the README against the test functions of tests/. Expected: every one
    exists, so a guarantee of "What a run survives" always points at the test that proves it."""
    cited = set(re.findall(r"`(test_\w+)`", README.read_text(encoding="utf-8")))
    defined = {
        name
        for path in (ROOT / "tests").glob("test_*.py")
        for name in re.findall(r"^def (test_\w+)\(", path.read_text(encoding="utf-8"), re.M)
    }
    assert len(cited) >= 10, cited
    assert cited <= defined, sorted(cited - defined)
