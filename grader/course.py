"""An nbgrader course built from exercises/ and solutions/.

``build_course(DIR)`` writes what stock nbgrader needs to release and autograde every exercise:

    DIR/nbgrader_config.py
    DIR/source/<exercise folder>/<notebook>.ipynb    answer cells hold the hidden answers
    DIR/source/<exercise folder>/*.cu, baselines/     the learner's stubs and the naive kernels

Nothing here knows an exercise: the notebook's cell tags say what each cell is.

* ``answer:<prompt>``: an nbgrader solution cell. Its source is the learner's stub followed by a
  ``### BEGIN SOLUTION`` region with the hidden answers to the names the stub defines, taken from
  ``solutions/<exercise>/answers.py``. ``ClearSolutions.code_stub`` is empty, so the release shows
  the stub and nothing else.
* ``check:<prompt>``: a locked test cell worth the prompt's points; it asserts on the CheckResult,
  and a hidden test (``### BEGIN HIDDEN TESTS``, which the release does not show) asserts that the
  verdict came from the instructor's own checkers, never from a learner's copy of the course.
* ``grade``: replaced by a locked cell that grades every kernel once (``result = grade(...)``),
  followed by one locked test cell per task for its correctness points and one for its speed points.
* anything else: locked, so autograding restores it.

An exercise without a notebook gets a minimal one: a title, the tasks, and the grading cells.
"""
from __future__ import annotations

import ast
import filecmp
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import nbformat

from grader.derivations.core import GPU_VARIABLE, named_spec
from grader.spec import Exercise, discover, find, learner_copy, repo_root, solutions_dir

SCHEMA_VERSION = 3                  # nbgrader's cell metadata format
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
CONFIG_MARK = "# Written by `grade course build`"
# One kernel cell grades every task of an exercise on the GPU: compile, many cases, timing.
CELL_TIMEOUT_S = 1800
# Never copied into autograded/ or feedback/: build products and editor state of a submission.
IGNORED = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "*.so", "*.o", "*.a", "*.obj",
           "*.ptx", "*.cubin", "*.fatbin", "*.ncu-rep", "*.nsys-rep", "a.out", ".DS_Store"]
# Never copied into autograded/ either: a package of these names in a submission would be imported
# before the instructor's (a notebook's folder comes first on its path), and grade with its checkers.
SHADOWING = ["grader", "hardware"]
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
FROM_THE_INSTRUCTOR = ("assert not verdict.self_check, \"checked by a learner's copy of the course, which cannot "
                       "grade: autograde with the instructor's repository\"")


class CourseError(Exception):
    """The course cannot be built as asked; the message says what to fix."""


@dataclass(frozen=True)
class Assignment:
    """One exercise as an nbgrader assignment."""

    name: str                       # the exercise folder's name, e.g. 01_foundations
    exercise_id: str
    title: str
    notebook: str                   # file name inside source/<name>/
    generated_notebook: bool        # the exercise had no notebook: a minimal one was written
    stubs: tuple[str, ...]          # the learner's files: graded as submitted, never overwritten
    files: tuple[str, ...]          # every non-notebook file copied into source/<name>/
    points: float
    graded_cells: int


@dataclass(frozen=True)
class Course:
    root: Path
    config: Path
    assignments: tuple[Assignment, ...]


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


def grading_cells(exercise: Exercise) -> list[nbformat.NotebookNode]:
    """The locked cell that grades every kernel once, and one test cell per task and kind of points."""
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
    graded = False
    for index, cell in enumerate(nb.cells):
        cell = nbformat.from_dict(cell)
        cell.metadata.pop("nbgrader", None)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        answer, check = _tag_value(cell, "answer"), _tag_value(cell, "check")
        if "grade" in _tags(cell):
            cells += grading_cells(exercise)
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


# ================================================================== the course folder

def _task_files(exercise: Exercise) -> tuple[list[str], list[str]]:
    stubs, files = [], []
    for task in exercise.tasks:
        for rel, is_stub in ((task.source, True), (task.baseline, False)):
            if rel in files:
                continue
            if not (exercise.folder / rel).is_file():
                raise CourseError(f"{exercise.folder / rel} does not exist (named in exercise.toml)")
            files.append(rel)
            if is_stub:
                stubs.append(rel)
    return stubs, files


