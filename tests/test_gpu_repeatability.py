"""On the GPU: a correct kernel is never rejected, and its grade does not depend on luck.

Every exercise's hidden solutions are graded several times in a row, each grading with its own
random inputs (a fresh seed), as a learner would grade them: twice in the everyday suite (the
first grading is the one the grading tests share), 20 times with `--release`, or S2S_REPEATS
times where that is set. Every grading must pass every task, and each task's measured speedup over the naive
baseline may vary by at most 10% (max / min) across the gradings. The spread is printed per task:

    pytest -m gpu -s --release tests/test_gpu_repeatability.py
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

MAX_SPREAD = 1.10          # max / min of one task's speedup across the gradings

EXERCISES = list(discover())


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda ex: ex.id)
def test_solutions_pass_every_grading_with_a_steady_speedup(exercise, request: pytest.FixtureRequest) -> None:
    from test_gpu_grading import graded      # the solutions' grading, shared with the grading tests
    repeats = int(os.environ.get("S2S_REPEATS") or (20 if request.config.getoption("release") else 2))
    folder = solutions_dir() / exercise.slug
    speedups: dict[str, list[float]] = defaultdict(list)
    failures: list[str] = []
    seconds: list[float] = []
    for i in range(repeats):
        started = time.perf_counter()
        result = graded(exercise.id, "solution") if i == 0 else grade(exercise.id, Options(submission=folder,
                                                                                           profile=False))
        seconds.append(time.perf_counter() - started)
        for task in result.tasks:
            if task.status != "passed" or task.points.total != task.points.max:
                failures.append(f"grading {i + 1}, {task.name}: {task.summary}")
            if task.timing is not None:
                speedups[task.name].append(task.timing.speedup)

    print(f"\n{exercise.id}: {repeats} gradings, {statistics.median(seconds):.1f} s each (median)")
    print(f"{'task':16} {'passed':>7} {'min':>9} {'median':>9} {'max':>9} {'max/min':>8}")
    spread = {}
    for name, values in speedups.items():
        spread[name] = max(values) / min(values)
        passed = repeats - sum(1 for f in failures if f", {name}:" in f)
        print(f"{name:16} {passed:>4}/{repeats:<2} {min(values):8.2f}x {statistics.median(values):8.2f}x "
              f"{max(values):8.2f}x {spread[name]:8.3f}")

    assert not failures, "a hidden solution was rejected:\n" + "\n".join(failures)
    assert all(len(v) == repeats for v in speedups.values()), "a grading did not time every task"
    unsteady = {name: s for name, s in spread.items() if s > MAX_SPREAD}
    assert not unsteady, f"speedups vary by more than {MAX_SPREAD:.2f}x (max/min) across gradings: {unsteady}"
