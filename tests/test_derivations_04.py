"""Derivation prompts of exercise 04: checkers, reference answers, the notebook that asks them."""

from __future__ import annotations

import ast
import copy
import math
import re
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from grader import spec
from grader.derivations import CheckResult, check, prompts

from derivation_helpers import (cells_tagged,
                                load_answers, read_notebook, source, stub)
from derivation_helpers import run_notebook as run_notebook_cells
from derivation_helpers import no_gpu  # noqa: F401 (autouse: the ridge-point cell sees no GPU)

# The exercise's own checkers, from its folder (exercise.toml names them).
sequence_models = spec.find("04").load_derivations()

ROOT = Path(__file__).resolve().parents[1]
EXERCISE_DIR = ROOT / "exercises" / "04_sequence_models"
NOTEBOOK = EXERCISE_DIR / "04_sequence_models.ipynb"
ANSWERS_PATH = ROOT / "solutions" / "04_sequence_models" / "answers.py"

PROMPT_IDS = [p.id for p in prompts("04")]
FUNCTIONS = {
    "softmax_jacobian": ("softmax_jacobian", "softmax_vjp"),
    "stable_softmax": ("stable_softmax",),
    "online_softmax": ("online_update", "online_update_block", "flash_update", "flash_finalize"),
    "attention_softmax_backward": ("ds_from_dp", "delta_from_output"),
    "layernorm_backward": ("layernorm_dx", "layernorm_dgamma_dbeta"),
    "cross_entropy": ("logsumexp32", "cross_entropy_grad"),
}


@pytest.fixture(scope="module")
def answers():
    return load_answers(ANSWERS_PATH)


def reference_answer(answers, prompt: str):
    if prompt in FUNCTIONS:
        return {name: getattr(answers, name) for name in FUNCTIONS[prompt]}
    return copy.deepcopy(getattr(answers, prompt))


def with_function(answers, name: str, fn):
    prompt = next(p for p, names in FUNCTIONS.items() if name in names)
    answer = reference_answer(answers, prompt)
    answer[name] = fn
    return prompt, answer


def softmax(z):
    e = np.exp(z - np.max(z))
    return e / e.sum()


def assert_fails_naming(result: CheckResult, name: str, needle: str):
    assert not result.passed and result.points == 0
    line = next((chunk for chunk in result.message.split("\u2718")[1:]
                 if chunk.startswith(f" {name}")), None)
    assert line is not None, result.message
    assert needle in line, result.message


# ------------------------------------------------------------------ the registry


def test_unknown_prompt_is_a_value_error_naming_the_valid_ids():
    with pytest.raises(ValueError) as err:
        check("04", "softmax_jacobians", {})
    for valid in PROMPT_IDS:
        assert valid in str(err.value)


# ------------------------------------------------------------------ reference answers


def test_reference_numbers_are_the_ones_derived_by_hand(answers):
    numbers = answers.softmax_numbers
    assert numbers["exp_overflow_float32"] == pytest.approx(88.7228, abs=1e-4)
    assert numbers["exp_overflow_float64"] == pytest.approx(709.7827, abs=1e-4)
    fp32 = answers.attention_costs["fp32"]
    assert fp32["flops"] == 4 * 32 * 2048**2 * 64 == 34_359_738_368
    assert fp32["bytes_fused"] == 16 * 32 * 2048 * 64 == 67_108_864
    assert fp32["bytes_naive"] == 67_108_864 + 4 * 4 * 32 * 2048**2
    assert fp32["traffic_ratio"] == pytest.approx(33.0)
    assert answers.attention_costs["bf16"]["traffic_ratio"] == pytest.approx(65.0)
    assert answers.attention_costs["bf16"]["intensity_fused"] == pytest.approx(2048.0)


def test_the_exp_limits_are_where_numpy_overflows():
    with np.errstate(over="ignore"):
        for dtype, limit in ((np.float32, sequence_models.EXP_LIMIT_FLOAT32),
                             (np.float64, sequence_models.EXP_LIMIT_FLOAT64)):
            assert np.isfinite(np.exp(dtype(limit - 1e-3)))
            assert np.isinf(np.exp(dtype(limit + 1e-2)))


