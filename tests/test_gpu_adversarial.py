"""On the GPU: every submission of the adversarial catalogue fails, with the reason the
catalogue promises, and never takes the grading down with it.

For each case (tests/adversarial/catalogue.toml) the whole exercise is graded: the case's
file for the task it attacks, the hidden solutions for the other tasks, which must still pass:
a crash, a hang or a poisoned CUDA context costs one task, never the grading. After every case that kills the worker, a grading of the task's reference solution
shows that the GPU is usable again. The verdicts are printed as a table at the end:

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

from adversarial.catalogue import Attack, load, problems, shown, solution_folder, with_the_other_solutions
from grader.build import cache_dir
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
    reporter.write_line(f"{'case':30} {'category':9} {'verdict':32} {'s':>6}  reason shown")
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


@pytest.mark.parametrize("attack", CASES)
def test_attack_fails_with_its_reason_and_spares_the_rest(attack: Attack, verdicts: list[Verdict], tmp_path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole exercise is graded: the attacked task from the case, every other task from the
    hidden solutions. The attacked task fails as promised; the others pass with full points,
    whether they are graded before or after it."""
    for name, value in attack.limits().items():
        monkeypatch.setenv(name, value)
    folder = with_the_other_solutions(attack, tmp_path / "submission")
    before = _fingerprint()
    result, seconds = _timed_grade(attack.exercise, Options(submission=folder, profile=False))
    after = _fingerprint()
    changed = sorted(p for p in before if p in after and before[p] != after[p])
    assert not changed, f"{attack.name} changed files a later grading reads: {changed[:5]}"
    task = result.task(attack.task)
    found = _record(verdicts, attack, task, seconds)
    assert not found, f"{attack.name} ({attack.flaw}):\n" + "\n".join(found)
    assert result.exit_code == ExitCode.FAILED
    assert not result.notice, f"the grading itself reported a problem: {result.notice}"
    for other in result.tasks:
        if other.name != attack.task:
            assert other.status == "passed", f"{other.name}, graded beside {attack.name}: {other.summary}"
            assert other.points.total == other.points.max

    if attack.stops_the_worker:
        # The worker died (or its CUDA context did); the next grading must find a healthy GPU.
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
