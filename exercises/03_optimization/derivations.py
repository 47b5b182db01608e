"""Checkers of exercise 03 (Optimization): bias correction, AdamW against Adam with L2, where eps
sits, momentum as a moving average, and what an optimizer step costs in memory traffic.

The truth comes from PyTorch's own optimizers (run in float64 on the CPU) for the update rules,
from the moving-average recursion itself for the bias correction, from this exercise's
exercise.toml for the model sizes, and from the spec sheet of the reference GPU for the times.
When an answer is wrong, the checker replays the mistakes people make (the correction's reciprocal,
weight decay inside the gradient, eps under the square root) to name the one that fits.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from grader import spec as specmod
from grader.derivations import core
from grader.derivations.core import (NumericQuestion, Prompt, Verdict, as_float_array, ask_for_numbers,
                                     call_learner, check_numbers, close, fmt, functions_verdict,
                                     missing_functions)
from hardware.specs import GpuSpec, default_spec

# This exercise's exercise.toml: the sizes of the model whose step the traffic prompt counts.
EXERCISE = specmod.load(Path(__file__).resolve().parent)
GPT2_PARAMETERS = EXERCISE.task("adamw_multi").benchmarks[0]
GPT2_VALUES = sum(math.prod(s) for s in GPT2_PARAMETERS.lists["params"])
SEVEN_B = 7e9

RTOL_RULES = 1e-9          # a NumPy float64 update against PyTorch's float64 update
RTOL_NUMBERS = 0.02        # numbers derived by hand


# ================================================================== 1 · bias correction

BETAS = (0.0, 0.5, 0.9, 0.95, 0.99, 0.999)
STEPS = (1, 2, 3, 10, 100, 1000, 10000)


def _average_of_constant(beta: float, t: int) -> float:
    """m_t for a gradient that is 1 at every step, from m_0 = 0: the recursion itself."""
    m = 0.0
    for _ in range(t):
        m = beta * m + (1 - beta)
    return m


BIAS_SLIPS: tuple[tuple[Callable[[float, int], float], str], ...] = (
    (lambda b, t: b ** t, "That is beta^t, the part of the truth that is missing: the average "
                          "starts from m_0 = 0, so only 1 - beta^t of the gradient's weight is in m_t."),
    (lambda b, t: 1 / (1 - b ** t), "That is the reciprocal: the factor that m_t is divided by is "
                                    "1 - beta^t (multiplying by your value does the same job)."),
    (lambda b, t: 1 - b ** (t - 1), "Off by one step: m_1 = (1 - beta) g_1 already holds one gradient, "
                                    "so the factor at t = 1 is 1 - beta."),
    (lambda b, t: (1 - b) ** t, "Write m_t out: (1 - beta) times a geometric sum of beta^k, k = 0..t-1."),
    (lambda b, t: 1 - b * t, "The weights decay geometrically (beta^k), not linearly."),
)


def _bias_slip(fn: Any) -> str:
    for slip, text in BIAS_SLIPS:
        try:
            if all(close(float(fn(b, t)), slip(b, t), 1e-9) for b in (0.5, 0.9) for t in (1, 2, 5)):
                return text
        except Exception:   # the learner's function may reject what a slip accepts: no match
            continue
    return ("Unroll m_t = beta m_{t-1} + (1 - beta) g_t from m_0 = 0 for a constant gradient g: "
            "m_t = (1 - beta)(1 + beta + ... + beta^{t-1}) g. Sum the geometric series.")


def _check_bias_function(fn: Any) -> str | None:
    for beta in BETAS:
        for t in STEPS:
            called = call_learner("bias_correction", fn, (beta, t), f"beta = {beta}, t = {t}")
            if called.problem:
                return called.problem
            got = core.as_number(called.value)
            if got is None:
                return f"bias_correction({beta}, {t}) returned {called.value!r}, not a number."
            expected = _average_of_constant(beta, t)
            if not close(got, expected, 1e-9) and abs(got - expected) > 1e-12:
                return (f"bias_correction({beta}, {t}) = {got:.6g}, but a moving average of a gradient "
                        f"that is 1 at every step reaches {expected:.6g} at step {t}.\n  Hint: {_bias_slip(fn)}")
    return None


def _uncorrected_ratio() -> float:
    """|m_1 / sqrt(v_1)| over |m_hat_1 / sqrt(v_hat_1)| with beta1 = 0.9, beta2 = 0.999, eps -> 0."""
    return (1 - 0.9) / math.sqrt(1 - 0.999)


def _diag_uncorrected(got: float) -> str | None:
    truth = _uncorrected_ratio()
    if close(got, 1 / truth, RTOL_NUMBERS):
        return "Upside down: the uncorrected step is the larger one."
    if close(got, 0.1 / 0.001, RTOL_NUMBERS) or close(got, 100, RTOL_NUMBERS):
        return "v enters the step through its square root."
    return None


UNCORRECTED = NumericQuestion(
    "uncorrected_step_ratio", "the uncorrected first step over the corrected one (beta1 0.9, beta2 0.999)",
    _uncorrected_ratio(), rtol=RTOL_NUMBERS, diagnose=_diag_uncorrected,
    hint="At step 1, m_1 = (1 - beta1) g and v_1 = (1 - beta2) g^2; the corrected m_hat / sqrt(v_hat) "
         "is g / |g| = +-1. Compute m_1 / sqrt(v_1).")


def check_bias_correction(answer: Any) -> Verdict:
    refused = missing_functions(answer, ("bias_correction",))
    if refused:
        return refused
    problem = _check_bias_function(answer["bias_correction"])
    lines = [f"\u2718 {problem}" if problem else
             f"\u2714 bias_correction: matches the moving average of a constant gradient for "
             f"{len(BETAS) * len(STEPS)} (beta, t) pairs."]
    numbers = check_numbers(answer, (UNCORRECTED,))
    return Verdict(problem is None and numbers.passed, "\n".join(lines + [numbers.message]))


# ================================================================== 2 · AdamW against Adam with L2

@dataclass(frozen=True)
class AdamCase:
    p: np.ndarray
    g: np.ndarray
    m: np.ndarray
    v: np.ndarray
    t: int
    lr: float
    beta1: float
    beta2: float
    eps: float
    weight_decay: float

    def args(self) -> tuple:
        return (self.p.copy(), self.g.copy(), self.m.copy(), self.v.copy(), self.t, self.lr, self.beta1,
                self.beta2, self.eps, self.weight_decay)

    def describe(self) -> str:
        return (f"{self.p.size} parameters at step t = {self.t}, lr = {self.lr}, betas = ({self.beta1}, "
                f"{self.beta2}), eps = {self.eps}, weight_decay = {self.weight_decay}")


def adam_cases(seed: int = 303) -> list[AdamCase]:
    rng = np.random.default_rng(seed)
    cases = []
    for t, lr, b1, b2, wd, n in ((1, 1e-3, 0.9, 0.999, 0.01, 5), (2, 0.1, 0.9, 0.95, 0.1, 7),
                                 (10, 0.01, 0.8, 0.99, 0.5, 4), (1000, 1e-3, 0.9, 0.999, 0.1, 6)):
        p = rng.standard_normal(n) * 3
        g = rng.standard_normal(n)
        if t == 1:
            m, v = np.zeros(n), np.zeros(n)        # PyTorch's state before the first step
        else:
            m, v = rng.standard_normal(n) * 0.3, rng.random(n) * 0.2
        cases.append(AdamCase(p, g, m, v, t, lr, b1, b2, 1e-8, wd))
    # Gradients of about 1e-8 from zero moments: sqrt(v_hat) is then as small as eps, and where eps
    # sits decides the step.
    n = 5
    cases.append(AdamCase(rng.standard_normal(n), rng.standard_normal(n) * 1e-8, np.zeros(n), np.zeros(n),
                          1, 1e-3, 0.9, 0.999, 1e-8, 0.01))
    return cases


def torch_step(case: AdamCase, decoupled: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One step of torch.optim.AdamW (decoupled) or torch.optim.Adam(weight_decay=...) (L2), in
    float64 on the CPU, from the case's state."""
    p = torch.tensor(case.p, dtype=torch.float64, requires_grad=True)
    optimizer_class = torch.optim.AdamW if decoupled else torch.optim.Adam
    optimizer = optimizer_class([p], lr=case.lr, betas=(case.beta1, case.beta2), eps=case.eps,
                                weight_decay=case.weight_decay, foreach=False)
    p.grad = torch.tensor(case.g, dtype=torch.float64)
    optimizer.state[p] = {"step": torch.tensor(float(case.t - 1)),
                          "exp_avg": torch.tensor(case.m, dtype=torch.float64),
                          "exp_avg_sq": torch.tensor(case.v, dtype=torch.float64)}
    optimizer.step()
    state = optimizer.state[p]
    return p.detach().numpy().copy(), state["exp_avg"].numpy().copy(), state["exp_avg_sq"].numpy().copy()


