"""What the graded cells of a released notebook call.

nbgrader scores a test cell by its outputs alone: an error gives zero points, anything written to
stderr gives zero points too, and a number left as the cell's value is read as partial credit.
So every helper here

* decides by the grader's result objects, never by printed text;
* says why a cell loses its points in a sentence the learner can act on; the kernel cells assert
  on that sentence themselves, so the feedback shows it under the cell, not a traceback into the
  grader (the one way a cell should lose its points is that assertion);
* keeps warnings and stderr of the grader, its tools and the learner's code out of the cell's
  stderr: they are shown on stdout as notes instead;
* returns ``None`` or a result object, never a bare number.

In a released notebook::

    from grader.notebook import grade
    result = grade("01", submission=".", profile=False)      # locked, not graded
    result

    from grader.notebook import correctness_problem           # graded: correctness points
    problem = correctness_problem(result, "vector_add")
    assert problem is None, problem

    from grader.notebook import checked
    verdict = checked("01", "relu_jacobians", {...})         # graded: a derivation prompt
    assert verdict.passed, "..."

    from grader.notebook import grade_model                   # the capstone: locked, not graded
    result_small = grade_model("small", submission="..")     # a model of capstone.toml
    from grader.notebook import bar_problem                   # graded: one bar of the model
    problem = bar_problem(result_small, "accuracy")          # a bar id of its points
    assert problem is None, problem
"""
from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from grader.result import GradeResult, TaskResult


@dataclass
class Captured:
    """What the code inside :func:`quiet` wrote to stderr or raised as warnings."""

    warnings: list[str] = field(default_factory=list)
    stderr: str = ""

    def notes(self) -> list[str]:
        lines = [f"note: {w}" for w in self.warnings]
        lines += [f"note: {line}" for line in self.stderr.splitlines() if line.strip()]
        return lines


@contextlib.contextmanager
def quiet() -> Iterator[Captured]:
    """Capture warnings and stderr, Python's and the file descriptor's (child processes, C code)."""
    captured = Captured()
    sink = io.StringIO()
    fd_copy = fd_file = None
    try:
        sys.stderr.flush()
    except (AttributeError, ValueError, OSError):
        pass
    try:
        fd_file = tempfile.TemporaryFile(mode="w+b")
        fd_copy = os.dup(2)
        os.dup2(fd_file.fileno(), 2)
    except OSError:       # no fd 2 to redirect (an embedded interpreter): Python-level capture still works
        fd_copy = None
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stderr(sink):
            warnings.simplefilter("always")
            yield captured
    finally:
        if fd_copy is not None:
            os.dup2(fd_copy, 2)
            os.close(fd_copy)
        raw = b""
        if fd_file is not None:
            fd_file.seek(0)
            raw = fd_file.read()
            fd_file.close()
        captured.warnings = [f"{w.category.__name__}: {w.message}" for w in caught]
        captured.stderr = sink.getvalue() + raw.decode("utf-8", errors="replace")


def _show_notes(captured: Captured) -> None:
    for line in captured.notes():
        print(line)


def _display(obj: Any) -> None:
    try:
        from IPython.display import display
    except ImportError:       # plain Python: the text form is what there is
        print(obj)
        return
    display(obj)


class ProgressLine:
    """One line that updates in place while the grader works, then says how long it took: a display
    that a notebook stores as one line, or a terminal line rewritten with \\r; nothing elsewhere
    (a log file gets no wall of half-lines)."""

    def __init__(self) -> None:
        self.handle = None
        self.terminal = False
        try:
            from IPython import get_ipython
            from IPython.display import display
            if get_ipython() is not None:
                self.handle = display({"text/plain": "… starting"}, raw=True, display_id=True)
                return
        except ImportError:
            pass
        self.terminal = sys.stdout.isatty()

    def __call__(self, message: str) -> None:
        if self.handle is not None:
            self.handle.update({"text/plain": f"… {message}"}, raw=True)
        elif self.terminal:
            print(f"\r\033[K… {message}", end="", flush=True)

    def done(self, text: str = "") -> None:
        if self.handle is not None:
            self.handle.update({"text/plain": text}, raw=True)
        elif self.terminal:
            print("\r\033[K", end="", flush=True)


def grade(exercise: str, submission: str | Path = ".", profile: bool = False, tasks: tuple[str, ...] = ()
          ) -> GradeResult:
    """Grade the kernels of ``exercise`` in ``submission`` (the notebook's folder) once, quietly.

    A usage error (unknown exercise, missing folder) raises; everything the submission does wrong
    is in the returned result, which the graded cells below it assert on.
    """
    from grader.pipeline import Options, grade as run
    from grader.report import register_notebook_display

    register_notebook_display()
    progress = ProgressLine()
    started = time.perf_counter()
    with quiet() as captured:
        result = run(exercise, Options(submission=Path(submission), tasks=tuple(tasks), profile=profile),
                     progress=progress)
    progress.done(f"graded in {time.perf_counter() - started:.1f} s")
    _show_notes(captured)
    return result


