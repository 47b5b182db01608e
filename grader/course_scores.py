"""Autograding a class with nbgrader: the checkout a course grades with, the submitted students,
their scores from the gradebook, and the grades' export."""
from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from grader.course_notebook import CourseError
from grader.spec import learner_copy, repo_root


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
