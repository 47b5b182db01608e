"""The adversarial catalogue (``catalogue.toml``): submissions the grader must reject.

Both the CPU tests and the GPU tests read it through :func:`load`, and judge a grading
with :func:`problems`, which lists every way a task's result differs from what the
catalogue says a learner must see.
"""
from __future__ import annotations

import re
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
    alone: bool = False
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
    # Graded in a group, the case's file keeps its own name: the summary names that file.
    promised = attack.summary.replace(attack.spec.task(attack.task).source, result.source)
    if promised not in result.summary:
        found.append(f"the summary does not say {promised!r}")
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


@dataclass
class Group:
    """Cases graded in one grading."""
    exercise: str
    attacks: list[Attack]
    limits: dict[str, str]

    @property
    def alone(self) -> bool:
        return len(self.attacks) == 1 and (self.attacks[0].alone or bool(self.attacks[0].known_gap))

    @property
    def stops_the_worker(self) -> bool:
        return any(a.stops_the_worker for a in self.attacks)

    @property
    def id(self) -> str:
        if self.alone:
            return self.attacks[0].name
        deadlines = "".join(f"-{k.removeprefix('S2S_').lower()}{v}" for k, v in sorted(self.limits.items()))
        return f"{self.exercise}{deadlines}-{len(self.attacks)}cases"


def plan(attacks: list[Attack]) -> list[Group]:
    """One grading for the cases of an exercise that share their deadlines; one each for the rest."""
    together: dict[tuple, Group] = {}
    alone: list[Group] = []
    for attack in attacks:
        if attack.alone or attack.known_gap:
            alone.append(Group(attack.exercise, [attack], attack.limits()))
        else:
            key = (attack.exercise, tuple(sorted(attack.limits().items())))
            together.setdefault(key, Group(attack.exercise, [], attack.limits())).attacks.append(attack)
    return [*together.values(), *alone]


def task_name(attack: Attack) -> str:
    return f"{attack.task}__{attack.name}"


def _task_blocks(toml: str) -> tuple[str, dict[str, str]]:
    """An exercise.toml cut into its preamble and its [[tasks]] tables, by task name."""
    preamble, *blocks = toml.split("\n[[tasks]]\n")
    named = {}
    for block in blocks:
        name = re.search(r'^name = "([^"]+)"$', block, re.M)
        assert name, f"a [[tasks]] table without a name: {block[:80]}"
        named[name.group(1)] = block
    return preamble, named


def grouped_exercise(group: Group, root: Path) -> tuple[Path, Path]:
    """(exercise folder, submission folder) for a group: one task per case, named after it and
    reading the case's file; the exercise's real tasks after them, on the hidden solutions,
    when a case stops the worker."""
    spec = find(group.exercise)
    exercise = root / "exercise"
    shutil.copytree(spec.folder, exercise, ignore=shutil.ignore_patterns("*.ipynb", "__pycache__"))
    preamble, blocks = _task_blocks((exercise / "exercise.toml").read_text())
    submission = root / "submission"
    submission.mkdir()
    tables = []
    for attack in group.attacks:
        block = blocks[attack.task]
        renamed = f'name = "{task_name(attack)}"'
        for key in ("symbol", "reference"):          # both default to the task's name
            if not re.search(rf"^{key} = ", block, re.M):
                renamed += f'\n{key} = "{attack.task}"'
        block = re.sub(r'^name = "[^"]+"$', renamed, block, count=1, flags=re.M)
        block = re.sub(r'^source = "[^"]+"$', f'source = "{attack.name}.cu"', block, count=1, flags=re.M)
        tables.append(block)
        shutil.copy(attack.source, submission / f"{attack.name}.cu")
    solutions = solutions_dir() / spec.slug
    if group.stops_the_worker:
        tables += blocks.values()
        for task in spec.tasks:
            shutil.copy(solutions / task.source, submission / task.source)
    for header in [*solutions.glob("*.cuh"), *solutions.glob("*.h")]:
        shutil.copy(header, submission / header.name)
    (exercise / "exercise.toml").write_text(preamble + "".join(f"\n[[tasks]]\n{t}" for t in tables))
    return exercise, submission
