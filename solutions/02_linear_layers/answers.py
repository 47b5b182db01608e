"""Reference answers to the derivation prompts of exercise 02, under the notebook's names.

The hardware numbers are for the GPU the prompts are checked against (reference_gpu: this
machine's, or the one a course names); ``*_for(spec)`` gives them for any spec sheet.
"""

from __future__ import annotations

import math

import numpy as np

from grader.derivations import reference_gpu
from hardware.specs import GpuSpec

# ------------------------------------------------------------------ 1 · the backward pass
# Z = X W^T + b, Y = gelu(Z) = Z Phi(Z). With dY = dL/dY:
#   dZ = dY * gelu'(Z), gelu'(z) = Phi(z) + z phi(z)     (product rule, Phi' = phi)
#   dX = dZ W (M x K), dW = dZ^T X (N x K), db = sum of dZ over the M rows.

_erf = np.vectorize(math.erf)


def gelu_derivative(z):
    z = np.asarray(z, dtype=np.float64)
    cdf = 0.5 * (1.0 + _erf(z / math.sqrt(2.0)))
    density = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    return cdf + z * density


def linear_backward(X, W, b, dY):
    Z = X @ W.T + b
    dZ = dY * gelu_derivative(Z)
    return dZ @ W, dZ.T @ X, dZ.sum(axis=0)


# ------------------------------------------------------------------ 2 · FLOPs of a layer
# GPT-2 small's MLP expansion over M = 8192 tokens: N = 3072, K = 768.
M, N, K = 8192, 3072, 768


def layer_flops_for(spec: GpuSpec) -> dict[str, float]:
    forward = 2 * M * N * K                       # one multiply-add per product, 2 FLOPs
    backward = 2 * (2 * M * N * K)                # dX = dZ W and dW = dZ^T X, each as large
    return {
        "forward_flops": forward,
        "backward_flops": backward,
        "backward_over_forward": backward / forward,
        "flops_per_token_per_weight": (forward + backward) / (M * N * K),
        "forward_us_fp32": forward / (spec.fp32_tflops * 1e12) * 1e6,
        # A GPU whose tensor cores take no bf16 (Turing) runs the same product in fp16.
        "forward_us_bf16": forward / ((spec.bf16_tensor_tflops or spec.fp16_tensor_tflops) * 1e12) * 1e6,
    }


# ------------------------------------------------------------------ 3 · arithmetic intensity of tiles
# A T x T block tile, BK deep: loads (T BK + BK T) elements, does T T BK multiply-adds, so its
# intensity is 2 T^2 BK / (bytes (2 T BK)) = T / bytes: T / 4 in fp32, T / 2 in bf16.


def tile_intensity_for(spec: GpuSpec) -> dict[str, float]:
    dram = spec.memory_bandwidth_gbs * 1e9
    ridge_fp32 = spec.fp32_tflops * 1e12 / dram
    ridge_bf16 = (spec.bf16_tensor_tflops or spec.fp16_tensor_tflops) * 1e12 / dram
    smem = 128 * spec.sms * spec.boost_clock_mhz * 1e6
    return {
        "intensity_block_fp32": 2 * 128 * 128 * 8 / (4 * (128 * 8 + 8 * 128)),
        "ridge_fp32": ridge_fp32,
        "tile_fp32": 4 * ridge_fp32,
        "ridge_bf16": ridge_bf16,
        "tile_bf16": 2 * ridge_bf16,
        "intensity_thread_fp32": 2 * 8 * 8 / (4 * (8 + 8)),
        "ridge_smem": spec.fp32_tflops * 1e12 / smem,
    }


# ------------------------------------------------------------------ 4 · register tiles
register_tile = {
    "loads_1x1": 2,
    "fmas_1x1": 1,
    "loads_8x8": 8 + 8,                 # a column of 8 values of A, a row of 8 of B
    "fmas_8x8": 8 * 8,
    "lds128_8x8": (8 + 8) / 4,
    "accumulators_8x8": 8 * 8,
}


# ------------------------------------------------------------------ 5 · shared memory and occupancy

def occupancy_for(spec: GpuSpec) -> dict[str, float]:
    fp32 = 2 * (128 * 8 + 8 * 128) * 4
    bf16 = 4 * (128 * 64 + 64 * 128) * 2
    smem = spec.smem_per_sm_kb * 1024
    by_smem = smem // (fp32 + 1024)
    by_registers = spec.regs_per_sm // (128 * 256)
    by_threads = spec.max_warps_per_sm * 32 // 256
    return {
        "smem_bytes_fp32": fp32,
        "blocks_by_smem_fp32": by_smem,
        "blocks_by_registers": by_registers,
        "warps_per_sm": min(by_smem, by_registers, by_threads) * 8,
        "smem_bytes_bf16": bf16,
        "blocks_by_smem_bf16": smem // (bf16 + 1024),
    }


# ------------------------------------------------------------------ 6 · one tensor-core instruction
mma_flops = {
    "flops_mma_sync": 2 * 16 * 8 * 16,
    "flops_wgmma": 2 * 64 * 256 * 16,
    "mma_sync_per_wgmma": (64 * 256 * 16) / (16 * 8 * 16),
    "mma_per_warp_tile": (64 // 16) * (64 // 8),
}

layer_flops = layer_flops_for(reference_gpu().spec)
tile_intensity = tile_intensity_for(reference_gpu().spec)
occupancy = occupancy_for(reference_gpu().spec)
