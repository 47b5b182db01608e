"""Derivation prompts of exercise 03: checkers, reference answers, the notebook that asks them."""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path

import numpy as np
import pytest

from grader import spec
from grader.derivations import CheckResult, check, prompts

from derivation_helpers import (cells_tagged,
                                load_answers, read_notebook, source)
from derivation_helpers import run_notebook as run_notebook_cells
from derivation_helpers import no_gpu  # noqa: F401 (autouse: the bandwidth cell sees no GPU)

# The exercise's own checkers, from its folder (exercise.toml names them).
optimization = spec.find("03").load_derivations()

ROOT = Path(__file__).resolve().parents[1]
EXERCISE_DIR = ROOT / "exercises" / "03_optimization"
NOTEBOOK = EXERCISE_DIR / "03_optimization.ipynb"
ANSWERS_PATH = ROOT / "solutions" / "03_optimization" / "answers.py"

PROMPT_IDS = [p.id for p in prompts("03")]


@pytest.fixture(scope="module")
def answers():
    return load_answers(ANSWERS_PATH)


def reference_answer(answers, prompt: str):
    if prompt == "bias_correction":
        return {"bias_correction": answers.bias_correction, "uncorrected_step_ratio": answers.uncorrected_step_ratio}
    if prompt == "adamw_vs_l2":
        return {"adamw_step": answers.adamw_step, "adam_l2_step": answers.adam_l2_step}
    return copy.deepcopy(getattr(answers, prompt))


def test_the_prompts_are_worth_9_points():
    assert sum(p.max_points for p in prompts("03")) == 9


def test_the_model_size_comes_from_the_spec(answers):
    """GPT-2 small's parameter count is the exercise's own list, not a copy."""
    task = spec.find("03").task("adamw_multi")
    shapes = task.benchmarks[0].lists["params"]
    assert len(shapes) == 148
    assert optimization.GPT2_VALUES == sum(math.prod(s) for s in shapes) == answers.GPT2_PARAMETERS == 124_439_808


# ------------------------------------------------------------------ 1 · bias correction

@pytest.mark.parametrize("fn, fragment", [
    (lambda b, t: b ** t, "the part of the truth that is missing"),
    (lambda b, t: 1 / (1 - b ** t), "That is the reciprocal"),
    (lambda b, t: 1 - b ** (t - 1), "Off by one step"),
    (lambda b, t: (1 - b) ** t, "geometric sum"),
    (lambda b, t: 1 - b * t, "not linearly"),
    (lambda b, t: 0.5, "Sum the geometric series"),
])
def test_a_wrong_bias_correction_is_explained(answers, fn, fragment):
    answer = reference_answer(answers, "bias_correction")
    answer["bias_correction"] = fn
    result = check("03", "bias_correction", answer)
    assert not result.passed and fragment in result.message, result.message


def test_the_uncorrected_step_is_about_three_times_too_large(answers):
    assert answers.uncorrected_step_ratio == pytest.approx(3.1623, rel=1e-4)
    answer = reference_answer(answers, "bias_correction")
    answer["uncorrected_step_ratio"] = 1 / answers.uncorrected_step_ratio
    assert "Upside down" in check("03", "bias_correction", answer).message


# ------------------------------------------------------------------ 2 · AdamW against Adam with L2

def _adam(p, g, m, v, t, lr, b1, b2, eps, eps_inside=False, corrected=True):
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    bc1, bc2 = (1 - b1 ** t, 1 - b2 ** t) if corrected else (1, 1)
    denom = np.sqrt(v / bc2 + eps) if eps_inside else np.sqrt(v / bc2) + eps
    return p - lr * (m / bc1) / denom, m, v


ADAMW_SLIPS = {
    "decay through the gradient": (lambda p, g, m, v, t, lr, b1, b2, eps, wd: _adam(p, g + wd * p, m, v, t, lr, b1, b2, eps),
                                   "That is Adam with L2"),
    "decay after the step": (lambda p, g, m, v, t, lr, b1, b2, eps, wd: tuple(
        [x * (1 - lr * wd) if i == 0 else x for i, x in enumerate(_adam(p, g, m, v, t, lr, b1, b2, eps))]),
        "The decay comes first"),
    "eps under the root": (lambda p, g, m, v, t, lr, b1, b2, eps, wd: _adam(p * (1 - lr * wd), g, m, v, t, lr, b1, b2,
                                                                             eps, eps_inside=True),
                           "eps goes outside the square root"),
    "no bias correction": (lambda p, g, m, v, t, lr, b1, b2, eps, wd: _adam(p * (1 - lr * wd), g, m, v, t, lr, b1, b2,
                                                                             eps, corrected=False),
                           "The bias corrections are missing"),
}