def test_attention_shapes_and_formulas_agree_with_exercise_toml():
    exercise = spec.find("04")
    tasks = {t.name: t for t in exercise.tasks}
    assert tasks["softmax"].benchmarks[0].values["cols"] == sequence_models.ROW_LENGTH
    for shape in sequence_models.SHAPES:
        task = tasks[shape.task]
        sizes = {"bh": shape.bh, "seq": shape.seq, "dim": shape.dim, "causal": shape.causal}
        bench = dict(task.benchmarks[0].values)
        assert {k: v for k, v in sizes.items() if k != "causal"} == \
            {k: v for k, v in bench.items() if k != "causal"}, shape.key
        assert any(case.values == sizes for case in task.cases) or bench == sizes, shape.key
        assert task.flops(sizes) == shape.flops, shape.key
        assert task.bytes(sizes) == shape.bytes_fused, shape.key
        assert shape.element_bytes == next(a.itemsize for a in task.args if a.name == "q")
    assert [s.causal for s in sequence_models.SHAPES] == [0, 0, 1]


# ------------------------------------------------------------------ 1 · the softmax Jacobian

def y_of(z):
    return softmax(z)


JACOBIAN_SLIPS = {
    "diagonal term missing": (lambda z: -np.outer(y_of(z), y_of(z)), "diagonal term is missing"),
    "denominator term missing": (lambda z: np.diag(y_of(z)), "Only the numerator"),
    "diagonal only": (lambda z: np.diag(y_of(z) * (1 - y_of(z))),
                      "off-diagonal entries are not zero"),
    "signs flipped": (lambda z: np.outer(y_of(z), y_of(z)) - np.diag(y_of(z)), "sign is flipped"),
    "exp instead of y": (lambda z: np.diag(np.exp(z)) - np.outer(np.exp(z), np.exp(z)),
                         "exp(z) where y"),
    "a vector": (lambda z: y_of(z) * (1 - y_of(z)), "shape"),
    "forgotten return": (lambda z: None, "forget `return`"),
}


@pytest.mark.parametrize("slip", list(JACOBIAN_SLIPS))
def test_jacobian_mistakes_fail_with_a_message_naming_them(answers, slip):
    wrong, needle = JACOBIAN_SLIPS[slip]
    prompt, answer = with_function(answers, "softmax_jacobian", wrong)
    result = check("04", prompt, answer)
    assert_fails_naming(result, "softmax_jacobian", needle)
    assert "\u2714 softmax_vjp" in result.message


def test_a_transposed_jacobian_is_still_right_because_it_is_symmetric(answers):
    prompt, answer = with_function(answers, "softmax_jacobian",
                                   lambda z: answers.softmax_jacobian(z).T)
    assert check("04", prompt, answer).passed


VJP_SLIPS = {
    "denominator term missing": (lambda z, g: y_of(z) * g, "denominator's term is missing"),
    "unweighted inner product": (lambda z, g: y_of(z) * (g - g.sum()),
                                 "weighted by the probabilities"),
    "factor y missing": (lambda z, g: g - g @ y_of(z), "factor y_i"),
    "diagonal term missing": (lambda z, g: -y_of(z) * (g @ y_of(z)), "diagonal term is missing"),
    "J g with J built": (lambda z, g: (np.diag(y_of(z)) - np.outer(y_of(z), y_of(z))) @ g,
                         "n x n Jacobian"),
    "the Jacobian itself": (lambda z, g: np.diag(y_of(z)) - np.outer(y_of(z), y_of(z)), "shape"),
}


@pytest.mark.parametrize("slip", list(VJP_SLIPS))
def test_vjp_mistakes_fail_with_a_message_naming_them(answers, slip):
    wrong, needle = VJP_SLIPS[slip]
    prompt, answer = with_function(answers, "softmax_vjp", wrong)
    result = check("04", prompt, answer)
    assert_fails_naming(result, "softmax_vjp", needle)
    assert "\u2714 softmax_jacobian" in result.message


def test_the_memory_probe_leaves_tracemalloc_as_it_found_it(answers):
    assert not tracemalloc.is_tracing()
    check("04", "softmax_jacobian", reference_answer(answers, "softmax_jacobian"))
    assert not tracemalloc.is_tracing()
    tracemalloc.start()
    try:
        assert check("04", "softmax_jacobian", reference_answer(answers, "softmax_jacobian")).passed
        assert tracemalloc.is_tracing()
    finally:
        tracemalloc.stop()


