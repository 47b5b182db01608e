"""Derivation prompts of exercise 02: checkers, reference answers, the notebook that asks them."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pytest
from derivation_helpers import (
    cells_tagged,
    load_answers,
    no_gpu,  # noqa: F401 (autouse: the GPU cell sees no GPU)
    read_notebook,
    source,
)
from derivation_helpers import run_notebook as run_notebook_cells

from grader import spec
from grader.derivations import CheckResult, check, prompts

# The exercise's own checkers, from its folder (exercise.toml names them).
linear = spec.find("02").load_derivations()

ROOT = Path(__file__).resolve().parents[1]
EXERCISE_DIR = ROOT / "exercises" / "02_linear_layers"
NOTEBOOK = EXERCISE_DIR / "02_linear_layers.ipynb"
ANSWERS_PATH = ROOT / "solutions" / "02_linear_layers" / "answers.py"

PROMPT_IDS = [p.id for p in prompts("02")]


@pytest.fixture(scope="module")
def answers():
    return load_answers(ANSWERS_PATH)


def reference_answer(answers, prompt: str):
    if prompt == "linear_backward":
        return {"gelu_derivative": answers.gelu_derivative, "linear_backward": answers.linear_backward}
    return copy.deepcopy(getattr(answers, prompt))


def test_the_prompts_are_worth_10_points():
    assert sum(p.max_points for p in prompts("02")) == 10


def test_the_layer_comes_from_the_spec(answers):
    """GPT-2 small's MLP expansion over 8192 tokens is a benchmark size of the exercise, not a copy."""
    values = linear.LAYER.values
    assert (values["M"], values["N"], values["K"]) == (answers.M, answers.N, answers.K) == (8192, 3072, 768)
    assert linear.flops_truths(linear.default_spec())["forward_flops"] == 2 * 8192 * 3072 * 768


# ------------------------------------------------------------------ 1 · the backward pass

def _erf(z):
    return np.vectorize(math.erf)(z)


def _cdf(z):
    return 0.5 * (1 + _erf(np.asarray(z) / math.sqrt(2)))


def _phi(z):
    return np.exp(-0.5 * np.asarray(z) ** 2) / math.sqrt(2 * math.pi)


@pytest.mark.parametrize("fn, fragment", [
    (_cdf, "That is Phi(z) alone"),
    (lambda z: z * _phi(z), "Phi(z) is missing"),
    (lambda z: z * _cdf(z), "That is gelu(z) itself"),
    (lambda z: _cdf(z) - z * _phi(z), "is + z phi(z)"),
    (lambda z: 1.0 * (np.asarray(z) > 0), "Apply the product rule"),
])
def test_a_wrong_gelu_derivative_is_explained(answers, fn, fragment):
    answer = reference_answer(answers, "linear_backward")
    answer["gelu_derivative"] = fn
    result = check("02", "linear_backward", answer)
    assert not result.passed and fragment in result.message, result.message
    assert "\u2714 linear_backward" in result.message


def test_the_tanh_approximation_is_named(answers):
    import torch
    import torch.nn.functional as F

    def tanh_derivative(z):
        t = torch.tensor(np.asarray(z, dtype=np.float64), requires_grad=True)
        F.gelu(t, approximate="tanh").sum().backward()
        return t.grad.numpy()
    answer = reference_answer(answers, "linear_backward")
    answer["gelu_derivative"] = tanh_derivative
    assert "tanh approximation" in check("02", "linear_backward", answer).message


def _backward_with(dz_of):
    """A backward pass whose dZ is dz_of(Z, dY), and gradients formed from it correctly."""
    def backward(X, W, b, dY):
        dZ = dz_of(X @ W.T + b, dY, X @ W.T)
        return dZ @ W, dZ.T @ X, dZ.sum(axis=0)
    return backward


@pytest.mark.parametrize("fn, fragment", [
    (_backward_with(lambda Z, dY, _: dY), "without GELU"),
    (_backward_with(lambda Z, dY, _: dY * _cdf(Z)), "uses Phi(Z)"),
    (_backward_with(lambda Z, dY, _: dY * Z * _cdf(Z)), "multiplies dY by gelu(Z)"),
    (_backward_with(lambda Z, dY, XW: dY * (_cdf(XW) + XW * _phi(XW))), "without b"),
])
def test_a_wrong_backward_pass_names_its_slip(answers, fn, fragment):
    answer = reference_answer(answers, "linear_backward")
    answer["linear_backward"] = fn
    result = check("02", "linear_backward", answer)
    assert not result.passed and fragment in result.message, result.message
    assert "\u2714 gelu_derivative" in result.message


def test_transposed_and_misshapen_gradients_are_told_their_shape(answers):
    def transposed_dw(X, W, b, dY):
        dX, dW, db = answers.linear_backward(X, W, b, dY)
        return dX, dW.T, db

    def rows_summed(X, W, b, dY):
        dX, dW, _ = answers.linear_backward(X, W, b, dY)
        return dX, dW, (dY * answers.gelu_derivative(X @ W.T + b)).sum(axis=1)
    answer = reference_answer(answers, "linear_backward")
    answer["linear_backward"] = transposed_dw
    message = check("02", "linear_backward", answer).message
    assert "dW has shape (3, 4)" in message and "Yours is transposed" in message
    answer["linear_backward"] = rows_summed
    message = check("02", "linear_backward", answer).message
    assert "db has shape (5,)" in message and "Sum dZ over the rows (axis 0)" in message


def test_a_backward_that_returns_the_wrong_thing_is_told_what_to_return(answers):
    answer = reference_answer(answers, "linear_backward")
    answer["linear_backward"] = lambda X, W, b, dY: X
    assert "must return a tuple (dX, dW, db)" in check("02", "linear_backward", answer).message


