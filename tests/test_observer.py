"""The observer: the checker's own measure of the GPU time a call took in the learner's process,
from the pauses in a clock-reading loop of its own context (grader.worker.observer).

    pytest tests/test_observer.py               (the arithmetic, no GPU)
    pytest -m gpu -s tests/test_observer.py     (the observer against known work in another process)
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import textwrap

import pytest

from grader.worker.observer import CLOCK_NOISE_REL, CLOCK_NOISE_S, Gaps, judge_remote, observed_times, switch_cost

US = 1e-6


def test_the_observers_counters_read_as_seconds_and_pauses() -> None:
    assert Gaps.read([0, 0]) == Gaps(0.0, 0)
    assert Gaps.read([2_600_000, 2, 1, 0]) == Gaps(pytest.approx(2.6e-3), 2)


def test_a_switch_costs_the_smaller_of_the_trusted_and_the_recent_figure() -> None:
    empty = [Gaps(300 * US, 1)] * 5
    assert switch_cost(empty, None) == pytest.approx(300 * US)
    assert switch_cost(empty, 290 * US) == pytest.approx(290 * US)
    # A learner's process that slows its empty calls would make its own calls look shorter: the
    # figure measured before its code loaded caps the cost.
    assert switch_cost([Gaps(900 * US, 1)] * 5, 290 * US) == pytest.approx(290 * US)
    assert switch_cost([Gaps(0.0, 0)] * 5, None) == 0.0               # nothing seen: nothing taken off


def test_every_pause_is_charged_one_switch() -> None:
    assert observed_times([Gaps(400 * US, 1), Gaps(3.2e-3, 2), Gaps(0.0, 0)], 300 * US) == \
        pytest.approx([100 * US, 2.6e-3, 0.0])
    assert observed_times([Gaps(100 * US, 1)], 300 * US) == [0.0]      # never below nothing


@pytest.mark.parametrize("events, observed, want, clock", [
    ([100 * US] * 8, [99 * US] * 8, 100 * US, "events"),            # they agree: the finer events stand
    ([257 * US] * 8, [274 * US] * 8, 257 * US, "events"),           # within the switch's share of the margin
    ([10 * US] * 8, [20 * US] * 8, 10 * US, "events"),
    ([1 * US] * 8, [90 * US] * 8, 90 * US, "grader"),               # events forged or work hidden from them
    ([200 * US] * 8, [260 * US] * 8, 260 * US, "grader"),
    ([float("nan")] * 8, [90 * US] * 8, 90 * US, "grader"),         # nonsense reported
    ([5e-3] * 8, [2.9e-3] * 8, 2.9e-3, "grader"),                   # events that counted the observer's slices
])
def test_the_observer_overrules_events_it_disagrees_with(events, observed, want, clock) -> None:
    learner_s, observed_s, got_clock = judge_remote(events, observed)
    assert (learner_s, got_clock) == (pytest.approx(want), clock)
    assert observed_s == pytest.approx(statistics.median(observed))


# -- on the GPU ---------------------------------------------------------------------------------

class Process:
    """Another process with its own CUDA context that does known work on request."""

    def __init__(self) -> None:
        pytest.importorskip("cupy")
        child = r"""
        import json, sys
        import cupy
        copy = cupy.RawKernel(
            "extern \"C\" __global__ void copy(const int4* src, int4* dst, long long n) {"
            "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;"
            "       i += (long long)gridDim.x * blockDim.x) dst[i] = src[i];"
            "}", "copy")
        spin = cupy.RawKernel(
            "extern \"C\" __global__ void spin(long long cycles) {"
            "  long long t = clock64(); while (clock64() - t < cycles) { }"
            "}", "spin")
        src = cupy.zeros(1 << 30, dtype=cupy.uint8)          # 1 GiB
        dst = cupy.empty_like(src)
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        WORK = {
            "empty": [],
            "copy 16 MB": [16 << 20],
            "copy 256 MB": [256 << 20],
            "20 copies of 16 MB": [16 << 20] * 20,
            "4 copies of 1 GB": [1 << 30] * 4,
        }
        print("ready", flush=True)
        for line in sys.stdin:
            request = json.loads(line)
            if request.get("cover"):            # alone: keep the GPU busy while the host enqueues
                spin((264,), (1024,), (cupy.int64(1_000_000),))
            start.record()
            for n in WORK[request.get("work", "empty")]:
                copy((1056,), (512,), (src, dst, cupy.int64(n // 16)))
            end.record()
            end.synchronize()
            print(json.dumps({"event_s": cupy.cuda.get_elapsed_time(start, end) * 1e-3}), flush=True)
        """
        self.proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(child)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        assert self.proc.stdout.readline().strip() == "ready"

    def request(self, **fields) -> dict:
        self.proc.stdin.write(json.dumps(fields) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.mark.gpu
def test_the_observer_times_another_process_as_its_own_events_would() -> None:
    """Each piece of work, timed by its own process's events while nothing else runs, and by the
    observer in this process: the two agree within the judge's margin. Past one time slice (2.1 ms
    on an H100) the events also count the observer's slices; the observer does not."""
    from grader.worker.observer import calibrate, observer
    other = Process()
    try:
        switch_s = calibrate(other)
        print(f"\nswitch to the other process and back: {switch_s * 1e6:.1f} us")
        for work in ("copy 16 MB", "copy 256 MB", "20 copies of 16 MB", "4 copies of 1 GB"):
            alone = statistics.median(other.request(op="call", work=work, cover=True)["event_s"] for _ in range(9))
            seen = [observer().observe(lambda: other.request(op="call", work=work)) for _ in range(9)]
            observed = statistics.median(observed_times([g for _, g in seen], switch_s))
            events = statistics.median(r["event_s"] for r, _ in seen)
            print(f"{work:20}  alone {alone * 1e6:8.1f} us   observed {observed * 1e6:8.1f} us   "
                  f"events while observed {events * 1e6:8.1f} us   pauses {seen[0][1].count}")
            assert abs(observed - alone) <= max(CLOCK_NOISE_S, CLOCK_NOISE_REL * alone), work
    finally:
        other.close()


@pytest.mark.parametrize("events_us, observed_us, note, why", [
    (1.0, 7000.0, True, "work ran outside the events"),                  # forged, or a hidden stream
    (5000.0, 2900.0, False, "also counted the slices the GPU gave the grader's own process"),  # cut by slices
])
def test_the_learner_is_told_when_and_why_the_graders_clock_stood(events_us, observed_us, note, why) -> None:
    """What the learner reads: the summary says the speed came from the grader's clock when the
    events missed work, and the report's line under the timing says why the events were overruled."""
    from grader.limits import Limits
    from grader.protocol import SizeTiming, TaskOutcome
    from grader.report import clock_line
    from grader.result import CaseResult, TaskResult
    from grader.spec import find
    from grader.verdict import apply_run

    task = find("01").task("vector_add")
    timing = SizeTiming(label="n=67108864", case={"n": 67108864}, reps=9, learner_s=observed_us * US,
                        baseline_s=7.2e-3, learner_spread=0.0, baseline_spread=0.0, learner_wall_s=observed_us * US,
                        flops=0, bytes=0, learner_events_s=events_us * US, clock="grader")
    cases = [CaseResult(c.describe(), c.to_dict(), True, 0.001) for c in task.cases]
    tr = TaskResult(task.name, task.source, "not run", "", cases_total=len(cases))
    apply_run(tr, task, TaskOutcome(task.name, cases, correct=True, timing=[timing]), Limits())
    assert tr.summary.startswith(f"correct ({len(cases)}/{len(cases)})")
    assert ("by the grader's own clock: your CUDA events missed part of the work" in tr.summary) == note
    line = clock_line(tr.timing.sizes[0], several=False)
    assert line.startswith("The grader's own clock measured") and why in line


def test_gpu_time_taken_between_calls_is_reported_only_beyond_noise(monkeypatch) -> None:
    """After a call the learner's process is stopped; a pause the observer sees then is work a
    thread of its own left on the GPU. Pauses below a switch's length are not taken for it."""
    from grader.worker import observer as observing

    for total_s, count, want in [(0.0, 0, 0.0), (10 * US, 1, 0.0), (2.4e-3, 1, 2.4e-3)]:
        class Seen:
            def observe(self, call):
                return call(), Gaps(total_s, count)
        monkeypatch.setattr(observing, "observer", Seen)
        monkeypatch.setattr(observing, "IDLE_PROBE_S", 0.0)
        assert observing.leftover() == pytest.approx(want)
