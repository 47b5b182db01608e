"""Checkers of exercise 05 (Production): the noise a quantizer adds, when an int32 accumulator
overflows, what e4m3 and e5m2 can hold, per-tensor against per-row scales on outlier channels,
clipping a heavy tail, and SmoothQuant's migration of the outliers into the weights.

The truth comes from the definitions themselves (computed here in float64 NumPy), from PyTorch's
own description of its float8 types (torch.finfo), from this exercise's exercise.toml for the sizes
and from the spec sheet of the reference GPU for the times. When a number is wrong, the checker
tries the slips people make (the step where its square belongs, 6 dB without 1.76, 127 where the
worst product is 128 x 128) to name the one that fits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from grader import spec as specmod
from grader.derivations import core
from grader.derivations.core import (NumericQuestion, Prompt, Verdict, ask_for_numbers, call_learner,
                                     check_numbers, close, functions_verdict, missing_functions)
from hardware.specs import GpuSpec, default_spec

# This exercise's exercise.toml: the GEMM's longest sum, and the weight a decoding step reads.
EXERCISE = specmod.load(Path(__file__).resolve().parent)
K_LONGEST = max(int(c.values["K"]) for c in EXERCISE.task("gemm_w8a8").benchmarks)
_GEMV = max(EXERCISE.task("gemv_fp8").benchmarks, key=lambda c: int(c.values["N"]) * int(c.values["K"]))
GEMV_N, GEMV_K = int(_GEMV.values["N"]), int(_GEMV.values["K"])

RTOL_NUMBERS = 0.01        # numbers derived by hand
RTOL_FUNCTIONS = 1e-12     # a NumPy float64 function against the same formula


# ================================================================== 1 · the noise of a quantizer

AMAX = 4.0                 # the row's largest magnitude in the prompt
BITS = (8, 4)


def noise_truths() -> dict[str, float]:
    step = AMAX / 127
    return {
        "noise_variance": step ** 2 / 12,
        # A full-scale sine of amplitude A has power A^2 / 2; b bits split 2A into 2^b steps.
        "snr_db_8bit": 10 * math.log10(1.5 * 2 ** (2 * 8)),
        "snr_db_4bit": 10 * math.log10(1.5 * 2 ** (2 * 4)),
        "db_per_bit": 20 * math.log10(2),
    }


def _diag_noise(got: float) -> str | None:
    step = AMAX / 127
    for value, text in ((step ** 2 / 6, "The error is uniform on [-step/2, step/2], whose width is the step: "
                                        "its variance is step^2 / 12."),
                        (step / 12, "Square the step: a variance has the units of the value squared."),
                        (step ** 2 / 4, "That is the largest squared error, (step / 2)^2; the mean of the "
                                        "square over the uniform error is a third of it."),
                        ((AMAX / 128) ** 2 / 12, "Symmetric INT8 uses 127 steps on each side: step = amax / 127."),
                        ((AMAX / 255) ** 2 / 12, "Symmetric INT8 uses 127 steps on each side: step = amax / 127.")):
        if close(got, value, RTOL_NUMBERS):
            return text
    return None


def _diag_snr(bits: int, got: float) -> str | None:
    if close(got, 6.02 * bits, RTOL_NUMBERS):
        return ("The 6.02 dB per bit is right; the ratio of the sine's power, A^2 / 2, to the noise's adds "
                "10 log10(1.5) = 1.76 dB.")
    if close(got, 10 * math.log10(2 ** bits), RTOL_NUMBERS):
        return "Powers go as the square of amplitudes: 20 log10 of an amplitude ratio, 10 log10 of a power ratio."
    return None


def _noise_questions() -> tuple[NumericQuestion, ...]:
    truth = noise_truths()
    return (
        NumericQuestion("noise_variance", f"variance of the rounding error, step = {AMAX:g} / 127",
                        truth["noise_variance"], rtol=RTOL_NUMBERS, diagnose=_diag_noise,
                        hint="Rounding errs by a value spread evenly over [-step/2, step/2]: its variance."),
        NumericQuestion("snr_db_8bit", "SNR of a full-scale sine through 8 bits, dB", truth["snr_db_8bit"],
                        rtol=RTOL_NUMBERS, diagnose=partial(_diag_snr, 8),
                        hint="Signal power A^2 / 2 over noise power step^2 / 12 with step = 2A / 2^b, in dB."),
        NumericQuestion("snr_db_4bit", "the same through 4 bits, dB", truth["snr_db_4bit"], rtol=RTOL_NUMBERS,
                        diagnose=partial(_diag_snr, 4), hint="The same formula with b = 4."),
        NumericQuestion("db_per_bit", "dB gained by each extra bit", truth["db_per_bit"], rtol=RTOL_NUMBERS,
                        hint="One more bit halves the step: the noise power drops by 4.",
                        diagnose=lambda got: ("That is 10 log10(2): the noise's amplitude halves, so its power "
                                              "drops by 4." if close(got, 10 * math.log10(2), RTOL_NUMBERS) else None)),
    )


def check_quantization_noise(answer: Any) -> Verdict:
    if not isinstance(answer, Mapping):
        return ask_for_numbers("quantization_noise", _noise_questions())
    return check_numbers(answer, _noise_questions())


# ================================================================== 2 · when int32 overflows

INT32_MAX = 2 ** 31 - 1


def overflow_truths() -> dict[str, float]:
    k_int8 = INT32_MAX // (128 * 128)
    k_symmetric = INT32_MAX // (127 * 127)
    return {"k_max_int8": k_int8, "k_max_symmetric": k_symmetric, "headroom": k_symmetric / K_LONGEST}


def _diag_overflow(key: str, got: float) -> str | None:
    if key == "k_max_int8" and close(got, INT32_MAX // (127 * 127), 1e-9):
        return "int8 reaches -128: (-128) x (-128) = 16,384 is the largest product."
    if close(got, INT32_MAX / 128, RTOL_NUMBERS) or close(got, INT32_MAX / 127, RTOL_NUMBERS):
        return "Each term is a product of two int8 values: square the largest magnitude."
    if close(got, 2 ** 32 // (128 * 128), RTOL_NUMBERS) or close(got, 2 ** 32 // (127 * 127), RTOL_NUMBERS):
        return "int32 holds up to 2^31 - 1: one bit is the sign."
    if not float(got).is_integer():
        return "A number of terms is a whole number: round down."
    return None


def _overflow_questions() -> tuple[NumericQuestion, ...]:
    truth = overflow_truths()
    return (
        NumericQuestion("k_max_int8", "the longest sum of int8 x int8 products that cannot overflow int32",
                        truth["k_max_int8"], diagnose=partial(_diag_overflow, "k_max_int8"),
                        hint="The worst case: every product as large as it gets, all with one sign, and int32 holds at "
                             "most 2^31 - 1."),
        NumericQuestion("k_max_symmetric", "the same with symmetric quantization (values in [-127, 127])",
                        truth["k_max_symmetric"], diagnose=partial(_diag_overflow, "k_max_symmetric"),
                        hint="The same worst case with 127, against the same 2^31 - 1."),
        NumericQuestion("headroom", f"how many times this exercise's longest K ({K_LONGEST:,}) fits in it",
                        truth["headroom"], rtol=RTOL_NUMBERS,
                        hint=f"k_max_symmetric / {K_LONGEST}."),
    )


def check_accumulator_overflow(answer: Any) -> Verdict:
    if not isinstance(answer, Mapping):
        return ask_for_numbers("accumulator_overflow", _overflow_questions())
    return check_numbers(answer, _overflow_questions())


# ================================================================== 3 · e4m3 and e5m2

def fp8_truths(spec: GpuSpec) -> dict[str, float]:
    e4m3, e5m2 = torch.finfo(torch.float8_e4m3fn), torch.finfo(torch.float8_e5m2)
    bytes_per_s = spec.memory_bandwidth_gbs * 1e9
    return {
        "e4m3_max": float(e4m3.max), "e5m2_max": float(e5m2.max),
        "e4m3_min_normal": float(e4m3.tiny), "e5m2_min_normal": float(e5m2.tiny),
        "e4m3_spacing_at_1": float(e4m3.eps), "e5m2_spacing_at_1": float(e5m2.eps),
        "weight_read_us_fp8": GEMV_N * GEMV_K / bytes_per_s * 1e6,
        "weight_read_us_bf16": 2 * GEMV_N * GEMV_K / bytes_per_s * 1e6,
    }


def _diag_max(fmt_name: str, got: float) -> str | None:
    if fmt_name == "e4m3" and close(got, 480, 1e-9):
        return ("e4m3 (the 'fn' variant Hopper uses) has no infinities, and the pattern S.1111.111 is NaN: the "
                "largest finite value has mantissa 110, 1.75 x 2^8.")
    if fmt_name == "e4m3" and close(got, 240, 1e-9):
        return "e4m3 keeps exponent 1111 for finite values (only S.1111.111 is NaN): the bias is 7, so 2^(15 - 7)."
    if fmt_name == "e5m2" and close(got, 114688, 1e-9):
        return "e5m2 follows IEEE: exponent 11111 is infinity and NaN, so the largest exponent is 30 - 15 = 15."
    return None


def _fp8_questions(spec: GpuSpec) -> tuple[NumericQuestion, ...]:
    truth = fp8_truths(spec)
    bandwidth = f"{spec.memory_bandwidth_gbs:,.0f} GB/s"
    return (
        NumericQuestion("e4m3_max", "the largest finite e4m3 value", truth["e4m3_max"],
                        diagnose=partial(_diag_max, "e4m3"), hint="4 exponent bits, bias 7, 3 mantissa bits; "
                        "only the all-ones pattern is NaN."),
        NumericQuestion("e5m2_max", "the largest finite e5m2 value", truth["e5m2_max"],
                        diagnose=partial(_diag_max, "e5m2"), hint="5 exponent bits, bias 15, 2 mantissa bits, IEEE "
                        "style: the all-ones exponent is for infinities and NaN."),
        NumericQuestion("e4m3_min_normal", "the smallest normal e4m3 value", truth["e4m3_min_normal"],
                        hint="Exponent field 1, mantissa 0: 2^(1 - bias)."),
        NumericQuestion("e5m2_min_normal", "the smallest normal e5m2 value", truth["e5m2_min_normal"],
                        hint="Exponent field 1, mantissa 0: 2^(1 - bias)."),
        NumericQuestion("e4m3_spacing_at_1", "the gap between 1 and the next e4m3 value", truth["e4m3_spacing_at_1"],
                        hint="2^-(mantissa bits)."),
        NumericQuestion("e5m2_spacing_at_1", "the gap between 1 and the next e5m2 value", truth["e5m2_spacing_at_1"],
                        hint="2^-(mantissa bits)."),
        NumericQuestion("weight_read_us_fp8", f"reading a {GEMV_N:,} x {GEMV_K:,} e4m3 weight once at {bandwidth}, us",
                        truth["weight_read_us_fp8"], rtol=RTOL_NUMBERS,
                        hint="One byte per weight, divided by the bandwidth (10^9 bytes/s per GB/s)."),
        NumericQuestion("weight_read_us_bf16", "the same weight in bf16, us", truth["weight_read_us_bf16"],
                        rtol=RTOL_NUMBERS, hint="Two bytes per weight."),
    )


def check_fp8_formats(answer: Any) -> Verdict:
    if not isinstance(answer, Mapping):
        return ask_for_numbers("fp8_formats", _fp8_questions(default_spec()))
    gpu = core.reference_gpu()
    return check_numbers(answer, _fp8_questions(gpu.spec),
                         heading=f"Times checked against the spec sheet of {gpu.describe()}.")


# ================================================================== 4 · per-tensor against per-row scales

def fake_quantize(x: np.ndarray, amax: np.ndarray) -> np.ndarray:
    """Symmetric INT8 with scale amax / 127 (1 where amax is 0), rounded half to even, dequantized."""
    scale = np.where(amax > 0, amax / 127.0, 1.0)
    return np.clip(np.round(x / scale), -127, 127) * scale


def reference_per_tensor(x: np.ndarray) -> np.ndarray:
    return fake_quantize(x, np.abs(x).max())


def reference_per_row(x: np.ndarray) -> np.ndarray:
    return fake_quantize(x, np.abs(x).max(axis=1, keepdims=True))


def outlier_matrix(seed: int = 505, tokens: int = 64, channels: int = 512) -> np.ndarray:
    """Activations as a large model has them: normal values, a few channels 50 times larger, a row
    of zeros, and rows of different sizes."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((tokens, channels)) * rng.uniform(0.2, 3.0, size=(tokens, 1))
    x[:, 7::61] *= 50
    x[3] = 0
    return x


