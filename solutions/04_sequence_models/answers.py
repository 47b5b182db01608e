"""Reference answers to the derivation prompts of exercise 04, under the notebook's names."""

from __future__ import annotations

import math

import numpy as np

# ------------------------------------------------------------------ 1 · the softmax Jacobian
# y_i = exp(z_i) / S with S = sum_k exp(z_k). The quotient rule gives
#   dy_i/dz_j = delta_ij exp(z_i) / S - exp(z_i) exp(z_j) / S^2 = y_i (delta_ij - y_j),
# so J = diag(y) - y y^T (symmetric), and J^T g = y * g - y (y . g) = y * (g - <g, y>).


def _probabilities(z):
    shifted = np.exp(z - np.max(z))
    return shifted / np.sum(shifted)


def softmax_jacobian(z):
    y = _probabilities(z)
    return np.diag(y) - np.outer(y, y)


def softmax_vjp(z, g):
    y = _probabilities(z)
    return y * (g - np.dot(g, y))


# ------------------------------------------------------------------ 2a · float limits
# exp(x) stays finite while x <= ln(largest finite float). softmax(z + c) = softmax(z) exactly:
# exp(c) multiplies numerator and denominator alike. After subtracting the max m, the term of
# the max itself is exp(0) = 1 and every other term lies in [0, 1]: the denominator is in [1, n].

softmax_numbers = {
    "exp_overflow_float32": math.log(float(np.finfo(np.float32).max)),   # 88.7228
    "exp_overflow_float64": math.log(float(np.finfo(np.float64).max)),   # 709.7827
    "shift_difference": 0.0,
    "denominator_min": 1.0,
    "denominator_max": 8192.0,
}


# ------------------------------------------------------------------ 2b · a stable softmax

def stable_softmax(z):
    # Every exponent is <= 0, so nothing overflows, and the max's own term is exactly 1, so the
    # sum cannot underflow to 0. float32 in, float32 arithmetic, float32 out.
    weights = np.exp(z - z.max())
    return weights / weights.sum(dtype=np.float32)


# ------------------------------------------------------------------ 3 · the online softmax
# state = (m, l): m the running max, l = sum over the values seen of exp(x - m). A new maximum
# m_new turns every exp(x - m) into exp(x - m_new) = exp(x - m) * exp(m - m_new): one factor for
# the whole sum. math.exp(-inf) is 0.0, so the empty state (-inf, 0) needs no special case.


def online_update(state, x):
    running_max, total = state
    new_max = max(running_max, x)
    return new_max, total * math.exp(running_max - new_max) + math.exp(x - new_max)


def online_update_block(state, xs):
    running_max, total = state
    new_max = max(running_max, float(np.max(xs)))
    block_total = float(np.sum(np.exp(xs - new_max)))
    return new_max, total * math.exp(running_max - new_max) + block_total


# The attention row adds acc = sum_j exp(s_j - m) v_j, whose weights are those of l: the same
# factor rescales it. o = acc / l at the end is softmax(s) @ v, what flash attention computes.


def flash_update(state, s, v):
    running_max, total, acc = state
    new_max = max(running_max, float(np.max(s)))
    alpha = math.exp(running_max - new_max)
    p = np.exp(s - new_max)
    return new_max, alpha * total + float(np.sum(p)), alpha * acc + p @ v


def flash_finalize(state):
    _, total, acc = state
    return acc / total


# ------------------------------------------------------------------ 4 · attention costs
# FLOPs: 2 per multiply-add, dim multiply-adds per query-key pair in each of the two products;
# causal keeps the seq (seq + 1) / 2 pairs on or below the diagonal. Fused traffic: q, k, v read
# once and o written once. Naive traffic: the same plus four passes over the fp32 score square
# (written, read and rewritten by the softmax, read by P v), masked entries included.


def attention_cost(bh, seq, dim, causal, element_bytes):
    pairs = seq * (seq + 1) / 2 if causal else seq * seq
    flops = 2 * 2 * bh * pairs * dim
    fused = 4 * bh * seq * dim * element_bytes
    naive = fused + 4 * (bh * seq * seq * 4)
    return {
        "flops": flops,
        "bytes_naive": naive,
        "bytes_fused": fused,
        "traffic_ratio": naive / fused,
        "intensity_naive": flops / naive,
        "intensity_fused": flops / fused,
    }


