"""Exercise 02's float64 references are what PyTorch's nn.Linear, GELU and autograd compute, and its
PyTorch comparisons compute the same thing: both checked on the CPU."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from grader import spec

EXERCISE = spec.find("02")
REF = EXERCISE.load_reference()

# (M, N, K): one token, one output, one input feature, and ordinary odd shapes.
SHAPES = [(1, 1, 1), (1, 7, 5), (6, 1, 4), (5, 3, 1), (17, 9, 13)]


def randn(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def test_gelu_is_pytorchs_exact_gelu_and_its_derivative_autograds():
    z = torch.linspace(-8, 8, 1601, dtype=torch.float64, requires_grad=True)
    torch.testing.assert_close(REF.gelu_erf(z.detach()), F.gelu(z.detach()), rtol=1e-14, atol=1e-15)
    F.gelu(z).sum().backward()
    torch.testing.assert_close(REF.gelu_erf_derivative(z.detach()), z.grad, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("M, N, K", SHAPES)
def test_sgemm_is_the_matrix_product(M, N, K):
    A, B = randn(M, K, seed=1), randn(K, N, seed=2)
    want = torch.stack([torch.stack([sum(A[m, k] * B[k, n] for k in range(K)) for n in range(N)]) for m in range(M)])
    torch.testing.assert_close(REF.sgemm(A, B, M, N, K), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("gelu", [0, 1])
@pytest.mark.parametrize("M, N, K", SHAPES)
def test_linear_forward_is_nn_linear_then_gelu(M, N, K, gelu):
    X, b = randn(M, K, seed=3), randn(N, seed=4)
    layer = torch.nn.Linear(K, N, dtype=torch.float64)
    with torch.no_grad():
        layer.bias.copy_(b)
        Z = layer(X)
        Y = F.gelu(Z) if gelu else Z
    got_Z, got_Y = REF.linear_forward(X, layer.weight.detach(), b, M, N, K, gelu)
    torch.testing.assert_close(got_Z, Z, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got_Y, Y, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("gelu", [0, 1])
@pytest.mark.parametrize("M, N, K", SHAPES)
def test_linear_backward_is_autograd_of_the_forward(M, N, K, gelu):
    X = randn(M, K, seed=5).requires_grad_(True)
    W = randn(N, K, seed=6).requires_grad_(True)
    b = randn(N, seed=7).requires_grad_(True)
    dY = randn(M, N, seed=8)
    Z = F.linear(X, W, b)
    (F.gelu(Z) if gelu else Z).backward(dY)
    dX, dW, db = REF.linear_backward(X.detach(), W.detach(), Z.detach(), dY, M, N, K, gelu)
    torch.testing.assert_close(dX, X.grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(dW, W.grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(db, b.grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("M, N, K", SHAPES)
def test_gemm_bf16_multiplies_by_the_transpose(M, N, K):
    A, B = randn(M, K, seed=9).bfloat16().double(), randn(N, K, seed=10).bfloat16().double()
    torch.testing.assert_close(REF.gemm_bf16(A, B, M, N, K), REF.sgemm(A, B.T.contiguous(), M, N, K),
                               rtol=1e-14, atol=1e-14)


def test_the_tolerance_bound_covers_gelus_derivative():
    """With condition = "abs" the reference runs on |inputs|: gelu'(|z|) bounds |gelu'(z)|, so the
    tolerance of the backward pass bounds every term of its sums."""
    z = torch.linspace(-10, 10, 20001, dtype=torch.float64)
    assert bool((REF.gelu_erf_derivative(z.abs()) >= REF.gelu_erf_derivative(z).abs()).all())
    assert bool((REF.gelu_erf(z.abs()) >= REF.gelu_erf(z).abs()).all())


# --------------------------------------------------------------------------- the PyTorch comparisons

def test_the_torch_comparisons_compute_the_same_in_float32():
    M, N, K = 33, 17, 29
    X, W, b = randn(M, K, seed=11), randn(N, K, seed=12), randn(N, seed=13)
    Z, dY = randn(M, N, seed=14), randn(M, N, seed=15)
    f32 = [t.float() for t in (X, W, b, Z, dY)]
    tol = {"rtol": 1e-4, "atol": 1e-4}
    torch.testing.assert_close(REF.sgemm_torch(f32[0], f32[1].T.contiguous(), M, N, K).double(),
                               REF.sgemm(X, W.T.contiguous(), M, N, K), **tol)
    for gelu in (0, 1):
        for got, want in zip(REF.linear_forward_torch(*f32[:3], M, N, K, gelu),
                             REF.linear_forward(X, W, b, M, N, K, gelu)):
            torch.testing.assert_close(got.double(), want, **tol)
        for got, want in zip(REF.linear_backward_torch(f32[0], f32[1], f32[3], f32[4], M, N, K, gelu),
                             REF.linear_backward(X, W, Z, dY, M, N, K, gelu)):
            torch.testing.assert_close(got.double(), want, **tol)
    A, B = X.bfloat16(), W.bfloat16()
    got = REF.gemm_bf16_torch(A, B, M, N, K)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.double(), REF.gemm_bf16(A.double(), B.double(), M, N, K), rtol=1e-2, atol=5e-2)


def test_the_fp32_comparison_keeps_tf32_off():
    assert torch.backends.cuda.matmul.allow_tf32 is False
