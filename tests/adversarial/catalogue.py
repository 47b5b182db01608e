"""The adversarial catalogue (``catalogue.toml``): submissions the grader must reject.

Both the CPU tests and the GPU tests read it through :func:`load`, and judge a grading
with :func:`problems`, which lists every way a task's result differs from what the
catalogue says a learner must see.
"""
from __future__ import annotations

import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path

from grader.result import TaskResult
from grader.spec import Exercise, find, solutions_dir

HERE = Path(__file__).resolve().parent
CATEGORIES = ("dishonest", "broken", "correct")
# Where a verdict shows in a TaskResult, and the values each place can hold.
VERDICTS = {
    "error.kind": {"compile error", "rejected", "missing symbol", "crash", "timeout", "cuda error",
                   "timed output wrong", "untimed work", "impossible time"},
    "case.error.kind": {"launch error", "out of bounds", "input modified"},
    "mismatch.reason": {"not written", "not finite", "wrong value"},
    "timing.passed": {"false"},
}
# Verdicts reached before anything runs: from the source, the compiler or the library's symbols.
STATIC_KINDS = frozenset({"compile error", "rejected", "missing symbol"})
# Verdicts that cost the grader its worker process (and, for a CUDA error, the CUDA context).
PROCESS_KINDS = frozenset({"crash", "timeout", "cuda error"})


@dataclass(frozen=True)
class Attack:
    name: str
    exercise: str
    task: str
    category: str
    flaw: str
    shown_in: str
    expect: str | tuple[str, ...]
    summary: str
    folder: Path
    task_timeout_s: float | None = None
    compile_timeout_s: float | None = None
    known_gap: str = ""

    @property
    def expects(self) -> tuple[str, ...]:
        """Every verdict the case accepts (most cases accept one)."""
        return (self.expect,) if isinstance(self.expect, str) else tuple(self.expect)

    @property
    def spec(self) -> Exercise:
        return find(self.exercise)

    @property
    def source(self) -> Path:
        return self.folder / self.spec.task(self.task).source

    @property
    def static(self) -> bool:
        """Rejected from the source and the build alone: no GPU needed to see it."""
        return self.shown_in == "error.kind" and set(self.expects) <= STATIC_KINDS

    @property
    def compiles(self) -> bool:
        return not (self.shown_in == "error.kind" and "compile error" in self.expects)

    def limits(self) -> dict[str, str]:
        """The grader's deadlines for this case, as the environment variables that set them."""
        env = {}
        if self.task_timeout_s:
            env["S2S_TASK_TIMEOUT"] = f"{self.task_timeout_s:g}"
        if self.compile_timeout_s:
            env["S2S_COMPILE_TIMEOUT"] = f"{self.compile_timeout_s:g}"
        return env

    @property
    def stops_the_worker(self) -> bool:
        return self.shown_in == "error.kind" and set(self.expects) <= PROCESS_KINDS


def load(path: Path = HERE / "catalogue.toml") -> list[Attack]:
    data = tomllib.loads(path.read_text())
    attacks = []
    for entry in data["case"]:
        entry = dict(entry)
        folder = HERE / entry.pop("folder", entry["name"])
        if isinstance(entry["expect"], list):
            entry["expect"] = tuple(entry["expect"])
        attacks.append(Attack(folder=folder, **entry))
    return attacks


def shown(result: TaskResult, field: str) -> str | None:
    """The value a learner sees in ``field`` of a task's result (None where there is none)."""
    failing = next((c for c in result.cases if not c.passed), None)
    if field == "error.kind":
        return result.error.kind if result.error else None
    if field == "case.error.kind":
        return failing.error.kind if failing and failing.error else None
    if field == "mismatch.reason":
        return failing.mismatch.reason if failing and failing.mismatch else None
    if field == "timing.passed":
        return str(result.timing.passed).lower() if result.timing else None
    raise ValueError(f"unknown field {field!r}")


def problems(attack: Attack, result: TaskResult) -> list[str]:
    """Every way ``result`` differs from the verdict the catalogue demands; empty when it matches."""
    found = []
    if result.status != "failed":
        found.append(f"status is {result.status!r}, not 'failed'")
    got = shown(result, attack.shown_in)
    if got not in attack.expects:
        found.append(f"{attack.shown_in} is {got!r}, not {' or '.join(map(repr, attack.expects))}")
    if attack.summary not in result.summary:
        found.append(f"the summary does not say {attack.summary!r}")
    points = result.points
    if points is None:
        found.append("no points were given")
    elif attack.category == "correct":
        if not result.correct or points.correct != points.max_correct or points.speed != 0:
            found.append(f"a correct but slow kernel must keep its correctness points only: {points}")
    elif points.total != 0:
        found.append(f"it scored {points.total:g} points")
    if found:
        found.append(f"summary: {result.summary}")
        if result.error:
            found.append(f"error: {result.error}")
    return found


def solution_folder(attack: Attack) -> Path:
    return solutions_dir() / attack.spec.slug


def with_the_other_solutions(attack: Attack, destination: Path) -> Path:
    """A submission of the whole exercise: the attack's file for its task, the hidden
    reference solutions for every other task."""
    destination.mkdir(parents=True, exist_ok=True)
    shutil.copy(attack.source, destination / attack.source.name)
    solutions = solution_folder(attack)
    for task in attack.spec.tasks:
        if task.name != attack.task:
            shutil.copy(solutions / task.source, destination / task.source)
    for header in [*solutions.glob("*.cuh"), *solutions.glob("*.h")]:
        shutil.copy(header, destination / header.name)
    return destination
