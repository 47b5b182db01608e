"""The observer: the checker's own measure of the GPU time a call took in the learner's process.

One thread of the checker's context reads the GPU's clock (%globaltimer) in a loop while the call
runs. Contexts of different processes share the GPU by time slices, never at once: while the
learner's context runs, the loop is switched out and its clock jumps. The jumps, summed, less what
a switch to an empty call costs, are the time the GPU gave the learner's process, measured where
that process cannot reach. Measured on an H100: an empty call costs 292.6 us of pause, constant to
1 us; work of 10 us to 1 ms adds its own length to within 1 us; copy-engine work counts too; a time
slice lasts 2.1 ms, so a longer call is cut into several pauses.
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable, NamedTuple

CLOCK_NOISE_S = 25e-6              # the observer overrules the learner's events beyond this,
CLOCK_NOISE_REL = 0.05             # ... and this share of the event time (see judge_remote)
GAP_NS = 3000                      # a pause this long in the observer's clock: another context had the GPU
CALIBRATION_CALLS = 15             # empty calls that measure a switch's cost, before any learner code
IDLE_PROBE_S = 4.5e-3              # longer than two time slices: a context with work left gets the GPU
LEFTOVER_S = 50e-6                 # pauses this long while the learner's process is stopped: its work


def clean_events(events: list[float]) -> list[float]:
    """Event times as reported, with NaN or a negative time (nonsense from the learner's process)
    read as nothing."""
    return [e if e == e and e >= 0 else 0.0 for e in events]


def switch_cost(empty: "list[Gaps]", trusted: float | None) -> float:
    """What one pause of the observer costs beyond the learner's work (switching contexts, and
    noticing that the learner's went idle): the empty calls of this size, or the calibration made
    before any learner code ran, whichever is smaller. The learner's process answers the empty calls
    too; making them slow would only inflate this figure, so the trusted one caps it."""
    costs = [g.total_s / g.count for g in empty if g.count]
    now = statistics.median(costs) if costs else None
    return min(c for c in (now, trusted) if c is not None) if (now, trusted) != (None, None) else 0.0


def observed_times(gaps: "list[Gaps]", switch_s: float) -> list[float]:
    """The learner's GPU time in each call: the observer's pauses, each less the cost of a switch
    (a call longer than a time slice is cut into several)."""
    return [max(0.0, g.total_s - switch_s * g.count) for g in gaps]


def judge_remote(events: list[float], observed: list[float]) -> tuple[float, float, str]:
    """(the learner's time, the observer's figure, which clock gave the time) from the learner's
    process's event times and the observer's times of the same calls.

    The events are finer and stand where the two agree. The observer's figure also carries part of
    the switch that an empty call does not have, growing with the memory the call touched (measured
    on an H100: 5 µs for 32 MB, 16-21 µs for 256 MB to 1 GB), and a few per cent where a call was cut
    by time slices: hence the margin, which is all a forged event could gain (the physical floor
    still applies). Beyond it the observer's figure stands: events that were wrong, work they did
    not see, or events that also counted the observer's own slices of a call longer than one."""
    events_s = statistics.median(clean_events(events))
    observed_s = statistics.median(observed)
    if events_s > 0 and abs(observed_s - events_s) <= max(CLOCK_NOISE_S, CLOCK_NOISE_REL * events_s):
        return events_s, observed_s, "events"
    return observed_s, observed_s, "grader"


class Gaps(NamedTuple):
    """What the observer saw during one call: the pauses in its clock (another context had the GPU)."""
    total_s: float          # their sum
    count: int

    @classmethod
    def read(cls, out: Any) -> "Gaps":
        return cls(int(out[0]) * 1e-9, int(out[1]))


_OBSERVER_SOURCE = r"""
extern "C" __global__ void s2s_observe(const volatile int* stop, unsigned long long* out, unsigned long long gap_ns) {
    unsigned long long prev, now, total = 0, count = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(prev));
    *(volatile unsigned long long*)&out[4] = 1;            // running: the request may go out
    __threadfence();
    bool stopping = false;
    for (unsigned int i = 1;; ++i) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (now - prev > gap_ns) {
            total += now - prev;
            ++count;
        }
        prev = now;
        if (stopping) break;
        // One more look at the clock after the flag: a switch just before it was read still counts.
        if ((i & 15) == 0 && *stop) stopping = true;
    }
    out[0] = total; out[1] = count;
}
"""


class Observer:
    """The clock-reading thread (see the module's docstring). It also holds the learner's work back
    until the end of its own time slice, so that a call is queued whole before any of it runs, as a
    busy kernel would."""

    def __init__(self) -> None:
        import cupy
        import numpy
        self.kernel = cupy.RawModule(code=_OBSERVER_SOURCE).get_function("s2s_observe")
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.control = cupy.cuda.Stream(non_blocking=True)
        self.stop = cupy.zeros(1, dtype=cupy.int32)
        self.out = cupy.zeros(8, dtype=cupy.uint64)
        pinned = cupy.cuda.alloc_pinned_memory(4)
        self.one = numpy.frombuffer(pinned, dtype=numpy.int32, count=1)
        self.one[0] = 1
        self._pinned = pinned
        # While the observer spins, nothing in this process may wait for the whole device: not a
        # module load (a kernel's first launch), not a cudaFree. So its kernel runs once now, and the
        # stop flag is set by a copy, not by a kernel.
        self._stopped()
        with self.stream:
            self.kernel((1,), (1,), self._args())
        self.stream.synchronize()

    def _args(self) -> tuple[Any, ...]:
        import cupy
        return self.stop, self.out, cupy.uint64(GAP_NS)

    def _stopped(self) -> None:
        self.stop.set(self.one, stream=self.control)
        self.control.synchronize()

    def observe(self, call: Callable[[], Any], prepare: Callable[[], None] | None = None) -> tuple[Any, Gaps]:
        """``call()``'s result, and the pauses the observer saw while ``prepare()`` (work of this
        process, before the call) and ``call()`` ran. Neither may wait for the whole device, free GPU
        memory or launch a kernel for the first time (a cudaFree or a module load waits for the
        spinning observer): the garbage collector, which could free some at any moment, waits until
        the observer has stopped."""
        import gc
        with self.stream:
            self.stop.fill(0)                 # memsets, not kernels
            self.out.fill(0)
            self.kernel((1,), (1,), self._args())
        collecting = gc.isenabled()
        gc.disable()
        try:
            while not int(self.out[4:5].get(stream=self.control)[0]):
                pass
            if prepare is not None:
                prepare()
            result = call()
        finally:
            self._stopped()
            self.stream.synchronize()
            if collecting:
                gc.enable()
        return result, Gaps.read(self.out[:2].get(stream=self.stream))


_observer: Observer | None = None


def observer() -> Observer:
    """This process's observer (its kernel compiled once)."""
    global _observer
    if _observer is None:
        _observer = Observer()
    return _observer


class Blind(Exception):
    """The observer sees no pause while the learner's process works: the GPU does not switch
    between the two processes' contexts (MPS shares it at once)."""


def calibrate(sandbox: Any, calls: int = CALIBRATION_CALLS) -> float:
    """The cost of one switch to the learner's process and back, from empty calls made before its
    process has loaded any learner code (so that code cannot inflate it). Blind when the observer
    sees no pause."""
    costs = []
    for _ in range(calls):
        _, gaps = observer().observe(lambda: sandbox.request(op="empty", timed=True))
        if gaps.count:
            costs.append(gaps.total_s / gaps.count)
    if len(costs) <= calls // 2:
        raise Blind(f"the GPU ran {calls - len(costs)} of {calls} calls in the learner's process without "
                    "switching away from the grader's own work (is MPS running?), so the grader cannot time them")
    return statistics.median(costs)


def leftover() -> float:
    """Seconds the GPU gave the learner's context while its process was stopped between calls (0:
    none). Its calls end only once their work is done, so this is work a thread of its own started
    late, which would run beside the baseline's timing."""
    _, gaps = observer().observe(lambda: time.sleep(IDLE_PROBE_S))
    return gaps.total_s if gaps.total_s >= LEFTOVER_S else 0.0
