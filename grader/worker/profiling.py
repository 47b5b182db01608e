"""Profile mode: each task's learner entry once at its first benchmark size, for Nsight Compute.

The call runs between cudaProfilerStart/Stop and inside an NVTX range named after the task, so
that ncu (started with --profile-from-start off) records the learner's kernels and nothing else.
Nothing is checked here: the grading that came before did that.
"""
from __future__ import annotations

from typing import Any, Callable

from grader import spec as specmod
from grader.protocol import Job, ProfileEnd, ProfileStart
from grader.worker.checking import case_seed
from grader.worker.entry import Entry, synchronize
from grader.worker.memory import CaseMemory


def profile_tasks(emit: Callable[[Any], None], job: Job, exercise: specmod.Exercise) -> None:
    import cupy
    for name in job.order:
        task = exercise.task(name)
        try:
            entry = Entry(job.tasks[name].library, task)
        except LookupError:
            continue
        case = task.benchmarks[0]
        memory = CaseMemory.allocate(task, case, functions=exercise.load_reference())
        memory.fill(case_seed(job.seed, "profile", name))
        values = memory.call_values(task.scalar_values(case))
        synchronize()
        emit(ProfileStart(name))
        _nvtx_push(job.nvtx_prefix + name)
        cupy.cuda.profiler.start()
        entry(values)
        synchronize()
        cupy.cuda.profiler.stop()
        _nvtx_pop()
        emit(ProfileEnd(name))
        del memory


def _nvtx_push(name: str) -> None:
    try:
        import cupy.cuda.nvtx as nvtx
        nvtx.RangePush(name)
    except Exception:
        import torch
        torch.cuda.nvtx.range_push(name)


def _nvtx_pop() -> None:
    try:
        import cupy.cuda.nvtx as nvtx
        nvtx.RangePop()
    except Exception:
        import torch
        torch.cuda.nvtx.range_pop()