def test_wrong_values_report_the_case_and_the_worst_entry(answers):
    prompt, answer = with_function(answers, "softmax_jacobian",
                                   lambda z: 2 * answers.softmax_jacobian(z))
    result = check("04", prompt, answer)
    assert not result.passed
    assert re.search(r"z of shape \(\d+,\)", result.message)
    assert re.search(r"worst entry \[\d+, \d+\]: expected -?[\d.e+-]+, got -?[\d.e+-]+",
                     result.message)
    assert "quotient rule" in result.message


# ------------------------------------------------------------------ 2a · float limits

NUMBER_SLIPS = {
    "float64 limit for float32": ("exp_overflow_float32", 709.78, "float64"),
    "float32 limit for float64": ("exp_overflow_float64", 88.72, "float32"),
    "float16 limit": ("exp_overflow_float32", 11.09, "float16"),
    "a power of two": ("exp_overflow_float32", 128, "natural"),
    "the largest float itself": ("exp_overflow_float32", 3.4028235e38, "largest float itself"),
    "too coarse": ("exp_overflow_float32", 88.5, "within 0.01"),
    "the shift changes softmax": ("shift_difference", 1.0, "cancels"),
    "the denominator can vanish": ("denominator_min", 0, "Not 0"),
    "off by one": ("denominator_max", 8191, "Off by one"),
    "the denominator explodes": ("denominator_max", math.exp(81.92), "no exponent is positive"),
}


@pytest.mark.parametrize("slip", list(NUMBER_SLIPS))
def test_number_mistakes_fail_with_a_message_naming_them(answers, slip):
    key, value, needle = NUMBER_SLIPS[slip]
    answer = dict(answers.softmax_numbers, **{key: value})
    result = check("04", "softmax_numbers", answer)
    assert_fails_naming(result, key, needle)


def test_exp_limits_are_within_a_hundredth(answers):
    answer = dict(answers.softmax_numbers, exp_overflow_float32=88.73, exp_overflow_float64=709.775)
    assert check("04", "softmax_numbers", answer).passed
    answer["exp_overflow_float32"] = 88.74
    assert not check("04", "softmax_numbers", answer).passed


def test_a_missing_number_is_named(answers):
    answer = dict(answers.softmax_numbers)
    del answer["denominator_max"]
    result = check("04", "softmax_numbers", answer)
    assert not result.passed and "denominator_max: missing" in result.message


# ------------------------------------------------------------------ 2b · a stable softmax

def naive(z):
    e = np.exp(z)
    return e / e.sum()


def shift_only_when_positive(z):
    e = np.exp(z - max(z.max(), np.float32(0)))
    return e / e.sum()


STABLE_SLIPS = {
    "no max subtraction overflows": (naive, "infinite in float32"),
    "a row of very negative logits gives 0 / 0": (shift_only_when_positive, "0 / 0 is NaN"),
    "float64 arithmetic": (lambda z: softmax(z.astype(np.float64)), "returned float64"),
    "half precision": (lambda z: softmax(z.astype(np.float16)).astype(np.float32),
                       "half precision"),
    "not normalised": (lambda z: np.exp(z - z.max()), "sum to 1"),
    "a row vector": (lambda z: softmax(z)[None, :], "shape"),
    "a crash": (lambda z: z.nonexistent, "AttributeError"),
}


@pytest.mark.parametrize("slip", list(STABLE_SLIPS))
def test_stable_softmax_mistakes_fail_with_a_message_naming_them(slip):
    wrong, needle = STABLE_SLIPS[slip]
    with np.errstate(all="ignore"):
        result = check("04", "stable_softmax", {"stable_softmax": wrong})
    assert_fails_naming(result, "stable_softmax", needle)


def test_the_naive_softmax_passes_ordinary_logits_and_fails_only_large_ones():
    cases = sequence_models.stable_softmax_cases()
    with np.errstate(all="ignore"):
        for case in cases:
            fine = np.all(np.isfinite(naive(case.z)))
            assert fine != case.large, case.label


