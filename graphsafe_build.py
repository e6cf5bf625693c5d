"""setuptools commands that build graphsafe's wheel from the checkout's folders (pyproject.toml's cmdclass).

The checkout keeps three top-level folders, harness/, kernels/ and cases/, whose modules import each other by
those names (`from harness import Case`). Installed, those generic names would collide with a user's own
`kernels` or `cases` package, so the wheel claims one import name instead:

    harness/  -> graphsafe/            kernels/ -> graphsafe/kernels/            cases/ -> graphsafe/cases/

and BuildPy rewrites every absolute import of the three names in the copied modules (`from harness.case import`
-> `from graphsafe.case import`, `import kernels` -> `import graphsafe.kernels as kernels`). Only import
statements are rewritten (found with `ast`), never other code: cases/moe_combine.py has a local list named
`cases`. Module names in strings (subprocess `-m` targets, package walks) must come from `__package__` or
`__name__`, which hold the installed names at run time.

An editable install (`pip install -e .`, what the Makefile does) keeps the checkout names: its .pth puts the
checkout on sys.path, and a small finder makes `graphsafe[.x]` the same module objects as `harness[.x]` (and
`graphsafe.kernels` / `graphsafe.cases` those of `kernels` / `cases`), so the `graphsafe` console script and
`from graphsafe import Case` work there too and a registry is never duplicated under two names.

This module runs at build time only: it imports setuptools and the standard library, never torch.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

# Checkout folder -> installed package. The import rewrite and the package discovery both read this table;
# pyproject.toml's [tool.setuptools] package-dir says the same for setuptools.
INSTALLED_NAMES = {"harness": "graphsafe", "kernels": "graphsafe.kernels", "cases": "graphsafe.cases"}
# Build outputs and caches that may sit inside the source folders of a working checkout.
_SKIPPED_DIRS = ("__pycache__", "_build", ".")


class ImportRewriteError(Exception):
    """An import the installed package could not honour (the message names the file, line and a fix)."""


def installed_module_name(name: str) -> str | None:
    """The installed name of checkout module `name`, or None when it is not one of the three folders."""
    top, dot, rest = name.partition(".")
    if top not in INSTALLED_NAMES:
        return None
    return INSTALLED_NAMES[top] + dot + rest


def rewrite_imports(source: str, filename: str = "<source>") -> str:
    """`source` with every absolute import of harness/kernels/cases renamed to its installed name.

    Idempotent: an already rewritten file has no import of the three checkout names left.
    """
    data = source.encode("utf-8")
    tree = ast.parse(data, filename)
    line_starts = [0]
    for line in data.splitlines(keepends=True):
        line_starts.append(line_starts[-1] + len(line))
    edits: list[tuple[int, int, bytes]] = []  # (start byte, end byte, replacement)
    for node in ast.walk(tree):
        # ast offsets are UTF-8 byte columns, hence the byte arithmetic.
        start = line_starts[node.lineno - 1] + node.col_offset if hasattr(node, "lineno") else 0
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            renamed = installed_module_name(node.module)
            if renamed is None:
                continue
            match = re.compile(rb"from[\s\\]+" + re.escape(node.module.encode()) + rb"\b").match(data, start)
            if match is None:
                raise ImportRewriteError(
                    f"{filename}:{node.lineno}: cannot find `from {node.module}` in the statement's text; "
                    "write the module name on one line without spaces around its dots"
                )
            name_start = match.end() - len(node.module.encode())
            edits.append((name_start, match.end(), renamed.encode()))
        elif isinstance(node, ast.Import) and any(installed_module_name(a.name) for a in node.names):
            parts = []
            for alias in node.names:
                renamed = installed_module_name(alias.name)
                if renamed is None:
                    parts.append(alias.name + (f" as {alias.asname}" if alias.asname else ""))
                elif alias.asname:
                    parts.append(f"{renamed} as {alias.asname}")
                elif "." not in alias.name:
                    parts.append(f"{renamed} as {alias.name}")  # binds the same local name as before
                else:
                    parent, _, leaf = alias.name.rpartition(".")
                    raise ImportRewriteError(
                        f"{filename}:{node.lineno}: `import {alias.name}` binds the name "
                        f"{alias.name.split('.')[0]!r}, which the installed package does not have; write "
                        f"`from {parent} import {leaf}` or `import {alias.name} as {leaf}`"
                    )
            assert node.end_lineno is not None and node.end_col_offset is not None
            end = line_starts[node.end_lineno - 1] + node.end_col_offset
            edits.append((start, end, ("import " + ", ".join(parts)).encode()))
    for begin, end, text in sorted(edits, reverse=True):
        data = data[:begin] + text + data[end:]
    return data.decode("utf-8")


def discover_packages(project_dir: str | os.PathLike[str] = ".") -> dict[str, str]:
    """Installed package name -> checkout folder, for the three roots and every folder below them that holds
    Python files (per-family kernel folders may be namespace packages without an __init__.py)."""
    found: dict[str, str] = {}
    for folder, package in INSTALLED_NAMES.items():
        root = Path(project_dir, folder)
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(_SKIPPED_DIRS))
            relative = Path(dirpath).relative_to(root)
            if relative.parts and not any(f.endswith(".py") for f in filenames):
                continue  # a folder of sources or headers only: package data of the package above
            if not all(part.isidentifier() for part in relative.parts):
                continue
            found[".".join((package, *relative.parts))] = str(Path(folder, *relative.parts))
    return found


class BuildPy(build_py):
    """build_py that installs the checkout's folders under `graphsafe` and rewrites their imports."""

    def finalize_options(self) -> None:
        super().finalize_options()
        # pyproject.toml names the three roots; the subpackages are whatever folders the checkout has now, so a
        # new kernel family needs no packaging edit.
        self.packages = sorted(
            set(self.packages or ()) | set(discover_packages(self.distribution.src_root or "."))
        )

    def build_module(self, module: str, module_file: str, package: str | list[str]):  # type: ignore[override]
        outfile, copied = super().build_module(module, module_file, package)
        if outfile.endswith(".py"):
            text = Path(outfile).read_text(encoding="utf-8")
            rewritten = rewrite_imports(text, module_file)
            if rewritten != text:
                # A fresh file, never an in-place write: the build copy must not share an inode with the source.
                os.unlink(outfile)
                Path(outfile).write_text(rewritten, encoding="utf-8")
        return outfile, copied

    def find_data_files(self, package: str, src_dir: str) -> list[str]:
        # A working checkout may hold compiled kernels or caches under kernels/; only sources ship.
        return [
            f
            for f in super().find_data_files(package, src_dir)
            if not any(part.startswith(_SKIPPED_DIRS) for part in Path(f).relative_to(src_dir).parts[:-1])
        ]


