"""The worker's event loop: read the job, grade its tasks one by one, report each as an event."""
from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from grader import spec as specmod
from grader.protocol import (CaseResult, Ceilings, Done, Event, Fatal, Isolation, Job, Problem, Progress,
                             TaskDone, TaskOutcome, TaskStart)
from grader.worker.checking import Checker, case_seed
from grader.worker.entry import Entry, RemoteSticky, Sticky, synchronize
from grader.worker.remote import Sandbox, SandboxDied, attached
from grader.worker.foreign import Watch
from grader.worker.memory import GUARD_BYTES, Arena, CaseMemory
from grader.worker.profiling import profile_tasks
from grader.worker.observer import Blind, calibrate
from grader.worker.timing import quiet_ceilings, time_task


PR_SET_DUMPABLE = 4


class Emitter:
    """Events to the parent, one JSON object a line, into the path it named (a FIFO or a file)."""

    def __init__(self, path: str):
        self._f = open(path, "w", buffering=1)
        self.key = ""

    def __call__(self, event: Event) -> None:
        self._f.write(event.to_line(self.key))
        self._f.flush()


def check_case(task: specmod.Task, case: specmod.Case, learner: Any, reference: Callable[..., Any],
               seed: int, guard: int, functions: Any = None) -> CaseResult:
    """The case's calls on fresh inputs and one state, each compared with its reference; the first
    call that goes wrong is the result. ``functions``: the reference module, for derived inputs."""
    memory = CaseMemory.allocate(task, case, guard, functions, arena=getattr(learner, "arena", None))
    memory.fill(seed)
    with attached(learner, memory):
        return _check_calls(task, case, memory, learner, reference, seed)


def _check_calls(task: specmod.Task, case: specmod.Case, memory: CaseMemory, learner: Any,
                 reference: Callable[..., Any], seed: int) -> CaseResult:
    seconds = 0.0
    for call in range(len(task.calls)):
        if call:   # fresh inputs, the state (inout buffers) as the previous call left it
            memory.fill(case_seed(seed, "call", str(call)), roles=("in",), call=call)
        scalars = task.scalar_values(case, call)
        memory.snapshot()
        memory.poison_outputs()
        synchronize()
        t0 = time.perf_counter()
        try:
            learner(memory.call_values(scalars))
            synchronize()
        except Sticky as exc:   # this process's context or the learner's process's: the same kind
            raise type(exc)(f"{exc} (case {_label(task, case, call)})") from None
        seconds += time.perf_counter() - t0
        problem = learner.launch_problem() or memory.damage()
        mismatch = None if problem else Checker(task, reference, memory, scalars).compare()
        if problem or mismatch:
            return CaseResult(_label(task, case, call), case.to_dict(), False, seconds,
                              Problem(*problem) if problem else None, mismatch)
    return CaseResult(case.describe(), case.to_dict(), True, seconds)


def _label(task: specmod.Task, case: specmod.Case, call: int) -> str:
    if len(task.calls) == 1:
        return case.describe()
    changed = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in task.calls[call].items())
    return f"{case.describe()}; call {call + 1} of {len(task.calls)}" + (f" ({changed})" if changed else "")


def sanitizer_cases(task: specmod.Task, job: Job) -> list[specmod.Case]:
    """The cases a sanitizer run checks: the sanitizer slows kernels 10-100x, and its job is to find
    bad accesses, which small and ragged sizes show as well as large ones."""
    return [c for c in task.cases if sum(a.numel(c) for a in task.tensors) <= job.max_elements
            and task.work(c)[0] <= job.max_flops]