def test_float32_rounding_fits_the_tolerance_and_float16_does_not(answers):
    for case in sequence_models.stable_softmax_cases():
        expected = softmax(case.z.astype(np.float64))
        got = answers.stable_softmax(case.z.copy())
        assert got.dtype == np.float32
        assert np.allclose(got, expected, rtol=sequence_models.RTOL_FLOAT32 / 3,
                           atol=sequence_models.ATOL_FLOAT32), case.label


def test_stable_softmax_may_return_a_torch_tensor():
    torch = pytest.importorskip("torch")
    result = check("04", "stable_softmax",
                   {"stable_softmax": lambda z: torch.softmax(torch.from_numpy(z), dim=0)})
    assert result.passed, result.message


# ------------------------------------------------------------------ 3 · the online softmax

def online_no_rescale(state, x):
    m, l = state
    m_new = max(m, x)
    return m_new, l + math.exp(x - m_new)


def block_no_rescale(state, xs):
    m, l = state
    m_new = max(m, float(xs.max()))
    return m_new, l + float(np.exp(xs - m_new).sum())


def online_inverted(state, x):
    m, l = state
    m_new = max(m, x)
    factor = 0.0 if m == -math.inf else math.exp(m_new - m)
    return m_new, l * factor + math.exp(x - m_new)


def block_own_max(state, xs):
    m, l = state
    m_new = max(m, float(xs.max()))
    return m_new, l * math.exp(m - m_new) + float(np.exp(xs - xs.max()).sum())


def online_no_shift(state, x):
    m, l = state
    return max(m, x), l + np.exp(x)


def online_first_max(state, x):
    m, l = state
    if m == -math.inf:
        return x, 1.0
    return m, l + math.exp(x - m)


def online_math_exp_overflow(state, x):
    return x, math.exp(1000.0)


ONLINE_SLIPS = {
    "l not rescaled": ("online_update", online_no_rescale, "not rescaled when m grows"),
    "block l not rescaled": ("online_update_block", block_no_rescale, "not rescaled when m grows"),
    "factor upside down": ("online_update", online_inverted, "upside down"),
    "block measured from its own max": ("online_update_block", block_own_max,
                                        "block's own maximum"),
    "no shift at all": ("online_update", online_no_shift, "without the shift"),
    "max never updated": ("online_update", online_first_max, "running maximum"),
    "math.exp overflows": ("online_update", online_math_exp_overflow, "OverflowError"),
    "only l returned": ("online_update", lambda state, x: state[1] + 1.0, "pair (m, l)"),
    "block returns None": ("online_update_block", lambda state, xs: None, "forget `return`"),
}


@pytest.mark.parametrize("slip", list(ONLINE_SLIPS))
def test_online_mistakes_fail_with_a_message_naming_them(answers, slip):
    name, wrong, needle = ONLINE_SLIPS[slip]
    prompt, answer = with_function(answers, name, wrong)
    with np.errstate(all="ignore"):
        result = check("04", prompt, answer)
    assert_fails_naming(result, name, needle)
    for other in set(FUNCTIONS["online_softmax"]) - {name}:
        assert f"\u2714 {other}" in result.message


def test_the_rescaling_slip_is_caught_by_a_stream_whose_maximum_arrives_late():
    streams = sequence_models.online_streams()
    caught = []
    for stream in streams:
        state = (-math.inf, 0.0)
        for x in stream.xs:
            state = online_no_rescale(state, float(x))
        m, l = sequence_models.two_pass(stream.xs)
        if not math.isclose(state[1], l, rel_tol=1e-9):
            caught.append(stream.label)
    assert any("late" in label or "last" in label for label in caught)
    assert any("maximum first" in s.label for s in streams)
    assert {s.xs.size for s in streams} >= {1, 2}
    assert max(abs(s.xs).max() for s in streams) >= 4000


def flash_no_acc_rescale(state, s, v):
    m, l, acc = state
    m_new = max(m, float(s.max()))
    alpha, p = math.exp(m - m_new), np.exp(s - m_new)
    return m_new, alpha * l + p.sum(), acc + p @ v


def flash_no_l_rescale(state, s, v):
    m, l, acc = state
    m_new = max(m, float(s.max()))
    alpha, p = math.exp(m - m_new), np.exp(s - m_new)
    return m_new, l + p.sum(), alpha * acc + p @ v


