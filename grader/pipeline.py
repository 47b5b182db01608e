"""The grading pipeline: resolve, inspect, build, run, time, profile, report.

Each stage does one job and hands data to the next; where a stage cannot run
(no nvcc, no GPU, no counter permission) the result says so in one sentence and
the stages before it still report.
"""
from __future__ import annotations

import datetime as _dt
import os
import secrets
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from grader import device as devmod
from grader import gpulock, state
from grader.build import (DEFAULT_ARCH, BuildResult, Toolchain, ToolchainError, compile_cuda, exported_symbols,
                          foreign_symbols)
from grader.inspect_source import check as inspect_source, check_build
from grader.limits import Limits, limits_for
from grader.protocol import Ceilings, Event, Libraries, Problem, Progress
from grader.result import Device, GradeResult, Points, TaskResult
from grader.spec import Exercise, SpecError, Task, find
from grader.verdict import apply_run, describe_failure  # noqa: F401  (describe_failure: also imported from here)

NO_GPU = "Correctness, timing and hardware counters need an NVIDIA GPU, and none was found on this machine"

Say = Callable[[str], None]
BUILD_JOBS = 8   # nvcc processes at once: each takes a core and up to about a GiB


class GradingError(Exception):
    """The grading could not start (unknown exercise, task or folder): a usage error."""


@dataclass
class Options:
    submission: Path | None = None
    tasks: tuple[str, ...] = ()
    profile: bool = True
    timing: bool = True
    seed: int | None = None
    sanitize: bool = False       # run the correctness cases under compute-sanitizer instead of timing


