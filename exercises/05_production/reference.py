"""Float64 references for exercise 05: INT8 and FP8 quantizers, a W8A8 linear layer, an FP8 GEMV.

The grader calls each function with every argument but the outputs, in the order of the C
signature: tensors as float64 copies of their values (int8, bf16 and e4m3 values are exact in
float64), scalars as numbers. It returns the value of every `out` argument, in signature order.

A quantizer's codes are compared exactly, with one exception the functions below spell out: where
x / scale lies at a rounding tie (within 1e-6 of one, relatively), a kernel that divided in float32
may round the other way, and both neighbours are right. The scale a kernel uses is the float32
one it stores, so the reference divides by that same float32 value.

The `*_torch` functions run PyTorch's own kernels on the inputs' dtypes; the grader times them
only so you can see how your kernels compare with a production library.
"""

import math

import torch

from grader.tolerance import Within

INT8_MAX = 127.0
# e4m3 as PyTorch describes it (section 3 of the notebook derives these from the format's bits):
_E4M3 = torch.finfo(torch.float8_e4m3fn)
E4M3_MAX = float(_E4M3.max)                             # the largest finite value
E4M3_MIN_EXPONENT = int(math.log2(_E4M3.tiny))          # of the smallest normal; below it the spacing stays fixed
E4M3_MANTISSA_BITS = -int(math.log2(_E4M3.eps))
TIE = 1e-6                  # how close to a tie (relatively) counts as one


def _row_scales(x: torch.Tensor, top: float) -> torch.Tensor:
    """scale[r] = max |x[r]| / top in float32 (1 for a row of zeros), as a float64 column."""
    amax = x.abs().amax(dim=1)
    scale = torch.where(amax > 0, amax / top, torch.ones_like(amax))
    return scale.to(torch.float32).to(torch.float64)


def _near_tie(u: torch.Tensor) -> torch.Tensor:
    """Where u (in units of the rounding step) lies within TIE of a half-way point."""
    return ((u - u.floor()) - 0.5).abs() <= TIE * u.abs().clamp(min=1.0)


def quantize_int8(x, rows: int, cols: int):
    """scale[r] = max_c |x[r][c]| / 127; q = round-to-nearest-even(x / scale), clamped to +-127."""
    x = x.reshape(rows, cols)
    scale = _row_scales(x, INT8_MAX)
    u = x / scale[:, None]
    q = torch.round(u).clamp(-INT8_MAX, INT8_MAX)            # torch.round: half to even
    return Within(q, _near_tie(u).to(torch.float64)), scale


def e4m3_step(v: torch.Tensor) -> torch.Tensor:
    """The spacing of e4m3 values around |v|: 2^(e - mantissa bits) in the binade [2^e, 2^(e+1)),
    and that of the smallest normal's binade among the subnormals below it."""
    exponent = torch.floor(torch.log2(v.abs().clamp(min=2.0 ** E4M3_MIN_EXPONENT)))
    return torch.exp2(exponent - E4M3_MANTISSA_BITS)


def quantize_fp8(x, rows: int, cols: int):
    """scale[r] = max |x[r]| / E4M3_MAX; q = e4m3(x / scale): round to nearest even, saturating at
    E4M3_MAX (e4m3's largest finite value)."""
    x = x.reshape(rows, cols)
    scale = _row_scales(x, E4M3_MAX)
    v = (x / scale[:, None]).clamp(-E4M3_MAX, E4M3_MAX)
    step = e4m3_step(v)
    u = v / step
    q = (torch.round(u) * step).clamp(-E4M3_MAX, E4M3_MAX)
    return Within(q, torch.where(_near_tie(u), step, torch.zeros_like(step))), scale


def gemm_w8a8(A, B, sA, sB, bias, M: int, N: int, K: int):
    """Y = (A B^T) * sA[m] * sB[n] + bias[n]: the int32 sums exactly (they are, in float64, below
    2^53), then the scales and the bias."""
    acc = A.reshape(M, K) @ B.reshape(N, K).T
    return acc * sA.reshape(M, 1) * sB.reshape(1, N) + bias.reshape(1, N)


def gemv_fp8(x, W, scale, M: int, N: int, K: int):
    """y = x dequant(W)^T with dequant(W)[n][k] = W[n][k] * scale[n]."""
    return x.reshape(M, K) @ (W.reshape(N, K) * scale.reshape(N, 1)).T


# ---------------------------------------------------------------------------- PyTorch, timed

def quantize_int8_torch(x, rows: int, cols: int):
    """PyTorch's per-row INT8 quantizer, as one would write it: a few kernels, each a pass."""
    x = x.reshape(rows, cols)
    amax = x.abs().amax(dim=1, keepdim=True)
    scale = torch.where(amax > 0, amax / INT8_MAX, torch.ones_like(amax))
    q = torch.round(x / scale).clamp_(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q, scale.reshape(rows)


def quantize_fp8_torch(x, rows: int, cols: int):
    x = x.reshape(rows, cols).float()
    amax = x.abs().amax(dim=1, keepdim=True)
    scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    q = (x / scale).clamp_(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q, scale.reshape(rows)


def gemm_w8a8_torch(A, B, sA, sB, bias, M: int, N: int, K: int):
    """The whole layer in PyTorch: torch._int_mm (cuBLASLt's INT8 GEMM, int32 out), then the scales
    and the bias, to bf16."""
    acc = torch._int_mm(A.reshape(M, K), B.reshape(N, K).T)
    return (acc * sA.reshape(M, 1) * sB.reshape(1, N) + bias.reshape(1, N)).to(torch.bfloat16)


_dequantized: dict = {}


def gemv_fp8_torch(x, W, scale, M: int, N: int, K: int):
    """What the FP8 weights replace: the same product with a bf16 weight (dequantized once, outside
    the timing), as PyTorch runs it. Twice the bytes of W to read."""
    key = (W.data_ptr(), N, K)
    if key not in _dequantized:
        _dequantized.clear()
        _dequantized[key] = (W.reshape(N, K).float() * scale.reshape(N, 1)).to(torch.bfloat16)
    return x.reshape(M, K) @ _dequantized[key].T
