"""`grade course example`: a released exercise with three submissions handed in, for an instructor to
try autograding, feedback and the formgrader on before a class (tests/test_course.py autogrades
such a class end to end)."""
from __future__ import annotations

import filecmp
import os
import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbgrader", reason="nbgrader is not installed: pip install -e '.[course]'")

from grader import course, spec  # noqa: E402
from grader.course_example import STUDENTS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def answer_cells(path: Path) -> list[str]:
    return [c.source for c in nbformat.read(path, as_version=4).cells
            if c.get("metadata", {}).get("nbgrader", {}).get("solution")]


def test_the_example_class_holds_three_submissions_ready_to_autograde(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))))
    done = subprocess.run([sys.executable, "-m", "grader.cli", "course", "example", str(tmp_path / "class")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    exercise = spec.discover()[0]
    name, root = exercise.folder.name, tmp_path / "class"
    assert f"grade course autograde . {name}" in done.stdout
    assert course.submitted_students(root, name) == sorted(STUDENTS)
    release = root / "release" / name
    best, naive, stubs = (root / "submitted" / s / name for s in STUDENTS)
    for task in exercise.tasks:
        assert filecmp.cmp(best / task.source, spec.solutions_dir() / name / task.source, shallow=False)
        assert filecmp.cmp(naive / task.source, exercise.folder / task.baseline, shallow=False)
        assert filecmp.cmp(stubs / task.source, release / task.source, shallow=False)
    notebook = exercise.notebook
    released = answer_cells(release / notebook)
    assert released and answer_cells(stubs / notebook) == released
    for answered in (best, naive):
        cells = answer_cells(answered / notebook)
        assert len(cells) == len(released) and all(a != r for a, r in zip(cells, released))
