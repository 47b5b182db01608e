"""Float64 references for exercise 04: softmax, attention, and a Transformer block's training
step (LayerNorm forward and backward, the cross-entropy loss, attention's backward pass), spelled
out step by step.

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

from grader.tolerance import Within

LAYERNORM_EPS = 1e-5

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


# ------------------------------------------------------------------ a Transformer block's training step


def layernorm_mean(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """The mean of each row of x: what layernorm_forward saves for the backward pass."""
    return x.reshape(rows, cols).mean(dim=1)


def layernorm_rstd(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """1 / sqrt(var + eps) of each row, with the biased variance (divided by cols), as nn.LayerNorm."""
    x = x.reshape(rows, cols)
    centred = x - x.mean(dim=1, keepdim=True)
    return 1.0 / torch.sqrt((centred * centred).mean(dim=1) + LAYERNORM_EPS)


def layernorm_forward(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, rows: int,
                      cols: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """y = (x - mean) * rstd * gamma + beta, row by row; also returns mean and rstd."""
    mean, rstd = layernorm_mean(x, rows, cols), layernorm_rstd(x, rows, cols)
    x_hat = (x.reshape(rows, cols) - mean[:, None]) * rstd[:, None]
    return x_hat * gamma + beta, mean, rstd


def layernorm_backward(x: torch.Tensor, gamma: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
                       dy: torch.Tensor, rows: int, cols: int
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dx, dgamma, dbeta from dy = dL/dy and the statistics the forward pass saved.

    With x_hat = (x - mean) * rstd and g = dy * gamma (the gradient with respect to x_hat):
      dx     = rstd * (g - mean_row(g) - x_hat * mean_row(g * x_hat))
      dgamma = sum over rows of dy * x_hat,   dbeta = sum over rows of dy.
    """
    x, dy = x.reshape(rows, cols), dy.reshape(rows, cols)
    x_hat = (x - mean[:, None]) * rstd[:, None]
    g = dy * gamma
    dx = rstd[:, None] * (g - g.mean(dim=1, keepdim=True) - x_hat * (g * x_hat).mean(dim=1, keepdim=True))
    return dx, (dy * x_hat).sum(dim=0), dy.sum(dim=0)


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, rows: int, cols: int
                  ) -> tuple[torch.Tensor, Within]:
    """loss[r] = logsumexp(logits[r]) - logits[r, targets[r]] and its gradient for the mean loss,
    dlogits = (softmax(logits) - onehot(targets)) / rows.

    logsumexp is computed from the row maximum m: log sum exp(x) = m + log sum exp(x - m), every
    exponent <= 0. At the target, p - 1 holds p's rounding error in absolute terms: a float32
    kernel may be off there by 1e-4 * p / rows more (see exercise.toml).
    """
    x = logits.reshape(rows, cols)
    t = targets.reshape(rows, 1).long()
    row_max = x.max(dim=1, keepdim=True).values
    log_sum = torch.log(torch.exp(x - row_max).sum(dim=1, keepdim=True))
    loss = (row_max - x.gather(1, t) + log_sum).reshape(rows)
    p = torch.exp(x - row_max - log_sum)
    onehot = torch.zeros_like(x).scatter_(1, t, 1.0)
    return loss, Within((p - onehot) / rows, 1e-4 * p * onehot / rows)


def attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                       dO: torch.Tensor, bh: int, seq: int, dim: int, causal: int
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv of o = softmax(q k^T / sqrt(dim)) v (causal or not), given dO = dL/do and o.

    With P the softmax weights, recomputed from q and k:
      dV = P^T dO,   dP = dO v^T,   dS = P * (dP - delta),   delta = rowsum(dO * o),
      dq = dS k / sqrt(dim),   dk = dS^T q / sqrt(dim).
    delta = rowsum(dP * P) as well; the kernel is given o so that it need not keep P.
    """
    q, k, v, o, dO = (t.reshape(bh, seq, dim) for t in (q, k, v, o, dO))
    scale = 1.0 / math.sqrt(dim)
    future = torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(diagonal=1)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    heads_per_slice = max(1, _SCORE_ELEMENTS_PER_SLICE // (seq * seq))
    for start in range(0, bh, heads_per_slice):
        part = slice(start, start + heads_per_slice)
        scores = (q[part] @ k[part].transpose(1, 2)) * scale
        if causal:
            scores = scores.masked_fill(future, -math.inf)
        p = softmax(scores.reshape(-1, seq), scores.numel() // seq, seq).reshape(scores.shape)
        dv[part] = p.transpose(1, 2) @ dO[part]
        dp = dO[part] @ v[part].transpose(1, 2)
        delta = (dO[part] * o[part]).sum(dim=2, keepdim=True)
        ds = p * (dp - delta)
        dq[part] = (ds @ k[part]) * scale
        dk[part] = (ds.transpose(1, 2) @ q[part]) * scale
    return dq, dk, dv


def layernorm_forward_torch(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, rows: int,
                            cols: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PyTorch's LayerNorm kernel, which also returns the saved mean and rstd (for timing only)."""
    y, mean, rstd = torch.native_layer_norm(x.reshape(rows, cols), [cols], gamma, beta, LAYERNORM_EPS)
    return y, mean.reshape(rows), rstd.reshape(rows)


def layernorm_backward_torch(x: torch.Tensor, gamma: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
                             dy: torch.Tensor, rows: int, cols: int
                             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PyTorch's LayerNorm backward kernel, from the same saved statistics (for timing only)."""
    return torch.ops.aten.native_layer_norm_backward(
        dy.reshape(rows, cols), x.reshape(rows, cols), [cols], mean.reshape(rows, 1), rstd.reshape(rows, 1),
        gamma, gamma, [True, True, True])


def cross_entropy_torch(logits: torch.Tensor, targets: torch.Tensor, rows: int, cols: int
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """F.cross_entropy per row and its gradient for the mean loss, by autograd (for timing only)."""
    with torch.enable_grad():
        x = logits.reshape(rows, cols).detach().requires_grad_()
        loss = F.cross_entropy(x, targets.reshape(rows).long(), reduction="none")
        (dlogits,) = torch.autograd.grad(loss.mean(), x)
    return loss.detach(), dlogits


def attention_backward_torch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                             dO: torch.Tensor, bh: int, seq: int, dim: int, causal: int
                             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """scaled_dot_product_attention's forward pass (for its saved statistics) and backward pass, by
    autograd, in the input's dtype (for timing only). PyTorch keeps the forward's log-sum-exp; given
    only o, a kernel must find it again, which costs about what PyTorch's forward does."""
    shape4d = (1, bh, seq, dim)
    with torch.enable_grad():
        q4, k4, v4 = (t.reshape(shape4d).detach().requires_grad_() for t in (q, k, v))
        out = F.scaled_dot_product_attention(q4, k4, v4, is_causal=bool(causal))
        grads = torch.autograd.grad(out, (q4, k4, v4), dO.reshape(shape4d))
    return tuple(g.reshape(bh, seq, dim) for g in grads)
