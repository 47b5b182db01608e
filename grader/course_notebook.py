"""The instructor's source notebook of an exercise, as nbgrader reads it: its hidden answers taken
from answers.py, its answer, check and grading cells, and CourseError."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Sequence

import nbformat

from grader.spec import Exercise, repo_root

SCHEMA_VERSION = 3                  # nbgrader's cell metadata format
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
FROM_THE_INSTRUCTOR = ("assert not verdict.self_check, \"checked by a learner's copy of the course, which cannot "
                       "grade: autograde with the instructor's repository\"")


class CourseError(Exception):
    """The course cannot be built as asked; the message says what to fix."""


# ================================================================== hidden answers from answers.py

def defined_names(source: str) -> list[str]:
    """The names a cell defines at top level (functions, classes, assigned variables), in order."""
    names: list[str] = []
    for node in ast.parse(source).body:
        for name in _names_bound(node):
            if name not in names:
                names.append(name)
    return names


def _names_bound(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    return []


def _names_used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def hidden_answers(answers: str, names: Sequence[str], where: str = "answers.py") -> str:
    """The code of ``answers`` that defines ``names``: their definitions and everything they use.

    Top-level imports come first (only the names needed), then the definitions in the order of
    the file, so the region runs as it is wherever it is pasted.
    """
    module = ast.parse(answers)
    lines = answers.splitlines()
    binders: dict[str, ast.stmt] = {}
    for node in module.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        for name in _names_bound(node):
            binders[name] = node        # the last binding wins, as when the file runs
    missing = [n for n in names if n not in binders]
    if missing:
        raise CourseError(f"{where} does not define {', '.join(missing)}, which the answer cell defines; "
                          "add the reference answer under the same name")
    needed: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in needed:
            continue
        needed.add(name)
        node = binders[name]
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            todo += [n for n in _names_used(node) if n in binders and n not in needed]
    imports, bodies = [], []
    for node in module.body:
        bound = [n for n in _names_bound(node) if n in needed and binders.get(n) is node]
        if not bound:
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            kept = [a for a in node.names if (a.asname or a.name).split(".")[0] in bound]
            clone = type(node)(**{**{f: getattr(node, f) for f in node._fields}, "names": kept})
            imports.append(ast.unparse(clone))
        else:
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            bodies.append("\n".join(lines[first - 1:node.end_lineno]))
    return "\n".join(imports) + ("\n\n\n" if imports and bodies else "") + "\n\n\n".join(bodies)


def function_bodies(answers: str) -> list[str]:
    """The body of every function in ``answers`` without its docstring: what must never be released."""
    lines = answers.splitlines()
    out = []
    for node in ast.walk(ast.parse(answers)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                body = body[1:]
            if body:
                out.append("\n".join(lines[body[0].lineno - 1:body[-1].end_lineno]))
    return out


# ================================================================== the source notebook

def _meta(grade_id: str, *, solution: bool = False, grade: bool = False, locked: bool = True,
          points: float | None = None) -> dict:
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": SCHEMA_VERSION,
            "solution": solution, "task": False}
    if grade:
        meta["points"] = points
    return meta


def _code(source: str, meta: dict) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source, metadata={"nbgrader": meta})
    cell.id = meta["grade_id"].replace("_", "-")[:64]
    return cell


def _markdown(source: str, meta: dict) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_markdown_cell(source, metadata={"nbgrader": meta})
    cell.id = meta["grade_id"].replace("_", "-")[:64]
    return cell


def _tags(cell: nbformat.NotebookNode) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def _tag_value(cell: nbformat.NotebookNode, kind: str) -> str | None:
    for tag in _tags(cell):
        if tag.startswith(kind + ":"):
            return tag.split(":", 1)[1]
    return None


def _plural(points: float) -> str:
    return f"{points:g} point" + ("" if points == 1 else "s")


def grading_cells(exercise: Exercise, model: str | None = None) -> list[nbformat.NotebookNode]:
    """The locked cell that grades every kernel once, and one test cell per task and kind of points;
    for the capstone, the same for each of its models (or the one named): a locked cell that trains
    it, and one test cell per bar."""
    if exercise.models:
        return [c for name in ([model] if model else exercise.models) for c in _model_cells(exercise, name)]
    cells = [_code(f'from grader.notebook import grade\n\n'
                   f'result = grade("{exercise.id}", submission=".", profile=False)\nresult',
                   _meta("grade_kernels")),
             _markdown("The cells below turn that report into points. Each task earns its correctness "
                       "points when every case is right, and its speed points when it is also at least "
                       "as fast as its speed bar. A cell that fails says why; without an NVIDIA GPU "
                       "they all fail, because nothing could run.", _meta("grade_kernels_explained"))]
    for task in exercise.tasks:
        if task.points.correct > 0:
            cells.append(_code(
                f"# {task.source}: the right result on every correctness case "
                f"({_plural(task.points.correct)})\n"
                f"from grader.notebook import correctness_problem\n\n"
                f'problem = correctness_problem(result, "{task.name}")\n'
                f"assert problem is None, problem",
                _meta(f"kernel_{task.name}_correct", grade=True, points=task.points.correct)))
        if task.points.speed > 0:
            cells.append(_code(
                f"# {task.source}: correct and at least {task.min_speedup:g}x as fast as the naive "
                f"baseline ({_plural(task.points.speed)})\n"
                f"from grader.notebook import speed_problem\n\n"
                f'problem = speed_problem(result, "{task.name}")\n'
                f"assert problem is None, problem",
                _meta(f"kernel_{task.name}_speed", grade=True, points=task.points.speed)))
    return cells


def _model_cells(exercise: Exercise, name: str) -> list[nbformat.NotebookNode]:
    """The capstone's model ``name``: its training and report (locked), then one test cell per bar
    of capstone.toml's points, each asserting on that bar of the result."""
    from grader.capstone import ModelError, bar_points, load_capstone

    try:
        points = bar_points(load_capstone(name))
    except ModelError as exc:
        raise CourseError(str(exc)) from None
    if not points:
        raise CourseError(f"{exercise.folder / 'capstone.toml'}: [models.{name}.points] gives no bar any points; "
                          "the course grades the capstone by its bars")
    cells = [_code(f"from grader.notebook import grade_model\n\n"
                   f"# Your kernels are taken from the exercise folders beside this one (../02_linear_layers, ...).\n"
                   f'result_{name} = grade_model("{name}", submission="..")\nresult_{name}',
                   _meta(f"grade_model_{name}")),
             _markdown(f"The cells below turn that report into points: each bar of the model earns its points "
                       "when the model trained on your kernels meets it. A cell that fails says why; without an "
                       "NVIDIA GPU, or while a kernel is missing or wrong, nothing trains and they all fail.",
                       _meta(f"grade_model_{name}_explained"))]
    for bar, value in points.items():
        cells.append(_code(
            f"# {name}: the bar {bar!r} ({_plural(value)})\n"
            f"from grader.notebook import bar_problem\n\n"
            f'problem = bar_problem(result_{name}, "{bar}")\n'
            f"assert problem is None, problem",
            _meta(f"model_{name}_{bar}", grade=True, points=value)))
    return cells


