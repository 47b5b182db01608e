"""What the runner tells a learner when their code ran out of time while printing."""
from __future__ import annotations

import pytest

from grader.protocol import TaskOutcome
from grader.runner import _blame_the_output

STOPPED = "stopped after 15 s while checking case 7/8 (n=33554433): an endless loop"


@pytest.mark.parametrize("printed, blamed", [(0, False), (200_000, False), (45 << 20, True)])
def test_a_timeout_after_megabytes_of_output_blames_the_printing(printed: int, blamed: bool) -> None:
    result = TaskOutcome.failure("vector_add", "timeout", STOPPED)
    _blame_the_output(result, printed)
    message = result.error.message
    assert message.startswith(STOPPED)
    assert ("printed 45 MB by then: printf, above all in a kernel, is slow" in message) == blamed


def test_other_failures_are_left_alone() -> None:
    result = TaskOutcome.failure("vector_add", "crash", "the process was killed by SIGSEGV")
    _blame_the_output(result, 45 << 20)
    assert result.error.message == "the process was killed by SIGSEGV"
    _blame_the_output(None, 45 << 20)   # the worker died before any task started