def _model_step(case: AdamCase, decay: str, corrected: bool = True, eps_inside: bool = False):
    """The update with one thing changed: decay 'decoupled', 'l2', 'after' or 'none'."""
    p, g, m, v = case.p.copy(), case.g.copy(), case.m.copy(), case.v.copy()
    if decay == "l2":
        g = g + case.weight_decay * p
    if decay == "decoupled":
        p = p * (1 - case.lr * case.weight_decay)
    m = case.beta1 * m + (1 - case.beta1) * g
    v = case.beta2 * v + (1 - case.beta2) * g * g
    bc1, bc2 = (1 - case.beta1 ** case.t, 1 - case.beta2 ** case.t) if corrected else (1.0, 1.0)
    denom = np.sqrt(v / bc2 + case.eps) if eps_inside else np.sqrt(v / bc2) + case.eps
    new_p = p - case.lr * (m / bc1) / denom
    if decay == "after":
        new_p = new_p * (1 - case.lr * case.weight_decay)
    return new_p, m, v


RULE_SLIPS = {
    "adamw_step": (
        (partial(_model_step, decay="l2"), "That is Adam with L2: AdamW's decay is not added to the gradient; "
                                           "it shrinks p directly, p *= 1 - lr * weight_decay."),
        (partial(_model_step, decay="after"), "The decay comes first, on p before the Adam step "
                                              "(PyTorch: p.mul_(1 - lr * weight_decay), then the update)."),
        (partial(_model_step, decay="none"), "The weight decay is missing: p *= 1 - lr * weight_decay."),
        (partial(_model_step, decay="decoupled", corrected=False), "The bias corrections are missing: divide m "
                                                                   "by 1 - beta1^t and v by 1 - beta2^t."),
        (partial(_model_step, decay="decoupled", eps_inside=True), "eps goes outside the square root: "
                                                                   "sqrt(v_hat) + eps."),
    ),
    "adam_l2_step": (
        (partial(_model_step, decay="decoupled"), "That is AdamW: with L2 regularisation the decay term "
                                                  "weight_decay * p is added to the gradient, so it passes "
                                                  "through m and v."),
        (partial(_model_step, decay="none"), "The weight decay is missing: add weight_decay * p to g first."),
        (partial(_model_step, decay="l2", corrected=False), "The bias corrections are missing."),
        (partial(_model_step, decay="l2", eps_inside=True), "eps goes outside the square root."),
    ),
}
RULE_HINT = {"adamw_step": "p *= 1 - lr wd; m, v moving averages of g and g^2; "
                           "p -= lr m_hat / (sqrt(v_hat) + eps).",
             "adam_l2_step": "g += wd p; m, v moving averages of that g and its square; "
                             "p -= lr m_hat / (sqrt(v_hat) + eps)."}
