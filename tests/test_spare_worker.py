"""A worker started ahead of its grading (the spare): it imports its libraries while nothing waits,
then takes the next plain grading's job; every grading still runs in a process of its own."""
from __future__ import annotations

import time

import pytest

from grader import runner
from grader.protocol import Libraries
from grader.spec import find


@pytest.fixture
def fake_worker(monkeypatch, tmp_path):
    monkeypatch.setattr(runner, "WORKER_MODULE", "tests.fake_worker")
    ready = tmp_path / "ready"
    monkeypatch.setenv("S2S_FAKE_READY", str(ready))
    runner._discard_spare()
    yield ready
    runner._discard_spare()


def _grade(launch=runner.Launch()):
    ex = find("01")
    libs = {"vector_add": Libraries("/nonexistent/lib.so", "/nonexistent/base.so")}
    return runner.run_worker(ex, ["vector_add"], libs, seed=1, launch=launch)


def _graded_by(outcome) -> int:
    return int(outcome.results["vector_add"].cases[0].label)


def test_a_grading_takes_the_spare_that_was_started_before_it(fake_worker):
    runner.prestart()
    spare = runner._spare.proc.pid
    runner.prestart()                                  # one is waiting already: nothing new
    assert runner._spare.proc.pid == spare
    time.sleep(0.5)
    outcome = _grade()
    assert not outcome.fatal and outcome.results["vector_add"].correct
    assert _graded_by(outcome) == spare
    assert runner._spare is None                       # taken: the next grading starts its own
    again = _grade()
    assert _graded_by(again) != spare


def test_the_spare_was_ready_before_its_job_came(fake_worker):
    runner.prestart()
    time.sleep(1.0)
    asked = time.time()
    _grade()
    pid, ready_at = fake_worker.read_text().split()
    assert float(ready_at) < asked                     # its imports were done while nothing waited


def test_a_sanitizer_run_or_a_changed_environment_does_not_take_the_spare(fake_worker, monkeypatch):
    runner.prestart()
    spare = runner._spare.proc
    outcome = _grade(runner.Launch(mode="grade", env=(("S2S_X", "1"),)))
    assert _graded_by(outcome) != spare.pid
    assert spare.poll() is not None                    # the unsuitable spare was stopped
    runner.prestart()
    monkeypatch.setenv("S2S_SOMETHING_NEW", "1")
    spare = runner._spare.proc
    assert _graded_by(_grade()) != spare.pid


def test_a_dead_spare_is_replaced(fake_worker):
    runner.prestart()
    spare = runner._spare.proc
    spare.kill()
    spare.wait()
    outcome = _grade()
    assert outcome.results["vector_add"].correct and _graded_by(outcome) != spare.pid
