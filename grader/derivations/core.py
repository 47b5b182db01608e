"""The building blocks every derivation checker shares.

A derivation prompt is a question in an exercise's notebook whose answer is code or numbers.
Its checker runs on a CPU, compares the learner's answer with the truth, and answers with a
:class:`CheckResult` that says what is wrong and what to think about, never the answer itself.
"""

from __future__ import annotations

import contextlib
import html
import math
import os
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import KW_ONLY, dataclass
from typing import Any

import numpy as np

from hardware.specs import GpuSpec, default_spec, load_specs, spec_for


@dataclass(frozen=True)
class Verdict:
    """What a checker concludes: passed or not, and the message the learner reads."""

    passed: bool
    message: str


@dataclass(frozen=True)
class Prompt:
    """One derivation prompt: its id (used in the notebook's check cell), title, points, checker.

    ``function_tolerance`` (rtol, atol), where given, is how closely a learner's copy of the course
    compares what the learner's functions return with what the hidden answer's return (see
    grader.derivations.answer_key); without it, a tolerance suited to each result's dtype.
    ``self_check`` marks the checkers of a learner's copy, which compare digests, not the truth.
    """

    id: str
    title: str
    max_points: float
    checker: Callable[[Any], Verdict]
    function_tolerance: tuple[float, float] | None = None
    self_check: bool = False


@dataclass(frozen=True)
class PromptInfo:
    """What a listing of an exercise's prompts shows."""

    id: str
    title: str
    max_points: float


@dataclass(frozen=True)
class CheckResult:
    """A checked answer. ``self_check`` is True when a learner's copy of the course checked it
    (against digests): such a verdict helps the learner, and is never a grade."""

    exercise: str
    prompt: str
    passed: bool
    points: float
    max_points: float
    message: str
    self_check: bool = False

    def _headline(self) -> str:
        mark = "passed" if self.passed else "not yet"
        return (f"{self.exercise}/{self.prompt}: {mark} "
                f"({_fmt_points(self.points)}/{_fmt_points(self.max_points)} points)")

    def __str__(self) -> str:
        mark = "\u2714" if self.passed else "\u2718"
        return f"{mark} {self._headline()}\n{self.message}"

    def _repr_html_(self) -> str:
        border, background, mark = (("#2e7d32", "#e8f5e9", "\u2714") if self.passed
                                    else ("#c62828", "#ffebee", "\u2718"))
        return (
            f'<div style="border-left: 6px solid {border}; background: {background}; '
            f'color: #212121; padding: 8px 12px; margin: 4px 0; border-radius: 4px;">'
            f'<div style="font-weight: bold; margin-bottom: 4px;">{mark} '
            f"{html.escape(self._headline())}</div>"
            f'<div style="white-space: pre-wrap; font-family: var(--jp-code-font-family, '
            f'monospace); font-size: 0.9em;">{html.escape(self.message)}</div></div>'
        )


def _fmt_points(points: float) -> str:
    return f"{points:g}"


def run_prompt(exercise: str, prompt: Prompt, answer: Any) -> CheckResult:
    """Run one checker; whatever the learner's answer does, the result is a CheckResult."""
    observer = _OBSERVER.get()
    if observer is not None:
        answer = observer.begin(exercise, prompt, answer)
    try:
        verdict = prompt.checker(answer)
    except NotImplementedError:
        verdict = Verdict(False, NOT_ANSWERED)
    except Exception as err:  # an answer shaped so oddly that the checker tripped over it
        verdict = Verdict(False, "Your answer could not be checked: reading it raised "
                                 f"{type(err).__name__}: {err}\n"
                                 "Compare its shape with the answer cell's template.")
    if observer is not None:
        observer.end(verdict)
    return CheckResult(exercise=exercise, prompt=prompt.id, passed=verdict.passed,
                       points=prompt.max_points if verdict.passed else 0.0,
                       max_points=prompt.max_points, message=verdict.message, self_check=prompt.self_check)


NOT_ANSWERED = ("Not answered yet: replace `raise NotImplementedError` (or the `None` values) "
                "in the answer cell with your own work, run that cell, then this one.")


# ------------------------------------------------------------------ watching a checker work

# Who watches the checkers: nobody while learners check their answers. While a learner's copy of
# the course is written, grader.derivations.key_recorder watches each checker judge the hidden answer
# (what it calls, which numbers it compares, with which tolerance) and keeps digests of that.
_OBSERVER: ContextVar[Any] = ContextVar("s2s_derivations_observer", default=None)