def grade(exercise_id: str, options: Options | None = None, progress: Say | None = None) -> GradeResult:
    options = options or Options()
    say = progress or (lambda _msg: None)
    started = time.perf_counter()
    try:
        exercise = find(exercise_id)
    except SpecError as exc:
        raise GradingError(str(exc)) from None
    submission = Path(options.submission).resolve() if options.submission else exercise.folder
    if submission.is_file():
        raise GradingError(f"{submission} is a file; --submission takes the folder that holds the .cu files "
                           f"(here {submission.parent})")
    if not submission.is_dir():
        raise GradingError(f"the submission folder {submission} does not exist")
    try:
        tasks = [exercise.task(name) for name in options.tasks] if options.tasks else list(exercise.tasks)
    except SpecError as exc:
        raise GradingError(str(exc)) from None

    result = GradeResult(exercise=exercise.id, title=exercise.title, submission=str(submission), tasks=[],
                         device=None, started=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    probe = devmod.probe()
    gpu = probe.gpu
    arch = os.environ.get("S2S_ARCH") or (gpu.arch if gpu else DEFAULT_ARCH)
    if gpu:
        result.device = Device(gpu.name, gpu.arch)

    try:
        toolchain = Toolchain.find()
    except ToolchainError as exc:
        result.tasks = [_not_run(t, "not compiled: nvcc was not found") for t in tasks]
        result.notice = str(exc)
        result.seconds = time.perf_counter() - started
        return result

    # inspect + build
    ready: list[Task] = []
    libraries: dict[str, Libraries] = {}
    by_name: dict[str, TaskResult] = {}
    for task, tr, baseline in _build_all(exercise, tasks, submission, arch, toolchain, say):
        by_name[task.name] = tr
        if baseline is not None:
            if not baseline.ok:
                tr.status, tr.summary = "not run", f"the naive baseline does not compile: {baseline.error}"
                tr.error = Problem("baseline", baseline.log or baseline.error)
                continue
            libraries[task.name] = Libraries(tr.build.library, baseline.library)
            ready.append(task)
    result.tasks = [by_name[t.name] for t in tasks]

    if gpu is None:
        for t in ready:
            tr = by_name[t.name]
            tr.status, tr.summary = "not run", "compiled; running it needs an NVIDIA GPU"
        result.notice = f"{NO_GPU} ({probe.reason})."
        result.seconds = time.perf_counter() - started
        state.save(result)
        return result

    seed = options.seed if options.seed is not None else secrets.randbits(63)
    if ready:
        try:
            with gpulock.exclusive(gpu.uuid or f"gpu{gpu.index}", f"a grading of exercise {exercise.id}", say):
                if options.sanitize:
                    _sanitize(exercise, ready, by_name, libraries, seed, gpu.index, say, result)
                else:
                    _run_and_profile(exercise, ready, by_name, libraries, seed, gpu.index, options, say, result)
        except gpulock.GpuBusy as exc:
            result.notice = str(exc)
            for t in ready:
                by_name[t.name].status, by_name[t.name].summary = "not run", "compiled; not run: the GPU was busy"
    result.seconds = time.perf_counter() - started
    if not options.sanitize:      # `grade list` shows gradings, not sanitizer runs
        state.save(result)
    return result


def _run_and_profile(exercise: Exercise, ready: list[Task], by_name: dict[str, TaskResult],
                     libraries: dict[str, Libraries], seed: int, device: int, options: Options, say: Say,
                     result: GradeResult) -> None:
    """Check and time every task in the GPU worker, then collect the counters of the correct ones."""
    from grader.runner import run_worker

    def on_event(event: Event) -> None:
        if isinstance(event, Progress):
            if event.stage == "check":
                say(f"{event.task}: checking case {event.case}/{event.of} ({event.label})")
            else:
                size = f" (size {event.case} of {event.of})" if event.of > 1 else ""
                say(f"{event.task}: timing against the baseline at {event.label}{size}")
        elif isinstance(event, Ceilings):
            say("measuring the copy bandwidth of this GPU")

    say("starting the GPU worker")
    outcome = run_worker(exercise, [t.name for t in ready], libraries, seed, timing=options.timing,
                         progress=on_event, device=device)
    result.output = outcome.output
    if outcome.isolation is not None:
        result.isolation = outcome.isolation.detail
    copy_gbs = outcome.ceilings.copy_bytes_per_s / 1e9 if outcome.ceilings else None
    result.device.copy_gbs = copy_gbs
    if outcome.fatal:
        result.notice = f"the GPU worker failed: {outcome.fatal}"
    limits = limits_for(result.device.name, copy_gbs,
                        trusted=not (outcome.ceilings and outcome.ceilings.disturbed))
    for t in ready:
        raw = outcome.results.get(t.name)
        if raw is None:
            by_name[t.name].status = "not run"
            by_name[t.name].summary = "not graded: " + (outcome.fatal or "the worker stopped before this task")
            continue
        apply_run(by_name[t.name], t, raw, limits)
    disturbed = [t.name for t in ready if by_name[t.name].error and by_name[t.name].error.kind == "disturbed"]
    if disturbed and not result.notice:
        result.notice = (f"another process used this GPU while {' and '.join(disturbed)} "
                         f"{'was' if len(disturbed) == 1 else 'were'} timed, so no speed was judged: "
                         "grade again when the GPU is free")

    profiled = [t for t in ready if by_name[t.name].correct]
    if options.profile and profiled:
        from grader.profile import profile_tasks
        say("collecting hardware counters with Nsight Compute")
        profiles = profile_tasks(exercise, [t.name for t in profiled],
                                 {t.name: libraries[t.name] for t in profiled}, seed, device=device)
        for t in profiled:
            by_name[t.name].profile = profiles.get(t.name)


def _sanitize(exercise: Exercise, ready: list[Task], by_name: dict[str, TaskResult],
              libraries: dict[str, Libraries], seed: int, device: int, say: Say,
              result: GradeResult) -> None:
    """Correctness cases (the small ones) under memcheck, then racecheck; no timing."""
    from grader import sanitize
    from grader.runner import Launch, run_worker
    if sanitize.find_sanitizer() is None:
        result.notice = ("compute-sanitizer was not found: it ships with the CUDA toolkit (bin/compute-sanitizer); "
                         "put that folder on PATH or set CUDA_HOME.")
        for t in ready:
            by_name[t.name].status, by_name[t.name].summary = "not run", "not sanitized: compute-sanitizer is missing"
        return
    sources = {t.source: t.name for t in ready}
    for t in ready:
        by_name[t.name].status, by_name[t.name].correct = "passed", True
    for tool in sanitize.TOOLS:
        say(f"running the correctness cases under compute-sanitizer {tool}")
        log = sanitize.log_path()
        launch = Launch(mode="sanitize", wrapper=tuple(sanitize.wrapper(tool, log)),
                        env=(("PYTORCH_NO_CUDA_MEMORY_CACHING", "1"),), timeout_factor=20.0)
        outcome = run_worker(exercise, [t.name for t in ready], libraries, seed, timing=False, device=device,
                             launch=launch)
        findings = sanitize.parse(log.read_text(errors="replace") if log.exists() else "", tool, sources)
        sanitize.keep(log, tool)
        log.unlink(missing_ok=True)
        for t in ready:
            tr = by_name[t.name]
            tr.sanitizer.extend(f.to_dict() for f in findings.get(t.name, []))
            raw = outcome.results.get(t.name)
            if raw is not None and tool == "memcheck":
                apply_run(tr, t, raw, Limits())
        if outcome.fatal:
            result.notice = f"the sanitizer run failed: {outcome.fatal}"
    for t in ready:
        tr = by_name[t.name]
        tr.points = Points(0, 0, t.points.correct, t.points.speed)   # a sanitizer run awards no points
        if tr.sanitizer:
            first = tr.sanitizer[0]
            tr.status = "failed"
            count = len(tr.sanitizer)
            tr.summary = (f"compute-sanitizer {first['tool']} found {count} problem{'s' if count > 1 else ''}"
                          f"{'; the first' if count > 1 else ''} at {first['location']}: {first['message']}")
        elif tr.status == "passed":
            tr.summary = (f"compute-sanitizer memcheck and racecheck found nothing in {tr.cases_passed} "
                          "correctness cases (the sanitizer run is not timed and gives no points)")


def _not_run(task: Task, summary: str) -> TaskResult:
    return TaskResult(task.name, task.source, "not run", summary,
                      points=Points(0, 0, task.points.correct, task.points.speed), cases_total=len(task.cases))


def _build_all(exercise: Exercise, tasks: list[Task], submission: Path, arch: str, toolchain: Toolchain,
               say: Say) -> list[tuple[Task, TaskResult, BuildResult | None]]:
    """Each task's source inspected and compiled, and its baseline compiled where the source was
    usable, in the tasks' order. nvcc runs as a process of its own, so the tasks compile side by
    side, one per core (at most BUILD_JOBS, or S2S_BUILD_JOBS): a fresh exercise of seven tasks
    compiles in about the time of its slowest file."""
    def one(task: Task) -> tuple[Task, TaskResult, BuildResult | None]:
        tr = _build_task(exercise, task, submission, arch, toolchain)
        if tr.status == "failed":
            return task, tr, None
        return task, tr, compile_cuda(exercise.folder / task.baseline, task.build.target(arch), toolchain,
                                      display_root=exercise.folder, extra_flags=task.build.flags)

    jobs = max(1, min(len(tasks), _build_jobs()))
    say(f"compiling {len(tasks)} sources, {jobs} at a time")
    done: dict[str, tuple[Task, TaskResult, BuildResult | None]] = {}
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="nvcc") as pool:
        for future in as_completed([pool.submit(one, t) for t in tasks]):
            task = future.result()[0]
            done[task.name] = future.result()
            say(f"compiled {task.source} ({len(done)}/{len(tasks)})")
    return [done[t.name] for t in tasks]