def flash_no_rescale(state, s, v):
    m, l, acc = state
    m_new = max(m, float(s.max()))
    p = np.exp(s - m_new)
    return m_new, l + p.sum(), acc + p @ v


def flash_normalised_acc(state, s, v):
    m, l, acc = state
    m_new = max(m, float(s.max()))
    alpha, p = math.exp(m - m_new), np.exp(s - m_new)
    l_new = alpha * l + p.sum()
    return m_new, l_new, (alpha * l * acc + p @ v) / l_new


FLASH_SLIPS = {
    "acc not rescaled": ("flash_update", flash_no_acc_rescale, "acc is not rescaled"),
    "l not rescaled": ("flash_update", flash_no_l_rescale, "l is not rescaled"),
    "nothing rescaled": ("flash_update", flash_no_rescale, "Neither l nor acc"),
    "acc kept normalised": ("flash_update", flash_normalised_acc, "unnormalised"),
    "state of two": ("flash_update", lambda state, s, v: state[:2], "triple (m, l, acc)"),
    "finalize forgets l": ("flash_finalize", lambda state: state[2], "acc itself"),
    "finalize divides by m": ("flash_finalize", lambda state: state[2] / state[0],
                              "weighted average"),
}


@pytest.mark.parametrize("slip", list(FLASH_SLIPS))
def test_flash_mistakes_fail_with_a_message_naming_them(answers, slip):
    name, wrong, needle = FLASH_SLIPS[slip]
    prompt, answer = with_function(answers, name, wrong)
    with np.errstate(all="ignore"):
        result = check("04", prompt, answer)
    assert_fails_naming(result, name, needle)
    for other in set(FUNCTIONS["online_softmax"]) - {name}:
        assert f"\u2714 {other}" in result.message


def test_the_learners_arrays_cannot_change_the_truth(answers):
    def vandal(state, s, v):
        s[:] = 0
        v[:] = 0
        return answers.flash_update(state, s, v)

    prompt, answer = with_function(answers, "flash_update", vandal)
    result = check("04", prompt, answer)
    assert not result.passed
    assert "\u2714 flash_finalize" in result.message
    assert check("04", prompt, reference_answer(answers, prompt)).passed


# ------------------------------------------------------------------ 4 · attention costs

FP32, BF16, CAUSAL = sequence_models.SHAPES
# One pass over the fp32 score matrix of each benchmark, in bytes.
SCORES_FP32 = 4 * 32 * 2048**2
SCORES_BF16 = 4 * 128 * 4096**2

COST_SLIPS = {
    "causal FLOPs not halved": ("bf16_causal", "flops", 4 * 128 * 4096**2 * 128, "full square"),
    "one product only": ("fp32", "flops", 2 * 32 * 2048**2 * 64, "both products"),
    "score matrix counted once": ("fp32", "bytes_naive", FP32.bytes_fused + SCORES_FP32, "once"),
    "scores written and read once": ("bf16", "bytes_naive", BF16.bytes_fused + 2 * SCORES_BF16,
                                     "the softmax between"),
    "the baselines' three-read softmax": ("fp32", "bytes_naive", FP32.bytes_fused + 6 * SCORES_FP32,
                                          "three times"),
    "bf16 scores": ("bf16", "bytes_naive", BF16.bytes_fused + 4 * SCORES_BF16 // 2,
                    "fp32 (4 bytes)"),
    "causal halves the naive traffic": ("bf16_causal", "bytes_naive",
                                        CAUSAL.bytes_fused + 2 * SCORES_BF16,
                                        "masked entries included"),
    "q k v o left out": ("fp32", "bytes_naive", 4 * SCORES_FP32, "q, k, v and o"),
    "elements, not bytes": ("fp32", "bytes_fused", 4 * 32 * 2048 * 64, "elements"),
    "bf16 counted as 4 bytes": ("bf16", "bytes_fused", 16 * 128 * 4096 * 128, "2 bytes"),
    "o forgotten": ("bf16", "bytes_fused", 6 * 128 * 4096 * 128, "one tensor out"),
    "fused with scores": ("fp32", "bytes_fused", FP32.bytes_naive, "never writes the scores"),
    "ratio upside down": ("fp32", "traffic_ratio", 1 / 33.0, "Upside down"),
    "intensity upside down": ("bf16", "intensity_fused", 1 / 2048, "Upside down"),
}