@contextlib.contextmanager
def observed_by(observer: Any) -> Iterator[None]:
    """Within the block, every checker built on this module tells ``observer`` what it does:
    ``begin(exercise, prompt, answer) -> answer``, ``end(verdict)``, ``calling(name, where)``,
    ``functions(answer, names)``, ``numbers(answer, questions, heading)`` and
    ``table(answer, rows, fields, accepts, wrong, right)``."""
    token = _OBSERVER.set(observer)
    try:
        yield
    finally:
        _OBSERVER.reset(token)


def _notify(event: str, *args: Any) -> None:
    observer = _OBSERVER.get()
    if observer is not None:
        getattr(observer, event)(*args)


# ------------------------------------------------------------------ the GPU the numbers refer to

NVIDIA_SMI_TIMEOUT_S = 5.0
# Names the GPU the derivation prompts refer to, whatever this machine has: a key of
# hardware/specs.toml ("h100-sxm") or a name ("H100"). `grade course build --gpu` sets it for
# autograding, so that a class is graded with the figures of the GPU its learners' copies name.
GPU_VARIABLE = "S2S_GPU"
THIS_COPY = "the GPU this copy of the course was made for"


def detect_gpu_name() -> str | None:
    """The driver's name for this machine's first GPU, or None when there is no usable GPU."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    return lines[0] if done.returncode == 0 and lines else None


def named_spec(name: str) -> GpuSpec | None:
    """The spec sheet a person names: a key of specs.toml ("h100-sxm"), or a GPU's name ("H100",
    "NVIDIA H100 80GB HBM3", "h200")."""
    specs = load_specs()
    wanted = name.strip().lower()
    for spec in specs:
        if wanted in (spec.key, spec.name.lower()):
            return spec
    return spec_for(name, specs)


@dataclass(frozen=True)
class ReferenceGpu:
    """The spec sheet that hardware answers are checked against, and why it is that one."""

    spec: GpuSpec
    detected_name: str | None
    chosen: str | None = None       # why it is this spec when a person named it, not the driver

    @property
    def is_this_machine(self) -> bool:
        return self.chosen is None and self.detected_name is not None and spec_for(self.detected_name) == self.spec

    def describe(self) -> str:
        if self.chosen is not None:
            why = self.chosen
        elif self.detected_name is None:
            why = "no GPU on this machine, so the course's default GPU"
        elif self.is_this_machine:
            why = f"the GPU on this machine, reported as '{self.detected_name}'"
        else:
            why = (f"this machine's GPU '{self.detected_name}' has no spec sheet here, "
                   "so the course's default GPU")
        return f"{self.spec.name} ({why})"


_NAMED: ContextVar[ReferenceGpu | None] = ContextVar("s2s_named_gpu", default=None)


@contextlib.contextmanager
def using_gpu(spec: GpuSpec, why: str) -> Iterator[None]:
    """Within the block, hardware answers are checked against ``spec``, described with ``why``."""
    token = _NAMED.set(ReferenceGpu(spec=spec, detected_name=None, chosen=why))
    try:
        yield
    finally:
        _NAMED.reset(token)


def reference_gpu() -> ReferenceGpu:
    """The GPU whose spec sheet the hardware answers are checked against, first that applies:
    the one a learner's copy of the course was made for (its answers' digests hold its figures);
    the one S2S_GPU names; this machine's when its spec sheet is known; the default (the H200)."""
    named = _NAMED.get()
    if named is not None:
        return named
    from grader.spec import learner_copy

    copy = learner_copy()
    if copy is not None and copy.gpu is not None:
        return ReferenceGpu(spec=copy.gpu, detected_name=None, chosen=THIS_COPY)
    wanted = os.environ.get(GPU_VARIABLE, "").strip()
    if wanted:
        spec = named_spec(wanted)
        if spec is not None:
            return ReferenceGpu(spec=spec, detected_name=None, chosen=f"named by {GPU_VARIABLE}")
        return ReferenceGpu(spec=default_spec(), detected_name=None,
                            chosen=f"{GPU_VARIABLE} names '{wanted}', which has no spec sheet here, "
                                   "so the course's default GPU")
    name = detect_gpu_name()
    spec = spec_for(name) if name is not None else None
    return ReferenceGpu(spec=spec or default_spec(), detected_name=name)


# ------------------------------------------------------------------ reading numeric answers

