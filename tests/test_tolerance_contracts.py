"""What the specs and stubs promise about their tolerances, held on the CPU against the very rtol,
cases and references the grader uses: an honest kernel passes with room, the named shortcut fails.
(Exercise 03's summation orders: tests/test_ex03_reference.py.)"""
from __future__ import annotations

import torch

from grader import spec
from grader.tolerance import split

EX02, EX05 = spec.find("02"), spec.find("05")


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def worst_share(got: torch.Tensor, want: torch.Tensor, scale: torch.Tensor, rtol: float, atol: float) -> float:
    """The largest |got - want| as a share of the grader's tolerance, atol + rtol * scale."""
    return float(((got.double() - want).abs() / (atol + rtol * scale)).max())


# ---------------------------------------------------------------------------- gemm_w8a8: Y in bf16

def truncated_to_bf16(y: torch.Tensor) -> torch.Tensor:
    bits = y.float().view(torch.int32) & ~0xFFFF
    return bits.view(torch.float32)


def test_w8a8_tolerance_holds_rounding_to_bf16_with_room_and_rejects_truncating():
    task = EX05.task("gemm_w8a8")
    # Y of every magnitude the layer gives, and some just above a power of two: the worst case of
    # rounding to 8 significant bits.
    y = torch.exp2(torch.empty(200_000, dtype=torch.float64).uniform_(-10, 20, generator=generator(1)))
    y = torch.cat([y, torch.exp2(torch.arange(-10, 20, dtype=torch.float64)) * (1 + 2.0 ** -8 - 2.0 ** -20)])
    y = y * torch.where(torch.rand(y.shape, generator=generator(2)) < 0.5, -1.0, 1.0).double()
    nearest = worst_share(y.float().to(torch.bfloat16), y, y.abs(), task.rtol, task.atol)
    assert 0.6 < nearest < 0.67, nearest             # 2^-8 of |Y|: two thirds of rtol at most
    assert worst_share(truncated_to_bf16(y), y, y.abs(), task.rtol, task.atol) > 1.2


# ---------------------------------------------------------------------------- gemm_bf16: bf16, not fp16

def test_gemm_bf16_has_cases_that_only_bf16_holds():
    task = EX02.task("gemm_bf16")
    reference = EX02.reference_function(task)
    scales = sorted(c.input_scale for c in task.cases if c.input_scale != 1.0)
    assert scales[0] <= 1e-7 and scales[-1] >= 1e6, scales
    for case in (c for c in task.cases if c.input_scale != 1.0):
        M, N, K = (int(case.values[k]) for k in "MNK")
        A = (torch.randn(M, K, generator=generator(3)) * case.input_scale).to(torch.bfloat16)
        B = (torch.randn(N, K, generator=generator(4)) * case.input_scale).to(torch.bfloat16)
        want = reference(A.double(), B.double(), M, N, K).reshape(M, N)
        scale = reference(A.double().abs(), B.double().abs(), M, N, K).reshape(M, N)   # condition "abs"
        honest = (A.float() @ B.float().T).to(torch.bfloat16)
        assert worst_share(honest, want, scale, task.rtol, task.atol) < 1
        as_fp16 = (A.half().float() @ B.half().float().T).to(torch.bfloat16)
        assert not bool(torch.isfinite(as_fp16).all()) or worst_share(as_fp16, want, scale, task.rtol, task.atol) > 1, \
            case.describe()


# ---------------------------------------------------------------------------- the quantizers at a tie

def test_a_tie_may_go_to_either_neighbour_in_both_quantizers():
    """x / scale exactly half-way: round-half-even (the reference) and round-half-away (roundf)
    both pass, as the stubs say."""
    reference = EX05.load_reference()
    row = torch.tensor([[127.0, 2.5, -2.5, 3.5, 0.5]], dtype=torch.float64)       # scale 1: u = x
    value, allowed = split(reference.quantize_int8(row, 1, 5)[0])
    away = torch.sign(row) * torch.floor(row.abs() + 0.5)
    even = torch.round(row)
    for q in (away, even):
        assert bool(((q - value).abs() <= allowed).all()), q
    assert not bool(((away + 1 - value).abs() <= allowed).all())                    # a tie is one step wide
    # e4m3 at 1.0 has steps of 1/8: 1.0625 is half-way between 1 and 1.125.
    top = reference.E4M3_MAX        # the row's largest magnitude is e4m3's largest value: scale 1
    x = torch.tensor([[top, 1.0625, -1.0625, 1.1875]], dtype=torch.float64)
    value, allowed = split(reference.quantize_fp8(x, 1, 4)[0])
    for q in (torch.tensor([[top, 1.0, -1.0, 1.25]]), torch.tensor([[top, 1.125, -1.125, 1.25]])):
        assert bool(((q.double() - value).abs() <= allowed).all()), q
