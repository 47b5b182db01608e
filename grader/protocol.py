"""The contract between the grading process and its GPU worker.

The parent (:mod:`grader.runner`) sends one :class:`Job` as JSON on the worker's stdin; the worker
(:mod:`grader.worker`) answers with events, one JSON object a line, each a dataclass below with
its ``kind`` under the key ``"event"``. A task's outcome (:class:`TaskOutcome`) holds the case
results and timings the result model is built from. Everything that crosses the process
boundary is defined here, once.
"""
from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Union


# --------------------------------------------------------------------------- encoding

def to_dict(obj: Any) -> Any:
    return dataclasses.asdict(obj)


def from_dict(cls: type, data: Any) -> Any:
    """A dataclass (nested ones, lists, dicts and optionals included) from what ``to_dict`` made."""
    return _convert(cls, data)


def _convert(tp: Any, value: Any) -> Any:
    if tp is Any or value is None:
        return value
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        known = {f.name for f in dataclasses.fields(tp) if f.init}
        return tp(**{k: _convert(hints[k], v) for k, v in value.items() if k in known})
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        return _convert(options[0], value) if len(options) == 1 else value
    if origin is list:
        return [_convert(args[0], v) for v in value]
    if origin is tuple:
        return tuple(_convert(args[0], v) for v in value)
    if origin is dict:
        return {k: _convert(args[1], v) for k, v in value.items()}
    if tp is float and isinstance(value, int):
        return float(value)
    return value


# --------------------------------------------------------------------------- results of the worker

@dataclass
class Problem:
    """Why something failed: a short kind ("timeout", "cuda error", ...) and a sentence for the learner."""

    kind: str
    message: str
    trace: str = ""        # a grader error's traceback, for whoever maintains the grader


@dataclass
class Mismatch:
    output: str            # the argument, with the tensor's index for a list: "p[3]"
    index: list[int]
    expected: float
    got: float
    bad: int
    total: int
    reason: str            # "wrong value" | "not written" | "not updated" | "not finite"
    tolerance: float


@dataclass
class CaseResult:
    label: str
    case: dict[str, Any]
    passed: bool
    seconds: float = 0.0
    error: Problem | None = None
    mismatch: Mismatch | None = None


@dataclass
class SizeTiming:
    """Median times of the learner, the naive baseline and the vendor at one benchmark size."""

    label: str
    case: dict[str, Any]
    reps: int
    learner_s: float
    baseline_s: float
    learner_spread: float
    baseline_spread: float
    learner_wall_s: float
    flops: float
    bytes: float
    vendor_s: float | None = None
    learner_events_s: float | None = None   # what the CUDA events in the learner's process measured
    clock: str = "events"                   # "grader": the checker's own clock overruled those events


@dataclass
class TaskOutcome:
    """What the worker found for one task."""

    task: str
    cases: list[CaseResult] = field(default_factory=list)
    correct: bool = False
    timing: list[SizeTiming] | None = None
    error: Problem | None = None

    @classmethod
    def failure(cls, task: str, kind: str, message: str, trace: str = "") -> "TaskOutcome":
        return cls(task, error=Problem(kind, message, trace))


# --------------------------------------------------------------------------- the job

@dataclass
class Libraries:
    library: str              # the learner's shared library
    baseline_library: str


@dataclass
class Job:
    mode: str                  # "grade" | "sanitize" | "profile"
    exercise_folder: str
    order: list[str]
    seed: int
    tasks: dict[str, Libraries]
    timing: bool = True
    device: int = 0
    nvtx_prefix: str = "s2s/"
    max_elements: int = 1 << 22     # sanitize mode: cases up to this many elements
    max_flops: float = 2.0 ** 30    # ... and this much work (a 1000^3 GEMM took minutes under racecheck)
    key: str = ""                   # signs every event the worker writes back

    def to_json(self) -> str:
        return json.dumps(to_dict(self))

    @staticmethod
    def from_json(text: str) -> "Job":
        return from_dict(Job, json.loads(text))


# --------------------------------------------------------------------------- events

def _mac(key: str, payload: str) -> str:
    return hmac.new(key.encode(), payload.encode(), hashlib.sha256).hexdigest()


@dataclass
class Event:
    kind: ClassVar[str] = ""

    def to_line(self, key: str = "") -> str:
        """One line of JSON; with the job's key, signed (the parent then takes no line unsigned)."""
        payload = json.dumps({"event": self.kind, **to_dict(self)})
        return payload + (f"\t{_mac(key, payload)}" if key else "") + "\n"


@dataclass
class Ceilings(Event):
    kind: ClassVar[str] = "ceilings"
    copy_bytes_per_s: float
    l2_bytes: int
    device: str
    disturbed: str = ""       # the processes that used the GPU during every measurement of the copy


@dataclass
class TaskStart(Event):
    kind: ClassVar[str] = "task_start"
    task: str


@dataclass
class Progress(Event):
    kind: ClassVar[str] = "progress"
    task: str
    stage: str                 # "check" | "time"
    label: str
    case: int = 0
    of: int = 0


@dataclass
class TaskDone(Event):
    kind: ClassVar[str] = "task_done"
    task: str
    result: TaskOutcome
    sticky: bool = False       # the CUDA context is lost: the worker stops after this


@dataclass
class Fatal(Event):
    kind: ClassVar[str] = "fatal"
    message: str
    trace: str = ""


@dataclass
class Isolation(Event):
    """Where the learner's code runs: its own confined process, or (a platform without CUDA IPC)
    inside the checker."""
    kind: ClassVar[str] = "isolation"
    separate: bool
    detail: str


@dataclass
class Done(Event):
    kind: ClassVar[str] = "done"


@dataclass
class ProfileStart(Event):
    kind: ClassVar[str] = "profile_start"
    task: str


@dataclass
class ProfileEnd(Event):
    kind: ClassVar[str] = "profile_end"
    task: str


EVENTS: dict[str, type[Event]] = {cls.kind: cls for cls in
                                  (Ceilings, TaskStart, Progress, TaskDone, Fatal, Done, ProfileStart, ProfileEnd, Isolation)}


def parse_event(line: bytes | str, key: str = "") -> Event | None:
    """One event from a line the worker wrote; None for anything else (a torn or foreign line, or,
    with a key, one the worker did not sign with it)."""
    text = line.decode(errors="replace") if isinstance(line, bytes) else line
    text = text.rstrip("\n")
    if key:
        payload, _, mac = text.rpartition("\t")
        if not payload or not hmac.compare_digest(mac, _mac(key, payload)):
            return None
        text = payload
    try:
        data = json.loads(text)
        cls = EVENTS[data.pop("event")]
        return from_dict(cls, data)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