@pytest.mark.parametrize("slip", list(COST_SLIPS))
def test_cost_mistakes_fail_with_a_message_naming_them(answers, slip):
    shape, field, value, needle = COST_SLIPS[slip]
    answer = copy.deepcopy(answers.attention_costs)
    answer[shape][field] = value
    result = check("04", "attention_costs", answer)
    assert not result.passed and result.points == 0
    block = next(chunk for chunk in result.message.split("\u2718")[1:]
                 if chunk.startswith(f" {shape} "))
    assert f"{field}: " in block and needle in block, result.message
    for other in {"fp32", "bf16", "bf16_causal"} - {shape}:
        assert f"\u2714 {other} " in result.message


def test_cost_errors_that_follow_from_earlier_ones_say_so(answers):
    answer = copy.deepcopy(answers.attention_costs)
    entry = answer["fp32"]
    entry["bytes_naive"] = FP32.bytes_fused + SCORES_FP32
    entry["traffic_ratio"] = entry["bytes_naive"] / entry["bytes_fused"]
    entry["intensity_naive"] = entry["flops"] / entry["bytes_naive"]
    result = check("04", "attention_costs", answer)
    assert not result.passed
    assert result.message.count("follows from your other numbers") == 2


def test_cost_tolerance_is_two_percent_and_exact_halving_is_fine(answers):
    answer = copy.deepcopy(answers.attention_costs)
    answer["bf16_causal"]["flops"] = 2 * 128 * 4096**2 * 128  # seq^2 / 2 pairs
    answer["bf16"]["bytes_naive"] = 16 * 128 * 4096**2         # q, k, v, o: 1.5% of the total
    answer["fp32"]["traffic_ratio"] *= 1.019
    assert check("04", "attention_costs", answer).passed
    answer["fp32"]["traffic_ratio"] *= 1.02
    assert not check("04", "attention_costs", answer).passed


def test_a_missing_shape_is_named(answers):
    answer = copy.deepcopy(answers.attention_costs)
    del answer["bf16_causal"]
    result = check("04", "attention_costs", answer)
    assert not result.passed and "\u2718 bf16_causal: missing" in result.message


# ------------------------------------------------------------------ 5 · a training step backwards

def _normalised(x):
    mean = x.mean(axis=1, keepdims=True)
    rstd = 1 / np.sqrt(((x - mean) ** 2).mean(axis=1, keepdims=True) + 1e-5)
    return (x - mean) * rstd, rstd


TRAINING_SLIPS = {
    "dS without the row term": ("ds_from_dp", lambda p, dp: p * dp, "second term is missing"),
    "dS without the factor P": ("ds_from_dp", lambda p, dp: dp - (dp * p).sum(1, keepdims=True), "multiply by P"),
    "dS with an unweighted sum": ("ds_from_dp", lambda p, dp: p * (dp - dp.sum(1, keepdims=True)),
                                  "weighted by the probabilities"),
    "dS summed down the columns": ("ds_from_dp", lambda p, dp: p * (dp - (dp * p).sum(0, keepdims=True)),
                                   "along the row"),
    "delta summed over the queries": ("delta_from_output", lambda dO, o: (dO * o).sum(0), "one entry per query"),
    "delta as a matrix": ("delta_from_output", lambda dO, o: dO @ o.T, "one entry per query"),
    "delta from dO alone": ("delta_from_output", lambda dO, o: dO.sum(1), "swap the order"),
    "dx without the mean's term": ("layernorm_dx", lambda x, gamma, dy: (lambda xh, r: r * (
        dy * gamma - xh * (dy * gamma * xh).mean(1, keepdims=True)))(*_normalised(x)), "from the mean is missing"),
    "dx without gamma": ("layernorm_dx", lambda x, gamma, dy: (lambda xh, r: r * (
        dy - dy.mean(1, keepdims=True) - xh * (dy * xh).mean(1, keepdims=True)))(*_normalised(x)), "without gamma"),
    "dgamma from x, not x_hat": ("layernorm_dgamma_dbeta", lambda x, dy: ((dy * x).sum(0), dy.sum(0)), "sums dy * x"),
    "dgamma summed along the rows": ("layernorm_dgamma_dbeta", lambda x, dy: (
        (dy * _normalised(x)[0]).sum(1), dy.sum(1)), "sum over the rows"),
    "the means instead of the sums": ("layernorm_dgamma_dbeta", lambda x, dy: (
        (dy * _normalised(x)[0]).mean(0), dy.mean(0)), "A sum, not a mean"),
    "a logsumexp that overflows": ("logsumexp32", lambda z: np.log(np.sum(np.exp(z))), "exp(88.72)"),
    "a logsumexp that forgets the shift": ("logsumexp32", lambda z: np.log(np.sum(np.exp(z - z.max()))),
                                           "comes back as + m"),
    "a logsumexp in float64": ("logsumexp32", lambda z: np.float64(np.log(np.sum(np.exp(z - z.max())))) + float(
        z.max()), "compute in float32"),
    "the gradient's sign flipped": ("cross_entropy_grad", lambda z, t: np.eye(len(z))[t] - softmax(z), "sign"),
    "softmax without the one-hot": ("cross_entropy_grad", lambda z, t: softmax(z), "second term"),
}


