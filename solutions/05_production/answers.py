"""Reference answers to the derivation prompts of exercise 05, under the notebook's names.

``fp8_formats`` holds the read times for the GPU the prompts are checked against (reference_gpu:
this machine's, or the one a course names); ``fp8_formats_for`` gives them for any spec sheet.
"""

from __future__ import annotations

import math

import numpy as np

from grader.derivations import reference_gpu
from hardware.specs import GpuSpec

# ------------------------------------------------------------------ 1 · the noise of a quantizer
# Rounding errs by e, uniform on [-step/2, step/2]: E[e^2] = step^2 / 12. A full-scale sine of
# amplitude A has power A^2 / 2; b bits split 2A into 2^b steps, step = 2A / 2^b, so
# SNR = (A^2 / 2) / ((2A)^2 / (12 * 4^b)) = 1.5 * 4^b: 10 log10(1.5) + 20 b log10(2) dB.
quantization_noise = {
    "noise_variance": (4.0 / 127) ** 2 / 12,
    "snr_db_8bit": 10 * math.log10(1.5) + 8 * 20 * math.log10(2),
    "snr_db_4bit": 10 * math.log10(1.5) + 4 * 20 * math.log10(2),
    "db_per_bit": 20 * math.log10(2),
}

# ------------------------------------------------------------------ 2 · when int32 overflows
# The worst sum: every product at its largest, one sign. int8 reaches -128, so (-128)^2 = 16,384;
# symmetric quantization stops at 127, 127^2 = 16,129. int32 holds up to 2^31 - 1.
accumulator_overflow = {
    "k_max_int8": (2 ** 31 - 1) // (128 * 128),
    "k_max_symmetric": (2 ** 31 - 1) // (127 * 127),
    "headroom": ((2 ** 31 - 1) // (127 * 127)) / 8192,
}

# ------------------------------------------------------------------ 3 · e4m3 and e5m2
# e4m3 (bias 7): no infinities, only S.1111.111 is NaN, so the largest is 1.110b x 2^8 = 448.
# e5m2 (bias 15): IEEE-like, the largest exponent is 30 - 15 = 15: 1.11b x 2^15 = 57,344.
# Smallest normals 2^(1 - bias); the gap after 1 is 2^-(mantissa bits). Reading the weight once
# takes its bytes over the memory bandwidth: one byte a weight in e4m3, two in bf16.
GEMV_N, GEMV_K = 28672, 8192


def fp8_formats_for(spec: GpuSpec) -> dict[str, float]:
    bandwidth = spec.memory_bandwidth_gbs * 1e9
    return {
        "e4m3_max": 1.75 * 2 ** 8,
        "e5m2_max": 1.75 * 2 ** 15,
        "e4m3_min_normal": 2.0 ** -6,
        "e5m2_min_normal": 2.0 ** -14,
        "e4m3_spacing_at_1": 2.0 ** -3,
        "e5m2_spacing_at_1": 2.0 ** -2,
        "weight_read_us_fp8": GEMV_N * GEMV_K / bandwidth * 1e6,
        "weight_read_us_bf16": 2 * GEMV_N * GEMV_K / bandwidth * 1e6,
    }


fp8_formats = fp8_formats_for(reference_gpu().spec)


# ------------------------------------------------------------------ 4 · per-tensor against per-row scales

def _fake_quantize(x, amax):
    scale = np.where(amax > 0, amax / 127.0, 1.0)
    return np.clip(np.round(x / scale), -127, 127) * scale


def quantize_per_tensor(x):
    return _fake_quantize(x, np.abs(x).max())


def quantize_per_row(x):
    return _fake_quantize(x, np.abs(x).max(axis=1, keepdims=True))


# ------------------------------------------------------------------ 5 · clipping a heavy tail

def quantize_clipped(x, clip, bits):
    levels = 2 ** (bits - 1) - 1
    scale = clip / levels
    return np.clip(np.round(np.clip(x, -clip, clip) / scale), -levels, levels) * scale


sample = np.random.default_rng(5).standard_t(3, size=100_000)
clipping_mse = {
    f"mse_{name}_{bits}bit": float(np.mean((quantize_clipped(sample, clip, bits) - sample) ** 2))
    for bits in (8, 4)
    for name, clip in (("absmax", np.abs(sample).max()), ("p999", np.quantile(np.abs(sample), 0.999)))
}


# ------------------------------------------------------------------ 6 · SmoothQuant

def migration_scales(X, W, alpha):
    return np.abs(X).max(axis=0) ** alpha / np.abs(W).max(axis=1) ** (1 - alpha)


def smooth(X, W, alpha):
    s = migration_scales(X, W, alpha)
    return X / s, W * s[:, None]
