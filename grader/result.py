"""The result of a grading: one object, serialised as JSON here and rendered elsewhere
(:mod:`grader.report`: a terminal table and HTML).

The JSON form is documented by ``grader/result.schema.json`` (its version is
``SCHEMA_VERSION``); notebooks and nbgrader cells read points from these objects,
never from printed text.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from enum import IntEnum
from typing import Any

from grader.build import BuildResult
from grader.protocol import CaseResult, Mismatch, Problem

__all__ = ["CaseResult", "Device", "ExitCode", "GradeResult", "KernelProfile", "Measurement", "Mismatch",
           "Points", "Problem", "Profile", "Roofline", "TaskResult", "Timing", "geometric_mean"]

SCHEMA_VERSION = 2


class ExitCode(IntEnum):
    """Exit status of ``grade exercise``."""

    PASSED = 0          # every graded task passed correctness and the speed bar
    FAILED = 1          # at least one task failed (compile error, wrong result, too slow, crash, timeout)
    USAGE = 2           # the command line was wrong (unknown option, unknown exercise or task)
    NOT_GRADED = 3      # the grading could not be completed here: no GPU, no nvcc, a broken install


@dataclass
class Roofline:
    bound: str                  # "memory" | "compute": the larger of the two floors
    achieved_gbs: float
    achieved_tflops: float
    floor_s: float              # the roofline's time for this work
    percent: float              # floor / measured, in percent
    bandwidth_gbs: float        # the ceilings used
    compute_tflops: float | None
    source: str                 # where the ceilings come from


@dataclass
class Measurement:
    """The learner's kernel, the naive baseline (and the vendor library) at one benchmark size."""

    label: str
    case: dict[str, Any]
    reps: int
    learner_s: float
    baseline_s: float
    speedup: float
    learner_spread: float
    baseline_spread: float
    flops: float
    bytes: float
    vendor_s: float | None = None
    vendor_ratio: float | None = None        # vendor time / learner time (>1: learner faster)
    learner_wall_s: float | None = None
    roofline: Roofline | None = None
    learner_events_s: float | None = None    # what the learner's process's own events measured
    clock: str = "events"                    # "grader": the grader's own clock overruled those events

    @property
    def events_missed_work(self) -> bool:
        """The grader's clock overruled events that saw less than it did (rather than events that
        also counted the grader's own time slices)."""
        return self.clock == "grader" and self.learner_events_s is not None and self.learner_events_s < self.learner_s


@dataclass
class Timing:
    """Every benchmark size of a task; the speed bar applies to the geometric mean of the speedups."""

    sizes: list[Measurement]
    speedup: float
    min_speedup: float
    vendor_ratio: float | None = None        # geometric mean, where every size timed the vendor

    @property
    def passed(self) -> bool:
        return self.speedup >= self.min_speedup

    @property
    def roofline_percent(self) -> float | None:
        """Geometric mean of the percent of the roofline over the sizes."""
        values = [m.roofline.percent for m in self.sizes if m.roofline]
        return geometric_mean(values) if values and len(values) == len(self.sizes) else None


def geometric_mean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


@dataclass
class KernelProfile:
    name: str
    duration_us: float
    memory_pct: float | None
    compute_pct: float | None
    dram_gbs: float | None
    achieved_occupancy_pct: float | None
    theoretical_occupancy_pct: float | None
    occupancy_limiter: str | None
    registers: int | None
    block: str | None
    grid: str | None
    global_load_efficiency_pct: float | None   # useful bytes / fetched sectors' bytes
    global_store_efficiency_pct: float | None
    bank_conflicts: float | None               # shared-memory bank conflicts (wavefronts beyond ideal)
    shared_instructions: float | None = None   # warp-level shared-memory loads + stores executed
    dram_bytes: float | None = None            # bytes read + written in DRAM (counters)
    fp32_flops: float | None = None            # FADD + FMUL + 2 x FFMA executed, per thread (counters)
    tensor_pipe_pct: float | None = None       # tensor-core pipe busy, % of peak
    top_stalls: list[tuple[str, float]] = field(default_factory=list)   # (reason, % of stall samples)
    advice: list[str] = field(default_factory=list)                    # ncu's own rule messages


@dataclass
class Profile:
    available: bool
    message: str = ""                           # why not, and how to enable
    kernels: list[KernelProfile] = field(default_factory=list)


@dataclass
class Points:
    correct: float
    speed: float
    max_correct: float
    max_speed: float

    @property
    def total(self) -> float:
        return self.correct + self.speed

    @property
    def max(self) -> float:
        return self.max_correct + self.max_speed


@dataclass
class TaskResult:
    name: str
    source: str
    status: str                  # "passed" | "failed" | "not run"
    summary: str                 # one line a learner reads first
    build: BuildResult | None = None
    findings: list[dict[str, Any]] = field(default_factory=list)   # static checks: {"line", "message"}
    cases: list[CaseResult] = field(default_factory=list)
    cases_total: int = 0
    correct: bool | None = None
    timing: Timing | None = None
    profile: Profile | None = None
    error: Problem | None = None
    points: Points | None = None
    sanitizer: list[dict[str, str]] = field(default_factory=list)   # {"tool", "message", "location"}

    @property
    def cases_passed(self) -> int:
        return sum(c.passed for c in self.cases)


@dataclass
class Device:
    name: str
    arch: str
    copy_gbs: float | None = None


@dataclass
class GradeResult:
    exercise: str
    title: str
    submission: str
    tasks: list[TaskResult]
    device: Device | None
    notice: str = ""             # a stage that could not run, in one sentence, with the fix
    isolation: str = ""          # where the learner's code ran while it was graded
    started: str = ""
    seconds: float = 0.0
    output: str = ""             # what the learner's code printed (tail)
    schema_version: int = SCHEMA_VERSION

    @property
    def points(self) -> float:
        return sum(t.points.total for t in self.tasks if t.points)

    @property
    def max_points(self) -> float:
        return sum(t.points.max for t in self.tasks if t.points)

    @property
    def exit_code(self) -> ExitCode:
        if any(t.status == "failed" for t in self.tasks):
            return ExitCode.FAILED
        if self.notice and any(t.status == "not run" for t in self.tasks):
            return ExitCode.NOT_GRADED
        return ExitCode.PASSED

    @property
    def passed(self) -> bool:
        return self.exit_code == ExitCode.PASSED

    def task(self, name: str) -> TaskResult:
        for t in self.tasks:
            if t.name == name:
                return t
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["points"] = self.points
        d["max_points"] = self.max_points
        d["exit_code"] = int(self.exit_code)
        for td, t in zip(d["tasks"], self.tasks):
            td["cases_passed"] = t.cases_passed
            if td.get("build"):     # what the build cache keeps to check itself, not part of a result
                td["build"].pop("headers", None)
                td["build"].pop("sha256", None)
            for case in td["cases"]:
                m = case.get("mismatch")
                if m:   # JSON has no NaN or Infinity: a non-finite value is written as a string
                    for key in ("expected", "got"):
                        if not math.isfinite(m[key]):
                            m[key] = str(m[key])
            if t.points:
                td["points"]["total"] = t.points.total
                td["points"]["max"] = t.points.max
            if t.timing:
                td["timing"]["passed"] = t.timing.passed
                td["timing"]["roofline_percent"] = t.timing.roofline_percent
        return d

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)
