"""The checkout itself: what it ignores, and that each install the README offers brings what the
tests it runs import.

The README offers `./setup.sh` (every extra) and, by hand, `pip install -e ".[test]"`. The test
suite must pass with either: a test that needs more than its install brings skips with a reason
(`pytest.importorskip`), and the rest imports only what the install holds. The check below reads
every import of the tests, and of the code they reach, with Python's own parser (code written in
strings for a child interpreter included), and resolves each third-party module to the
distribution that provides it in this environment.
"""
from __future__ import annotations

import ast
import functools
import importlib.metadata as metadata
import shutil
import subprocess
import sys
import textwrap
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# Where the code the tests reach lives; modules found here (or beside a test) are this project's own.
FIRST_PARTY_DIRS = [ROOT, ROOT / "tests", *sorted((ROOT / "exercises").glob("*/")),
                    *sorted((ROOT / "solutions").glob("*/"))]
DOCUMENTED_INSTALLS = {"by hand": ("test",), "setup.sh without a GPU": ("test", "course", "capstone")}


# ---------------------------------------------------------------------------- what an install brings

def _installed(name: str) -> metadata.Distribution | None:
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None


def installed_with(extras: tuple[str, ...]) -> set[str]:
    """The distributions `pip install -e ".[extras]"` brings: the project's requirements and, read
    from this environment's metadata, theirs, and so on."""
    todo = [Requirement(r) for r in PROJECT["dependencies"]]
    for extra in extras:
        todo += [Requirement(r) for r in PROJECT["optional-dependencies"][extra]]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        req = todo.pop()
        key = (canonicalize_name(req.name), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        dist = _installed(req.name)
        for line in (dist.requires or []) if dist else []:
            sub = Requirement(line)
            wanted = sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in ("", *req.extras))
            if wanted:
                todo.append(sub)
    return {name for name, _ in seen}


@functools.lru_cache(maxsize=1)
def _distributions_of_modules() -> dict[str, list[str]]:
    return metadata.packages_distributions()


def providers(module: str) -> set[str]:
    return {canonicalize_name(d) for d in _distributions_of_modules().get(module, [])}


# ---------------------------------------------------------------------------- what the tests import

@dataclass
class Imports:
    """The top-level modules a scope imports, and those it skips without (pytest.importorskip)."""

    imported: dict[str, str] = field(default_factory=dict)      # module -> where
    skips_without: set[str] = field(default_factory=set)


def _is_import_guard(handler: ast.ExceptHandler) -> bool:
    names = [handler.type] if not isinstance(handler.type, ast.Tuple) else handler.type.elts
    if handler.type is None:
        return True
    return any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError", "Exception")
               for n in names)