class Learners:
    """Where the learner's code runs. Grading (points at stake): in its own confined process, one a
    grading, a fresh one after a crash or a CUDA error. A sanitizer run (no points): here, so that
    compute-sanitizer, which wraps this process, sees the kernels."""

    def __init__(self, job: Job, watch: Watch, emit: Callable[[Event], None],
                 exercise: specmod.Exercise | None = None):
        self.job, self.watch, self.emit, self.exercise = job, watch, emit, exercise
        self.arena: Arena | None = None
        self.sandbox: Sandbox | None = None
        self.fallback = ""          # why the learner's code runs here after all (no CUDA IPC, say)
        self.switch_s: float | None = None      # a switch to the learner's process and back (timing.calibrate)
        self.stage = ""             # what the current task is doing, for a crash's message
        self._told = False

    @property
    def remote(self) -> bool:
        return self.job.mode == "grade" and not self.fallback

    @property
    def wanted(self) -> bool:
        """A separate process for the learner's code: always when grading, unless S2S_SANDBOX=0
        (for comparing the two designs' figures on one machine)."""
        if self.job.mode == "grade" and not self.fallback and os.environ.get("S2S_SANDBOX", "1") == "0":
            self.fallback = "the learner's code runs inside the checker, because S2S_SANDBOX=0 asked for it"
            self.emit(Isolation(False, self.fallback))
        return self.job.mode == "grade" and not self.fallback

    def load(self, library: str, task: specmod.Task) -> Any:
        if self.wanted and (self.sandbox is None or not self.sandbox.alive or not self.sandbox.ready):
            self._start()
        if not self.remote:
            return Entry(library, task)
        return self.sandbox.load(library, task)

    def prestart(self) -> None:
        """Start the learner's process now; it creates its context while this one measures the copy
        bandwidth, and is waited for when the first task needs it."""
        if self.wanted and self.sandbox is None:
            try:
                self.watch.before_other()
                self.sandbox = Sandbox(self.job.device, self._arena(), wait=False)
            except (OSError, MemoryError, RuntimeError):
                self.sandbox = None

    def _arena(self) -> Arena:
        """Room for the largest case of this job's tasks, allocated once a grading."""
        if self.arena is None:
            tasks = [self.exercise.task(name) for name in self.job.order] if self.exercise else []
            need = max((Arena.footprint(t, c) for t in tasks for c in (*t.cases, *t.benchmarks)), default=0)
            self.arena = Arena(need)
        return self.arena

    def _start(self) -> None:
        try:
            if self.sandbox is None or not self.sandbox.alive:
                self.lost()
                self.watch.before_other()
                self.sandbox = Sandbox(self.job.device, self._arena(), wait=False)
            self.sandbox.wait_ready()
            if self.switch_s is None:
                self.switch_s = calibrate(self.sandbox)
            self.sandbox.switch_s = self.switch_s
        except (RuntimeError, OSError, MemoryError, ImportError, SandboxDied, Sticky, Blind) as exc:
            self.lost()
            if self._told:
                # A learner's process has run in this grading, and what it left behind (a child
                # holding the GPU, say) may be why no new one starts: the task fails; the learner's
                # code never moves into this process.
                raise SandboxDied(f"a fresh process for the learner's code could not be started ({exc})") from None
            # Nothing of the learner's has run yet: the platform lacks what the separate process
            # needs (CUDA IPC under WSL, say). Grade as before, in this process, and say so.
            self.fallback = (f"the learner's code runs inside the checker, because a separate process could not "
                             f"share its memory or be timed here ({exc}); a submission can then tamper with its "
                             "own grading")
            self.emit(Isolation(False, self.fallback))
            return
        self.watch.adopt(self.sandbox.pid)
        if not self._told:
            _not_dumpable()
            self.emit(Isolation(True, f"a separate process, {self.sandbox.confinement}"))
            self._told = True

    def lost(self) -> None:
        """The learner's process is gone, or its CUDA context is: the next task gets a fresh one."""
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None

    def close(self) -> None:
        self.lost()


def _not_dumpable() -> None:
    """The learner's process may not read this one's memory (the events' key) or trace it. Set once
    the first learner's process has mapped the arena, before any learner's library loads."""
    import ctypes
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def run_task(emit: Callable[[Event], None], job: Job, exercise: specmod.Exercise, name: str,
             ceilings: dict[str, Any], watch: Watch, learners: Learners) -> TaskOutcome:
    task = exercise.task(name)
    libraries = job.tasks[name]
    try:
        learner = learners.load(libraries.library, task)
    except LookupError:
        return TaskOutcome.failure(name, "missing symbol", f"the library has no function named {task.symbol!r}")
    functions = exercise.load_reference()
    reference = getattr(functions, task.reference)
    sanitize = job.mode == "sanitize"
    cases = sanitizer_cases(task, job) if sanitize else list(task.cases)
    outcome = TaskOutcome(name)
    for i, case in enumerate(cases):
        emit(Progress(name, "check", case.describe(), i + 1, len(cases)))
        learners.stage = f"checking case {i + 1}/{len(cases)} ({case.describe()})"
        result = check_case(task, case, learner, reference, case_seed(job.seed, name, f"case{i}"),
                            0 if sanitize else GUARD_BYTES, functions)
        outcome.cases.append(result)
        if not result.passed:
            _free()
            return outcome           # the first failing case is what the learner needs
    outcome.correct = True
    _free()
    if job.timing and not sanitize:
        learners.stage = "timing against the baseline"
        baseline = Entry(libraries.baseline_library, task)
        vendor = getattr(functions, task.vendor) if task.vendor else None
        timing = time_task(emit, task, learner, baseline, reference, vendor, job.seed, ceilings, watch, functions)
        _free()     # the benchmark's buffers went with time_task's frame
        if isinstance(timing, Problem):     # a disturbed timing leaves the correctness as it was
            outcome.error, outcome.correct = timing, timing.kind == "disturbed"
        else:
            outcome.timing = timing
    return outcome


