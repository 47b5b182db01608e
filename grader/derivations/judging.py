"""How a checker reads and judges a learner's answer: numbers within a tolerance, tables of them,
functions called on test cases, and the :class:`Verdict` it concludes with; and the observer that
watches checkers while a learner's copy of the course records its answer keys."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import KW_ONLY, dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Verdict:
    """What a checker concludes: passed or not, and the message the learner reads."""

    passed: bool
    message: str



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


def current_observer() -> Any:
    """Who watches the checkers now (None: nobody)."""
    return _OBSERVER.get()


def _notify(event: str, *args: Any) -> None:
    observer = _OBSERVER.get()
    if observer is not None:
        getattr(observer, event)(*args)


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
        ok, line = number_line(q.key, q.label, answer, q.accepts, q.rule(),
                               lambda got, q=q: q.diagnose(got) or q.hint)
        passed &= ok
        lines.append(line)
    return Verdict(passed, "\n".join(lines))


def number_line(key: str, label: str, numbers: Any, accepts: Callable[[float], bool], rule: str,
                hint: Callable[[float], str]) -> tuple[bool, str]:
    """One numeric question's line: its value in the dict ``numbers``, read, then accepted or told
    the ``rule`` it breaks and the ``hint`` for the value given."""
    if not isinstance(numbers, Mapping) or key not in numbers:
        return False, f"{NO} {key}: missing from your dict."
    got, problem = read_number(numbers[key])
    if problem:
        return False, f"{NO} {key} ({label}): {problem}."
    if accepts(got):
        return True, f"{OK} {key}: {label}"
    return False, f"{NO} {key} ({label}): {fmt(got)} is not right; it {rule}.\n  Hint: {hint(got)}"


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