def _find_task(result: Any, name: str) -> tuple[TaskResult | None, str | None]:
    """The task's result, or why there is none."""
    if not isinstance(result, GradeResult):
        return None, "There is no grading result to check: run the grading cell above first (it sets `result`)."
    try:
        return result.task(name), None
    except KeyError:
        return None, f"The grading result has no task {name!r}: the grading cell above must grade every task."


def _why_not(result: GradeResult, task: TaskResult) -> str:
    if task.status == "not run" and result.notice:
        return f"{task.name} was not run. {result.notice}"
    return f"{task.name}: {task.summary or task.status}"


def correctness_problem(result: GradeResult, task: str) -> str | None:
    """None when ``task`` computed the right result on every correctness case, else why not.

    The graded cells assert on it themselves (``assert problem is None, problem``), so that a
    failure shows the learner this sentence under their cell, not a traceback into the grader."""
    t, missing = _find_task(result, task)
    if t is None:
        return missing
    if not (t.correct and t.points is not None and t.points.correct >= t.points.max_correct):
        return _why_not(result, t)
    return None


def speed_problem(result: GradeResult, task: str) -> str | None:
    """None when ``task`` is correct and at least as fast as its speed bar demands, else why not."""
    t, missing = _find_task(result, task)
    if t is None:
        return missing
    if t.points is not None and t.points.max_speed > 0 and t.points.speed >= t.points.max_speed:
        return None
    if t.correct and t.timing is not None:
        return f"{t.name}: {t.timing.speedup:.2f}x the naive baseline, where {t.timing.min_speedup:g}x is required"
    if t.correct:
        return f"{t.name}: correct, but it was not timed: {t.summary}"
    return "Speed points need a correct kernel first. " + _why_not(result, t)


def require_correct(result: GradeResult, task: str) -> None:
    """Raise AssertionError, saying why, unless ``task`` is correct on every case."""
    problem = correctness_problem(result, task)
    if problem:
        raise AssertionError(problem)


def require_speed(result: GradeResult, task: str) -> None:
    """Raise AssertionError, saying why, unless ``task`` is correct and fast enough."""
    problem = speed_problem(result, task)
    if problem:
        raise AssertionError(problem)


def checked(exercise: str, prompt: str, answer: Any):
    """Check a derivation answer quietly, show the verdict and return the CheckResult.

    The learner's functions run inside; their warnings are shown as notes on stdout. A prompt id
    that does not exist raises ValueError: that is a mistake in the notebook, not in the answer.
    """
    from grader.derivations import check

    with quiet() as captured:
        verdict = check(exercise, prompt, answer)
    _show_notes(captured)
    _display(verdict)
    return verdict


def grade_model(model: str, submission: str | Path = "..", out: str | Path | None = None) -> Any:
    """Train and grade the capstone's ``model`` on the kernels of the exercise folders in
    ``submission`` (by default beside the notebook's), quietly, and return the ModelResult that the
    graded cells below it assert on. Nothing trains unless every kernel is ready on a GPU: the
    PyTorch twin alone earns no bar (``grade model`` in a terminal shows it)."""
    from grader.model import grade_model as run

    progress = ProgressLine()
    started = time.perf_counter()
    with quiet() as captured:
        result = run(submission=submission, out=out or f"model-report-{model}", say=progress, model=model,
                     twin_alone=False)
    progress.done(f"graded in {time.perf_counter() - started:.1f} s")
    _show_notes(captured)
    return result


def bar_problem(result: Any, bar: str) -> str | None:
    """None when the model trained on the learner's kernels meets the bar ``bar`` (its id in
    capstone.toml's points), else why not, in a sentence."""
    from grader.model import ModelResult

    if not isinstance(result, ModelResult):
        return "There is no model to check: run the cell above first (it trains the model on your kernels)."
    waiting = [k for k in result.kernels if k.status in ("missing", "failed")]
    if waiting:
        return ("Nothing was trained: these kernels are missing or not yet correct, and nothing stands in for "
                "them: " + "; ".join(f"{k.task} (exercise {k.exercise}): {k.summary}" for k in waiting))
    if any(k.status == "not run" for k in result.kernels):
        return f"Nothing was trained on your kernels. {result.notice or 'They could not be checked here.'}"
    if result.run.fatal:
        return f"The training did not finish: {result.run.fatal}"
    if result.run.error:
        return f"Training on your kernels stopped: {result.run.error}"
    found = next((b for b in result.bars if b.id == bar), None)
    if found is None:
        return f"The model's report has no bar {bar!r}: its bars are {', '.join(b.id for b in result.bars)}."
    if found.passed is None:
        return f"{found.what}: not measured. {result.run.notice or result.notice}".strip()
    if not found.passed:
        return f"{found.what}: needed {found.needed}, got {found.got}."
    return None
