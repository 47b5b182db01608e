"""What each kernel call of the GPT's training step costs, from the sizes it was called with: (FLOPs,
bytes moved), counted as each kernel's exercise.toml counts them (its ``flops`` and ``bytes``).

train_gpt.py adds these up over the calls it timed; the report shows the sums beside each
operation's share of a step. Plain Python: nothing here needs a GPU or PyTorch.
"""
from __future__ import annotations

from typing import Callable

PER_CALL: dict[str, Callable[..., tuple[int, int]]] = {
    "linear_forward": lambda M, N, K, gelu: (2 * M * N * K, 4 * (M * K + N * K + N + 2 * M * N)),
    "linear_backward": lambda M, N, K, gelu: (4 * M * N * K, 4 * (2 * M * K + 2 * N * K + 2 * M * N + N)),
    "layernorm_forward": lambda rows, cols: (8 * rows * cols, 8 * rows * cols + 8 * cols + 8 * rows),
    "layernorm_backward": lambda rows, cols: (13 * rows * cols, 12 * rows * cols + 12 * cols + 8 * rows),
    "attention": lambda bh, seq, dim, causal: (
        2 * bh * seq * (seq + 1) * dim if causal else 4 * bh * seq * seq * dim, 16 * bh * seq * dim),
    "attention_backward": lambda bh, seq, dim, causal: (
        5 * bh * seq * (seq + 1) * dim if causal else 10 * bh * seq * seq * dim, 32 * bh * seq * dim),
    "cross_entropy": lambda rows, cols: (5 * rows * cols, 8 * rows * cols + 8 * rows),
}


def optimizer_step(parameters: int) -> tuple[int, int]:
    """adamw_multi over every parameter of the model once (whatever the number of launches): each
    element's parameter, gradient and two moments read, the parameter and moments written."""
    return 16 * parameters, 28 * parameters
