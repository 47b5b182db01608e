"""The building blocks every derivation checker shares.

A derivation prompt is a question in an exercise's notebook whose answer is code or numbers.
Its checker runs on a CPU, compares the learner's answer with the truth, and answers with a
:class:`CheckResult` that says what is wrong and what to think about, never the answer itself.
"""

from __future__ import annotations

import html
import math
import subprocess
from dataclasses import dataclass
from typing import Any, Callable

from hardware.specs import GpuSpec, default_spec, spec_for


@dataclass(frozen=True)
class Verdict:
    """What a checker concludes: passed or not, and the message the learner reads."""

    passed: bool
    message: str


@dataclass(frozen=True)
class Prompt:
    """One derivation prompt: its id (used in the notebook's check cell), title, points, checker."""

    id: str
    title: str
    max_points: float
    checker: Callable[[Any], Verdict]


@dataclass(frozen=True)
class PromptInfo:
    """What a listing of an exercise's prompts shows."""

    id: str
    title: str
    max_points: float


@dataclass(frozen=True)
class CheckResult:
    exercise: str
    prompt: str
    passed: bool
    points: float
    max_points: float
    message: str

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
    try:
        verdict = prompt.checker(answer)
    except NotImplementedError:
        verdict = Verdict(False, NOT_ANSWERED)
    except Exception as err:  # an answer shaped so oddly that the checker tripped over it
        verdict = Verdict(False, "Your answer could not be checked: reading it raised "
                                 f"{type(err).__name__}: {err}\n"
                                 "Compare its shape with the answer cell's template.")
    return CheckResult(exercise=exercise, prompt=prompt.id, passed=verdict.passed,
                       points=prompt.max_points if verdict.passed else 0.0,
                       max_points=prompt.max_points, message=verdict.message)


NOT_ANSWERED = ("Not answered yet: replace `raise NotImplementedError` (or the `None` values) "
                "in the answer cell with your own work, run that cell, then this one.")


# ------------------------------------------------------------------ the GPU the numbers refer to

NVIDIA_SMI_TIMEOUT_S = 5.0


def detect_gpu_name() -> str | None:
    """The driver's name for this machine's first GPU, or None when there is no usable GPU."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    return lines[0] if done.returncode == 0 and lines else None


@dataclass(frozen=True)
class ReferenceGpu:
    """The spec sheet that hardware answers are checked against, and why it is that one."""

    spec: GpuSpec
    detected_name: str | None

    @property
    def is_this_machine(self) -> bool:
        return self.detected_name is not None and spec_for(self.detected_name) == self.spec

    def describe(self) -> str:
        if self.detected_name is None:
            why = "no GPU on this machine, so the course's default GPU"
        elif self.is_this_machine:
            why = f"the GPU on this machine, reported as '{self.detected_name}'"
        else:
            why = (f"this machine's GPU '{self.detected_name}' has no spec sheet here, "
                   "so the course's default GPU")
        return f"{self.spec.name} ({why})"


def reference_gpu() -> ReferenceGpu:
    """This machine's GPU when its spec sheet is known, else the default (the H200)."""
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
