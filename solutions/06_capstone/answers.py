"""Hidden answers to the capstone's prompts: what one training step of the full GPT costs.

Counted by hand from the shapes (6 layers, width 384, 6 heads of 64, context 256, batch 16, a byte
vocabulary of 256), with each kernel's FLOP and byte formulas of its exercise.toml. The roofline
answer is for the GPU the prompts are checked against; ``step_roofline_for`` gives it for any spec
sheet.
"""

from __future__ import annotations

from grader.derivations import reference_gpu
from hardware.specs import GpuSpec

# ------------------------------------------------------------------ what one step costs
# M = 16 x 256 = 4,096 tokens. Each block: QKV (N = 3C), projection (N = C), fc1 (N = 4C, GELU),
# fc2 (K = 4C); then the head (N = 256). Every linear layer has one forward and one backward call.
# LayerNorm: two per block and the final one. Attention: one call per block over bh = 16 x 6 = 96
# sequences of 256, head size 64, causal. AdamW: every parameter once, in two launches.


def _step_costs() -> dict[str, dict[str, int]]:
    layers, C, T, B, H, V = 6, 384, 256, 16, 6, 256
    M, bh, d = B * T, B * H, C // H
    shapes = [(3 * C, C), (C, C), (4 * C, C), (C, 4 * C)] * layers + [(V, C)]       # (N, K)
    fwd_flops = sum(2 * M * N * K for N, K in shapes)
    fwd_bytes = sum(4 * (M * K + N * K + N + 2 * M * N) for N, K in shapes)
    bwd_bytes = sum(4 * (2 * M * K + 2 * N * K + 2 * M * N + N) for N, K in shapes)
    norms = 2 * layers + 1
    # token and position embeddings, the head with its bias, the final LayerNorm, the blocks
    params = V * C + T * C + (V * C + V) + 2 * C + layers * (12 * C * C + 13 * C)
    return {
        "linear_forward": {"calls": len(shapes), "flops": fwd_flops, "bytes": fwd_bytes},
        "linear_backward": {"calls": len(shapes), "flops": 2 * fwd_flops, "bytes": bwd_bytes},
        "layernorm_forward": {"calls": norms, "flops": norms * 8 * M * C, "bytes": norms * (8 * M * C + 8 * C + 8 * M)},
        "layernorm_backward": {"calls": norms, "flops": norms * 13 * M * C,
                               "bytes": norms * (12 * M * C + 12 * C + 8 * M)},
        "attention": {"calls": layers, "flops": layers * 2 * bh * T * (T + 1) * d, "bytes": layers * 16 * bh * T * d},
        "attention_backward": {"calls": layers, "flops": layers * 5 * bh * T * (T + 1) * d,
                               "bytes": layers * 32 * bh * T * d},
        "cross_entropy": {"calls": 1, "flops": 5 * M * V, "bytes": 8 * M * V + 8 * M},
        "adamw_multi": {"calls": 2, "flops": 16 * params, "bytes": 28 * params},
    }


step_costs = _step_costs()


# ------------------------------------------------------------------ what bounds each operator

def step_roofline_for(spec: GpuSpec) -> dict[str, dict[str, float]]:
    peak, bandwidth = spec.fp32_tflops * 1e12, spec.memory_bandwidth_gbs * 1e9
    ridge = peak / bandwidth
    out = {}
    for name, c in _step_costs().items():
        intensity = c["flops"] / c["bytes"]
        out[name] = {"intensity": intensity, "time_us": max(c["flops"] / peak, c["bytes"] / bandwidth) * 1e6,
                     "memory_bound": 1 if intensity < ridge else 0}
    return out


step_roofline = step_roofline_for(reference_gpu().spec)