RULE_OUTPUTS = ("p", "m", "v")


def _read_triple(name: str, raw: Any, n: int) -> tuple[list[np.ndarray] | None, str | None]:
    if not isinstance(raw, (tuple, list)) or len(raw) != 3:
        return None, f"{name} must return a tuple (p, m, v) of the new values; got {type(raw).__name__}."
    out = []
    for label, item in zip(RULE_OUTPUTS, raw):
        array, problem = as_float_array(name, item)
        if problem:
            return None, problem
        if array.shape != (n,):
            return None, f"{name}: its {label} has shape {array.shape}; the parameters have shape ({n},)."
        out.append(array)
    return out, None


def _same(got: list[np.ndarray], want: tuple[np.ndarray, ...]) -> bool:
    return all(np.allclose(a, b, rtol=RTOL_RULES, atol=1e-15) for a, b in zip(got, want))


def _check_rule(name: str, fn: Any, cases: list[AdamCase], decoupled: bool) -> str | None:
    for case in cases:
        called = call_learner(name, fn, case.args(), case.describe())
        if called.problem:
            return called.problem
        got, problem = _read_triple(name, called.value, case.p.size)
        if problem:
            return problem
        truth = torch_step(case, decoupled)
        if _same(got, truth):
            continue
        wrong = next(label for label, a, b in zip(RULE_OUTPUTS, got, truth)
                     if not np.allclose(a, b, rtol=RTOL_RULES, atol=1e-15))
        hint = next((text for slip, text in RULE_SLIPS[name] if _same(got, slip(case))), RULE_HINT[name])
        return (f"{name}: the new {wrong} differs from PyTorch's for {case.describe()}.\n  Hint: {hint}")
    return None


