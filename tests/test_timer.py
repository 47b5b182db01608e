"""The timer's busy kernel outlasts a reference point's enqueue: a PyTorch layer dispatched from
Python can take longer to enqueue than the default 0.1 ms, and the events would then time the GPU
waiting for the host.

    pytest tests/test_timer.py              (the cover rule, no GPU)
    pytest -m gpu -s tests/test_timer.py    (the timer itself, on the GPU)
"""
from __future__ import annotations

import statistics
import time

import pytest

from grader.worker.timing import COVER_FACTOR, MAX_COVER_S, busy_cover


def test_the_cover_follows_the_recent_enqueues():
    assert busy_cover([]) == 0.0                          # not seen yet: the default busy kernel
    assert busy_cover([1e-4]) == pytest.approx(COVER_FACTOR * 1e-4)
    # the longest of the last three, so one quick call does not shorten it
    assert busy_cover([9e-4, 3e-4, 1e-4, 2e-4]) == pytest.approx(COVER_FACTOR * 3e-4)
    assert busy_cover([1.0]) == MAX_COVER_S                # a call that blocks the host is not waited for


@pytest.mark.gpu
def test_a_slow_enqueue_is_not_timed_once_covered():
    import torch
    from grader.worker import timing

    flush = torch.ones(30 << 20, dtype=torch.int32, device="cuda")
    timer = timing._Timer(flush, timing.busy_kernel())
    a = torch.randn(1 << 20, device="cuda")

    def quick() -> None:
        a.mul_(1.0)

    def slow() -> None:                 # 0.4 ms on the host before the same small kernel
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 4e-4:
            pass
        a.mul_(1.0)

    def median_event_s(fn, cover: bool) -> float:
        seen: list[float] = []
        times = []
        for _ in range(9):
            times.append(timer(fn, timing.busy_cover(seen) if cover else 0.0)[0])
            seen.append(timer.enqueue_s)
        return statistics.median(times)

    base = median_event_s(quick, cover=False)
    plain = median_event_s(slow, cover=False)
    covered = median_event_s(slow, cover=True)
    print(f"\nkernel alone {base * 1e6:.1f} us; after 0.4 ms of host work: {plain * 1e6:.1f} us with the default "
          f"busy kernel, {covered * 1e6:.1f} us with its cover")
    assert plain > 2e-4, "the default busy kernel was expected to end before 0.4 ms of enqueue"
    assert covered < base + 2e-5, "the covered call still timed the host"


def test_a_spread_of_times_that_read_zero_is_no_spread_not_a_crash() -> None:
    """Events that read 0 (a learner's process can report anything) must reach the physical-floor
    check, not stop the grading with a division by zero."""
    from grader.worker.timing import _spread
    assert _spread([0.0, 0.0, 0.0, 0.0]) == 0.0
    assert _spread([1.0, 1.0, 1.2, 1.0]) == pytest.approx(0.0)
    assert _spread([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(2 / 3)
