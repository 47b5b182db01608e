"""What the nbgrader course tests share: a course folder built as an instructor builds it, students'
hand-ins (worked on in a learner's copy of the course where asked), and the environment of a machine
without a GPU for every nbgrader step."""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

import nbformat

from grader import spec

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENT = "01_foundations"
EX01 = spec.find("01")
CAPSTONE = next(u for u in spec.units() if u.models)      # the capstone: an assignment of model bars
SOLUTIONS = ROOT / "solutions" / ASSIGNMENT
NO_GPU = "need an NVIDIA GPU"


def course_env(cache: Path) -> dict[str, str]:
    """This checkout's grader, its own build cache, and no GPU, whatever the machine has."""
    env = os.environ.copy()
    env.update(CUDA_VISIBLE_DEVICES="", S2S_CACHE=str(cache), S2S_ROOT=str(ROOT),
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p))
    return env


def run_ok(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def grade_id(cell) -> str:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")


def course_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "grader.course_cli", *args]


def build_and_release(root: Path, env: dict[str, str], exercises: list[str] | None = None) -> None:
    """`grade course build` (every exercise unless told), then `nbgrader generate_assignment` for each."""
    chosen = [spec.find_unit(e) for e in exercises] if exercises else spec.units()
    run_ok(course_cli("build", str(root), *[a for e in exercises or () for a in ("-e", e)]), ROOT, env)
    for ex in chosen:
        run_ok([sys.executable, "-m", "nbgrader", "generate_assignment", ex.folder.name, "--force"], root, env)


def submit(root: Path, student: str, *, answers: bool, files: dict[str, Path], assignment: str = ASSIGNMENT) -> Path:
    """Hand in the released notebook (with the hidden answers if asked) and .cu files, plus clutter."""
    release, target = root / "release" / assignment, root / "submitted" / student / assignment
    shutil.copytree(release, target)
    if answers:
        source = {grade_id(c): c.source
                  for c in nbformat.read(root / "source" / assignment / f"{assignment}.ipynb", as_version=4).cells}
        nb = nbformat.read(target / f"{assignment}.ipynb", as_version=4)
        for cell in nb.cells:
            if cell.metadata.get("nbgrader", {}).get("solution"):
                cell.source = source[grade_id(cell)]
        nbformat.write(nb, target / f"{assignment}.ipynb")
    for name, path in files.items():
        shutil.copyfile(path, target / name)
    # What a learner's folder picks up: editor state, Python caches, a build of their own.
    (target / ".ipynb_checkpoints").mkdir()
    (target / ".ipynb_checkpoints" / f"{assignment}-checkpoint.ipynb").write_text("{}")
    (target / "__pycache__").mkdir()
    (target / "__pycache__" / "helper.cpython-311.pyc").write_bytes(b"\0")
    (target / "vector_add.so").write_bytes(b"\0")
    (target / "vector_add.o").write_bytes(b"\0")
    return target


WRONG_VECTOR_ADD = ROOT / "tests" / "submissions" / "ex01_wrong_vector_add.cu"


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    saved = os.environ.copy()
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def work_in_learner_copy(folder: Path, copy: Path, env: dict[str, str]) -> dict[str, bool]:
    """What a learner of the class does before handing ``folder`` in: run its notebook, every cell in
    order, in a Jupyter kernel whose grader is the learner's copy ``copy`` (the instructor published
    it), and save it with its outputs. Returns whether each graded cell passed there."""
    NotebookClient = pytest.importorskip("nbclient", reason="running a notebook needs the course extra "
                                         "(pip install -e '.[course]')").NotebookClient

    path = folder / f"{ASSIGNMENT}.ipynb"
    nb = nbformat.read(path, as_version=4)
    learner = {**env, "S2S_ROOT": str(copy), "PYTHONPATH": str(copy)}
    with _environment(learner):
        NotebookClient(nb, timeout=1800, kernel_name="python3", allow_errors=True,
                       resources={"metadata": {"path": str(folder)}}).execute()
    nbformat.write(nb, path)
    return {grade_id(c): not any(o.output_type == "error" for o in c.outputs)
            for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}


def hand_in_a_class(pristine: Path, env: dict[str, str], kinds: tuple[str, ...], scratch: Path,
                    learner_copy: Path | None = None) -> dict[str, dict[str, bool]]:
    """A released exercise-01 course with one submission per entry of ``kinds``: "solution" (the
    hidden solutions), "stub" (untouched), "wrong" (vector_add never writes its last element),
    "slow" (the naive baselines) or "syntax" (a solution with a missing semicolon).

    With ``learner_copy``, each kind of submission is first worked on as a learner does, in that
    learner's copy of the course (see work_in_learner_copy), once per kind: the result says, per
    kind, which graded cells passed there."""
    build_and_release(pristine, env, ["01"])
    solutions = {t.source: SOLUTIONS / t.source for t in EX01.tasks}
    broken = scratch / "vector_add.cu"
    broken.write_text((SOLUTIONS / "vector_add.cu").read_text().replace("kUnroll = 4;", "kUnroll = 4", 1))
    baselines = ROOT / "exercises" / ASSIGNMENT / "baselines"
    files = {"solution": solutions, "stub": {}, "wrong": {**solutions, "vector_add.cu": WRONG_VECTOR_ADD},
             "slow": {t.source: baselines / t.source for t in EX01.tasks},
             "syntax": {**solutions, "vector_add.cu": broken}}
    seen: dict[str, dict[str, bool]] = {}
    worked: dict[str, Path] = {}
    for i, kind in enumerate(kinds, 1):
        target = submit(pristine, f"s{i:02d}_{kind}", answers=kind != "stub", files=files[kind])
        if learner_copy is not None:
            if kind in worked:
                shutil.copyfile(worked[kind] / f"{ASSIGNMENT}.ipynb", target / f"{ASSIGNMENT}.ipynb")
            else:
                seen[kind] = work_in_learner_copy(target, learner_copy, env)
                worked[kind] = target
        (target / "timestamp.txt").write_text(f"2026-03-{(i - 1) % 28 + 1:02d} 10:00:00.000000 UTC")
    return seen
