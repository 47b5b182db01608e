"""Float64 references for exercise 02: matrix products, and nn.Linear + GELU forward and backward.

The grader calls each function with every argument but the outputs, in the order of the C
signature: tensors as float64 copies of their values (bf16 inputs are upcast exactly), scalars as
numbers. It returns the value of every `out` argument, in signature order, and compares your
kernel's outputs with them. The forward math is spelled out; the backward pass is what PyTorch's
autograd computes, in float64: section 1 of the notebook has you derive it.

The `*_torch` functions are different: they run PyTorch's own kernels (cuBLAS) in the inputs'
dtype, and the grader times them only so you can see how your kernel compares with a production
library. They compute in full fp32: TF32 tensor cores stay off for float32 matrix products
(PyTorch's default, made explicit below), as they are not allowed in your fp32 kernels either.
"""

import math

import torch
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False


def gelu_erf(z: torch.Tensor) -> torch.Tensor:
    """GELU in its exact (erf) form, PyTorch's default: z Phi(z) = z / 2 (1 + erf(z / sqrt 2))."""
    return 0.5 * z * (1.0 + torch.erf(z / math.sqrt(2.0)))


def gelu_erf_derivative(z: torch.Tensor) -> torch.Tensor:
    """d gelu / dz, elementwise, as PyTorch's autograd differentiates F.gelu (its exact erf form)."""
    with torch.enable_grad():       # the grader calls references under torch.no_grad()
        t = z.detach().requires_grad_(True)
        (derivative,) = torch.autograd.grad(F.gelu(t), t, torch.ones_like(t))
    return derivative


def sgemm(A: torch.Tensor, B: torch.Tensor, M: int, N: int, K: int) -> torch.Tensor:
    """C = A B: C[m, n] = sum over k of A[m, k] B[k, n]."""
    return A.reshape(M, K) @ B.reshape(K, N)


def linear_forward(X, W, b, M: int, N: int, K: int, gelu: int):
    """nn.Linear then GELU: Z = X W^T + b (W is out_features x in_features), Y = gelu(Z) or Z."""
    Z = X.reshape(M, K) @ W.reshape(N, K).T + b.reshape(1, N)
    Y = gelu_erf(Z) if gelu else Z
    return Z, Y


def linear_backward(X, W, Z, dY, M: int, N: int, K: int, gelu: int):
    """The gradients dX, dW, db of a loss L given dY = dL/dY, for Y = gelu(Z) (or Z), Z = X W^T + b,
    as PyTorch's autograd computes them: back through GELU at the given Z, then through F.linear."""
    X, W = X.reshape(M, K), W.reshape(N, K)
    dY, Z = dY.reshape(M, N), Z.reshape(M, N)
    with torch.enable_grad():       # the grader calls references under torch.no_grad()
        at = Z.detach().requires_grad_(True)
        (dZ,) = torch.autograd.grad(F.gelu(at) if gelu else at.clone(), at, dY)
        X_, W_ = X.detach().requires_grad_(True), W.detach().requires_grad_(True)
        b_ = torch.zeros(N, dtype=Z.dtype, device=Z.device, requires_grad=True)
        dX, dW, db = torch.autograd.grad(F.linear(X_, W_, b_), (X_, W_, b_), dZ)
    return dX, dW, db


def gemm_bf16(A: torch.Tensor, B: torch.Tensor, M: int, N: int, K: int) -> torch.Tensor:
    """C = A B^T with both operands K-contiguous (A is M x K, B is N x K), exactly (the grader
    compares it with your bf16 C)."""
    return A.reshape(M, K) @ B.reshape(N, K).T


# ----------------------------------------------------------------------------- PyTorch's own

def sgemm_torch(A, B, M: int, N: int, K: int):
    """torch.mm in fp32 (cuBLAS SGEMM, TF32 off)."""
    return torch.mm(A.reshape(M, K), B.reshape(K, N))


def linear_forward_torch(X, W, b, M: int, N: int, K: int, gelu: int):
    """F.linear (cuBLAS, the bias in its epilogue) then F.gelu, as a PyTorch model runs them."""
    Z = F.linear(X.reshape(M, K), W.reshape(N, K), b)
    return Z, (F.gelu(Z) if gelu else Z)


def linear_backward_torch(X, W, Z, dY, M: int, N: int, K: int, gelu: int):
    """What autograd runs for the backward of F.gelu(F.linear(X, W, b)): GELU's backward kernel,
    two cuBLAS products and a column sum."""
    X, W = X.reshape(M, K), W.reshape(N, K)
    dY, Z = dY.reshape(M, N), Z.reshape(M, N)
    dZ = torch.ops.aten.gelu_backward(dY, Z) if gelu else dY
    return torch.mm(dZ, W), torch.mm(dZ.t(), X), dZ.sum(dim=0)


def gemm_bf16_torch(A, B, M: int, N: int, K: int):
    """torch.mm in bf16 (cuBLAS on tensor cores, fp32 accumulation)."""
    return torch.mm(A.reshape(M, K), B.reshape(N, K).t())