def _how_they_differ(cases: list[AdamCase]) -> str:
    """Where AdamW and Adam with L2 part ways, measured on a case with large weights."""
    case = cases[1]
    decoupled, l2 = torch_step(case, True)[0], torch_step(case, False)[0]
    gap = np.abs(decoupled - l2)
    i = int(np.argmax(gap))
    v_hat = (case.beta2 * case.v + (1 - case.beta2) * case.g ** 2) / (1 - case.beta2 ** case.t)
    return (f"For {case.describe()} the two updates differ by up to {fmt(gap[i])} (parameter {i}: p = "
            f"{case.p[i]:.3g}, sqrt(v_hat) = {math.sqrt(v_hat[i]):.3g}). With L2 the decay wd p is divided by "
            "sqrt(v_hat) like any gradient, so weights whose gradients have a small second moment (a small "
            "mean square) are decayed more and weights with a large one less; AdamW decays every weight by the same factor 1 - lr wd.")


def check_adamw_vs_l2(answer: Any) -> Verdict:
    names = ("adamw_step", "adam_l2_step")
    refused = missing_functions(answer, names)
    if refused:
        return refused
    cases = adam_cases()
    verdict = functions_verdict([
        (name, _check_rule(name, answer[name], cases, decoupled=(name == "adamw_step")),
         f"matches PyTorch's {'AdamW' if name == 'adamw_step' else 'Adam(weight_decay=...)'} on {len(cases)} "
         "random states, steps 1 to 1000, tiny gradients among them.")
        for name in names])
    if verdict.passed:
        return Verdict(True, verdict.message + "\n" + _how_they_differ(cases))
    return verdict


# ================================================================== 3 · where eps sits

EPS_SETTING = {"m_hat": 1e-9, "v_hat": 1e-18, "eps": 1e-8, "lr": 1e-3}


def _eps_truths() -> dict[str, float]:
    s = EPS_SETTING
    return {"update_eps_outside": s["lr"] * s["m_hat"] / (math.sqrt(s["v_hat"]) + s["eps"]),
            "update_eps_inside": s["lr"] * s["m_hat"] / math.sqrt(s["v_hat"] + s["eps"]),
            "update_without_eps": s["lr"] * s["m_hat"] / math.sqrt(s["v_hat"])}


def _diag_eps(key: str, got: float) -> str | None:
    truths = _eps_truths()
    for other, value in truths.items():
        if other != key and close(got, value, RTOL_NUMBERS):
            return f"That is {other.replace('_', ' ')}."
    if close(got, truths[key] / EPS_SETTING["lr"], RTOL_NUMBERS):
        return "Multiply by the learning rate."
    return None


