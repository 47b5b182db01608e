"""On the GPU: every submission of the adversarial catalogue fails, with the reason the
catalogue promises, and never takes the grading down with it.

The catalogue (tests/adversarial/catalogue.toml) is graded in a few gradings rather than one a
case. The cases of one exercise that share their deadlines are graded together, each as a task
of its own in a copy of the exercise (``vector_add__off_by_one_write``, with the exercise's
reference, baseline and sizes); where one of them stops the worker, the exercise's real tasks
follow them with the hidden solutions and must still pass: a crash, a hang or a poisoned CUDA
context costs one task, never the grading. A case marked ``alone`` (it tampers with the process
or the GPU beyond its own output) is graded by itself: its file for the task it attacks, the
hidden solutions for the others. The verdicts are printed as a table at the end:

    pytest -m gpu -k adversarial

Hangs cost the task's deadline, shortened to the catalogue's task_timeout_s through
S2S_TASK_TIMEOUT (and a compile that never ends its compile_timeout_s through
S2S_COMPILE_TIMEOUT); counters are not collected (profile=False).
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

import pytest

from adversarial.catalogue import (Attack, Group, grouped_exercise, load, plan, problems, shown, solution_folder,
                                  task_name, with_the_other_solutions)
from grader.build import cache_dir
from grader.pipeline import Options, grade
from grader.result import ExitCode, GradeResult, TaskResult
from grader.spec import find, solutions_dir

pytestmark = pytest.mark.gpu

ATTACKS = load()


def _param(group: Group):
    marks = [pytest.mark.xfail(reason=a.known_gap, strict=True) for a in group.attacks if a.known_gap]
    return pytest.param(group, id=group.id, marks=marks)


GROUPS = [_param(g) for g in plan(ATTACKS)]





@dataclass
class Verdict:
    case: str
    category: str          # dishonest, broken or correct (catalogue.toml)
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
    reporter.write_line(f"{'case':30} {'category':9} {'verdict':32} {'s':>6}  reason shown "
                        f"(s: the grading's seconds, shared among its cases)")
    for r in rows:
        mark = "" if r.as_promised else "  << NOT AS PROMISED"
        reporter.write_line(f"{r.case:30} {r.category:9} {r.verdict:32} {r.seconds:6.1f}  {r.summary[:100]}{mark}")
    wrong = [r for r in rows if not r.as_promised]
    accepted = [r for r in rows if r.category != "correct" and r.verdict.startswith("passed")]
    reporter.write_line(f"{len(rows)} cases; not as promised: {len(wrong)}; "
                        f"dishonest or broken kernels accepted: {len(accepted)}")


def _record(rows: list[Verdict], attack: Attack, task: TaskResult, seconds: float) -> list[str]:
    found = problems(attack, task)
    verdict = f"{task.status}: {shown(task, attack.shown_in)}"
    rows.append(Verdict(attack.name, attack.category, verdict, task.summary, seconds, not found))
    print(f"\n[{attack.name}] {verdict} ({seconds:.1f} s){'' if not found else ' NOT AS PROMISED'}: "
          f"{task.summary[:160]}", flush=True)
    return found


def _timed_grade(exercise: str, options: Options) -> tuple[GradeResult, float]:
    started = time.perf_counter()
    result = grade(exercise, options)
    return result, time.perf_counter() - started


def _fingerprint() -> dict[str, str]:
    """The digest of every file a later grading reads: the course's exercises, and the build cache."""
    files = [p for p in sorted(find("01").folder.parent.rglob("*")) if p.is_file() and "__pycache__" not in p.parts]
    cache = cache_dir() / "build"
    files += sorted(cache.glob("*/build.json")) + sorted(cache.glob("*/lib.so")) if cache.is_dir() else []
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


@pytest.mark.parametrize("group", GROUPS)
def test_attacks_fail_with_their_reason_and_spare_the_rest(group: Group, verdicts: list[Verdict], tmp_path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Each attacked task fails as promised; every other task of the grading passes with full
    points, whether it is graded before or after the attacks."""
    for name, value in group.limits.items():
        monkeypatch.setenv(name, value)
    if group.alone:
        attack = group.attacks[0]
        exercise, submission = attack.exercise, with_the_other_solutions(attack, tmp_path / "submission")
        names = {attack.task: attack}
    else:
        folder, submission = grouped_exercise(group, tmp_path)
        exercise, names = str(folder), {task_name(a): a for a in group.attacks}
    before = _fingerprint()
    result, seconds = _timed_grade(exercise, Options(submission=submission, profile=False))
    after = _fingerprint()
    changed = sorted(p for p in before if p in after and before[p] != after[p])
    assert not changed, f"{group.id} changed files a later grading reads: {changed[:5]}"

    wrong = []
    for name, attack in names.items():
        found = _record(verdicts, attack, result.task(name), seconds / len(names))
        if found:
            wrong.append(f"{attack.name} ({attack.flaw}):\n  " + "\n  ".join(found))
    assert not wrong, "\n".join(wrong)
    assert result.exit_code == ExitCode.FAILED
    assert not result.notice, f"the grading itself reported a problem: {result.notice}"
    for other in result.tasks:
        if other.name not in names:
            assert other.status == "passed", f"{other.name}, graded beside {group.id}: {other.summary}"
            assert other.points.total == other.points.max

    if group.alone and group.attacks[0].stops_the_worker:
        # The worker died (or its CUDA context did); the next grading must find a healthy GPU.
        attack = group.attacks[0]
        healthy = grade(attack.exercise, Options(submission=solution_folder(attack), tasks=(attack.task,),
                                                 profile=False, timing=False)).task(attack.task)
        assert healthy.status == "passed", f"after {attack.name}, the reference solution: {healthy.summary}"


def test_the_gpu_still_grades_every_reference_solution_afterwards() -> None:
    """Runs last: whatever the catalogue did to the GPU, the reference solutions still pass."""
    exercises = sorted({a.exercise for a in ATTACKS})
    for exercise in exercises:
        folder = solutions_dir() / find(exercise).slug
        result = grade(exercise, Options(submission=folder, profile=False, timing=False))
        for task in result.tasks:
            assert task.status == "passed", f"{exercise} {task.name}: {task.summary}"
