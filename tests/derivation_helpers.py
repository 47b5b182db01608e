"""What the tests of the derivation prompts share: the hidden answers, a machine without a GPU,
and reading and running an exercise's notebook the way JupyterLab would."""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from grader.derivations import core
from hardware.specs import GpuSpec, default_spec


def load_answers(path: Path, gpu: GpuSpec | None = None) -> ModuleType:
    """An exercise's hidden answers.py, imported from solutions/ without touching sys.path. Its
    hardware answers are for ``gpu``, by default the course's default GPU: the one every test sees
    (see no_gpu), whatever this machine has."""
    module_spec = importlib.util.spec_from_file_location(f"answers_{path.parent.name}", path)
    module = importlib.util.module_from_spec(module_spec)
    with core.using_gpu(gpu or default_spec(), "the GPU the test names"):
        module_spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    """Every test sees a machine without a GPU unless it says otherwise: the default GPU's spec
    sheet applies, and the notebooks' cells that ask for the GPU get the same answer anywhere."""
    monkeypatch.setattr(core, "detect_gpu_name", lambda: None)


def stub(*args):
    """A function as the answer cell's template leaves it."""
    raise NotImplementedError


# ------------------------------------------------------------------ notebooks

def read_notebook(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def cells_tagged(notebook: dict, prefix: str) -> dict[str, dict]:
    """The cells with a tag prefix:NAME (answer:, check:), by NAME, in notebook order."""
    found = {}
    for cell in notebook["cells"]:
        for tag in cell.get("metadata", {}).get("tags", []):
            if tag.startswith(prefix):
                found[tag.removeprefix(prefix)] = cell
    return found


def assert_valid_notebook_with_clear_outputs(path: Path) -> None:
    """nbformat 4 that validates, a python3 kernel, unique cell ids, no outputs left behind."""
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.nbformat == 4
    assert nb.metadata.kernelspec.name == "python3"
    ids = [cell.id for cell in nb.cells]
    assert len(set(ids)) == len(ids)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


def run_cell(code: str, namespace: dict) -> Any:
    """Run a notebook cell like IPython does: the value of a final expression is returned."""
    tree = ast.parse(code)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, "<cell>", "exec"), namespace)
    if last is not None:
        return eval(compile(ast.Expression(last.value), "<cell>", "eval"), namespace)
    return None


def run_notebook(notebook: dict, answer_source=None) -> dict[str, Any]:
    """Every code cell but the grading one, in order, as a learner runs them; the value of each check
    cell by its prompt. answer_source(prompt, stub_code), when given, replaces each answer cell."""
    namespace: dict = {}
    results = {}
    for cell in notebook["cells"]:
        tags = cell["metadata"].get("tags", [])
        if cell["cell_type"] != "code" or "grade" in tags:
            continue
        code = source(cell)
        for tag in tags:
            if tag.startswith("answer:") and answer_source is not None:
                code = answer_source(tag.removeprefix("answer:"), code)
        value = run_cell(code, namespace)
        for tag in tags:
            if tag.startswith("check:"):
                results[tag.removeprefix("check:")] = value
    return results