@pytest.mark.parametrize("slip", list(TRAINING_SLIPS))
def test_training_step_mistakes_fail_with_a_message_naming_them(answers, slip):
    name, wrong, needle = TRAINING_SLIPS[slip]
    prompt, answer = with_function(answers, name, wrong)
    with np.errstate(all="ignore"):
        result = check("04", prompt, answer)
    assert_fails_naming(result, name, needle)
    for other in set(FUNCTIONS[prompt]) - {name}:
        assert f"\u2714 {other}" in result.message


def test_the_delta_identity_holds_on_the_checkers_cases():
    for case in sequence_models.attention_cases():
        np.testing.assert_allclose((case.dO * case.o).sum(1), (case.dp * case.p).sum(1), rtol=1e-12, atol=1e-12)


BACKWARD_COST_SLIPS = {
    "forward without the 2 FLOPs": ("forward_flops", 0.5, "2 FLOPs per multiply-add"),
    "backward without recomputing S": ("backward_flops", 0.8, "S = q k^T must be recomputed"),
    "backward of the gradients only": ("backward_flops", 0.6, "P and dP need two more"),
    "P in bf16": ("p_bytes_per_head", 0.5, "4 bytes a weight"),
    "P counted in weights": ("p_bytes_per_head", 0.25, "Count bytes"),
    "P read but never written": ("recompute_flops_per_byte", 2.0, "crosses the bus twice"),
}


@pytest.mark.parametrize("slip", list(BACKWARD_COST_SLIPS))
def test_backward_cost_mistakes_fail_with_a_message_naming_them(answers, slip):
    key, factor, needle = BACKWARD_COST_SLIPS[slip]
    answer = dict(answers.backward_costs, **{key: answers.backward_costs[key] * factor})
    result = check("04", "backward_costs", answer)
    assert_fails_naming(result, key, needle)


def test_backward_costs_follow_the_spec():
    costs = sequence_models.BACKWARD_COSTS
    assert costs["backward_over_forward"] == pytest.approx(2.5)
    assert costs["p_bytes_per_head"] == 4 * 4096**2 == 64 * 2**20
    assert costs["recompute_flops_per_byte"] == pytest.approx(16.0)
    task = spec.find("04").task("attention_backward")
    assert costs["backward_flops"] == task.flops({"bh": 32, "seq": 2048, "dim": 64, "causal": 0})


# ------------------------------------------------------------------ stubs and odd answers

@pytest.mark.parametrize("prompt", list(FUNCTIONS))
def test_stub_functions_fail_cleanly(prompt):
    result = check("04", prompt, {name: stub for name in FUNCTIONS[prompt]})
    assert not result.passed and result.points == 0
    for name in FUNCTIONS[prompt]:
        assert f"\u2718 {name}: not written yet" in result.message


