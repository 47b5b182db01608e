"""Parent side of the worker protocol: start, feed, watch, kill, restart.

Learner code runs only in the worker process (:mod:`grader.worker`). This module
gives each task a deadline, turns a hang into a killed process and a crash into a
failed task, and starts a fresh worker for the tasks that remain, so one broken
kernel never costs the other tasks their grade.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from grader import forkserver
from grader.crash import cap_output, crash_message as _crash_message
from grader.protocol import (Ceilings, Done, Event, Fatal, Isolation, Job, Libraries, Progress, TaskDone, TaskOutcome,
                             TaskStart, parse_event)
from grader.spec import Exercise, repo_root

STARTUP_TIMEOUT_S = float(os.environ.get("S2S_STARTUP_TIMEOUT", "180"))
OUTPUT_TAIL_BYTES = 4000
WORKER_MODULE = "grader.worker"     # what runs as the worker (python -m)

OnEvent = Callable[[Event], None]


@dataclass
class RunOutcome:
    results: dict[str, TaskOutcome] = field(default_factory=dict)
    ceilings: Ceilings | None = None
    output: str = ""
    fatal: str = ""                                                    # the environment failed, not the learner
    isolation: Isolation | None = None                                 # where the learner's code ran


def task_timeout(exercise: Exercise, task: str) -> float:
    """Seconds a task may take in the worker (``S2S_TASK_TIMEOUT`` overrides the spec)."""
    override = os.environ.get("S2S_TASK_TIMEOUT")
    return float(override) if override else exercise.task(task).timeout_s


def _prepare_child() -> None:
    """In the worker, before it runs: cap its output, and have the kernel kill it if the grader dies
    (a grading stopped with SIGKILL must not leave a worker running, or timing, on the GPU)."""
    cap_output()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass


PR_SET_PDEATHSIG = 1


@contextlib.contextmanager
def _stopped_by_sigterm() -> Iterator[None]:
    """SIGTERM (a notebook kernel restarted, a batch job cancelled) ends the grading through the
    normal unwinding, so that the worker's whole process group is killed on the way out."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def worker_env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(repo_root())
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass(frozen=True)
class Launch:
    """How to start the worker: the job's mode, and an optional wrapper such as compute-sanitizer."""

    mode: str = "grade"                     # "grade" | "sanitize"
    wrapper: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    timeout_factor: float = 1.0             # a sanitizer slows everything down