def _check_cell(source: str, prompt: str, where: str) -> str:
    """The check cell as a graded test: the same call through grader.notebook.checked, then an assert."""
    tree = ast.parse(source)
    last = tree.body[-1] if tree.body else None
    call = getattr(last, "value", None)
    if not (isinstance(last, ast.Expr) and isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
            and call.func.id == "check"):
        raise CourseError(f"{where}: the cell tagged check:{prompt} must end with a call "
                          f'check("<exercise>", "{prompt}", answer)')
    before = "\n".join(source.splitlines()[:last.lineno - 1]).rstrip()
    call_source = ast.get_source_segment(source, call)
    body = (f"{before}\n" if before else "") + (
        f"verdict = checked{call_source[len('check'):]}\n"
        'assert verdict.passed, "not yet right: the message above says what to look at"\n'
        f"{BEGIN_HIDDEN}\n{FROM_THE_INSTRUCTOR}\n{END_HIDDEN}")
    return f"from grader.notebook import checked\n\n{body}"


def _prompt_points(exercise: Exercise) -> dict[str, float]:
    from grader.derivations import prompts
    try:
        return {p.id: p.max_points for p in prompts(exercise.id)}
    except ValueError:
        return {}


def _shown(path: Path) -> str:
    """A path as the instructor knows it: relative to the checkout when inside it."""
    return str(path.relative_to(repo_root())) if path.is_relative_to(repo_root()) else str(path)


