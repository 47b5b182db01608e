"""Timing: the learner's entry point, the naive baseline (and the vendor library) interleaved on the
same inputs at each benchmark size, and the copy bandwidth of the GPU.

The baseline and the vendor run here, in the checker, which never loads learner code. The learner's
calls run in the learner's own process (:mod:`grader.worker.remote`): there, CUDA events around the
call give a precise time, but one that process could forge. So the checker also times every one of
those calls on the GPU itself, with an observer kernel in its own context
(:mod:`grader.worker.observer`). Where the two agree within noise, the events' finer figure stands;
otherwise the observer's does."""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable

from grader import spec as specmod
from grader.protocol import Problem, Progress, SizeTiming
from grader.worker.checking import Checker, case_seed
from grader.worker.entry import Entry, synchronize
from grader.worker.foreign import Watch
from grader.worker.memory import CaseMemory
from grader.worker.observer import (Gaps, Observer, clean_events, judge_remote, leftover, observed_times, observer,
                                   switch_cost)
from grader.worker.remote import attached

MIN_REPS = 7
MAX_REPS = 200
TIME_BUDGET_S = 1.5                # per benchmark size, for the timing loop
WARMUP = 2
MIN_OTHER_REPS = 3
HIDDEN_WORK_S = 50e-6             # host time beyond the events' that counts as hidden work, at least
HIDDEN_WORK_REL = 0.25             # ... and this share of the event time (learner code in this process)
SLEEP_CYCLES = 200_000             # ~0.1 ms at 2 GHz: longer than enqueueing one ctypes launch takes
COVER_FACTOR = 2.0                 # a reference point's busy kernel lasts this many times its enqueue
MAX_COVER_S = 5e-3                 # at most
OTHER_BUDGET_S = 0.25
SLOW_OTHER_S = 1.0                 # a reference point this slow in total is known well enough
DISTURBED_ATTEMPTS = 3             # timings of one size with another process on the GPU, at most
DISTURBED_PAUSE_S = 1.0            # between them: a burst of someone else's work may pass

WRONG_TIMED_OUTPUT = ("the output of a timed call was wrong, although the same code passed the correctness cases: "
                      "does it depend on state left over from an earlier call (a cache keyed on the pointers or "
                      "sizes)?")


