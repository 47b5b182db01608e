"""On the GPU: every exercise's hidden solutions pass, untouched stubs fail cleanly,
naive baselines are correct but too slow, and Nsight Compute counters appear.

Run on a GPU machine with `pytest -m gpu`.
"""
from __future__ import annotations

import functools
import re

import pytest

from grader.pipeline import Options, grade
from grader.result import ExitCode, GradeResult
from grader.spec import discover, solutions_dir

pytestmark = pytest.mark.gpu

EXERCISES = [ex.id for ex in discover()]


@functools.cache
def graded(exercise_id: str, who: str) -> GradeResult:
    """One grading per exercise and submitter, shared by the tests below."""
    ex = next(e for e in discover() if e.id == exercise_id)
    folder = {"solution": solutions_dir() / ex.slug, "stub": ex.folder, "baseline": ex.folder / "baselines"}[who]
    return grade(exercise_id, Options(submission=folder, profile=(who == "solution")))


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_solutions_pass_every_task_with_their_speedup(exercise_id: str) -> None:
    result = graded(exercise_id, "solution")
    for t in result.tasks:
        assert t.status == "passed", f"{t.name}: {t.summary}"
        assert t.cases_passed == t.cases_total
        assert t.timing.speedup >= t.timing.min_speedup
        assert t.points.total == t.points.max
        print(f"{exercise_id} {t.name}: {t.timing.speedup:.2f}x the baseline (needs {t.timing.min_speedup:g}x), "
              f"{t.timing.roofline_percent:.0f}% of the roofline")
    assert result.exit_code == ExitCode.PASSED
    assert result.points == result.max_points


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_solutions_show_hardware_counters(exercise_id: str) -> None:
    result = graded(exercise_id, "solution")
    for t in result.tasks:
        assert t.profile is not None and t.profile.available, f"{t.name}: {t.profile and t.profile.message}"
        assert t.profile.kernels, f"{t.name}: no kernel profiled"
        k = t.profile.kernels[0]
        assert k.duration_us > 0 and k.memory_pct is not None and k.achieved_occupancy_pct is not None


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_untouched_stubs_fail_cleanly_with_zero_points(exercise_id: str) -> None:
    result = graded(exercise_id, "stub")
    assert result.exit_code == ExitCode.FAILED
    assert result.points == 0
    for t in result.tasks:
        assert t.status == "failed"
        assert t.build is not None and t.build.ok, "a stub must compile"
        # An output still holds the grader's poison; state updated in place still holds its old value.
        assert "never written" in t.summary or "the state was not updated" in t.summary, t.summary
        assert t.error is None, f"a stub fails on its values, not with an error: {t.error}"


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_baselines_are_correct_but_fail_the_speed_bar(exercise_id: str) -> None:
    result = graded(exercise_id, "baseline")
    for t in result.tasks:
        assert t.correct, f"{t.name}: the naive baseline must be correct: {t.summary}"
        assert t.timing is not None and not t.timing.passed, f"{t.name}: the baseline must fail the speed bar"
        assert t.points.correct == t.points.max_correct and t.points.speed == 0
        assert re.search(r"naive baseline( \(geometric mean over \d+ sizes\))? where", t.summary), t.summary


def test_ex02_solutions_are_correct_at_every_size_without_timing() -> None:
    """A quick check of the GEMM solutions alone: every correctness case, no timing, no counters."""
    ex = next(e for e in discover() if e.id == "02")
    result = grade("02", Options(submission=solutions_dir() / ex.slug, profile=False, timing=False))
    for t in result.tasks:
        assert t.correct, f"{t.name}: {t.summary}"
        assert t.cases_passed == t.cases_total == len(ex.task(t.name).cases), t.name
        assert t.points.correct == t.points.max_correct, t.name


def test_ex04_a_layernorm_backward_that_adds_into_dgamma_fails(tmp_path) -> None:
    """dgamma and dbeta are overwritten, not accumulated (the stub says so): the hidden solution with
    its final write turned into an addition fails on dgamma, because the grader poisons outputs with
    NaN before every call."""
    import shutil
    ex = next(e for e in discover() if e.id == "04")
    folder = tmp_path / "adds"
    shutil.copytree(solutions_dir() / ex.slug, folder)
    source = folder / "layernorm_backward.cu"
    text = source.read_text()
    assert "dgamma[c] = total;" in text
    source.write_text(text.replace("dgamma[c] = total;", "dgamma[c] += total;"))
    result = grade("04", Options(submission=folder, profile=False, timing=False, tasks=("layernorm_backward",)))
    t = result.task("layernorm_backward")
    assert not t.correct and t.points.total == 0
    failing = next(c for c in t.cases if not c.passed)
    assert failing.mismatch is not None and failing.mismatch.output == "dgamma", t.summary