def test_values_left_as_none_fail_cleanly(answers):
    numbers = dict.fromkeys(answers.softmax_numbers)
    result = check("04", "softmax_numbers", numbers)
    assert not result.passed and result.points == 0
    assert result.message.count("not answered yet") == len(numbers)
    costs = {shape: dict.fromkeys(entry) for shape, entry in answers.attention_costs.items()}
    result = check("04", "attention_costs", costs)
    assert not result.passed and result.points == 0
    assert result.message.count("not answered yet") == 3 * len(sequence_models.COST_FIELDS)


@pytest.mark.parametrize("prompt", PROMPT_IDS)
@pytest.mark.parametrize("answer", [None, 42, "64", [1, 2]], ids=repr)
def test_answers_of_the_wrong_kind_fail_cleanly(prompt, answer):
    result = check("04", prompt, answer)
    assert not result.passed and result.points == 0
    assert "dict" in result.message


def test_calling_the_function_instead_of_passing_it_is_explained(answers):
    prompt, answer = with_function(answers, "online_update", (0.0, 1.0))
    result = check("04", prompt, answer)
    assert_fails_naming(result, "online_update", "without calling it")


def test_a_missing_function_is_named(answers):
    answer = reference_answer(answers, "online_softmax")
    del answer["flash_finalize"]
    result = check("04", "online_softmax", answer)
    assert not result.passed and "'flash_finalize'" in result.message


# ------------------------------------------------------------------ the notebook

def notebook():
    return read_notebook(NOTEBOOK)


def markdown() -> str:
    return "\n".join(source(c) for c in notebook()["cells"] if c["cell_type"] == "markdown")


def _answer_snippets() -> list[str]:
    """What must never be shown: each statement of the answers' functions, each computed value."""
    text = ANSWERS_PATH.read_text()
    tree = ast.parse(text)
    snippets = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for statement in node.body:
                if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
                    continue  # a docstring may be shared
                snippets.append(ast.get_source_segment(text, statement))
        if isinstance(node, ast.Dict):
            snippets += [ast.get_source_segment(text, v) for v in node.values
                         if isinstance(v, (ast.Call, ast.BinOp))]
    return [" ".join(s.split()) for s in snippets]


def test_the_answer_cells_leave_every_blank_to_the_learner():
    answer_code = "\n".join(source(c) for c in cells_tagged(notebook(), "answer:").values())
    assert answer_code.count("# YOUR ANSWER HERE") >= 2 + 5 + 1 + 4 + 6 + 2 + 6 + 2 + 2
    assert answer_code.count("raise NotImplementedError") == 2 + 1 + 4 + 2 + 2 + 2


def run_notebook(answer_source=None) -> dict[str, CheckResult]:
    return run_notebook_cells(notebook(), answer_source)


def test_the_untouched_notebook_shows_the_overflow_and_the_ridge_point(capsys):
    run_notebook()
    shown = capsys.readouterr().out
    assert "nan" in shown and "ridge point" in shown


# ------------------------------------------------------------------ when the exponentials are the limit

def test_exp_bottleneck_truth_is_half_the_products_time_at_dim_128(answers):
    numbers = answers.exp_bottleneck
    assert numbers["flops_per_exp"] == 512
    assert numbers["exp_over_matmul"] == pytest.approx(0.5)
    assert numbers["exp_share_serial"] == pytest.approx(1 / 3)
    assert numbers["peak_share_serial"] == pytest.approx(2 / 3)
    assert numbers["exp_over_matmul_dim64"] == pytest.approx(1.0)


def test_exp_bottleneck_names_the_ampere_rate(answers):
    answer = dict(answers.exp_bottleneck, exp_over_matmul=1.0)
    result = check("04", "exp_bottleneck", answer)
    assert_fails_naming(result, "exp_over_matmul", "A100")


def test_exp_bottleneck_names_the_missing_product(answers):
    answer = dict(answers.exp_bottleneck, flops_per_exp=256)
    result = check("04", "exp_bottleneck", answer)
    assert_fails_naming(result, "flops_per_exp", "Both products")


def test_exp_bottleneck_without_a_dict_lists_the_numbers_asked():
    result = check("04", "exp_bottleneck", None)
    assert not result.passed
    for key in ("flops_per_exp", "exp_over_matmul", "exp_share_serial", "peak_share_serial",
                "exp_over_matmul_dim64"):
        assert key in result.message
