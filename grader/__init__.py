"""Silicon-to-Synapse grader: compile, check, time and profile learners' CUDA kernels.

From Python (a notebook cell)::

    from grader import grade
    grade("01")            # returns a GradeResult; shown as HTML in a notebook
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

__all__ = ["grade", "check"]


def grade(exercise: str, submission: str | Path | None = None, tasks: Iterable[str] = (),
          profile: bool = True, progress: bool = True):
    """Grade an exercise and return its :class:`grader.result.GradeResult`.

    In a notebook the result renders as an HTML report; ``result.points`` and
    ``result.task("vector_add").points`` give the score.
    """
    from grader.pipeline import Options, grade as run
    from grader.report import register_notebook_display
    register_notebook_display()

    def say(message: str) -> None:
        print(f"\r… {message:<90}", end="", flush=True)
    result = run(exercise, Options(submission=Path(submission) if submission else None, tasks=tuple(tasks),
                                   profile=profile), progress=say if progress else None)
    if progress:
        print("\r" + " " * 94 + "\r", end="", flush=True)
    return result


def check(exercise: str, prompt: str, answer):
    """Check a derivation answer (see grader.derivations)."""
    from grader.derivations import check as run
    return run(exercise, prompt, answer)