def relative_error(x: np.ndarray, approx: np.ndarray) -> float:
    return float(np.linalg.norm(approx - x) / np.linalg.norm(x))


def _quantize_with(x: np.ndarray, amax: np.ndarray, levels: float = 127.0, rounding=np.round,
                   dequantize: bool = True, clip: bool = True) -> np.ndarray:
    """A quantizer with one thing changed, to name the slip a learner's output matches."""
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(amax > 0, amax / levels, 1.0)
        q = rounding(x / scale)
    if clip:
        q = np.clip(q, -127, 127)
    return q * scale if dequantize else q


def _half_away(v: np.ndarray) -> np.ndarray:
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def _quantizer_slips(x: np.ndarray, per_row: bool) -> list[tuple[np.ndarray, str]]:
    """What a quantizer returns with each common mistake, and the sentence that names it."""
    amax = np.abs(x).max(axis=1, keepdims=True) if per_row else np.abs(x).max()
    other = np.abs(x).max() if per_row else np.abs(x).max(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        unguarded = np.round(x / (amax / 127.0)) * (amax / 127.0)
    return [
        (_quantize_with(x, other), "per tensor where this function is per row" if per_row else
         "per row where this function is per tensor"),
        (_quantize_with(x, amax, levels=128.0), "scale = amax / 128: symmetric INT8 uses 127 steps a side"),
        (_quantize_with(x, amax, levels=255.0), "scale = amax / 255: symmetric INT8 spans [-amax, amax] with 127 "
                                                "steps a side, amax / 127 each"),
        (_quantize_with(x, amax, levels=127.5), "scale = 2 amax / 255: symmetric INT8 uses amax / 127"),
        (_quantize_with(x, amax, rounding=_half_away), "ties rounded away from zero: np.round rounds half to even, "
                                                       "as the GPU's cvt.rni does"),
        (_quantize_with(x, amax, rounding=np.trunc), "q truncated toward zero: round to the nearest (np.round)"),
        (_quantize_with(x, amax, rounding=np.floor), "q rounded down (floor): round to the nearest (np.round)"),
        (_quantize_with(x, amax, dequantize=False), "the codes q returned: multiply back by the scale (q * scale)"),
        (unguarded, "a zero row divided by a zero scale: use scale = 1 where amax is 0"),
    ]


QUANTIZER_HINT = ("scale = amax / 127 (1 for amax = 0), q = round(x / scale) half to even (np.round), "
                  "clipped to [-127, 127], then q * scale.")


def _name_quantizer_slip(x: np.ndarray, got: np.ndarray, per_row: bool) -> str:
    for slip, text in _quantizer_slips(x, per_row):
        if slip.shape == got.shape and np.allclose(got, slip, rtol=RTOL_FUNCTIONS, atol=1e-15, equal_nan=True):
            return text[0].upper() + text[1:] + "."
    if not np.all(np.isfinite(got)):
        return "NaN or inf in the output: " + QUANTIZER_HINT
    return QUANTIZER_HINT


def _check_quantizer(name: str, fn: Any, truth: Any) -> str | None:
    rng = np.random.default_rng(55)
    for where, x in (("a 64 x 512 matrix with outlier channels and a zero row", outlier_matrix()),
                     ("a 1 x 1 matrix", np.array([[0.7]])),
                     ("a 5 x 7 matrix of zeros", np.zeros((5, 7))),
                     ("a 16 x 33 normal matrix", rng.standard_normal((16, 33))),
                     ("a matrix whose values sit at rounding ties (max 127: a step of 1)",
                      np.array([[127.0, 0.5, 1.5, -2.5, 3.5, -0.5], [-127.0, 2.5, -1.5, 0.0, 126.5, -126.5]]))):
        called = call_learner(name, fn, (x.copy(),), where)
        if called.problem:
            return called.problem
        got = np.asarray(called.value, dtype=np.float64) if called.value is not None else None
        want = truth(x)
        if got is None or got.shape != want.shape:
            return f"{name} on {where} returned shape {None if got is None else got.shape}; expected {want.shape}."
        if not np.allclose(got, want, rtol=RTOL_FUNCTIONS, atol=1e-15):
            i = np.unravel_index(np.argmax(np.abs(got - want)), want.shape)
            hint = _name_quantizer_slip(x, got, per_row=truth is reference_per_row)
            return (f"{name} on {where}: element {tuple(int(v) for v in i)} is {got[i]:.6g}, expected {want[i]:.6g} "
                    f"(x = {x[i]:.6g}).\n  Hint: {hint}")
    return None


def check_outlier_channel(answer: Any) -> Verdict:
    names = ("quantize_per_tensor", "quantize_per_row")
    refused = missing_functions(answer, names)
    if refused:
        return refused
    results = [(n, _check_quantizer(n, answer[n], t), "matches the reference on five matrices.")
               for n, t in zip(names, (reference_per_tensor, reference_per_row))]
    verdict = functions_verdict(results)
    if not verdict.passed:
        return verdict
    x = outlier_matrix()
    per_column = fake_quantize(x, np.abs(x).max(axis=0, keepdims=True))
    return Verdict(True, verdict.message + "\n" + (
        f"On the outlier matrix the relative error is {relative_error(x, reference_per_tensor(x)):.2%} per tensor, "
        f"{relative_error(x, reference_per_row(x)):.2%} per row and {relative_error(x, per_column):.2%} per "
        "column: rows of different sizes are what per-row scales fix, while an outlier channel sits in every "
        "row and needs per-column scales, which a GEMM cannot apply to its activations (they would have to "
        "come out of the sum over K). Section 6 moves them into the weights."))


# ================================================================== 5 · clipping a heavy tail

def heavy_tailed_sample(seed: int = 5, size: int = 100_000) -> np.ndarray:
    """Student's t with 3 degrees of freedom: mostly small values and a few very large ones."""
    return np.random.default_rng(seed).standard_t(3, size=size)


def reference_clipped(x: np.ndarray, clip: float, bits: int) -> np.ndarray:
    """Symmetric quantization to 2^(bits - 1) - 1 levels a side over [-clip, clip], dequantized."""
    levels = 2 ** (bits - 1) - 1
    scale = clip / levels
    return np.clip(np.round(np.clip(x, -clip, clip) / scale), -levels, levels) * scale


def clipping_truths() -> dict[str, float]:
    x = heavy_tailed_sample()
    clips = {"absmax": float(np.abs(x).max()), "p999": float(np.quantile(np.abs(x), 0.999))}
    return {f"mse_{name}_{bits}bit": float(np.mean((reference_clipped(x, clip, bits) - x) ** 2))
            for bits in (8, 4) for name, clip in clips.items()}


def _clipping_questions() -> tuple[NumericQuestion, ...]:
    truth = clipping_truths()
    how = {"absmax": "the scale from max |x|", "p999": "clipped at the 99.9th percentile of |x|"}
    hint = {"absmax": "quantize_clipped(x, np.abs(x).max(), bits), then the mean of the squared error.",
            "p999": "clip = np.quantile(np.abs(x), 0.999)."}
    return tuple(NumericQuestion(f"mse_{name}_{bits}bit", f"mean squared error in {bits} bits, {how[name]}",
                                 truth[f"mse_{name}_{bits}bit"], rtol=RTOL_NUMBERS, hint=hint[name])
                 for bits in (8, 4) for name in ("absmax", "p999"))


def _check_clipped(fn: Any) -> str | None:
    rng = np.random.default_rng(7)
    for x, clip, bits in ((rng.standard_normal(1000) * 3, 2.5, 8), (heavy_tailed_sample(size=500), 4.0, 4),
                          (np.array([0.0, 1.0, -1.0]), 1.0, 8), (np.round(rng.standard_normal(64) * 40) / 2, 12.7, 8)):
        called = call_learner("quantize_clipped", fn, (x.copy(), clip, bits),
                              f"{x.size} values, clip = {clip}, bits = {bits}")
        if called.problem:
            return called.problem
        got = np.asarray(called.value, dtype=np.float64)
        want = reference_clipped(x, clip, bits)
        if got.shape != want.shape or not np.allclose(got, want, rtol=RTOL_FUNCTIONS, atol=1e-15):
            return (f"quantize_clipped(x, {clip}, {bits}) differs from the reference on {x.size} values.\n  Hint: "
                    "clip x to [-clip, clip], scale = clip / (2^(bits - 1) - 1), round half to even, then multiply "
                    "back.")
    return None


def check_clipping(answer: Any) -> Verdict:
    refused = missing_functions(answer, ("quantize_clipped",))
    if refused:
        return refused
    problem = _check_clipped(answer["quantize_clipped"])
    functions = functions_verdict([("quantize_clipped", problem, "matches the reference on four samples.")])
    numbers = check_numbers(answer, _clipping_questions())
    passed = functions.passed and numbers.passed
    message = functions.message + "\n" + numbers.message
    if passed:
        message += ("\nIn 8 bits the rounding noise of the full range is small, and the errors of clipping the "
                    "tail cost more; in 4 bits the steps are 18 times coarser and clipping wins by far. The "
                    "best clip depends on the bits and on the tail.")
    return Verdict(passed, message)


# ================================================================== 6 · SmoothQuant

ALPHA = 0.5


def reference_migration_scales(X: np.ndarray, W: np.ndarray, alpha: float) -> np.ndarray:
    """s_j = max_t |X[t, j]|^alpha / max_n |W[j, n]|^(1 - alpha), for Y = X W with W: K x N."""
    return np.abs(X).max(axis=0) ** alpha / np.abs(W).max(axis=1) ** (1 - alpha)


def w8a8_error(X: np.ndarray, W: np.ndarray) -> float:
    """Relative error of X W with X quantized per row (token) and W per column (output channel)."""
    Xq = fake_quantize(X, np.abs(X).max(axis=1, keepdims=True))
    Wq = fake_quantize(W, np.abs(W).max(axis=0, keepdims=True))
    return relative_error(X @ W, Xq @ Wq)


def smoothquant_problem(seed: int = 506) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = outlier_matrix(seed)
    X[3] = rng.standard_normal(X.shape[1])          # every token carries information here
    W = rng.standard_normal((X.shape[1], 256)) * 0.05
    return X, W


def _check_smoothing(answer: Mapping) -> list[tuple[str, str | None, str]]:
    X, W = smoothquant_problem()
    results = []
    problem = None
    for alpha in (ALPHA, 0.8):
        called = call_learner("migration_scales", answer["migration_scales"], (X.copy(), W.copy(), alpha),
                              f"X {X.shape}, W {W.shape}, alpha = {alpha}")
        problem = called.problem
        if problem is None:
            got = np.asarray(called.value, dtype=np.float64)
            want = reference_migration_scales(X, W, alpha)
            if got.shape != want.shape:
                problem = f"migration_scales returned shape {got.shape}; one scale per input channel is {want.shape}."
            elif not np.allclose(got, want, rtol=1e-10):
                inverse = reference_migration_scales(X, W, 1 - alpha)
                problem = (f"migration_scales(X, W, {alpha}) differs from max|X_j|^alpha / max|W_j|^(1 - alpha)."
                           + ("\n  Hint: alpha belongs to X (the activations)."
                              if np.allclose(got, inverse, rtol=1e-10) else
                              "\n  Hint: the maximum of X runs over tokens (axis 0), of W over outputs (axis 1)."))
        if problem:
            break
    results.append(("migration_scales", problem, f"matches SmoothQuant's s_j at alpha = {ALPHA} and 0.8."))
    called = call_learner("smooth", answer["smooth"], (X.copy(), W.copy(), ALPHA), f"alpha = {ALPHA}")
    problem = called.problem
    if problem is None:
        try:
            Xs, Ws = (np.asarray(v, dtype=np.float64) for v in called.value)
        except (TypeError, ValueError):
            Xs = Ws = None
            problem = "smooth should return the pair (X_smoothed, W_smoothed)."
        if problem is None:
            s = reference_migration_scales(X, W, ALPHA)
            if Xs.shape != X.shape or Ws.shape != W.shape:
                problem = f"smooth returned shapes {Xs.shape} and {Ws.shape}; expected {X.shape} and {W.shape}."
            elif not (np.allclose(Xs, X / s, rtol=1e-10) and np.allclose(Ws, W * s[:, None], rtol=1e-10)):
                problem = ("smooth: X diag(s)^-1 divides column j of X by s_j, diag(s) W multiplies row j of W by "
                           "s_j.")
            elif not np.allclose(Xs @ Ws, X @ W, rtol=1e-9, atol=1e-12):
                problem = "smooth changed the product X W."
    results.append(("smooth", problem, "X diag(s)^-1 and diag(s) W, with the same product."))
    return results


def check_smoothquant(answer: Any) -> Verdict:
    refused = missing_functions(answer, ("migration_scales", "smooth"))
    if refused:
        return refused
    verdict = functions_verdict(_check_smoothing(answer))
    if not verdict.passed:
        return verdict
    X, W = smoothquant_problem()
    s = reference_migration_scales(X, W, ALPHA)
    return Verdict(True, verdict.message + "\n" + (
        f"W8A8 error of X W (X per token, W per output channel): {w8a8_error(X, W):.2%} as it is, "
        f"{w8a8_error(X / s, W * s[:, None]):.2%} after smoothing with alpha = {ALPHA}. The outlier channels "
        "now live partly in W, whose per-channel scales absorb them."))


# ================================================================== the prompts of exercise 05

PROMPTS = (
    Prompt("quantization_noise", "The noise a quantizer adds, and 6 dB per bit", 2.0, check_quantization_noise),
    Prompt("accumulator_overflow", "When an int32 sum of int8 products overflows", 1.0, check_accumulator_overflow),
    Prompt("fp8_formats", "What e4m3 and e5m2 can hold, and what FP8 weights save", 2.0, check_fp8_formats),
    Prompt("outlier_channel", "Per-tensor and per-row scales on outlier channels", 2.0, check_outlier_channel),
    Prompt("clipping", "Clipping a heavy tail", 2.0, check_clipping),
    Prompt("smoothquant", "SmoothQuant: moving the outliers into the weights", 2.0, check_smoothquant),
)