def _build_jobs() -> int:
    wanted = os.environ.get("S2S_BUILD_JOBS", "")
    if wanted.isdigit() and int(wanted) > 0:
        return int(wanted)
    return min(BUILD_JOBS, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def _build_task(exercise: Exercise, task: Task, submission: Path, arch: str, toolchain: Toolchain) -> TaskResult:
    source = submission / task.source
    tr = _not_run(task, "")
    if not source.is_file():
        where = "is a folder, not a file, in" if source.is_dir() else "is missing from"
        tr.status, tr.summary = "failed", f"{task.source} {where} {submission}"
        tr.error = Problem("missing file", tr.summary)
        return tr
    findings = inspect_source(source, task)
    tr.findings = [f.to_dict() for f in findings]
    if not any(f.unusable for f in findings):
        tr.build = compile_cuda(source, task.build.target(arch), toolchain, display_root=submission,
                                extra_flags=task.build.flags)
    build = tr.build
    if findings:   # reported even when the build fails: the finding is usually the reason
        tr.status, tr.summary = "failed", findings[0].where(task.source)
        tr.error = Problem("rejected", "\n".join(f.where(task.source) for f in findings))
        return tr
    if not build.ok:
        tr.status, tr.summary = "failed", f"does not compile: {build.error}"
        tr.error = Problem("compile error", build.log or build.error)
        return tr
    compiled = check_build(build.headers, [k.name for k in build.kernels])
    if compiled:
        tr.findings = [f.to_dict() for f in compiled]
        tr.status, tr.summary = "failed", compiled[0].where(task.source)
        tr.error = Problem("rejected", tr.summary)
        return tr
    symbols = exported_symbols(Path(build.library))
    if symbols is not None and task.symbol not in symbols:
        mangled = sorted(s for s in symbols if task.symbol in s)
        hint = (f' It is there under the C++ name {mangled[0]}: declare it extern "C" as in the stub.'
                if mangled else " Keep the stub's function name and signature.")
        tr.status, tr.summary = "failed", f"{task.source} defines no function {task.symbol}().{hint}"
        tr.error = Problem("missing symbol", tr.summary)
        return tr
    foreign = foreign_symbols(Path(build.library))
    if foreign:
        shown = ", ".join(f"{name}() ({_library_of(name)})" for name in foreign[:4]) + (
            f" and {len(foreign) - 4} more" if len(foreign) > 4 else "")
        tr.status, tr.summary = "failed", (
            f"{task.source} calls {shown}, which neither the CUDA runtime nor the C/C++ runtime provides; this task "
            "is about writing the kernel yourself, so library implementations are not accepted")
        tr.error = Problem("rejected", tr.summary)
    return tr


_LIBRARIES = (("cublasLt", "cuBLASLt"), ("cublas", "cuBLAS"), ("cudnn", "cuDNN"), ("cufft", "cuFFT"),
              ("curand", "cuRAND"), ("cusparse", "cuSPARSE"), ("cusolver", "cuSOLVER"), ("nccl", "NCCL"),
              ("nvjpeg", "nvJPEG"), ("npp", "NPP"))


def _library_of(symbol: str) -> str:
    return next((name for prefix, name in _LIBRARIES if symbol.startswith(prefix)), "another library")
