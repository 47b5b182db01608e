"""Exercise 03's float64 references are PyTorch's optimizers, and its PyTorch comparisons compute
the same thing: both checked on the CPU."""
from __future__ import annotations

import pytest
import torch

from grader import spec

EXERCISE = spec.find("03")
REF = EXERCISE.load_reference()


def randn(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def test_sgd_momentum_is_torch_optim_sgd_from_a_given_buffer():
    p, g, buf = randn(50, seed=1), randn(50, seed=2), randn(50, seed=3)
    want_p, want_buf = REF.sgd_momentum(p, g, buf, 50, 0.1, 0.9, 0.01)
    param = p.clone().requires_grad_(True)
    optimizer = torch.optim.SGD([param], lr=0.1, momentum=0.9, weight_decay=0.01, foreach=False)
    param.grad = g.clone()
    optimizer.state[param] = {"momentum_buffer": buf.clone()}
    optimizer.step()
    torch.testing.assert_close(param.detach(), want_p, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(optimizer.state[param]["momentum_buffer"], want_buf, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("step", [1, 2, 3, 10000])
def test_adamw_is_torch_optim_adamw_at_every_step(step):
    p, g, m, v = randn(40, seed=4), randn(40, seed=5), randn(40, seed=6), randn(40, seed=7).abs()
    want = REF.adamw(p, g, m, v, 40, 0.1, 0.9, 0.95, 1e-8, 0.1, step)
    param = p.clone().requires_grad_(True)
    optimizer = torch.optim.AdamW([param], lr=0.1, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, foreach=False)
    param.grad = g.clone()
    optimizer.state[param] = {"step": torch.tensor(float(step - 1)), "exp_avg": m.clone(), "exp_avg_sq": v.clone()}
    optimizer.step()
    got = (param.detach(), optimizer.state[param]["exp_avg"], optimizer.state[param]["exp_avg_sq"])
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


def test_adamw_multi_is_adamw_on_each_tensor():
    shapes = [(3,), (5, 7), (1,)]
    p, g, m = ([randn(*s, seed=10 * i + k) for i, s in enumerate(shapes)] for k in range(3))
    v = [randn(*s, seed=99 + i).abs() for i, s in enumerate(shapes)]
    new_p, new_m, new_v = REF.adamw_multi(p, g, m, v, torch.tensor([3, 35, 1]), 3, 0.01, 0.9, 0.999, 1e-8, 0.1, 2)
    for i in range(3):
        one = REF.adamw(p[i], g[i], m[i], v[i], p[i].numel(), 0.01, 0.9, 0.999, 1e-8, 0.1, 2)
        for a, b in zip((new_p[i], new_m[i], new_v[i]), one):
            assert torch.equal(a, b)


@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_grad_norm_is_torch_clip_grad_norm(max_norm):
    g = randn(1000, seed=8)
    want_g, want_total = REF.clip_grad_norm(g, 1000, max_norm)
    param = torch.zeros(1000, dtype=torch.float64, requires_grad=True)
    param.grad = g.clone()
    total = torch.nn.utils.clip_grad_norm_([param], max_norm)
    torch.testing.assert_close(param.grad, want_g, rtol=1e-12, atol=0)
    torch.testing.assert_close(total.reshape(1), want_total, rtol=1e-12, atol=0)


# --------------------------------------------------------------------------- the PyTorch comparisons

def _float32(*tensors):
    return [t.to(torch.float32).clone() for t in tensors]


def test_the_fused_sgd_comparison_computes_the_step():
    p, g, buf = randn(300, seed=11), randn(300, seed=12), randn(300, seed=13)
    want = REF.sgd_momentum(p, g, buf, 300, 0.1, 0.9, 0.01)
    got = REF.sgd_momentum_torch(*_float32(p, g, buf), 300, 0.1, 0.9, 0.01)
    for a, b in zip(got, want):
        torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-6)


def test_the_fused_adamw_comparisons_compute_the_step():
    p, g, m, v = randn(300, seed=14), randn(300, seed=15), randn(300, seed=16), randn(300, seed=17).abs()
    want = REF.adamw(p, g, m, v, 300, 0.1, 0.9, 0.999, 1e-8, 0.1, 3)
    got = REF.adamw_torch(*_float32(p, g, m, v), 300, 0.1, 0.9, 0.999, 1e-8, 0.1, 3)
    for a, b in zip(got, want):
        torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-6)
    lists = [_float32(p[:100], p[100:]), _float32(g[:100], g[100:]), _float32(m[:100], m[100:]),
             _float32(v[:100], v[100:])]
    new_p, new_m, new_v = REF.adamw_multi_torch(*lists, torch.tensor([100, 200]), 2, 0.1, 0.9, 0.999, 1e-8, 0.1, 3)
    for got_list, expected in zip((new_p, new_m, new_v), want):
        torch.testing.assert_close(torch.cat(got_list).double(), expected, rtol=1e-5, atol=1e-6)


def test_the_clip_comparison_scales_the_gradient_in_place_and_returns_the_norm():
    g32 = randn(1000, seed=18, dtype=torch.float32)
    want_g, want_total = REF.clip_grad_norm(g32.double(), 1000, 0.5)
    got_g, got_total = REF.clip_grad_norm_torch(g32, 1000, 0.5)
    assert got_g.data_ptr() == g32.data_ptr()                 # in place, like the learner's kernel
    torch.testing.assert_close(g32.double(), want_g, rtol=1e-5, atol=0)
    torch.testing.assert_close(got_total.double(), want_total, rtol=1e-5, atol=0)


def _norm_in_float32_runs(g: torch.Tensor, run: int) -> float:
    """The norm as a kernel computes it: float32 running sums of `run` squares each, one after the
    other, then the partial sums added in a tree."""
    squares = (g * g).reshape(-1, run)
    partial = squares[:, 0].clone()
    for k in range(1, run):               # one running sum per row, in float32, in order
        partial += squares[:, k]
    while partial.numel() > 1:
        partial = partial[0::2] + partial[1::2]
    return float(partial[0].double().sqrt())


def test_clip_grad_norm_tolerance_holds_every_order_the_stub_allows():
    """The stub allows any order whose float32 running sums add at most 2^15 squares: such a norm
    stays well inside rtol, while one running sum eight times longer does not (it comes out low)."""
    rtol = EXERCISE.task("clip_grad_norm").rtol
    g = torch.randn(1 << 20, generator=torch.Generator().manual_seed(3), dtype=torch.float32)
    exact = float(g.double().square().sum().sqrt())
    allowed = _norm_in_float32_runs(g, 1 << 15) / exact - 1
    assert abs(allowed) < rtol / 5, allowed
    too_long = _norm_in_float32_runs(g, 1 << 18) / exact - 1
    assert too_long < -rtol, too_long