def time_task(emit: Callable[[Any], None], task: specmod.Task, learner: Entry, baseline: Entry,
              reference: Callable[..., Any], vendor: Callable[..., Any] | None, seed: int,
              ceilings: dict[str, Any], watch: Watch, functions: Any = None) -> list[SizeTiming] | Problem:
    """Median times at every benchmark size, or the problem that stopped the timing. ``functions``: the
    reference module, for derived inputs."""
    import torch
    # Reading (not writing) twice the L2's size evicts everything, including dirty lines from
    # the output poisoning, and leaves only clean lines behind: the timed call then neither
    # hits in L2 nor pays for someone else's write-backs.
    flush = torch.ones(int(ceilings.get("l2_bytes", 64 << 20)) // 2, dtype=torch.int32, device="cuda")
    timer = _Timer(flush, busy_kernel(), observer() if hasattr(learner, "timed") else None)
    out: list[SizeTiming] = []
    for index, case in enumerate(task.benchmarks):
        emit(Progress(task.name, "time", case.describe(), index + 1, len(task.benchmarks)))
        memory = CaseMemory.allocate(task, case, functions=functions, arena=getattr(learner, "arena", None))
        result = watched(watch, case.describe(), lambda memory=memory: _time_size(
            task, case, memory, learner, baseline, reference, vendor, case_seed(seed, task.name, f"benchmark{index}"),
            timer))
        del memory
        if isinstance(result, Problem):
            return result
        out.append(result)
    return out


def _until_quiet(watch: Watch, measure: Callable[[], Any], pause_s: float,
                 stands: Callable[[Any], bool] = lambda result: False) -> tuple[Any, list[str]]:
    """``measure()`` again while another process used the GPU meanwhile, DISTURBED_ATTEMPTS times
    at most. Returns the last result and, when every attempt was disturbed, the other processes
    (empty otherwise). A result that ``stands`` is kept whoever else ran."""
    for attempt in range(DISTURBED_ATTEMPTS):
        watch.begin()
        result = measure()
        others = watch.others()
        if not others or stands(result):
            return result, []
        if attempt + 1 < DISTURBED_ATTEMPTS:
            time.sleep(pause_s)
    return result, others


def watched(watch: Watch, label: str, measure: Callable[[], SizeTiming | Problem],
            pause_s: float = DISTURBED_PAUSE_S) -> SizeTiming | Problem:
    """``measure()`` with no other process on the GPU meanwhile, and a "disturbed" problem (no
    verdict on the kernel) when one used it in every attempt. A wrong output is the code's, whoever
    else ran; any other result is only as good as the GPU was quiet."""
    result, others = _until_quiet(watch, measure, pause_s,
                                  stands=lambda r: isinstance(r, Problem) and r.kind == "timed output wrong")
    if not others:
        return result
    return Problem("disturbed", (
        f"another process used the GPU while {label} was timed, in each of {DISTURBED_ATTEMPTS} attempts: "
        f"{', '.join(others)}. A time measured beside it says nothing about your kernel; grade again when "
        "the GPU is free"))


def quiet_ceilings(watch: Watch, pause_s: float = DISTURBED_PAUSE_S) -> dict[str, Any]:
    """The copy bandwidth, measured while the GPU is quiet; after DISTURBED_ATTEMPTS disturbed
    measurements it carries the names of those processes, and the parent then draws no physical
    limit from it."""
    ceilings, others = _until_quiet(watch, measure_ceilings, pause_s)
    return {**ceilings, "disturbed": ", ".join(others)} if others else ceilings


class _Timer:
    """One call between CUDA events, the L2 flushed first and the GPU kept busy while the host
    enqueues, plus the host's clock around the same span."""

    def __init__(self, flush: Any, busy: Callable[[float], None], observer: Observer | None = None):
        import cupy
        self.flush, self.busy, self.observer = flush, busy, observer
        self.start, self.end = cupy.cuda.Event(), cupy.cuda.Event()
        self.enqueue_s = 0.0                 # host time of the last call's enqueue (fn() alone)
        # What the host clock adds to an empty call: the rest of the sleep, the event bookkeeping,
        # the synchronize. Work the events miss (another stream, a host thread) shows up as host
        # time beyond this.
        self.idle = statistics.median(h - e for e, h in (self(None) for _ in range(5)))

    def __call__(self, fn: Callable[[], None] | None, cover_s: float = 0.0) -> tuple[float, float]:
        """(event seconds, host seconds) of one call. ``cover_s``: keep the GPU busy at least this
        long after the call starts to be enqueued (default: SLEEP_CYCLES)."""
        import cupy
        self.flush.sum()
        synchronize()
        # Keep the GPU busy while the host enqueues the call, so that the start event fires right
        # before the first kernel instead of measuring the host's launch latency too. The busy
        # kernel fills every SM, so nothing launched elsewhere can run beside it.
        self.busy(cover_s)
        t0 = time.perf_counter()
        self.start.record()
        if fn is not None:
            fn()
        self.enqueue_s = time.perf_counter() - t0
        self.end.record()
        synchronize()
        return cupy.cuda.get_elapsed_time(self.start, self.end) * 1e-3, time.perf_counter() - t0

    def remote(self, learner: Any, values: list[Any] | None,
               stage: Callable[[], None] | None = None) -> tuple[float, Gaps]:
        """(the learner's process's event seconds, what the observer saw) of one call in the
        learner's process (None: an empty call). ``stage`` puts the call's inputs in place once the
        observer runs; the L2 is flushed after it."""
        import torch
        synchronize()
        assert self.observer is not None

        def prepare() -> None:
            # Copies and a kernel that have all run before: nothing here loads a module or frees
            # memory while the observer spins, and only this stream is waited for.
            if stage is not None:
                stage()
            self.flush.sum()
            torch.cuda.current_stream().synchronize()
        return self.observer.observe(lambda: learner.timed(values), prepare)


def busy_cover(enqueues: list[float]) -> float:
    """How long the busy kernel must last for a call whose latest enqueues took these host
    seconds: COVER_FACTOR times the longest of the last three, at most MAX_COVER_S (0: the default
    length, for a call not seen yet)."""
    return min(MAX_COVER_S, COVER_FACTOR * max(enqueues[-3:])) if enqueues else 0.0


def _time_size(task: specmod.Task, case: specmod.Case, memory: CaseMemory, learner: Any, baseline: Entry,
               reference: Callable[..., Any], vendor: Callable[..., Any] | None, seed: int,
               timer: _Timer) -> SizeTiming | Problem:
    scalars = task.scalar_values(case)
    with attached(learner, memory):
        values = memory.call_values(scalars)
        return _rounds(task, case, memory, values, scalars, learner, baseline, reference, vendor, seed, timer)


def _rounds(task: specmod.Task, case: specmod.Case, memory: CaseMemory, values: list[Any], scalars: dict[str, Any],
            learner: Any, baseline: Entry, reference: Callable[..., Any], vendor: Callable[..., Any] | None,
            seed: int, timer: _Timer) -> SizeTiming | Problem:
    remote = hasattr(learner, "timed")
    # Where the learner's code runs in a process of its own, each round's inputs are drawn in memory
    # that process has not mapped (staged) and reach the memory it shares only inside the observed
    # window of each of its calls: whatever its process does with them, the observer counts. The
    # baseline and PyTorch run here on a copy of their own (others): their outputs are never where
    # the learner's code could read them.
    staged = CaseMemory.allocate(task, case, functions=memory.functions) if remote else memory
    others = CaseMemory.allocate(task, case, functions=memory.functions) if remote else memory
    local_values = others.local_call_values(scalars)
    contenders: list[tuple[str, Callable[[], None]]] = [
        ("learner", lambda: learner(values)),
        ("baseline", lambda: baseline(local_values)),
    ]
    if remote:
        contenders.append(("empty", lambda: None))
    if vendor is not None:
        # Views of the case's memory, made once: the rounds refill that memory in place, and making
        # hundreds of views inside the timed region would time Python, not the vendor's kernels.
        vendor_args = [others.args[a.name].value() if a.is_tensor else scalars[a.name] for a in task.reference_args]
        written = [others.args[a.name].tensors() for a in task.results]

        def run_vendor() -> None:
            got = vendor(*vendor_args)
            got = got if isinstance(got, tuple) else (got,)
            for a, tensors, g in zip(task.results, written, got):
                for t, v in zip(tensors, g if a.list is not None else [g]):
                    if v.data_ptr() != t.data_ptr():       # updated in place: nothing to copy
                        t.copy_(v.reshape(t.shape))
        contenders.append(("vendor", run_vendor))

    samples: dict[str, list[float]] = {name: [] for name, _ in contenders}
    seen: dict[str, list[Gaps]] = {"learner": [], "empty": []}
    host_excess: list[float] = []
    # A reference point can take longer to enqueue than the busy kernel lasts (a PyTorch layer is
    # several operations dispatched from Python: 0.1-0.4 ms measured on the H200's host); the start
    # event would then time the GPU waiting for the host. Its busy kernel is made to outlast its
    # enqueue, measured on its earlier calls. The learner keeps the fixed one, which host_excess is
    # measured against: a learner's slow launch is the learner's time.
    enqueues: dict[str, list[float]] = {name: [] for name, _ in contenders}

    def once(name: str, fn: Callable[[], None], record: bool) -> Problem | None:
        if name == "learner":
            memory.snapshot(staged)
        memory.poison_outputs()
        if remote and name in ("learner", "empty"):
            stage = (lambda: memory.copy_from(staged, ("in", "inout"))) if name == "learner" else None
            event_s, gaps = timer.remote(learner, values if name == "learner" else None, stage)
            if record:
                seen[name].append(gaps)
            if busy_s := leftover():
                return Problem("untimed work", (
                    f"your process kept the GPU busy for {busy_s * 1e6:.0f} µs after its call had returned: work "
                    "launched by a thread of its own runs where the timer cannot see it, beside the baseline the "
                    "grader times next. Launch every kernel from the call itself."))
        else:
            event_s, host_s = timer(fn, 0.0 if name == "learner" else busy_cover(enqueues[name]))
            enqueues[name].append(timer.enqueue_s)
        if name == "learner":
            problem = learner.launch_problem() or memory.damage()
            if problem:
                return Problem("timed output wrong", problem[1])
            if Checker(task, reference, memory, scalars).compare(detail=False) is not None:
                return Problem("timed output wrong", WRONG_TIMED_OUTPUT)
            if record and not remote:
                host_excess.append(host_s - event_s - timer.idle)
        if record:
            samples[name].append(event_s)
        return None

    def fill(round_seed: int) -> None:
        staged.fill(round_seed)
        if others is not staged:
            others.copy_from(staged)

    fill(seed)
    for _ in range(WARMUP):
        if problem := once("learner", contenders[0][1], False):
            return problem
    rounds = 0
    began = time.perf_counter()
    previous = None
    while rounds < MAX_REPS:
        fill(case_seed(seed, task.name, f"round{rounds}"))
        order = contenders if rounds % 2 == 0 else list(reversed(contenders))
        for name, fn in order:
            # A slow reference point (a naive baseline can be 1000x slower) needs few samples to be
            # known well enough; past a small budget it is only timed every fourth round, and not at
            # all once its samples add up to a second: a call that long varies by a few per cent at
            # most, and a speedup bar is not that close.
            if name in ("baseline", "vendor") and sum(samples[name]) > OTHER_BUDGET_S and (
                    sum(samples[name]) > SLOW_OTHER_S or (len(samples[name]) >= MIN_OTHER_REPS and rounds % 4)):
                continue
            if problem := once(name, fn, True):
                return problem
        rounds += 1
        if rounds >= MIN_REPS and rounds % 4 == 0:
            current = statistics.median(samples["learner"])
            stable = previous is not None and abs(current - previous) <= 0.01 * current
            if stable or time.perf_counter() - began > TIME_BUDGET_S:
                break
            previous = current
    flops, nbytes = task.work(case)
    med = {name: statistics.median(v) for name, v in samples.items() if name != "empty"}
    events_s = med["learner"]
    spread = _spread(samples["learner"])
    if remote:
        switch_s = switch_cost(seen["empty"], getattr(getattr(learner, "sandbox", None), "switch_s", None))
        observed = observed_times(seen["learner"], switch_s)
        learner_s, observed_s, clock = judge_remote(samples["learner"], observed)
        events_s = statistics.median(clean_events(samples["learner"]))
        if clock == "grader":
            spread = _spread(observed)
    else:
        learner_s, clock = events_s, "events"
        excess = statistics.median(host_excess)
        observed_s = events_s + excess
        if excess > HIDDEN_WORK_S and excess > HIDDEN_WORK_REL * events_s:
            return Problem("untimed work", (
                f"the call's CUDA events measured {events_s * 1e6:.0f} µs, but the GPU stayed busy with it "
                f"{excess * 1e6:.0f} µs longer by the grader's own clock: work was launched where the timer "
                "cannot see it (another stream or a host thread), or the events were not what they seemed. "
                "Launch every kernel on the default stream."))
    # No time at all (events that read zero, and an observer that saw nothing): the smallest
    # positive one, which the physical floor then rejects.
    learner_s = max(learner_s, 1e-12)
    return SizeTiming(label=case.describe(), case=case.to_dict(), reps=rounds, learner_s=learner_s,
                      baseline_s=med["baseline"], learner_spread=spread,
                      baseline_spread=_spread(samples["baseline"]), learner_wall_s=observed_s,
                      flops=flops, bytes=nbytes, vendor_s=med.get("vendor"), learner_events_s=events_s,
                      clock=clock)


_BUSY_SOURCE = r"""
extern "C" __global__ void s2s_busy(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
"""


def _sm_clock_hz(props: dict) -> float:
    """The SM clock's top rate (a lower clock only makes the busy kernel last longer). CUDA 13
    dropped it from the device properties; the device attribute (13, cudaDevAttrClockRate) may
    still answer; 2 GHz, a Hopper's, otherwise."""
    import cupy
    khz = props.get("clockRate")
    if not khz:
        try:
            khz = cupy.cuda.runtime.deviceGetAttribute(13, cupy.cuda.runtime.getDevice())
        except Exception:      # noqa: BLE001 - the attribute is gone from a runtime: take the default
            khz = 0
    return (khz or 2_000_000) * 1e3


def busy_kernel() -> Callable[[float], None]:
    """A launch that occupies every thread slot of every SM for about 0.1 ms, or for at least the
    seconds given."""
    import cupy
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
    kernel = cupy.RawKernel(_BUSY_SOURCE, "s2s_busy")
    block = 1024
    # Enough blocks of 1024 threads to hold every thread slot of every SM (2048 a Hopper SM).
    grid = props["multiProcessorCount"] * -(-props["maxThreadsPerMultiProcessor"] // block)
    cycles_per_s = _sm_clock_hz(props)

    def launch(at_least_s: float = 0.0) -> None:
        kernel((grid,), (block,), (cupy.int64(max(SLEEP_CYCLES, int(at_least_s * cycles_per_s))),))
    return launch


def _spread(values: list[float]) -> float:
    """(max - min) / median of the middle half: how noisy the samples were."""
    v = sorted(values)
    mid = v[len(v) // 4: len(v) - len(v) // 4] or v
    median = statistics.median(v)
    return (mid[-1] - mid[0]) / median if median > 0 else 0.0


def measure_ceilings() -> dict[str, Any]:
    """Copy bandwidth of this GPU, measured now (bytes read + written per second)."""
    import cupy
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
    l2 = int(props.get("l2CacheSize", 64 << 20))
    nbytes = 1 << 30
    src = cupy.cuda.alloc(nbytes)
    dst = cupy.cuda.alloc(nbytes)
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    times = []
    for i in range(6):
        start.record()
        cupy.cuda.runtime.memcpyAsync(dst.ptr, src.ptr, nbytes, cupy.cuda.runtime.memcpyDeviceToDevice, 0)
        end.record()
        end.synchronize()
        if i:
            times.append(cupy.cuda.get_elapsed_time(start, end) * 1e-3)
    del src, dst
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return {"copy_bytes_per_s": 2 * nbytes / statistics.median(times), "l2_bytes": l2, "device": name}
