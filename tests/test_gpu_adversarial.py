"""On the GPU: every submission of the adversarial catalogue fails, with the reason the
catalogue promises, and never takes the grading down with it.

For each case (tests/adversarial/catalogue.toml) the attacked task is graded twice: alone,
then as part of the whole exercise next to the hidden solutions of the other tasks, which
must still pass: a crash, a hang or a poisoned CUDA context costs one task, never the
grading. After every case that kills the worker, a grading of the task's reference solution
shows that the GPU is usable again. The verdicts are printed as a table at the end:

    pytest -m gpu -k adversarial

Hangs cost the task's deadline, shortened to the catalogue's task_timeout_s through
S2S_TASK_TIMEOUT; counters are not collected (profile=False).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import pytest

from adversarial.catalogue import (Attack, load, problems, shown, solution_folder, with_compile_deadline,
                                   with_the_other_solutions)
from grader import pipeline
from grader.build import compile_cuda
from grader.pipeline import Options, grade
from grader.result import ExitCode, GradeResult, TaskResult
from grader.spec import find, solutions_dir

pytestmark = pytest.mark.gpu

ATTACKS = load()


def _case(attack: Attack):
    marks = [pytest.mark.xfail(reason=attack.known_gap, strict=True)] if attack.known_gap else []
    return pytest.param(attack, id=attack.name, marks=marks)


CASES = [_case(a) for a in ATTACKS]


@dataclass
class Verdict:
    case: str
    graded: str            # "alone", or "whole": the exercise with the other tasks solved
    verdict: str
    summary: str
    seconds: float
    as_promised: bool


@pytest.fixture(scope="module")
def verdicts(request: pytest.FixtureRequest):
    """Collects one row per grading and prints them as a table when the module is done."""
    rows: list[Verdict] = []
    yield rows
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or not rows:
        return
    reporter.write_sep("=", "adversarial verdicts")
    reporter.write_line(f"{'case':28} {'graded':6} {'verdict':32} {'s':>6}  reason shown")
    for r in rows:
        mark = "" if r.as_promised else "  << NOT AS PROMISED"
        reporter.write_line(f"{r.case:28} {r.graded:6} {r.verdict:32} {r.seconds:6.1f}  {r.summary[:90]}{mark}")


def _limits(attack: Attack, monkeypatch: pytest.MonkeyPatch) -> None:
    if attack.task_timeout_s:
        monkeypatch.setenv("S2S_TASK_TIMEOUT", f"{attack.task_timeout_s:g}")
    if attack.compile_timeout_s:
        monkeypatch.setattr(pipeline, "compile_cuda", with_compile_deadline(compile_cuda, attack.compile_timeout_s))


def _record(rows: list[Verdict], attack: Attack, graded: str, task: TaskResult, seconds: float) -> list[str]:
    found = problems(attack, task)
    verdict = f"{task.status}: {shown(task, attack.shown_in)}"
    rows.append(Verdict(attack.name, graded, verdict, task.summary, seconds, not found))
    print(f"\n[{attack.name} {graded}] {verdict} ({seconds:.1f} s){'' if not found else ' NOT AS PROMISED'}: "
          f"{task.summary[:160]}", flush=True)
    return found


def _timed_grade(exercise: str, options: Options) -> tuple[GradeResult, float]:
    started = time.perf_counter()
    result = grade(exercise, options)
    return result, time.perf_counter() - started


@pytest.mark.parametrize("attack", CASES)
def test_attack_fails_with_its_reason(attack: Attack, verdicts: list[Verdict],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    _limits(attack, monkeypatch)
    result, seconds = _timed_grade(attack.exercise, Options(submission=attack.folder, tasks=(attack.task,),
                                                            profile=False))
    task = result.task(attack.task)
    found = _record(verdicts, attack, "alone", task, seconds)
    assert not found, f"{attack.name} ({attack.flaw}):\n" + "\n".join(found)
    assert result.exit_code == ExitCode.FAILED
    assert not result.notice, f"the grading itself reported a problem: {result.notice}"

    if attack.stops_the_worker:
        # The worker died (or its CUDA context did); the next grading must find a healthy GPU.
        healthy = grade(attack.exercise, Options(submission=solution_folder(attack), tasks=(attack.task,),
                                                 profile=False, timing=False)).task(attack.task)
        assert healthy.status == "passed", f"after {attack.name}, the reference solution: {healthy.summary}"


@pytest.mark.parametrize("attack", CASES)
def test_the_other_tasks_of_the_grading_still_pass(attack: Attack, verdicts: list[Verdict], tmp_path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _limits(attack, monkeypatch)
    folder = with_the_other_solutions(attack, tmp_path / "submission")
    result, seconds = _timed_grade(attack.exercise, Options(submission=folder, profile=False))
    task = result.task(attack.task)
    found = _record(verdicts, attack, "whole", task, seconds)
    assert not found, f"{attack.name} ({attack.flaw}), graded with the other tasks:\n" + "\n".join(found)
    others = [t for t in result.tasks if t.name != attack.task]
    for other in others:
        assert other.status == "passed", f"{other.name}, graded after {attack.name}: {other.summary}"
        assert other.points.total == other.points.max


def test_the_gpu_still_grades_every_reference_solution_afterwards() -> None:
    """Runs last: whatever the catalogue did to the GPU, the reference solutions still pass."""
    exercises = sorted({a.exercise for a in ATTACKS})
    for exercise in exercises:
        folder = solutions_dir() / find(exercise).slug
        result = grade(exercise, Options(submission=folder, profile=False, timing=False))
        for task in result.tasks:
            assert task.status == "passed", f"{exercise} {task.name}: {task.summary}"
