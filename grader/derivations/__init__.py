"""Derivation prompts: the questions of each notebook whose answers are checked on a CPU.

The checkers live in each exercise's folder (``derivations = "derivations.py"`` in its
exercise.toml), a module whose ``PROMPTS`` lists the prompts in the order the notebook asks them;
:mod:`grader.derivations.core` is the machinery they share. In a notebook::

    from grader.derivations import check
    check("01", "relu_jacobians", {"jacobian_y_wrt_x": jacobian_y_wrt_x, ...})

``check`` never raises for a wrong, missing or crashing answer: it returns a CheckResult that
says what is wrong. It raises ValueError only for an exercise or prompt id that does not exist,
which is a mistake in the notebook, not in the answer.
"""

from __future__ import annotations

from typing import Any

from grader import spec as specmod
from grader.derivations.core import (CheckResult, Prompt, PromptInfo, ReferenceGpu, reference_gpu,
                                     run_prompt)


def _prompts_of(exercise: str) -> tuple[Prompt, ...]:
    """The prompts of an exercise (by id, folder name or path), from its derivations module."""
    try:
        found = specmod.find_unit(exercise)
    except specmod.SpecError as exc:
        raise ValueError(str(exc)) from None
    module = found.load_derivations()
    if module is None:
        raise ValueError(f"exercise {found.id} ({found.slug}) has no derivation prompts: its "
                         f"{'capstone.toml' if found.models else 'exercise.toml'} names no derivations module")
    prompts = getattr(module, "PROMPTS", None)
    if not isinstance(prompts, tuple) or not all(isinstance(p, Prompt) for p in prompts):
        raise ValueError(f"{found.folder / found.derivations_file} must define PROMPTS, a tuple of "
                         "grader.derivations.core.Prompt")
    return prompts


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