def as_number(value: Any) -> float | None:
    """A finite real number from an int, float or NumPy scalar; None for anything else."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def close(got: float, expected: float, rtol: float) -> bool:
    """Within rtol of expected; an expected 0 must be met exactly."""
    if expected == 0:
        return got == 0
    return abs(got - expected) <= rtol * abs(expected)


def fmt(value: float) -> str:
    """A number as a learner would write it: integers in full with separators, else 4 digits."""
    if float(value).is_integer() and abs(value) < 1e16:
        return f"{int(value):,}"
    return f"{value:.4g}"


def size_label(case: Any) -> str:
    """A case of exercise.toml as people write it: "n = 2^26 = 67,108,864", "rows = 8,192, cols = 8,192"."""
    parts = []
    for name, value in case.values.items():
        if isinstance(value, int) and value >= 1 << 10 and value & (value - 1) == 0 and len(case.values) == 1:
            parts.append(f"{name} = 2^{value.bit_length() - 1} = {value:,}")
        else:
            parts.append(f"{name} = {fmt(value)}")
    return ", ".join(parts)


# ------------------------------------------------------------------ the learner's functions

OK, NO = "\u2714", "\u2718"


@dataclass(frozen=True)
class Called:
    """What a learner's function gave back, or the message about why it gave nothing usable."""

    value: Any
    problem: str | None


def call_learner(name: str, fn: Any, args: tuple, where: str,
                 crash_hint: Callable[[Exception], str | None] | None = None) -> Called:
    """Call the learner's function fn on args; where says what args are, for the messages.

    crash_hint, when given, turns what fn raised into a hint about the likely cause.
    """
    if not callable(fn):
        return Called(None, f"{name}: expected your function {name}, got {type(fn).__name__} "
                            "(pass the function itself, without calling it).")
    _notify("calling", name, where)
    try:
        value = fn(*args)
    except NotImplementedError:
        return Called(None, f"{name}: not written yet (it raises NotImplementedError).")
    except Exception as err:
        hint = crash_hint(err) if crash_hint else None
        return Called(None, f"{name} raised {type(err).__name__}: {err}\n"
                            f"  when called with {where}."
                            + ("" if hint is None else f"\n  Hint: {hint}"))
    if value is None:
        return Called(None, f"{name} returned None for {where}: did you forget `return`?")
    return Called(value, None)


def as_float_array(name: str, raw: Any) -> tuple[np.ndarray | None, str | None]:
    """What the learner's function returned as a float64 array, or why it is not one."""
    try:
        return np.asarray(raw, dtype=np.float64), None
    except (TypeError, ValueError) as err:
        return None, (f"{name} returned {type(raw).__name__}, which is not an array of numbers "
                      f"({err}).")


def worst_entry(got: np.ndarray, expected: np.ndarray) -> str:
    """Where a wrong array is furthest from the truth, and both values there."""
    error = np.abs(got - expected)
    worst = np.unravel_index(int(np.argmax(error)), error.shape)
    index = ", ".join(str(int(i)) for i in worst)
    return f"worst entry [{index}]: expected {expected[worst]:.6g}, got {got[worst]:.6g}"


def missing_functions(answer: Any, names: Sequence[str]) -> Verdict | None:
    """The refusal of an answer that is not a dict holding every function of the prompt."""
    _notify("functions", answer, tuple(names))
    if not isinstance(answer, Mapping):
        return Verdict(False, "Pass a dict of your functions, like the template: "
                              + "{" + ", ".join(f'"{n}": {n}' for n in names) + "}.")
    missing = [n for n in names if n not in answer]
    if missing:
        return Verdict(False, f"The answer dict lacks {', '.join(repr(n) for n in missing)}; "
                              "it needs one entry per function of the prompt.")
    return None


def functions_verdict(results: Sequence[tuple[str, str | None, str]]) -> Verdict:
    """One line per function from (name, problem or None, what passing means)."""
    lines = [f"{NO} {problem}" if problem else f"{OK} {name}: {good}"
             for name, problem, good in results]
    return Verdict(all(problem is None for _, problem, _ in results), "\n".join(lines))


# ------------------------------------------------------------------ prompts of numeric questions

def read_number(raw: Any) -> tuple[float | None, str | None]:
    """The learner's value as a float, or None and what is wrong with its form."""
    if raw is None:
        return None, "not answered yet (still None)"
    got = as_number(raw)
    if got is None:
        return None, f"{raw!r} is not a finite number"
    return got, None