def test_the_truth_is_autograd():
    case = linear.linear_cases()[0]
    truth = linear.backward_truth(case)
    Z = case.X @ case.W.T + case.b
    dZ = case.dY * (_cdf(Z) + Z * _phi(Z))
    np.testing.assert_allclose(truth["dX"], dZ @ case.W, rtol=1e-12)
    np.testing.assert_allclose(truth["dW"], dZ.T @ case.X, rtol=1e-12)
    np.testing.assert_allclose(truth["db"], dZ.sum(axis=0), rtol=1e-12)


# ------------------------------------------------------------------ 2 to 6 · numbers

@pytest.mark.parametrize("prompt, key, value, fragment", [
    ("layer_flops", "forward_flops", 8192 * 3072 * 768, "a multiply-add is 2 FLOPs"),
    ("layer_flops", "backward_flops", 2 * 8192 * 3072 * 768, "Two products"),
    ("layer_flops", "forward_us_fp32", 2 * 8192 * 3072 * 768 / 67e12, "not seconds"),
    ("layer_flops", "forward_us_bf16", 2 * 8192 * 3072 * 768 / 989.5e12 * 1e3, "Check the unit"),
    ("layer_flops", "forward_us_bf16", 2 * 8192 * 3072 * 768 / (2 * 989.5e12) * 1e6, "sparse figure"),
    ("tile_intensity", "ridge_bf16", 2 * 989.5e12 / 4.8e12, "sparse tensor-core peak"),
    ("tile_intensity", "intensity_block_fp32", 16, "A multiply-add is 2 FLOPs"),
    ("tile_intensity", "ridge_fp32", 4800 / 67000, "Upside down"),
    ("tile_intensity", "tile_bf16", 4 * 989.5e12 / 4.8e12, "2 bytes, not 4"),
    ("tile_intensity", "tile_bf16", 4 * 67e12 / 4.8e12, "That is the fp32 tile"),
    ("tile_intensity", "ridge_bf16", 989.5e12 / 4.8e12 / 1000, "Mind the units"),
    ("register_tile", "loads_8x8", 64, "load each once per step of k"),
    ("register_tile", "loads_1x1", 8, "Count values (floats), not bytes"),
    ("register_tile", "fmas_8x8", 128, "not FLOPs"),
    ("register_tile", "lds128_8x8", 16, "brings 4 floats at once"),
    ("occupancy", "smem_bytes_fp32", 8192, "every stage counts"),
    ("occupancy", "blocks_by_smem_fp32", 14, "reserves"),
    ("occupancy", "blocks_by_registers", 512, "That counts threads"),
    ("occupancy", "warps_per_sm", 64, "what do the registers allow"),
    ("occupancy", "smem_bytes_bf16", 2 * 131072, "2 bytes"),
    ("mma_flops", "flops_mma_sync", 2048, "each is 2 FLOPs"),
    ("mma_flops", "mma_per_warp_tile", 16, "8 wide in n"),
])
def test_a_wrong_number_gets_its_hint(answers, prompt, key, value, fragment):
    answer = reference_answer(answers, prompt)
    answer[key] = value
    result = check("02", prompt, answer)
    assert not result.passed and fragment in result.message, result.message


def test_the_numbers_on_the_reference_gpu(answers):
    """On the default GPU (the H200): fp32 ridge 14 FLOP/byte and a 56-wide tile, bf16 ridge 206 and
    a 412-wide tile; two blocks of the fp32 kernel per SM, limited by registers."""
    assert answers.tile_intensity["ridge_fp32"] == pytest.approx(13.96, rel=1e-3)
    assert answers.tile_intensity["tile_fp32"] == pytest.approx(55.8, rel=1e-3)
    assert answers.tile_intensity["tile_bf16"] == pytest.approx(412.3, rel=1e-3)
    assert answers.tile_intensity["ridge_smem"] == pytest.approx(2.0, rel=1e-2)
    assert answers.occupancy["warps_per_sm"] == 16 and answers.occupancy["blocks_by_smem_bf16"] == 1
    assert answers.layer_flops["forward_us_fp32"] == pytest.approx(576.9, rel=1e-3)
    assert "spec sheet of NVIDIA H200" in check("02", "tile_intensity", answers.tile_intensity).message


@pytest.mark.parametrize("prompt", PROMPT_IDS[1:])
def test_a_number_prompt_asks_for_its_dict(prompt):
    result = check("02", prompt, 3.0)
    assert not result.passed and f"Pass the dict `{prompt}`" in result.message


# ------------------------------------------------------------------ the notebook

def notebook():
    return read_notebook(NOTEBOOK)


def test_notebook_walks_the_ladder_and_says_how_to_measure_each_step():
    text = "\n".join(source(c) for c in notebook()["cells"] if c["cell_type"] == "markdown")
    assert "grade exercise 02 --task sgemm --submission" in text
    for step in ("Naive", "Shared-memory tiles", "1D register blocking", "2D register blocking",
                 "Vectorised loads", "Warp tiling", "Double buffering", "mma.sync", "wgmma"):
        assert step in text, step


def test_the_answer_cells_leave_every_blank_to_the_learner():
    answer_code = "\n".join(source(c) for c in cells_tagged(notebook(), "answer:").values())
    assert answer_code.count("# YOUR ANSWER HERE") == 2 + 6 + 7 + 6 + 6 + 4
    assert answer_code.count("raise NotImplementedError") == 2


def run_notebook(answer_source=None) -> dict[str, CheckResult]:
    return run_notebook_cells(notebook(), answer_source)


def test_the_untouched_notebook_shows_the_gpus_bandwidth(capsys):
    run_notebook()
    assert "4,800 GB/s" in capsys.readouterr().out