def _eps_questions() -> tuple[NumericQuestion, ...]:
    truths = _eps_truths()
    return (
        NumericQuestion("update_eps_outside", "lr m_hat / (sqrt(v_hat) + eps)", truths["update_eps_outside"],
                        rtol=RTOL_NUMBERS, diagnose=partial(_diag_eps, "update_eps_outside"),
                        hint="sqrt(1e-18) = 1e-9, then add eps."),
        NumericQuestion("update_eps_inside", "lr m_hat / sqrt(v_hat + eps)", truths["update_eps_inside"],
                        rtol=RTOL_NUMBERS, diagnose=partial(_diag_eps, "update_eps_inside"),
                        hint="Under the square root eps dwarfs v_hat: sqrt(1e-8) = 1e-4."),
        NumericQuestion("update_without_eps", "lr m_hat / sqrt(v_hat)", truths["update_without_eps"],
                        rtol=RTOL_NUMBERS, diagnose=partial(_diag_eps, "update_without_eps"),
                        hint="m_hat / sqrt(v_hat) = 1e-9 / 1e-9."),
    )


def check_epsilon(answer: Any) -> Verdict:
    questions = _eps_questions()
    if not isinstance(answer, Mapping):
        return ask_for_numbers("epsilon", questions)
    return check_numbers(answer, questions)


# ================================================================== 4 · momentum as a moving average

def _momentum_questions() -> tuple[NumericQuestion, ...]:
    window = "1 / (1 - beta): the weights (1 - beta) beta^k sum to 1 and have mean age beta / (1 - beta)."
    return (
        NumericQuestion("window_beta1", "effective window of beta = 0.9, in steps", 10.0, rtol=RTOL_NUMBERS,
                        hint=window),
        NumericQuestion("window_beta2", "effective window of beta = 0.999, in steps", 1000.0, rtol=RTOL_NUMBERS,
                        hint=window),
        NumericQuestion("weight_10_steps_back", "weight of the gradient 10 steps before the newest in m (beta 0.9)",
                        0.1 * 0.9 ** 10, rtol=RTOL_NUMBERS,
                        hint="The newest gradient has weight 1 - beta; each step back multiplies it by beta.",
                        diagnose=lambda got: ("That is 9 steps back: the newest gradient is 0 steps back."
                                              if close(got, 0.1 * 0.9 ** 9, RTOL_NUMBERS) else None)),
        NumericQuestion("weight_of_last_10", "share of m's weight on the 10 newest gradients (beta 0.9)",
                        1 - 0.9 ** 10, rtol=RTOL_NUMBERS,
                        hint="Sum (1 - beta) beta^k for k = 0..9: a geometric series."),
    )


def check_momentum_window(answer: Any) -> Verdict:
    questions = _momentum_questions()
    if not isinstance(answer, Mapping):
        return ask_for_numbers("momentum_window", questions)
    return check_numbers(answer, questions)


# ================================================================== 5 · what a step costs

def traffic_truths(spec: GpuSpec) -> dict[str, float]:
    bandwidth = spec.memory_bandwidth_gbs * 1e9
    return {"bytes_sgd": 20.0, "bytes_adamw": 28.0, "bytes_adamw_8bit": 16.0,
            "step_us_gpt2": 28.0 * GPT2_VALUES / bandwidth * 1e6,
            "step_ms_7b": 28.0 * SEVEN_B / bandwidth * 1e3,
            "state_gb_7b": 8.0 * SEVEN_B / 1e9, "state_gb_7b_8bit": 2.0 * SEVEN_B / 1e9}


def _diag_bytes(key: str, got: float) -> str | None:
    per_array = {"bytes_sgd": "p, g, buf", "bytes_adamw": "p, g, m, v", "bytes_adamw_8bit": "p, g, m, v"}[key]
    truth = traffic_truths(default_spec())[key]
    if close(got, truth / 4, RTOL_NUMBERS):
        return "That counts values; count bytes."
    if key == "bytes_sgd" and got == 12:
        return "buf is read and written too: momentum is state."
    if key == "bytes_adamw" and got == 16:
        return "Each array is read; p, m and v are also written back."
    if key == "bytes_adamw_8bit" and got in (28, 22):
        return "m and v take 1 byte each; p and g stay float32."
    return f"Count each of {per_array}: 4 bytes (1 for 8-bit state) read, and again written if it changes."