attention_costs = {
    "fp32": attention_cost(32, 2048, 64, 0, 4),
    "bf16": attention_cost(128, 4096, 128, 0, 2),
    "bf16_causal": attention_cost(128, 4096, 128, 1, 2),
}


# ------------------------------------------------------------------ 4b · when the exponentials are the limit
# One exp per score; per score the products do d + d multiply-adds (4d FLOPs). Hopper per SM and
# clock: 16 exponentials (MUFU), 4096 bf16 tensor FLOPs (wgmma).
_D_EXP = 128
_r = (1 / 16) / (4 * _D_EXP / 4096)
exp_bottleneck = {
    "flops_per_exp": 4 * _D_EXP,
    "exp_over_matmul": _r,                  # 0.5
    "exp_share_serial": _r / (1 + _r),      # 1/3
    "peak_share_serial": 1 / (1 + _r),      # 2/3
    "exp_over_matmul_dim64": (1 / 16) / (4 * 64 / 4096),  # 1.0
}


# ------------------------------------------------------------------ 5 · attention's backward
# Row i of P is softmax(S[i]), so row i of dS is section 1's vector-Jacobian product with
# g = dP[i]: dS = P * (dP - rowsum(dP * P)). And rowsum(dP * P)[i] = sum_j (dO_i . v_j) P_ij
# = dO_i . (sum_j P_ij v_j) = dO_i . o_i: delta needs o, not P.


def ds_from_dp(p, dp):
    return p * (dp - np.sum(dp * p, axis=1, keepdims=True))


def delta_from_output(dO, o):
    return np.sum(dO * o, axis=1)


# Forward: 2 products of bh x seq^2 x dim multiply-adds; backward: 5 (S again, dV, dP, dQ, dK).
# Storing P for one head at seq 4096 is 64 MiB written and read back; recomputing S costs
# 2 * 4096^2 * 64 FLOPs: 16 FLOPs per byte saved, and no memory that grows with seq^2.
_BH, _SEQ, _DIM, _LONG = 32, 2048, 64, 4096
backward_costs = {
    "forward_flops": 4 * _BH * _SEQ**2 * _DIM,
    "backward_flops": 10 * _BH * _SEQ**2 * _DIM,
    "backward_over_forward": 2.5,
    "p_bytes_per_head": 4 * _LONG**2,
    "recompute_flops_per_head": 2 * _LONG**2 * _DIM,
    "recompute_flops_per_byte": (2 * _LONG**2 * _DIM) / (2 * 4 * _LONG**2),
}


# ------------------------------------------------------------------ 5 · LayerNorm's backward
# x_hat = (x - mean) * rstd, y = x_hat * gamma + beta, g = dy * gamma = dL/dx_hat. Through the mean
# and the variance every x_j moves every x_hat_i: dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat)).


def _normalised(x):
    mean = x.mean(axis=1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=1, keepdims=True) + 1e-5)
    return (x - mean) * rstd, rstd


def layernorm_dx(x, gamma, dy):
    x_hat, rstd = _normalised(x)
    g = dy * gamma
    return rstd * (g - g.mean(axis=1, keepdims=True) - x_hat * (g * x_hat).mean(axis=1, keepdims=True))


def layernorm_dgamma_dbeta(x, dy):
    x_hat, _ = _normalised(x)
    return (dy * x_hat).sum(axis=0), dy.sum(axis=0)


# ------------------------------------------------------------------ 5 · the loss
# loss = logsumexp(z) - z_t; d/dz = softmax(z) - onehot(t). log sum exp(z) = m + log sum exp(z - m).


def logsumexp32(z):
    m = z.max()
    return m + np.log(np.sum(np.exp(z - m)))


def cross_entropy_grad(z, target):
    e = np.exp(z - np.max(z))
    grad = e / e.sum()
    grad[target] -= 1.0
    return grad
