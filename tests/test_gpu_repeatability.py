"""On the GPU: a correct kernel is never rejected, and its grade does not depend on luck.

Every exercise's hidden solutions are graded S2S_REPEATS times in a row (5 unless set; 20 before
a release), each grading with its own random inputs (a fresh seed), as a learner would grade
them. Every grading must pass every task, and each task's measured speedup over the naive
baseline may vary by at most 10% (max / min) across the gradings. The spread is printed per task:

    S2S_REPEATS=20 pytest -m gpu -s tests/test_gpu_repeatability.py
"""
from __future__ import annotations

import os
import statistics
import time
from collections import defaultdict

import pytest

from grader.pipeline import Options, grade
from grader.spec import discover, solutions_dir

pytestmark = pytest.mark.gpu

REPEATS = int(os.environ.get("S2S_REPEATS", "5"))
MAX_SPREAD = 1.10          # max / min of one task's speedup across the gradings

EXERCISES = list(discover())


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda ex: ex.id)
def test_solutions_pass_every_grading_with_a_steady_speedup(exercise) -> None:
    folder = solutions_dir() / exercise.slug
    speedups: dict[str, list[float]] = defaultdict(list)
    failures: list[str] = []
    seconds: list[float] = []
    for i in range(REPEATS):
        started = time.perf_counter()
        result = grade(exercise.id, Options(submission=folder, profile=False))
        seconds.append(time.perf_counter() - started)
        for task in result.tasks:
            if task.status != "passed" or task.points.total != task.points.max:
                failures.append(f"grading {i + 1}, {task.name}: {task.summary}")
            if task.timing is not None:
                speedups[task.name].append(task.timing.speedup)

    print(f"\n{exercise.id}: {REPEATS} gradings, {statistics.median(seconds):.1f} s each (median)")
    print(f"{'task':16} {'passed':>7} {'min':>9} {'median':>9} {'max':>9} {'max/min':>8}")
    spread = {}
    for name, values in speedups.items():
        spread[name] = max(values) / min(values)
        passed = REPEATS - sum(1 for f in failures if f", {name}:" in f)
        print(f"{name:16} {passed:>4}/{REPEATS:<2} {min(values):8.2f}x {statistics.median(values):8.2f}x "
              f"{max(values):8.2f}x {spread[name]:8.3f}")

    assert not failures, "a hidden solution was rejected:\n" + "\n".join(failures)
    assert all(len(v) == REPEATS for v in speedups.values()), "a grading did not time every task"
    unsteady = {name: s for name, s in spread.items() if s > MAX_SPREAD}
    assert not unsteady, f"speedups vary by more than {MAX_SPREAD:.2f}x (max/min) across gradings: {unsteady}"
