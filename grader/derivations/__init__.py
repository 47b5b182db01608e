"""Derivation prompts: the questions of each notebook whose answers are checked on a CPU.

In a notebook::

    from grader.derivations import check
    check("01", "relu_jacobians", {"jacobian_y_wrt_x": jacobian_y_wrt_x, ...})

``check`` never raises for a wrong, missing or crashing answer: it returns a CheckResult that
says what is wrong. It raises ValueError only for an exercise or prompt id that does not exist,
which is a mistake in the notebook, not in the answer.
"""

from __future__ import annotations

from typing import Any

from grader.derivations import foundations, sequence_models
from grader.derivations.core import (CheckResult, Prompt, PromptInfo, ReferenceGpu, reference_gpu,
                                     run_prompt)

# Exercise id -> its prompts, in the order the notebook asks them.
EXERCISES: dict[str, tuple[Prompt, ...]] = {
    foundations.EXERCISE: foundations.PROMPTS,
    sequence_models.EXERCISE: sequence_models.PROMPTS,
}


def _prompts_of(exercise: str) -> tuple[Prompt, ...]:
    try:
        return EXERCISES[exercise]
    except KeyError:
        raise ValueError(f"no derivation prompts for exercise {exercise!r}; exercises with "
                         f"prompts: {', '.join(sorted(EXERCISES))}") from None


def prompts(exercise: str) -> list[PromptInfo]:
    """The prompts of an exercise (id, title, max_points), in notebook order."""
    return [PromptInfo(p.id, p.title, p.max_points) for p in _prompts_of(exercise)]


def check(exercise: str, prompt: str, answer: Any) -> CheckResult:
    """Check the learner's answer to one prompt; a wrong answer gives passed=False, never raises."""
    by_id = {p.id: p for p in _prompts_of(exercise)}
    if prompt not in by_id:
        raise ValueError(f"exercise {exercise!r} has no prompt {prompt!r}; its prompts are: "
                         f"{', '.join(by_id)}")
    return run_prompt(exercise, by_id[prompt], answer)


__all__ = ["CheckResult", "PromptInfo", "ReferenceGpu", "check", "prompts", "reference_gpu"]
