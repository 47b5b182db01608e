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
  In the capstone (capstone.toml, no task of its own), a locked cell per model that trains it on the
  kernels of the exercise folders beside it, followed by one test cell per bar worth its points
  (``[models.NAME.points]``); a ``grade`` cell tagged ``model:NAME`` stands for that model only.
* anything else: locked, so autograding restores it.

An exercise without a notebook gets a minimal one: a title, the tasks, and the grading cells.

The source notebook (hidden answers, cells) is built in course_notebook and the class's scores are
read in course_scores; this module writes the course folder and is the import path for all of it.
"""
from __future__ import annotations

import filecmp
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import nbformat

from grader.course_notebook import (BEGIN, BEGIN_HIDDEN, END, END_HIDDEN, FROM_THE_INSTRUCTOR, SCHEMA_VERSION,
                                    CourseError, defined_names, function_bodies, grading_cells, hidden_answers,
                                    source_notebook)
from grader.course_scores import (CellScore, StudentScore, course_repository, export_grades, nbgrader_command,
                                  require_full_checkers, scores, submitted_students)
from grader.derivations.core import GPU_VARIABLE, named_spec
from grader.spec import Exercise, find_unit, learner_copy, repo_root, solutions_dir, units

__all__ = ["Assignment", "BEGIN", "BEGIN_HIDDEN", "CELL_TIMEOUT_S", "CONFIG_MARK", "CellScore", "Course", "CourseError",
           "END", "END_HIDDEN", "FROM_THE_INSTRUCTOR", "IGNORED", "SCHEMA_VERSION", "SHADOWING", "StudentScore",
           "build_assignment", "build_course", "config_text", "course_repository", "defined_names", "export_grades",
           "function_bodies", "grading_cells", "hidden_answers", "nbgrader_command", "require_full_checkers",
           "scores", "source_notebook", "submitted_students"]

CONFIG_MARK = "# Written by `grade course build`"
# One kernel cell grades every task of an exercise on the GPU: compile, many cases, timing.
CELL_TIMEOUT_S = 1800
# Never copied into autograded/ or feedback/: build products and editor state of a submission.
IGNORED = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "*.so", "*.o", "*.a", "*.obj",
           "*.ptx", "*.cubin", "*.fatbin", "*.ncu-rep", "*.nsys-rep", "a.out", ".DS_Store"]
# Never copied into autograded/ either: a package of these names in a submission would be imported
# before the instructor's (a notebook's folder comes first on its path), and grade with its checkers.
SHADOWING = ["grader", "hardware"]


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
    chosen = [find_unit(e) for e in exercises] if exercises else units()
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
    for ex in units():
        if (root / "source" / ex.folder.name).is_dir():
            stubs, files = _task_files(ex)
            out.append(Assignment(ex.folder.name, ex.id, ex.title, ex.notebook, False, tuple(stubs),
                                  tuple(files), 0.0, 0))
    return out