_ALIAS_FINDER = '''\
"""graphsafe in an editable install: `graphsafe[.x]` is the checkout's `harness[.x]`, `graphsafe.kernels[.x]`
its `kernels[.x]` and `graphsafe.cases[.x]` its `cases[.x]`: the same module objects under both names, so a
case registered through one name is in the registry seen through the other. Written by graphsafe_build.py."""

import importlib
import importlib.abc
import importlib.util
import sys

ALIASES = {aliases!r}  # installed prefix -> checkout name, longest prefix first


def _target(fullname):
    for prefix, target in ALIASES:
        if fullname == prefix or fullname.startswith(prefix + "."):
            return target + fullname[len(prefix):]
    return None


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target, target_spec):
        self._target = target
        self._target_spec = target_spec

    def create_module(self, spec):
        return importlib.import_module(self._target)

    def exec_module(self, module):
        module.__spec__ = self._target_spec  # module_from_spec set the alias spec; the module keeps its own

    def get_code(self, fullname):  # `python -m graphsafe`
        return self._target_spec.loader.get_code(self._target)


class AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        name = _target(fullname)
        if name is None:
            return None
        target_spec = importlib.util.find_spec(name)
        if target_spec is None:
            return None
        is_package = target_spec.submodule_search_locations is not None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(name, target_spec), is_package=is_package)


def install():
    if not any(isinstance(finder, AliasFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, AliasFinder())
'''


class _CheckoutWithAliases:
    """The editable wheel's contents: a .pth with the checkout root, and the alias finder it installs."""

    def __init__(self, project_dir: Path, name: str) -> None:
        self.project_dir = project_dir
        self.name = name

    def __call__(self, wheel, files, mapping) -> None:  # type: ignore[no-untyped-def]
        finder = "__editable___" + re.sub(r"\W", "_", self.name) + "_aliases"  # name: "graphsafe-0.1.0"
        aliases = sorted(((v, k) for k, v in INSTALLED_NAMES.items()), key=lambda kv: -len(kv[0]))
        wheel.writestr(f"{finder}.py", _ALIAS_FINDER.format(aliases=aliases).encode())
        pth = f"{self.project_dir.resolve()}\nimport {finder}; {finder}.install()\n"
        wheel.writestr(f"__editable__.{self.name}.pth", pth.encode())

    def __enter__(self) -> _CheckoutWithAliases:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class EditableWheel(editable_wheel):
    """`pip install -e .`: the checkout on sys.path under its own names, plus `graphsafe` as their alias.

    setuptools' own strategies would map `graphsafe` onto harness/ and load its modules a second time under
    the new name, where their `from harness ...` imports would find no `harness`.
    """

    def _select_strategy(self, name, tag, build_lib):  # type: ignore[no-untyped-def, override]
        return _CheckoutWithAliases(Path(self.project_dir), name)