def _diag_time(key: str, got: float, spec: GpuSpec) -> str | None:
    truth = traffic_truths(spec)[key]
    for factor, text in ((1e3, "Check the unit: microseconds for GPT-2, milliseconds for 7B."),
                         (1e-3, "Check the unit: microseconds for GPT-2, milliseconds for 7B."),
                         (2**30 / 1e9, "GB/s on a spec sheet means 10^9 bytes/s."),
                         (20 / 28, "That counts SGD's 20 bytes; the step here is AdamW's."),
                         (2, "A step moves the bytes once; no factor 2 for reading and writing (28 already "
                             "counts both).")):
        if close(got, truth * factor, RTOL_NUMBERS):
            return text
    return None


def _traffic_questions(spec: GpuSpec) -> tuple[NumericQuestion, ...]:
    truth = traffic_truths(spec)
    bandwidth = f"{fmt(spec.memory_bandwidth_gbs)} GB/s"
    return (
        NumericQuestion("bytes_sgd", "bytes per parameter of an SGD-with-momentum step", truth["bytes_sgd"],
                        diagnose=partial(_diag_bytes, "bytes_sgd"), hint="Reads and writes, 4 bytes each."),
        NumericQuestion("bytes_adamw", "bytes per parameter of an AdamW step", truth["bytes_adamw"],
                        diagnose=partial(_diag_bytes, "bytes_adamw"), hint="Reads and writes, 4 bytes each."),
        NumericQuestion("bytes_adamw_8bit", "bytes per parameter of AdamW with 8-bit m and v",
                        truth["bytes_adamw_8bit"], diagnose=partial(_diag_bytes, "bytes_adamw_8bit"),
                        hint="p and g in float32, m and v in 1 byte each (their scales are negligible)."),
        NumericQuestion("step_us_gpt2", f"AdamW step of GPT-2 small ({GPT2_VALUES:,} parameters) at {bandwidth}, us",
                        truth["step_us_gpt2"], rtol=RTOL_NUMBERS,
                        diagnose=partial(_diag_time, "step_us_gpt2", spec=spec),
                        hint="bytes per parameter x parameters / bandwidth."),
        NumericQuestion("step_ms_7b", f"AdamW step of a 7B model at {bandwidth}, ms", truth["step_ms_7b"],
                        rtol=RTOL_NUMBERS, diagnose=partial(_diag_time, "step_ms_7b", spec=spec),
                        hint="bytes per parameter x 7e9 / bandwidth."),
        NumericQuestion("state_gb_7b", "AdamW's state (m and v, float32) for 7B parameters, GB",
                        truth["state_gb_7b"], rtol=RTOL_NUMBERS,
                        hint="Two float32 values per parameter; 1 GB = 10^9 bytes.",
                        diagnose=lambda got: ("That is one of the two moments." if close(got, 28, RTOL_NUMBERS)
                                              else "Only m and v: the weights and gradients are not state."
                                              if close(got, 112, RTOL_NUMBERS) else None)),
        NumericQuestion("state_gb_7b_8bit", "the same state in 8 bits, GB", truth["state_gb_7b_8bit"],
                        rtol=RTOL_NUMBERS, hint="Two bytes per parameter."),
    )


def check_optimizer_traffic(answer: Any) -> Verdict:
    if not isinstance(answer, Mapping):
        return ask_for_numbers("optimizer_traffic", _traffic_questions(default_spec()))
    gpu = core.reference_gpu()
    return check_numbers(answer, _traffic_questions(gpu.spec),
                         heading=f"Times checked against the spec sheet of {gpu.describe()}.")


# ================================================================== the prompts of exercise 03

PROMPTS = (
    Prompt("bias_correction", "Adam's bias correction, derived", 2.0, check_bias_correction),
    Prompt("adamw_vs_l2", "AdamW against Adam with L2 regularisation", 3.0, check_adamw_vs_l2),
    Prompt("epsilon", "Where eps sits, and what it does for tiny v", 1.0, check_epsilon),
    Prompt("momentum_window", "Momentum as an exponential moving average", 1.0, check_momentum_window),
    Prompt("optimizer_traffic", "Bytes, time and memory of an optimizer step", 2.0, check_optimizer_traffic),
)
