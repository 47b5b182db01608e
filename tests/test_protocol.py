"""The contract between the grading process and its GPU worker: what one side writes, the other reads."""
from __future__ import annotations

import math

from grader.protocol import (CaseResult, Ceilings, Done, Fatal, Job, Libraries, Mismatch, Problem, Progress,
                             SizeTiming, TaskDone, TaskOutcome, TaskStart, parse_event)


def test_a_job_round_trips_with_its_libraries():
    job = Job(mode="grade", exercise_folder="/x/01_foundations", order=["vector_add", "transpose"], seed=2**62 + 5,
              tasks={"vector_add": Libraries("/c/a.so", "/c/b.so"), "transpose": Libraries("/c/t.so", "/c/u.so")},
              timing=False, device=3)
    back = Job.from_json(job.to_json())
    assert back == job
    assert isinstance(back.tasks["transpose"], Libraries)


def test_every_event_round_trips_through_a_line():
    outcome = TaskOutcome(
        "adamw",
        cases=[CaseResult("n=1", {"n": 1, "lr": 0.001}, True, 0.25),
               CaseResult("n=3; call 2 of 4 (step=2)", {"n": 3}, False, 0.5, None,
                          Mismatch("p[1]", [2], 1.5, math.inf, 1, 3, "not finite", 1e-6))],
        correct=True,
        timing=[SizeTiming("n=5", {"n": 5}, 9, 1e-3, 2e-3, 0.01, 0.02, 1.1e-3, 10.0, 40.0, None)],
    )
    events = [Ceilings(4.2e12, 62914560, "NVIDIA H200"), TaskStart("adamw"),
              Progress("adamw", "time", "n=5", 1, 2), TaskDone("adamw", outcome, sticky=True),
              Fatal("ImportError: no cupy", "Traceback ..."), Done()]
    for event in events:
        line = event.to_line()
        assert line.endswith("\n") and "\n" not in line[:-1]
        assert parse_event(line.encode()) == event


def test_a_failure_is_an_outcome_with_its_problem():
    failed = TaskOutcome.failure("softmax", "timeout", "stopped after 60 s")
    assert failed.error == Problem("timeout", "stopped after 60 s") and not failed.correct and failed.cases == []
    assert parse_event(TaskDone("softmax", failed).to_line()).result.error.kind == "timeout"


def test_what_is_not_an_event_is_ignored():
    for line in (b"", b"hello", b'{"event": "unknown"}', b'{"event": "task_start"}', b"[1, 2]", b'{"no": 1}'):
        assert parse_event(line) is None