def no_diagnosis(got: float) -> str | None:
    """For a question with no slip worth naming: its hint says all there is to say."""
    return None


@dataclass(frozen=True)
class NumericQuestion:
    """A number the learner derives: its key in the answer dict, the truth, how close an answer
    must come, and what to say when it does not.

    Without rtol or atol the answer must be exact; a question has one tolerance, never both.
    """

    key: str
    label: str
    truth: float
    _: KW_ONLY
    hint: str  # what to think about when diagnose names no known slip
    diagnose: Callable[[float], str | None] = no_diagnosis  # the slip a wrong value reveals
    rtol: float = 0.0
    atol: float = 0.0

    def __post_init__(self) -> None:
        if self.rtol and self.atol:
            raise ValueError(f"{self.key}: give a relative or an absolute tolerance, not both")

    def accepts(self, got: float) -> bool:
        if self.rtol:
            return close(got, self.truth, self.rtol)
        return abs(got - self.truth) <= self.atol

    def rule(self) -> str:
        if self.rtol:
            return f"must be within {self.rtol:.0%}"
        if self.atol:
            return f"must be within {self.atol:g}"
        return "must be exact"


def ask_for_numbers(name: str, questions: Sequence[NumericQuestion]) -> Verdict:
    """The refusal of an answer that is not the answer cell's dict of numbers."""
    return Verdict(False, f"Pass the dict `{name}` from the answer cell, with the keys "
                          f"{', '.join(q.key for q in questions)}.")


def check_numbers(answer: Mapping[str, Any], questions: Sequence[NumericQuestion],
                  heading: str | None = None) -> Verdict:
    """One line per question, in order: the right ones named, the wrong ones with a hint."""
    _notify("numbers", answer, tuple(questions), heading)
    lines = [] if heading is None else [heading]
    passed = True
    for q in questions:
        if q.key not in answer:
            passed = False
            lines.append(f"{NO} {q.key}: missing from your dict.")
            continue
        got, problem = read_number(answer[q.key])
        if problem is None and q.accepts(got):
            lines.append(f"{OK} {q.key}: {q.label}")
            continue
        passed = False
        if problem:
            lines.append(f"{NO} {q.key} ({q.label}): {problem}.")
        else:
            lines.append(f"{NO} {q.key} ({q.label}): {fmt(got)} is not right; it {q.rule()}.\n"
                         f"  Hint: {q.diagnose(got) or q.hint}")
    return Verdict(passed, "\n".join(lines))


# ------------------------------------------------------------------ prompts of tables of numbers

@dataclass(frozen=True)
class TableRow:
    """One row of a table prompt: the dict of numbers the learner gives under ``key`` (a task, a
    shape), what the key stands for, the true numbers, and the hint for a wrong field."""

    key: str
    label: str
    truth: Callable[[], Mapping[str, float]]
    hint: Callable[[str, float, Mapping[str, float | None]], str]  # (field, got, the learner's row)


def check_table(answer: Mapping[str, Any], rows: Sequence[TableRow], fields: Sequence[str], *,
                accepts: Callable[[float, float], bool], wrong: str, right: str) -> tuple[bool, list[str]]:
    """One line per row: a right row named with ``right``, a wrong one with a line per wrong field
    (``wrong`` follows the learner's value) and its hint. Returns (all right, lines)."""
    _notify("table", answer, tuple(rows), tuple(fields), accepts, wrong, right)
    lines, passed = [], True
    for row in rows:
        entry = answer.get(row.key)
        if not isinstance(entry, Mapping):
            passed = False
            what = "missing" if entry is None else f"{entry!r} is not a dict"
            lines.append(f"{NO} {row.key}: {what}; give a dict with " + ", ".join(fields) + ".")
            continue
        truth = row.truth()
        mine = {f: as_number(entry.get(f)) for f in fields}
        problems = []
        for field in fields:
            if field not in entry:
                problems.append(f"{field}: missing from the dict.")
                continue
            got, problem = read_number(entry[field])
            if problem:
                problems.append(f"{field}: {problem}.")
            elif not accepts(got, truth[field]):
                problems.append(f"{field}: {fmt(got)} {wrong}\n    Hint: {row.hint(field, got, mine)}")
        if problems:
            passed = False
            lines.append(f"{NO} {row.key} ({row.label}):\n  " + "\n  ".join(problems))
        else:
            lines.append(f"{OK} {row.key} ({row.label}): {right}")
    return passed, lines
