"""The building blocks every derivation checker shares.

A derivation prompt is a question in an exercise's notebook whose answer is code or numbers.
Its checker runs on a CPU, compares the learner's answer with the truth, and answers with a
:class:`CheckResult` that says what is wrong and what to think about, never the answer itself.
"""

from __future__ import annotations

import contextlib
import html
import os
import subprocess
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from grader.derivations.judging import (  # re-exported: the checkers import them from here
    as_float_array, as_number, ask_for_numbers, call_learner, Called, check_numbers, check_table, close,
    current_observer, fmt, functions_verdict, missing_functions, NO, no_diagnosis, NumericQuestion, observed_by, OK,
    read_number, size_label, TableRow, Verdict, worst_entry, _notify)
from hardware.specs import GpuSpec, default_spec, load_specs, spec_for

__all__ = ["_notify", "as_float_array", "as_number", "ask_for_numbers", "call_learner", "Called",
           "check_numbers", "check_table", "CheckResult", "close", "current_observer", "detect_gpu_name",
           "fmt", "functions_verdict", "GPU_VARIABLE", "missing_functions", "named_spec", "NO", "no_diagnosis",
           "NOT_ANSWERED", "NumericQuestion", "NVIDIA_SMI_TIMEOUT_S", "observed_by", "OK", "Prompt", "PromptInfo",
           "read_number", "reference_gpu", "ReferenceGpu", "run_prompt", "size_label", "TableRow", "THIS_COPY",
           "using_gpu", "Verdict", "worst_entry"]


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
    observer = current_observer()
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
