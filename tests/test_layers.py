"""The import rules of the repository's layers, read from every module's import statements (function-level
imports included).

- graphsafe is the only top-level name: no module imports `harness`, `kernels` or `cases`, the checkout's folder
  names, which an installed graphsafe does not have (such an import works here and breaks for users).
- Imports run one way: cases -> kernels -> harness. The harness (graphsafe itself) imports neither
  graphsafe.kernels nor graphsafe.cases; kernels import no case module.
- kernels/, cases/ and bench/ use the harness through its public names only: `graphsafe` (the contract) and
  `graphsafe.toolkit` (the face for op-family authors and benchmarks); every other harness module may change.

Method: parse each file and classify every imported module; a control checks the classifier itself on a
snippet that breaks each rule.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CHECKOUT_NAMES = ("harness", "kernels", "cases")
PUBLIC_HARNESS = ("graphsafe", "graphsafe.toolkit")
FOLDERS = ("harness", "kernels", "cases", "bench", "tests")


PACKAGE_FOLDERS = {
    "graphsafe": REPO / "harness",
    "graphsafe.kernels": REPO / "kernels",
    "graphsafe.cases": REPO / "cases",
}


def _is_submodule(package: str, name: str) -> bool:
    if f"{package}.{name}" in PACKAGE_FOLDERS:
        return True
    folder = PACKAGE_FOLDERS[package]
    return (folder / f"{name}.py").is_file() or (folder / name / "__init__.py").is_file()


def imported_modules(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in `source`; `from graphsafe import native` counts as
    graphsafe.native, so a submodule reached through its parent is seen (a name such as Case is not one)."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            if node.module in PACKAGE_FOLDERS:
                found += [
                    (node.lineno, f"{node.module}.{alias.name}")
                    for alias in node.names
                    if _is_submodule(node.module, alias.name)
                ]
    return found


def violations(folder: str, source: str, filename: str = "<source>") -> list[str]:
    """The layering rules above that `source`, a module of `folder`, breaks."""
    broken = []
    for line, module in imported_modules(source, filename):
        top = module.split(".")[0]
        where = f"{filename}:{line} imports {module}"
        if top in CHECKOUT_NAMES:
            broken.append(f"{where}: not an installed name (use graphsafe[.kernels|.cases])")
            continue
        if top != "graphsafe":
            continue
        layer = module.split(".")[1] if module.count(".") >= 1 else ""
        if folder == "harness" and layer in ("kernels", "cases"):
            broken.append(f"{where}: the harness imports neither kernels nor cases")
        elif folder == "kernels" and layer == "cases":
            broken.append(f"{where}: kernels import no case module")
        elif (
            folder in ("kernels", "cases", "bench")
            and layer not in ("kernels", "cases")
            and ".".join(module.split(".")[:2]) not in PUBLIC_HARNESS
        ):
            broken.append(f"{where}: only graphsafe and graphsafe.toolkit are public")
    return broken


def _modules() -> list[tuple[str, Path]]:
    found = []
    for folder in FOLDERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            if not any(
                part.startswith((".", "_build", "__pycache__")) for part in path.relative_to(REPO).parts
            ):
                found.append((folder, path))
    return found


def test_every_module_keeps_the_layering_rules() -> None:
    broken = []
    for folder, path in _modules():
        broken += violations(folder, path.read_text(), str(path.relative_to(REPO)))
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize(
    ("folder", "source", "rule"),
    [
        ("tests", "import kernels.moe_gemm\n", "not an installed name"),
        ("bench", "from harness import Case\n", "not an installed name"),
        ("harness", "from graphsafe.kernels.common import quant\n", "imports neither kernels nor cases"),
        ("harness", "from graphsafe import cases\n", "imports neither kernels nor cases"),
        ("kernels", "import graphsafe.cases.controls\n", "kernels import no case module"),
        ("cases", "from graphsafe.scan import comparison_pass\n", "only graphsafe and graphsafe.toolkit"),
        ("bench", "from graphsafe import native\n", "only graphsafe and graphsafe.toolkit"),
    ],
)
def test_the_checker_sees_each_broken_rule(folder: str, source: str, rule: str) -> None:
    """Negative controls of the checker: each snippet breaks one rule and is reported with it."""
    assert any(rule in v for v in violations(folder, source)), violations(folder, source)


def test_the_checker_accepts_the_public_names() -> None:
    """Fixed twins: the contract, the toolkit and the kernel and case packages are allowed where they belong."""
    source = (
        "from graphsafe import Case, register, toolkit\nfrom graphsafe.toolkit import compare\n"
        "import graphsafe\nfrom graphsafe.kernels.common import native\n"
    )
    assert violations("cases", source) == []
    assert (
        violations("harness", "from graphsafe.compare import compare\nimport graphsafe.native.build\n") == []
    )
