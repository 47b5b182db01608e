"""Reference answers to the derivation prompts of exercise 03, under the notebook's names.

``optimizer_traffic`` holds the numbers for the GPU the prompts are checked against (reference_gpu:
this machine's, or the one a course names); ``optimizer_traffic_for`` gives them for any spec sheet.
"""

from __future__ import annotations

import math

import numpy as np

from grader.derivations import reference_gpu
from hardware.specs import GpuSpec

# ------------------------------------------------------------------ 1 · bias correction
# m_t = beta m_{t-1} + (1 - beta) g_t from m_0 = 0 unrolls to (1 - beta) sum_k beta^k g_{t-k}: for a
# stationary gradient, E[m_t] = (1 - beta)(1 + beta + ... + beta^{t-1}) E[g] = (1 - beta^t) E[g].


def bias_correction(beta, t):
    return 1.0 - beta ** t


# At step 1: m_1 = 0.1 g and v_1 = 0.001 g^2, so m_1 / sqrt(v_1) = 0.1 / sqrt(0.001) sign(g), while the
# corrected m_hat / sqrt(v_hat) is sign(g).
uncorrected_step_ratio = 0.1 / math.sqrt(0.001)


# ------------------------------------------------------------------ 2 · AdamW against Adam with L2

def _adam(p, g, m, v, t, lr, beta1, beta2, eps):
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    m_hat = m / (1 - beta1 ** t)
    v_hat = v / (1 - beta2 ** t)
    return p - lr * m_hat / (np.sqrt(v_hat) + eps), m, v


def adamw_step(p, g, m, v, t, lr, beta1, beta2, eps, weight_decay):
    return _adam(p * (1 - lr * weight_decay), g, m, v, t, lr, beta1, beta2, eps)


def adam_l2_step(p, g, m, v, t, lr, beta1, beta2, eps, weight_decay):
    return _adam(p, g + weight_decay * p, m, v, t, lr, beta1, beta2, eps)


# ------------------------------------------------------------------ 3 · where eps sits
# m_hat = 1e-9, v_hat = 1e-18, eps = 1e-8, lr = 1e-3.
epsilon = {
    "update_eps_outside": 1e-3 * 1e-9 / (1e-9 + 1e-8),
    "update_eps_inside": 1e-3 * 1e-9 / math.sqrt(1e-18 + 1e-8),
    "update_without_eps": 1e-3 * 1e-9 / 1e-9,
}

# ------------------------------------------------------------------ 4 · momentum as a moving average
momentum_window = {
    "window_beta1": 1 / (1 - 0.9),
    "window_beta2": 1 / (1 - 0.999),
    "weight_10_steps_back": (1 - 0.9) * 0.9 ** 10,
    "weight_of_last_10": 1 - 0.9 ** 10,
}

# ------------------------------------------------------------------ 5 · what a step costs
GPT2_PARAMETERS = 124_439_808


def optimizer_traffic_for(spec: GpuSpec) -> dict[str, float]:
    bandwidth = spec.memory_bandwidth_gbs * 1e9
    return {
        "bytes_sgd": 4 + 4 + 4 + 4 + 4,            # read p, g, buf; write p, buf
        "bytes_adamw": 4 * 4 + 3 * 4,              # read p, g, m, v; write p, m, v
        "bytes_adamw_8bit": 4 + 4 + 1 + 1 + 4 + 1 + 1,
        "step_us_gpt2": 28 * GPT2_PARAMETERS / bandwidth * 1e6,
        "step_ms_7b": 28 * 7e9 / bandwidth * 1e3,
        "state_gb_7b": 2 * 4 * 7e9 / 1e9,
        "state_gb_7b_8bit": 2 * 1 * 7e9 / 1e9,
    }


optimizer_traffic = optimizer_traffic_for(reference_gpu().spec)