def source_notebook(exercise: Exercise, answers_file: Path | None) -> tuple[nbformat.NotebookNode, bool]:
    """The instructor's version of the exercise's notebook, and whether it had to be generated."""
    path = exercise.folder / exercise.notebook if exercise.notebook else None
    if path is None or not path.is_file():
        return _generated_notebook(exercise), True
    where = _shown(path)
    nb = nbformat.read(path, as_version=4)
    points = _prompt_points(exercise)
    answers = answers_file.read_text() if answers_file and answers_file.is_file() else None
    cells: list[nbformat.NotebookNode] = []
    graded, graded_models = False, set()
    for index, cell in enumerate(nb.cells):
        cell = nbformat.from_dict(cell)
        cell.metadata.pop("nbgrader", None)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        answer, check = _tag_value(cell, "answer"), _tag_value(cell, "check")
        if "grade" in _tags(cell):
            model = _tag_value(cell, "model")
            if model is not None and model not in exercise.models:
                raise CourseError(f"{where}: a grading cell is tagged model:{model}, which is not a model of "
                                  f"{exercise.folder / 'capstone.toml'}")
            cells += grading_cells(exercise, model)
            graded_models.update([model] if model else exercise.models)
            graded = True
            continue
        if answer and cell.cell_type == "code":
            if answers is None:
                raise CourseError(f"{where} has answer cells, but {answers_file} does not exist: the "
                                  "hidden answers live there")
            hidden = hidden_answers(answers, defined_names(cell.source), _shown(answers_file))
            cell.source = f"{cell.source.rstrip()}\n{BEGIN}\n{hidden}\n{END}"
            cell.metadata["nbgrader"] = _meta(f"answer_{answer}", solution=True, locked=False)
        elif check and cell.cell_type == "code":
            if check not in points:
                raise CourseError(f"{where}: exercise {exercise.id} has no derivation prompt {check!r} "
                                  "(grader.derivations lists the prompts and their points)")
            cell.source = _check_cell(cell.source, check, where)
            cell.metadata["nbgrader"] = _meta(f"check_{check}", grade=True, points=points[check])
        else:
            kind = _tag_value(cell, "info")
            cell.metadata["nbgrader"] = _meta(f"info_{kind}" if kind else f"cell_{index:02d}_{cell.cell_type}")
        cells.append(cell)
    if not graded:
        cells += grading_cells(exercise)
    for model in exercise.models:
        if graded and model not in graded_models:
            cells += grading_cells(exercise, model)
    nb.cells = cells
    return nb, False


def _generated_notebook(exercise: Exercise) -> nbformat.NotebookNode:
    task_lines = "\n".join(
        f"* [{t.source}]({t.source}), `{t.prototype().rstrip(';')}`: {_plural(t.points.correct)} when "
        f"correct, {t.points.speed:g} more when also at least {t.min_speedup:g}x as fast as the naive "
        f"[{t.baseline}]({t.baseline})."
        for t in exercise.tasks)
    intro = (f"# Exercise {exercise.id} · {exercise.title}\n\n"
             "Each task is one `extern \"C\"` function in its own `.cu` file: open it in the editor, read "
             "the comments at its top, write your kernels and save. Then run the cell below: it compiles "
             "every file, checks it on fresh random inputs, times it against the naive baseline and shows "
             "the report.\n\n" + task_lines)
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"}}
    nb.cells = [_markdown(intro, _meta("introduction"))] + grading_cells(exercise)
    return nb
