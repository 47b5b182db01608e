"""Float64 references for exercise 04: softmax and attention, spelled out step by step.

The grader calls each function with the inputs as float64 tensors (bf16 inputs are upcast
exactly) followed by the integer scalars in the order `exercise.toml` lists them, and
compares your kernel's output to what it returns. The math is written out on purpose:
these few lines are the definition your kernels must agree with.

The `*_torch` functions are different: they run PyTorch's own kernels in the input's native
dtype, and the grader times them only so you can see how your kernel compares with a
production implementation.
"""

import math

import torch
import torch.nn.functional as F

# Keep each float64 score matrix the attention reference builds to about 256 MiB, so the
# benchmark size (128 heads x 4096 x 4096 scores) fits in memory one slice at a time.
_SCORE_ELEMENTS_PER_SLICE = 1 << 25


def softmax(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """y[r, c] = exp(x[r, c] - max_r) / sum_c' exp(x[r, c'] - max_r), row by row.

    Subtracting the row maximum changes nothing mathematically (it cancels between numerator
    and denominator) but keeps every exponent <= 0, so nothing overflows.
    """
    x = x.reshape(rows, cols)
    row_max = x.max(dim=1, keepdim=True).values
    exps = torch.exp(x - row_max)
    return exps / exps.sum(dim=1, keepdim=True)


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bh: int,
    seq: int,
    dim: int,
    causal: int,
) -> torch.Tensor:
    """o = softmax(q k^T / sqrt(dim)) v for each of the bh (batch x head) slices.

    With causal != 0, query i may only look at keys 0..i: later keys get a score of -inf,
    which the softmax turns into a weight of exactly 0.
    """
    q, k, v = (t.reshape(bh, seq, dim) for t in (q, k, v))
    scale = 1.0 / math.sqrt(dim)
    future = torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(diagonal=1)
    out = torch.empty_like(q)
    heads_per_slice = max(1, _SCORE_ELEMENTS_PER_SLICE // (seq * seq))
    for start in range(0, bh, heads_per_slice):
        part = slice(start, start + heads_per_slice)
        scores = (q[part] @ k[part].transpose(1, 2)) * scale
        if causal:
            scores = scores.masked_fill(future, -math.inf)
        weights = softmax(scores.reshape(-1, seq), scores.numel() // seq, seq)
        out[part] = weights.reshape(scores.shape) @ v[part]
    return out


def softmax_torch(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """PyTorch's own softmax, in the input's dtype (for timing comparison only)."""
    return torch.softmax(x.reshape(rows, cols), dim=1)


def attention_torch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bh: int,
    seq: int,
    dim: int,
    causal: int,
) -> torch.Tensor:
    """PyTorch's scaled_dot_product_attention in the input's dtype (for timing comparison only).

    The fused backends (flash attention among them) expect 4-d (batch, heads, seq, dim)
    tensors, so the bh slices become the heads of a batch of one.
    """
    shape4d = (1, bh, seq, dim)
    out = F.scaled_dot_product_attention(
        q.reshape(shape4d), k.reshape(shape4d), v.reshape(shape4d), is_causal=bool(causal)
    )
    return out.reshape(bh, seq, dim)
