"""Silicon-to-Synapse grader: compile, check, time and profile learners' CUDA kernels.

From Python (a notebook cell)::

    from grader import grade
    grade("01")            # returns a GradeResult; shown as HTML in a notebook
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

__all__ = ["grade", "check", "show_sass"]


def grade(exercise: str, submission: str | Path | None = None, tasks: Iterable[str] = (),
          profile: bool = True, progress: bool = True):
    """Grade an exercise and return its :class:`grader.result.GradeResult`.

    In a notebook the result renders as an HTML report; ``result.points`` and
    ``result.task("vector_add").points`` give the score.
    """
    from grader.notebook import ProgressLine
    from grader.pipeline import Options, grade as run
    from grader.report import register_notebook_display
    register_notebook_display()
    line = ProgressLine() if progress else None
    result = run(exercise, Options(submission=Path(submission) if submission else None, tasks=tuple(tasks),
                                   profile=profile), progress=line)
    if line is not None:
        line.done(f"graded in {result.seconds:.1f} s")
    return result


def check(exercise: str, prompt: str, answer):
    """Check a derivation answer (see grader.derivations)."""
    from grader.derivations import check as run
    return run(exercise, prompt, answer)


def show_sass(exercise: str, submission: str | Path | None = None, tasks: Iterable[str] = ()):
    """Each kernel's hot loop in SASS, its loads, stores, FMAs and tensor-core instructions marked
    and counted per iteration (see grader.sass); shown as text in a notebook. No GPU needed."""
    from grader.sass import exercise_sass
    return exercise_sass(exercise, Path(submission) if submission else None, tuple(tasks))