def _watch(job: Job) -> Watch:
    """NVML's view of the GPU, for the gradings that time."""
    if job.mode != "grade" or not job.timing:
        return Watch(reason="nothing is timed")
    from grader.device import probe
    gpus = probe().gpus
    return Watch.open(gpus[job.device].uuid if job.device < len(gpus) else "")


def _free() -> None:
    import torch
    torch.cuda.empty_cache()


def main(argv: list[str]) -> int:
    # Python ignores SIGXFSZ; restore the default so that output beyond the runner's file-size
    # limit (megabytes of printf) stops this process instead of being silently dropped.
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    emit = Emitter(argv[1])
    # PyTorch and CuPy take seconds to import: both start before the job is read (a worker forked
    # by grader.forkserver has them already); neither touches the GPU.
    importer = threading.Thread(target=importlib.import_module, args=("torch",), daemon=True)
    importer.start()
    try:
        import cupy
        broken = None
    except Exception as exc:  # the environment, not the learner
        broken = Fatal(f"{type(exc).__name__}: {exc}", traceback.format_exc())
    job = Job.from_json(sys.stdin.read())
    sys.stdin.close()
    emit.key = job.key
    if broken is not None:
        emit(broken)
        return 3
    os.chdir(job.exercise_folder)
    try:
        watch = _watch(job)
        watch.before_context()
        cupy.cuda.set_allocator(None)          # plain cudaMalloc per buffer, no pool: guards stay honest
        cupy.cuda.runtime.setDevice(job.device)
        cupy.cuda.runtime.free(cupy.cuda.runtime.malloc(1))   # creates the context now
        watch.after_context()
        exercise = specmod.load(Path(job.exercise_folder))
        importer.join()
        import torch  # noqa: F401  (fails loudly here if the threaded import failed)
    except Exception as exc:  # the environment, not the learner
        emit(Fatal(f"{type(exc).__name__}: {exc}", traceback.format_exc()))
        return 3
    if job.mode != "grade":
        # Under Nsight Compute or compute-sanitizer the learner's library loads into this process
        # (no points are at stake there): it may write only temporary files and device files.
        from grader.sandbox.confine import confine_writes
        confine_writes([tempfile.gettempdir(), "/var/tmp"])
    if job.mode == "profile":
        try:
            profile_tasks(emit, job, exercise)
        except Sticky as exc:
            emit(Fatal(str(exc)))
            return 1
        emit(Done())
        return 0
    learners = Learners(job, watch, emit, exercise)
    learners.prestart()
    ceilings = quiet_ceilings(watch) if job.mode != "sanitize" else {}
    if ceilings:
        emit(Ceilings(**ceilings))
    try:
        return _grade_tasks(emit, job, exercise, ceilings, watch, learners)
    finally:
        learners.close()


def _grade_tasks(emit: Callable[[Event], None], job: Job, exercise: specmod.Exercise, ceilings: dict[str, Any],
                 watch: Watch, learners: Learners) -> int:
    for name in job.order:
        emit(TaskStart(name))
        learners.stage = "loading the library"
        try:
            result = run_task(emit, job, exercise, name, ceilings, watch, learners)
        except Sticky as exc:
            if not (learners.remote and isinstance(exc, RemoteSticky)):
                emit(TaskDone(name, TaskOutcome.failure(name, "cuda error", str(exc)), sticky=True))
                return 1      # this process's CUDA context is gone; the parent starts a fresh worker for the rest
            learners.lost()
            result = TaskOutcome.failure(name, "cuda error", str(exc))
        except SandboxDied as exc:
            learners.lost()
            result = TaskOutcome.failure(name, "crash", f"{exc} (while {learners.stage})")
        except Exception as exc:
            emit(TaskDone(name, TaskOutcome.failure(name, "grader error", f"{type(exc).__name__}: {exc}",
                                                    traceback.format_exc())))
            continue
        emit(TaskDone(name, result))
    emit(Done())
    return 0