def _importorskip(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "importorskip" \
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return node.args[0].value.split(".")[0]
    return None


def scopes(tree: ast.AST, where: str) -> list[Imports]:
    """The file as a whole, then each function in it: a function runs only if the file's skips
    pass, so it carries them too. Imports guarded by `except ImportError` need nothing."""
    out: list[Imports] = []

    def visit(node: ast.AST, scope: Imports, guarded: bool, line: int | None) -> None:
        at = f"{where}:{line or getattr(node, 'lineno', 0)}"
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner = Imports(skips_without=set(scope.skips_without))
            out.append(inner)
            for child in node.body + node.decorator_list:
                visit(child, inner, guarded, line)
            return
        if isinstance(node, ast.Try):
            guard = guarded or any(_is_import_guard(h) for h in node.handlers)
            for child in node.body:
                visit(child, scope, guard, line)
            for child in node.handlers + node.orelse + node.finalbody:
                visit(child, scope, guarded, line)
            return
        if (name := _importorskip(node)) is not None:
            scope.skips_without.add(name)
        if isinstance(node, ast.Import) and not guarded:
            for alias in node.names:
                scope.imported.setdefault(alias.name.split(".")[0], at)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and not guarded:
            scope.imported.setdefault(node.module.split(".")[0], at)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "import " in node.value:
            try:       # code a test hands to a child interpreter (python -c)
                code = ast.parse(textwrap.dedent(node.value))
            except SyntaxError:
                code = None
            if code is not None:
                for child in code.body:
                    visit(child, scope, guarded, line or node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child, scope, guarded, line)

    whole = Imports()
    out.insert(0, whole)
    for child in ast.iter_child_nodes(tree):
        visit(child, whole, False, None)
    return out


def first_party(module: str) -> Path | None:
    """The file or package of one of this project's modules, or None for anything else."""
    for folder in FIRST_PARTY_DIRS:
        if (folder / f"{module}.py").is_file():
            return folder / f"{module}.py"
        if (folder / module).is_dir() and any((folder / module).glob("*.py")):
            return folder / module
    return None


def missing_under(installed: set[str]) -> list[str]:
    """Every import, in a test that would run under ``installed`` or in the code it reaches, of a
    module that ``installed`` does not bring."""
    stdlib = set(sys.stdlib_module_names)
    problems: list[str] = []
    done: set[Path] = {Path(__file__).resolve()}        # this file's strings are samples, not code
    todo = sorted((ROOT / "tests").glob("*.py"))
    while todo:
        path = todo.pop()
        if path in done:
            continue
        done.add(path)
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for file in files:
            found = scopes(ast.parse(file.read_text()), str(file.relative_to(ROOT)))
            # A test runs its functions; the project's own modules import what their functions need
            # where they need it, behind the check that the caller makes (a GPU, the course extra):
            # of those, what importing the module runs counts.
            for scope in found if file.parent == ROOT / "tests" else found[:1]:
                absent = {m for m in scope.skips_without if not (providers(m) & installed) and m not in stdlib}
                if absent:
                    continue                  # skipped under this install, with the reason it gives
                for module, where in scope.imported.items():
                    if module in stdlib or module in scope.skips_without:
                        continue
                    own = first_party(module)
                    if own is not None:
                        todo.append(own)
                    elif not (providers(module) & installed):
                        problems.append(f"{where} imports {module}, which this install does not bring")
    return sorted(set(problems))


@pytest.mark.parametrize("install", DOCUMENTED_INSTALLS)
def test_each_documented_install_brings_what_its_tests_import(install):
    extras = DOCUMENTED_INSTALLS[install]
    installed = installed_with(extras)
    if not all(_installed(name) for name in installed):
        pytest.skip(f"this environment lacks part of the {install} install ({', '.join(extras)}): its "
                    "requirements cannot be followed here")
    problems = missing_under(installed)
    assert not problems, (f'pip install -e ".[{",".join(extras)}]" ({install}): skip these tests with a reason '
                          "(pytest.importorskip) or add the distribution to the extra:\n" + "\n".join(problems))


def test_the_check_sees_an_import_the_install_lacks(tmp_path, monkeypatch):
    """The check itself: a test importing a module of an extra it was not installed with, inside a
    function and inside code for a child interpreter, is found; with importorskip it is not."""
    (tmp_path / "test_sample.py").write_text(
        "import pytest\n\n"
        "def test_direct():\n    import nbgrader\n\n"
        "def test_child():\n    code = 'import json\\nfrom sklearn import datasets\\n'\n\n"
        "def test_skipped():\n    pytest.importorskip('onnx')\n    import onnx\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "tests").mkdir()
    (tmp_path / "test_sample.py").rename(tmp_path / "tests" / "test_sample.py")
    found = missing_under({"pytest", "packaging", "pluggy", "iniconfig"})
    assert found == ["tests/test_sample.py:4 imports nbgrader, which this install does not bring",
                     "tests/test_sample.py:7 imports sklearn, which this install does not bring"], found


# ---------------------------------------------------------------------------- what git leaves alone

@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                    reason="not a git checkout: nothing to ignore")
def test_what_grade_model_writes_is_ignored():
    """`grade model` writes model-report/ where it runs (the command line at the root, the
    capstone's notebook beside it): neither shows up as a change to commit."""
    paths = ["model-report/loss_curve.png", "exercises/06_capstone/model-report/model.onnx"]
    done = subprocess.run(["git", "check-ignore", "--no-index", *paths], cwd=ROOT, capture_output=True, text=True)
    assert done.stdout.split() == paths, done.stdout + done.stderr