@dataclass
class _Started:
    """A worker process that has been started: its events' named pipe (read end, and a write end the
    parent keeps open so that reading never sees end-of-file), and the file of its output."""

    proc: subprocess.Popen
    folder: tempfile.TemporaryDirectory
    read_fd: int
    keep_fd: int
    log: Any

    def close(self) -> None:
        if self.proc.poll() is None:
            _kill(self.proc)
        if isinstance(self.proc, forkserver.Forked):
            self.proc.close()
        for fd in (self.read_fd, self.keep_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.folder.cleanup()
        self.log.close()


def _start(launch: Launch) -> _Started:
    """Start a worker: it imports its libraries and then waits on stdin for its job."""
    folder = tempfile.TemporaryDirectory(prefix="s2s-events-")
    # Events travel through a named pipe: it survives wrappers (compute-sanitizer) that do not pass
    # inherited file descriptors on.
    fifo = os.path.join(folder.name, "events")
    os.mkfifo(fifo)
    read_fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    keep_fd = os.open(fifo, os.O_WRONLY)
    log = tempfile.TemporaryFile()
    env = worker_env()
    env.update(dict(launch.env))
    proc: Any = None
    if launch == Launch() and forkserver.enabled():
        # Forked by a server that has imported PyTorch already; None if there is none yet.
        proc = forkserver.fork_worker([WORKER_MODULE, fifo], env, str(repo_root()), log.fileno())
    if proc is None:
        proc = subprocess.Popen([*launch.wrapper, sys.executable, "-m", WORKER_MODULE, fifo],
                                stdin=subprocess.PIPE, stdout=log, stderr=log, env=env, cwd=str(repo_root()),
                                start_new_session=True, preexec_fn=_prepare_child)
    return _Started(proc, folder, read_fd, keep_fd, log)


def run_worker(exercise: Exercise, tasks: list[str], libraries: dict[str, Libraries], seed: int,
               *, timing: bool = True, progress: OnEvent | None = None, device: int = 0,
               launch: Launch = Launch()) -> RunOutcome:
    """Grade ``tasks`` (their libraries already built) in as few worker processes as possible."""
    outcome = RunOutcome()
    remaining = list(tasks)
    logs: list[str] = []
    while remaining:
        worker = _start(launch)
        try:
            current, fresh_results = _one_worker(exercise, remaining, libraries, seed, timing, progress, device,
                                                 worker, outcome, launch)
            log = worker.log
            log.seek(0, os.SEEK_END)
            size = log.tell()
            _blame_the_output(outcome.results.get(current or ""), size)
            log.seek(max(0, size - OUTPUT_TAIL_BYTES))
            text = log.read().decode(errors="replace")
            if text.strip():
                logs.append(("..." if size > OUTPUT_TAIL_BYTES else "") + text)
        finally:
            worker.close()
        for name in fresh_results:
            remaining.remove(name)
        if not fresh_results and current is None and not outcome.fatal:
            outcome.fatal = "the GPU worker stopped without grading anything"
        if outcome.fatal:
            break
        if current is not None and current in remaining:
            remaining.remove(current)
    outcome.output = "\n".join(logs)[-OUTPUT_TAIL_BYTES:]
    return outcome


def _one_worker(exercise: Exercise, tasks: list[str], libraries: dict[str, Libraries], seed: int,
                timing: bool, progress: OnEvent | None, device: int, worker: _Started,
                outcome: RunOutcome, launch: Launch) -> tuple[str | None, list[str]]:
    """Give the started worker its job and watch it until it finishes or dies. Returns (task it
    died in, tasks it finished)."""
    job = Job(mode=launch.mode, exercise_folder=str(exercise.folder), order=tasks, seed=seed,
              tasks={t: libraries[t] for t in tasks}, timing=timing, device=device, key=secrets.token_hex(16))
    proc = worker.proc
    assert proc.stdin is not None
    try:
        proc.stdin.write(job.to_json().encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass
    try:
        with _stopped_by_sigterm():
            return _watch(exercise, proc, worker.read_fd, progress, outcome, launch, job.key)
    finally:
        if proc.poll() is None:
            _kill(proc)


def _watch(exercise: Exercise, proc: subprocess.Popen, read_fd: int, progress: OnEvent | None,
           outcome: RunOutcome, launch: Launch, key: str = "") -> tuple[str | None, list[str]]:
    selector = selectors.DefaultSelector()
    selector.register(read_fd, selectors.EVENT_READ)
    buffer = b""
    current: str | None = None
    finished: list[str] = []
    startup = STARTUP_TIMEOUT_S * launch.timeout_factor
    deadline = time.monotonic() + startup
    stage_text = "starting the GPU worker"
    exited = False
    try:
        while True:
            timeout = deadline - time.monotonic()
            if timeout <= 0:
                _kill(proc)
                if current is not None:
                    limit = task_timeout(exercise, current) * launch.timeout_factor
                    outcome.results[current] = TaskOutcome.failure(current, "timeout",
                        f"stopped after {limit:g} s while {stage_text}: an endless loop in a kernel or in host "
                        "code, or a kernel far too slow for this size")
                else:
                    outcome.fatal = f"the GPU worker did not start within {startup:g} s"
                return current, finished
            selector.select(timeout=min(timeout, 0.2))
            chunk = _read_available(read_fd)
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                event = parse_event(line, key)
                if event is None:
                    continue
                if isinstance(event, Ceilings):
                    outcome.ceilings = event
                elif isinstance(event, Isolation):
                    outcome.isolation = event
                elif isinstance(event, TaskStart):
                    current = event.task
                    deadline = time.monotonic() + task_timeout(exercise, current) * launch.timeout_factor
                    stage_text = f"grading {current}"
                elif isinstance(event, Progress):
                    if event.stage == "check":
                        stage_text = f"checking case {event.case}/{event.of} ({event.label})"
                    else:
                        stage_text = f"timing at {event.label}"
                elif isinstance(event, TaskDone):
                    outcome.results[event.task] = event.result
                    finished.append(event.task)
                    current = None
                    deadline = time.monotonic() + startup
                    if event.sticky:
                        _kill(proc)
                        return None, finished
                elif isinstance(event, Fatal):
                    outcome.fatal = event.message or "the GPU worker failed"
                elif isinstance(event, Done):
                    exited = True
                if progress:
                    progress(event)
            if exited:
                break
            if proc.poll() is not None:
                exited = True          # one more pass drains what it wrote last
        code = _wait(proc)
        if current is not None:
            outcome.results[current] = TaskOutcome.failure(current, "crash",
                                                           f"{_crash_message(code)} (while {stage_text})")
        elif not finished and not outcome.fatal and code != 0:
            outcome.fatal = f"the GPU worker failed before it graded anything ({_crash_message(code)})"
        return current, finished
    finally:
        selector.close()


def _read_available(fd: int) -> bytes:
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


PRINTED_A_LOT_BYTES = 1 << 20


def _blame_the_output(result: TaskOutcome | None, printed: int) -> None:
    """A task stopped at its deadline after printing megabytes: the printing is the likely cause."""
    error = result.error if result is not None else None
    if error is not None and error.kind == "timeout" and printed >= PRINTED_A_LOT_BYTES:
        error.message += (f"; the code had printed {printed / (1 << 20):.0f} MB by then: printf, above all "
                             "in a kernel, is slow, so remove debugging output before grading")


def _wait(proc: subprocess.Popen, timeout: float = 30.0) -> int | None:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        return proc.returncode


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            proc.kill()
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