def _refuse_solutions(exercise: Exercise, solutions: Path, files: Iterable[str]) -> None:
    """A stub that is byte for byte a reference solution would be released as it is."""
    for rel in files:
        twin = solutions / rel
        if twin.is_file() and filecmp.cmp(exercise.folder / rel, twin, shallow=False):
            raise CourseError(f"{exercise.folder / rel} is identical to the reference solution {twin}; "
                              "the exercise folder must hold the learner's stub")


def build_assignment(exercise: Exercise, source_root: Path) -> Assignment:
    solutions = solutions_dir() / exercise.folder.name
    nb, generated = source_notebook(exercise, solutions / "answers.py")
    stubs, files = _task_files(exercise)
    _refuse_solutions(exercise, solutions, files)
    target = source_root / exercise.folder.name
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for rel in files:
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(exercise.folder / rel, target / rel)
    name = exercise.notebook if exercise.notebook.endswith(".ipynb") else f"{exercise.folder.name}.ipynb"
    nbformat.validate(nb)
    nbformat.write(nb, target / name)
    graded = [c.metadata["nbgrader"] for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    return Assignment(name=exercise.folder.name, exercise_id=exercise.id, title=exercise.title, notebook=name,
                      generated_notebook=generated, stubs=tuple(stubs), files=tuple(files),
                      points=sum(float(m["points"]) for m in graded), graded_cells=len(graded))


def config_text(assignments: Sequence[Assignment], repo: Path, gpu: str | None = None) -> str:
    keep = {a.name: list(a.stubs) for a in assignments}
    gpu_lines = ("" if gpu is None else
                 f"# The derivation prompts are checked with the figures of this GPU, as the learners' copies are.\n"
                 f"os.environ.setdefault({GPU_VARIABLE!r}, {gpu!r})\n")
    return f'''{CONFIG_MARK} from exercises/ and solutions/; building again rewrites it.
import os

c = get_config()  # noqa: F821 (nbgrader provides it)

# The notebooks' kernels grade with this checkout: its grader package, its exercises (specs,
# baselines, references) and its derivation checkers. Set S2S_ROOT before running nbgrader to use
# another one (never a learner's copy: it holds no answers, and its checks cannot grade).
REPO = os.environ.setdefault("S2S_ROOT", {str(repo)!r})
if REPO not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)
{gpu_lines}
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
# Build products and editor state of a submission never reach autograded/ or feedback/, nor a
# package that would be imported in place of the grader.
c.CourseDirectory.ignore = {IGNORED + SHADOWING!r}

# The release shows exactly the learner's stub: the hidden answer region is removed, not replaced.
c.ClearSolutions.code_stub = {{"python": ""}}

# The learner's own .cu files are what gets graded; without this, autograde would put the
# stubs from source/ back in their place.
c.Autograde.exclude_overwriting = {json.dumps(keep, indent=4)}

# The grading cell compiles, checks and times every task of an exercise on the GPU.
c.Execute.timeout = {CELL_TIMEOUT_S}
c.Execute.startup_timeout = 120
c.ExecutePreprocessor.timeout = {CELL_TIMEOUT_S}
'''


def build_course(root: Path, exercises: Sequence[str] = (), force: bool = False, gpu: str | None = None) -> Course:
    """Write DIR/nbgrader_config.py and DIR/source/<exercise>/ for the exercises (all by default).

    ``gpu`` (a key of hardware/specs.toml or a name): the GPU whose figures autograde checks the
    derivation prompts with; by default the grading machine's."""
    root = Path(root).resolve()
    if learner_copy() is not None:
        raise CourseError(f"{repo_root()} is a learner's copy of the course: it holds no solutions and no answers. "
                          "Build the course from the instructor's repository")
    gpu_key = None
    if gpu is not None:
        named = named_spec(gpu)
        if named is None:
            raise CourseError(f"no spec sheet matches the GPU {gpu!r} (hardware/specs.toml lists the GPUs it knows)")
        gpu_key = named.key
    chosen = [find(e) for e in exercises] if exercises else discover()
    if not chosen:
        raise CourseError(f"no exercises found in {repo_root() / 'exercises'}")
    config = root / "nbgrader_config.py"
    if config.exists() and not force and not config.read_text().startswith(CONFIG_MARK):
        raise CourseError(f"{config} exists and was not written by `grade course build`; "
                          "move it away or pass --force to replace it")
    root.mkdir(parents=True, exist_ok=True)
    assignments = tuple(build_assignment(ex, root / "source") for ex in chosen)
    every = {a.name: a for a in _existing_assignments(root)}
    every.update({a.name: a for a in assignments})
    config.write_text(config_text(sorted(every.values(), key=lambda a: a.name), repo_root(), gpu_key))
    return Course(root=root, config=config, assignments=assignments)


def _existing_assignments(root: Path) -> list[Assignment]:
    """Assignments built earlier into the same course, so that a partial build keeps their settings."""
    out = []
    for ex in discover():
        if (root / "source" / ex.folder.name).is_dir():
            stubs, files = _task_files(ex)
            out.append(Assignment(ex.folder.name, ex.id, ex.title, ex.notebook, False, tuple(stubs),
                                  tuple(files), 0.0, 0))
    return out


# ================================================================== autograding a class

@dataclass
class CellScore:
    name: str
    score: float
    max_score: float


@dataclass
class StudentScore:
    student: str
    score: float
    max_score: float
    cells: list[CellScore] = field(default_factory=list)

    def group(self, prefix: str) -> tuple[float, float]:
        chosen = [c for c in self.cells if c.name.startswith(prefix)]
        return sum(c.score for c in chosen), sum(c.max_score for c in chosen)


def course_repository(root: Path) -> Path:
    """The checkout whose grader and checkers the course's notebooks run with: S2S_ROOT where it is
    set, else the one its nbgrader_config.py names."""
    import os
    import re

    if os.environ.get("S2S_ROOT"):
        return Path(os.environ["S2S_ROOT"])
    config = (Path(root) / "nbgrader_config.py").read_text()
    found = re.search(r'os\.environ\.setdefault\("S2S_ROOT", (.+)\)', config)
    return Path(ast.literal_eval(found.group(1))) if found else repo_root()


def require_full_checkers(root: Path) -> None:
    """Refuse to autograde with a learner's copy of the course: its checks compare digests and are no grade."""
    repo = course_repository(root)
    if learner_copy(repo) is not None or not (repo / "solutions").is_dir():
        raise CourseError(f"the course grades with {repo}, a learner's copy of the course: its derivation checks "
                          "hold no answers and cannot grade. Autograde with the instructor's repository "
                          "(S2S_ROOT, or `grade course build` run from it)")


def nbgrader_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "nbgrader", *args]


def submitted_students(root: Path, assignment: str) -> list[str]:
    submitted = Path(root) / "submitted"
    return sorted(p.parent.name for p in submitted.glob(f"*/{assignment}") if p.is_dir())


def scores(root: Path, assignment: str) -> list[StudentScore]:
    """Every autograded submission's points per graded cell, from the gradebook."""
    from nbgrader.api import Gradebook, MissingEntry

    root = Path(root).resolve()
    out = []
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        try:
            submissions = gb.find_assignment(assignment).submissions
        except MissingEntry:
            return []
        for sub in sorted(submissions, key=lambda s: s.student_id):
            cells = [CellScore(g.name, float(g.score), float(g.max_score))
                     for nb in sub.notebooks for g in nb.grades]
            out.append(StudentScore(sub.student_id, float(sub.score), float(sub.max_score), cells))
    return out


def export_grades(root: Path, to: str = "grades.csv") -> Path:
    """``nbgrader export``: every student's score in every assignment, as CSV."""
    root = Path(root).resolve()
    done = subprocess.run(nbgrader_command("export", "--to", to), cwd=root, capture_output=True, text=True)
    if done.returncode != 0:
        raise CourseError(f"nbgrader export failed:\n{done.stdout}{done.stderr}")
    return root / to