@pytest.mark.parametrize("slip", ADAMW_SLIPS)
def test_a_wrong_adamw_names_its_slip(answers, slip):
    fn, fragment = ADAMW_SLIPS[slip]
    answer = reference_answer(answers, "adamw_vs_l2")
    answer["adamw_step"] = fn
    result = check("03", "adamw_vs_l2", answer)
    assert not result.passed and fragment in result.message, result.message
    assert "\u2714 adam_l2_step" in result.message


def test_adamw_in_place_of_adam_with_l2_is_named(answers):
    answer = reference_answer(answers, "adamw_vs_l2")
    answer["adam_l2_step"] = answers.adamw_step
    result = check("03", "adamw_vs_l2", answer)
    assert not result.passed and "That is AdamW: with L2 regularisation the decay term" in result.message


def test_when_both_are_right_the_check_shows_where_they_differ(answers):
    message = check("03", "adamw_vs_l2", reference_answer(answers, "adamw_vs_l2")).message
    assert re.search(r"the two updates differ by up to [0-9.]+ \(parameter \d+: p = ", message)
    assert "AdamW decays every weight by the same factor" in message


def test_a_function_returning_the_wrong_thing_is_told_what_to_return(answers):
    answer = reference_answer(answers, "adamw_vs_l2")
    answer["adamw_step"] = lambda p, *rest: p
    assert "must return a tuple (p, m, v)" in check("03", "adamw_vs_l2", answer).message


def test_pytorch_is_the_truth_of_both_rules():
    """The checker's truth is torch.optim itself, and it agrees with the rules written out."""
    case = optimization.adam_cases()[2]
    p, m, v = optimization.torch_step(case, decoupled=True)
    want = _adam(case.p * (1 - case.lr * case.weight_decay), case.g, case.m, case.v, case.t, case.lr, case.beta1,
                 case.beta2, case.eps)
    for got, expected in zip((p, m, v), want):
        np.testing.assert_allclose(got, expected, rtol=1e-12)


# ------------------------------------------------------------------ 3, 4, 5 · numbers

@pytest.mark.parametrize("prompt, key, value, fragment", [
    ("epsilon", "update_eps_outside", 1e-8, "That is update eps inside"),
    ("epsilon", "update_eps_inside", 1e-5, "Multiply by the learning rate"),
    ("momentum_window", "weight_10_steps_back", 0.1 * 0.9 ** 9, "That is 9 steps back"),
    ("optimizer_traffic", "bytes_sgd", 12, "buf is read and written too"),
    ("optimizer_traffic", "bytes_adamw", 7, "That counts values; count bytes"),
    ("optimizer_traffic", "step_us_gpt2", 28 * 124_439_808 / 4.8e12 * 1e3, "Check the unit"),
    ("optimizer_traffic", "step_ms_7b", 20 * 7e9 / 4.8e12 * 1e3, "SGD's 20 bytes"),
    ("optimizer_traffic", "state_gb_7b", 112, "the weights and gradients are not state"),
])
def test_a_wrong_number_gets_its_hint(answers, prompt, key, value, fragment):
    answer = reference_answer(answers, prompt)
    answer[key] = value
    result = check("03", prompt, answer)
    assert not result.passed and fragment in result.message, result.message


def test_the_step_times_use_the_reference_gpu(answers):
    """On the default GPU (the H200, 4.8 TB/s) a GPT-2 step takes 726 us, a 7B step 40.8 ms."""
    assert answers.optimizer_traffic["step_us_gpt2"] == pytest.approx(725.9, rel=1e-3)
    assert answers.optimizer_traffic["step_ms_7b"] == pytest.approx(40.83, rel=1e-3)
    assert "spec sheet of NVIDIA H200" in check("03", "optimizer_traffic", answers.optimizer_traffic).message


# ------------------------------------------------------------------ the notebook

def notebook():
    return read_notebook(NOTEBOOK)


def test_the_answer_cells_leave_every_blank_to_the_learner():
    answer_code = "\n".join(source(c) for c in cells_tagged(notebook(), "answer:").values())
    assert answer_code.count("# YOUR ANSWER HERE") == 2 + 2 + 3 + 4 + 7
    assert answer_code.count("raise NotImplementedError") == 3


def run_notebook(answer_source=None) -> dict[str, CheckResult]:
    return run_notebook_cells(notebook(), answer_source)


def test_the_untouched_notebook_shows_the_gpus_bandwidth(capsys):
    run_notebook()
    assert "memory bandwidth: 4,800 GB/s" in capsys.readouterr().out


