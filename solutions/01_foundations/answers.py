"""Reference answers to the derivation prompts of exercise 01, under the notebook's names.

The hardware numbers depend on the GPU: ``hardware_101`` and ``roofline_01`` are for the GPU the
prompts are checked against (grader.derivations.reference_gpu: this machine's, or the one a course
names); ``hardware_101_for`` and ``roofline_01_for`` give them for any spec sheet.
"""

from __future__ import annotations

import numpy as np

from grader.derivations import reference_gpu
from hardware.specs import GpuSpec

# ------------------------------------------------------------------ matrix calculus
# y = relu(z), z = W x + b. dy_i/dz_i = 1 if z_i > 0 else 0, and z_i depends on x_j through
# W[i, j] and on b_j only when i == j. The upstream gradient g is masked once, then flows to
# each parameter through the linear map.


def _active(W, x, b):
    return (W @ x + b > 0).astype(W.dtype)


def jacobian_y_wrt_x(W, x, b):
    return _active(W, x, b)[:, None] * W


def jacobian_y_wrt_b(W, x, b):
    return np.diag(_active(W, x, b))


def grad_W(W, x, b, g):
    return np.outer(g * _active(W, x, b), x)


def grad_x(W, x, b, g):
    return W.T @ (g * _active(W, x, b))


def grad_b(W, x, b, g):
    return g * _active(W, x, b)


# ------------------------------------------------------------------ hardware 101

def hardware_101_for(spec: GpuSpec) -> dict[str, float]:
    bandwidth_bytes_per_s = spec.memory_bandwidth_gbs * 1e9
    clock_hz = spec.boost_clock_mhz * 1e6
    bytes_per_clock = bandwidth_bytes_per_s / clock_hz
    return {
        "threads_per_warp": 32,
        "max_warps_per_sm": spec.max_warps_per_sm,
        "max_threads_per_block": spec.max_threads_per_block,
        "registers_per_sm": spec.regs_per_sm,
        "smem_per_sm_kib": spec.smem_per_sm_kb,
        "dram_bytes_per_clock": bytes_per_clock,
        "dram_bytes_per_clock_per_sm": bytes_per_clock / spec.sms,
        "ridge_flops_per_byte": spec.fp32_tflops * 1e12 / bandwidth_bytes_per_s,
    }


# ------------------------------------------------------------------ roofline of the three tasks

def roofline_01_for(spec: GpuSpec) -> dict[str, dict[str, float]]:
    n = 2**26
    rows = cols = 8192
    # (FLOPs, minimum bytes): float32 is 4 bytes; every input read, every output written once.
    work = {
        "vector_add": (n, 4 * (n + n + n)),
        "reduce_sum": (n, 4 * n),
        "transpose": (0, 4 * rows * cols * 2),
    }
    peak_flop_s = spec.fp32_tflops * 1e12
    bandwidth = spec.memory_bandwidth_gbs * 1e9
    return {
        task: {
            "flops": flops,
            "bytes": nbytes,
            "intensity": flops / nbytes,
            "time_us": max(flops / peak_flop_s, nbytes / bandwidth) * 1e6,
        }
        for task, (flops, nbytes) in work.items()
    }


hardware_101 = hardware_101_for(reference_gpu().spec)
roofline_01 = roofline_01_for(reference_gpu().spec)
