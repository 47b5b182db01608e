"""Derivation prompts of exercise 05: checkers, reference answers, the slips they name.
(tests/test_notebooks.py checks the notebook that asks them.)"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pytest
from derivation_helpers import load_answers
from derivation_helpers import no_gpu  # noqa: F401 (autouse: the bandwidth cell sees no GPU)

from grader import spec
from grader.derivations import check, prompts

production = spec.find("05").load_derivations()

ROOT = Path(__file__).resolve().parents[1]
ANSWERS_PATH = ROOT / "solutions" / "05_production" / "answers.py"
PROMPT_IDS = [p.id for p in prompts("05")]


@pytest.fixture(scope="module")
def answers():
    return load_answers(ANSWERS_PATH)


def reference_answer(answers, prompt: str):
    if prompt == "outlier_channel":
        return {"quantize_per_tensor": answers.quantize_per_tensor, "quantize_per_row": answers.quantize_per_row}
    if prompt == "clipping":
        return {"quantize_clipped": answers.quantize_clipped, **answers.clipping_mse}
    if prompt == "smoothquant":
        return {"migration_scales": answers.migration_scales, "smooth": answers.smooth}
    return copy.deepcopy(getattr(answers, prompt))


def test_the_prompts_are_worth_11_points():
    assert sum(p.max_points for p in prompts("05")) == 11


def test_the_sizes_come_from_the_spec():
    ex = spec.find("05")
    assert production.K_LONGEST == max(c.values["K"] for c in ex.task("gemm_w8a8").benchmarks) == 8192
    assert (production.GEMV_N, production.GEMV_K) == (28672, 8192)
    assert production.overflow_truths()["headroom"] == pytest.approx(133144 / 8192)


def test_the_truths_are_the_textbook_numbers():
    noise = production.noise_truths()
    assert noise["snr_db_8bit"] == pytest.approx(6.02 * 8 + 1.76, abs=0.01)
    assert noise["db_per_bit"] == pytest.approx(6.02, abs=0.001)
    assert production.overflow_truths()["k_max_int8"] == 131071
    fp8 = production.fp8_truths(production.default_spec())
    assert (fp8["e4m3_max"], fp8["e5m2_max"], fp8["e4m3_min_normal"], fp8["e5m2_min_normal"]) == \
        (448.0, 57344.0, 2.0 ** -6, 2.0 ** -14)
    assert fp8["weight_read_us_fp8"] == pytest.approx(28672 * 8192 / 4.8e12 * 1e6)


@pytest.mark.parametrize("prompt, key, value, fragment", [
    ("quantization_noise", "noise_variance", (4 / 127) ** 2 / 6, "step^2 / 12"),
    ("quantization_noise", "noise_variance", (4 / 127) / 12, "Square the step"),
    ("quantization_noise", "snr_db_8bit", 6.02 * 8, "10 log10(1.5) = 1.76 dB"),
    ("quantization_noise", "db_per_bit", 10 * math.log10(2), "power drops by 4"),
    ("accumulator_overflow", "k_max_int8", 133144, "(-128) x (-128) = 16,384"),
    ("accumulator_overflow", "k_max_symmetric", 2 ** 32 // (127 * 127), "one bit is the sign"),
    ("fp8_formats", "e4m3_max", 480, "S.1111.111 is NaN"),
    ("fp8_formats", "e5m2_max", 114688, "exponent 11111 is infinity"),
])
def test_a_wrong_number_gets_its_hint(answers, prompt, key, value, fragment):
    answer = reference_answer(answers, prompt)
    answer[key] = value
    result = check("05", prompt, answer)
    assert not result.passed
    block = result.message.split(key, 1)[1].split("\n\u2714")[0].split("\n\u2718")[0]
    assert fragment in block, result.message


def test_the_outlier_check_tells_what_the_scales_do(answers):
    message = check("05", "outlier_channel", reference_answer(answers, "outlier_channel")).message
    assert "per tensor" in message and "per row" in message and "per column" in message
    assert "Section 6 moves them into the weights" in message


def _per_row_with(slip: str):
    def per_row(x):
        amax = np.abs(x).max() if slip == "per tensor" else np.abs(x).max(axis=1, keepdims=True)
        levels = {"scale 128": 128.0, "scale 255": 255.0}.get(slip, 127.0)
        scale = amax / levels if slip == "zero row" else np.where(amax > 0, amax / levels, 1.0)
        v = x / scale
        q = {"round away from zero": lambda: np.floor(np.abs(v) + 0.5) * np.sign(v),
             "truncate": lambda: np.trunc(v)}.get(slip, lambda: np.round(v))()
        q = np.clip(q, -127, 127)
        return q if slip == "codes" else q * scale
    return per_row


@pytest.mark.parametrize("slip, named", [
    ("round away from zero", "Ties rounded away from zero"),
    ("scale 128", "Scale = amax / 128"),
    ("scale 255", "Scale = amax / 255"),
    ("truncate", "truncated toward zero"),
    ("codes", "The codes q returned"),
    ("per tensor", "Per tensor where this function is per row"),
    ("zero row", "a zero scale: use scale = 1 where amax is 0"),
    ("something else", "Hint: scale = amax / 127 (1 for amax = 0)"),
])
def test_a_wrong_quantizer_is_refused_with_its_mistake_named(answers, slip, named):
    per_row = _per_row_with(slip)
    if slip == "something else":
        per_row = lambda x: _per_row_with("")(x) * 1.01  # noqa: E731 (off by 1%, no known slip)
    with np.errstate(all="ignore"):
        result = check("05", "outlier_channel", {"quantize_per_tensor": answers.quantize_per_tensor,
                                                 "quantize_per_row": per_row})
    assert not result.passed
    assert "quantize_per_row" in result.message and named in result.message, result.message


def test_the_clipping_check_tells_who_wins_at_8_and_4_bits(answers):
    truths = production.clipping_truths()
    assert truths["mse_absmax_8bit"] < truths["mse_p999_8bit"]        # 8 bits: the full range wins
    assert truths["mse_p999_4bit"] < truths["mse_absmax_4bit"] / 3    # 4 bits: clipping wins by far
    message = check("05", "clipping", reference_answer(answers, "clipping")).message
    assert "clipping wins by far" in message


def test_a_clipper_that_ignores_the_bits_is_refused(answers):
    def eight_bits_always(x, clip, bits):
        return answers.quantize_clipped(x, clip, 8)
    answer = {**reference_answer(answers, "clipping"), "quantize_clipped": eight_bits_always}
    result = check("05", "clipping", answer)
    assert not result.passed and "quantize_clipped(x, 4.0, 4) differs" in result.message


def test_smoothquant_with_alpha_on_the_wrong_side_is_named(answers):
    def swapped(X, W, alpha):
        return answers.migration_scales(X, W, 1 - alpha)
    result = check("05", "smoothquant", {"migration_scales": swapped, "smooth": answers.smooth})
    assert not result.passed and "alpha belongs to X" in result.message


def test_a_smooth_that_changes_the_product_is_refused(answers):
    def scaled_twice(X, W, alpha):
        s = answers.migration_scales(X, W, alpha)
        return X / s, W * s[:, None] ** 2
    result = check("05", "smoothquant", {"migration_scales": answers.migration_scales, "smooth": scaled_twice})
    assert not result.passed and "row j of W by s_j" in result.message


def test_smoothing_lowers_the_w8a8_error(answers):
    X, W = production.smoothquant_problem()
    s = production.reference_migration_scales(X, W, production.ALPHA)
    before, after = production.w8a8_error(X, W), production.w8a8_error(X / s, W * s[:, None])
    assert after < before / 2
    message = check("05", "smoothquant", reference_answer(answers, "smoothquant")).message
    assert f"{before:.2%} as it is, {after:.2%} after smoothing" in message
