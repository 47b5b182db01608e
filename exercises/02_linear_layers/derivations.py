"""Checkers of exercise 02 (Linear layers): the backward pass of nn.Linear + GELU, what a layer
costs in FLOPs, the arithmetic intensity of GEMM tiles and the tile sizes it asks for, register
tiles, shared memory and occupancy, and the work of one tensor-core instruction.

The truth comes from torch autograd (float64, on the CPU) for the calculus, from this exercise's
exercise.toml for the layer sizes and FLOP formulas, and from the spec sheet of the reference GPU
(this machine's when it is known, else the H200) for the ceilings. When an answer is wrong, the
checker replays the mistakes people make (GELU's derivative without the product rule, dW
transposed, a FLOP counted as a multiply-add, bf16 counted as 4 bytes) to name the one that fits.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from grader import spec as specmod
from grader.derivations import core
from grader.derivations.core import (
    NumericQuestion,
    Prompt,
    Verdict,
    as_float_array,
    ask_for_numbers,
    call_learner,
    check_numbers,
    close,
    fmt,
    functions_verdict,
    missing_functions,
    worst_entry,
)
from hardware.specs import GpuSpec, default_spec

# This exercise's exercise.toml: the layer sizes and the FLOP formulas come from there.
EXERCISE = specmod.load(Path(__file__).resolve().parent)
FORWARD = EXERCISE.task("linear_forward")
BACKWARD = EXERCISE.task("linear_backward")
# GPT-2 small's MLP expansion over 8192 tokens: the third benchmark size of the forward pass.
LAYER = FORWARD.benchmarks[2]

RTOL_CALCULUS, ATOL_CALCULUS = 1e-7, 1e-10
RTOL_NUMBERS = 0.02                 # numbers derived by hand from a spec sheet

# The tiles the prompts ask about: those of the reference solutions.
BLOCK_TILE, BLOCK_K = 128, 8        # fp32: 128 x 128 block tile, 8 deep in K
REGISTER_TILE = 8                   # fp32: 8 x 8 accumulators per thread
THREADS = 256
REGISTERS_PER_THREAD = 128
STAGES_FP32 = 2                     # double buffering
BF16_TILE, BF16_K, STAGES_BF16 = 128, 64, 4
SMEM_BYTES_PER_CLOCK = 128          # per SM: 32 banks of 4 bytes
RESERVED_SMEM_PER_BLOCK = 1024      # bytes the system keeps per resident block


# ================================================================== 1 · the backward pass

def gelu_truth(z: np.ndarray) -> np.ndarray:
    """d gelu / dz by autograd, float64."""
    t = torch.tensor(z, dtype=torch.float64, requires_grad=True)
    F.gelu(t).sum().backward()
    return t.grad.numpy().copy()


@dataclass(frozen=True)
class LinearCase:
    """One input of Y = gelu(X W^T + b) and an upstream gradient dY = dL/dY."""

    X: np.ndarray
    W: np.ndarray
    b: np.ndarray
    dY: np.ndarray

    def describe(self) -> str:
        (m, k), n = self.X.shape, self.W.shape[0]
        return f"X of shape ({m}, {k}), W of shape ({n}, {k}), b of shape ({n},), dY of shape ({m}, {n})"

    def args(self) -> tuple:
        return (self.X.copy(), self.W.copy(), self.b.copy(), self.dY.copy())

    @property
    def Z(self) -> np.ndarray:
        return self.X @ self.W.T + self.b


# (tokens M, in_features K, out_features N): tall, wide, square, one token, one feature, one output.
CASE_SHAPES = ((5, 3, 4), (3, 6, 2), (4, 4, 4), (1, 6, 3), (7, 1, 5), (6, 4, 1), (9, 13, 11))


def linear_cases(seed: int = 202) -> list[LinearCase]:
    rng = np.random.default_rng(seed)
    return [LinearCase(rng.standard_normal((m, k)), rng.standard_normal((n, k)), rng.standard_normal(n),
                       rng.standard_normal((m, n))) for m, k, n in CASE_SHAPES]


def backward_truth(case: LinearCase) -> dict[str, np.ndarray]:
    """dX, dW, db of sum(dY * gelu(X W^T + b)) by autograd, float64."""
    X, W, b = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (case.X, case.W, case.b))
    F.gelu(F.linear(X, W, b)).backward(torch.tensor(case.dY, dtype=torch.float64))
    return {"dX": X.grad.numpy().copy(), "dW": W.grad.numpy().copy(), "db": b.grad.numpy().copy()}


def _phi(z: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


def _cdf(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))


def _tanh_gelu_derivative(z: np.ndarray) -> np.ndarray:
    t = torch.tensor(z, dtype=torch.float64, requires_grad=True)
    F.gelu(t, approximate="tanh").sum().backward()
    return t.grad.numpy().copy()


# Wrong derivatives people write, and what to say about each.
GELU_SLIPS: tuple[tuple[Callable[[np.ndarray], np.ndarray], str], ...] = (
    (_cdf, ("That is Phi(z) alone. gelu(z) = z Phi(z) is a product: its derivative has a second term, "
            "z Phi'(z) = z phi(z).")),
    (lambda z: z * _phi(z), "That is only the second term of the product rule; Phi(z) is missing."),
    (lambda z: z * _cdf(z), "That is gelu(z) itself, not its derivative."),
    (_tanh_gelu_derivative, ("That is the derivative of the tanh approximation of GELU. The exercise uses "
                             "the exact erf form, PyTorch's default.")),
    (lambda z: _cdf(z) - z * _phi(z), "The second term of the product rule is + z phi(z): Phi'(z) = phi(z) > 0."),
)
GELU_HINT = ("gelu(z) = z Phi(z), with Phi the standard normal CDF and phi = Phi' its density, "
             "exp(-z^2 / 2) / sqrt(2 pi). Apply the product rule.")
GELU_POINTS = np.concatenate([np.linspace(-6.0, 6.0, 49), [-0.7518, 0.0, 1e-3, -1e-3]])


def _check_gelu(fn: Any) -> str | None:
    called = call_learner("gelu_derivative", fn, (GELU_POINTS.copy(),), f"an array of {GELU_POINTS.size} values of z")
    if called.problem:
        return called.problem
    got, problem = as_float_array("gelu_derivative", called.value)
    if problem:
        return problem
    if got.shape != GELU_POINTS.shape:
        return (f"gelu_derivative returned shape {got.shape} for z of shape {GELU_POINTS.shape}: "
                "work elementwise, one derivative per z.")
    truth = gelu_truth(GELU_POINTS)
    if np.allclose(got, truth, rtol=RTOL_CALCULUS, atol=ATOL_CALCULUS):
        return None
    hint = next((text for slip, text in GELU_SLIPS
                 if np.allclose(got, slip(GELU_POINTS), rtol=1e-6, atol=1e-9)), GELU_HINT)
    z = GELU_POINTS[np.argmax(np.abs(got - truth))]
    return f"gelu_derivative differs from autograd's: {worst_entry(got, truth)} (z = {z:.4g}).\n  Hint: {hint}"


def _grads(case: LinearCase, dZ: np.ndarray) -> dict[str, np.ndarray]:
    return {"dX": dZ @ case.W, "dW": dZ.T @ case.X, "db": dZ.sum(axis=0)}


# Wrong backward passes, each computed from the case, and what to say about each.
BACKWARD_SLIPS: tuple[tuple[Callable[[LinearCase], dict[str, np.ndarray]], str], ...] = (
    (lambda c: _grads(c, c.dY), ("Your gradients are those of the layer without GELU: multiply dY by "
                                 "gelu'(Z) first (elementwise) to get dZ.")),
    (lambda c: _grads(c, c.dY * _cdf(c.Z)), ("Your dZ uses Phi(Z) for gelu'(Z): the product rule has a second "
                                             "term, Z phi(Z).")),
    (lambda c: _grads(c, c.dY * c.Z * _cdf(c.Z)), ("Your dZ multiplies dY by gelu(Z), the activation, instead of "
                                                   "its derivative gelu'(Z).")),
    (lambda c: _grads(c, c.dY * gelu_truth(c.X @ c.W.T)), ("Your gelu' is taken at X W^T without b: GELU sees the "
                                                           "pre-activation Z = X W^T + b.")),
)
SHAPE_WORDS = {"dX": "the shape of X, (M, K)", "dW": "the shape of W, (N, K)", "db": "the shape of b, (N,)"}
BACKWARD_HINT = ("Write Z = X W^T + b and Y = gelu(Z). Then dZ = dY * gelu'(Z) (elementwise), dX = dZ W, "
                 "dW = dZ^T X and db = the sum of dZ over the rows (the tokens).")


def _check_backward(fn: Any) -> str | None:
    for case in linear_cases():
        called = call_learner("linear_backward", fn, case.args(), case.describe(),
                              crash_hint=lambda err: "check each product's shapes: X is (M, K), W is (N, K), "
                                                     "dY and Z are (M, N).")
        if called.problem:
            return called.problem
        raw = called.value
        if not isinstance(raw, (tuple, list)) or len(raw) != 3:
            return f"linear_backward must return a tuple (dX, dW, db); got {type(raw).__name__}."
        truth = backward_truth(case)
        got = {}
        for name, item in zip(("dX", "dW", "db"), raw):
            array, problem = as_float_array("linear_backward", item)
            if problem:
                return problem
            if array.shape != truth[name].shape:
                transposed = array.shape == truth[name].shape[::-1] and array.ndim == 2
                return (f"linear_backward: {name} has shape {array.shape} for {case.describe()}; it must have "
                        f"{SHAPE_WORDS[name]}." + (" Yours is transposed." if transposed else "")
                        + ("" if name != "db" else " Sum dZ over the rows (axis 0), one value per output."))
            got[name] = array
        wrong = [n for n in ("dX", "dW", "db")
                 if not np.allclose(got[n], truth[n], rtol=RTOL_CALCULUS, atol=ATOL_CALCULUS)]
        if not wrong:
            continue
        hint = next((text for slip, text in BACKWARD_SLIPS
                     if all(np.allclose(got[n], slip(case)[n], rtol=1e-6, atol=1e-9) for n in got)), None)
        if hint is None and "dW" in wrong and got["dW"].shape[0] == got["dW"].shape[1] and np.allclose(
                got["dW"], truth["dW"].T, rtol=1e-6, atol=1e-9):
            hint = "Your dW is transposed (it is square here, so the shape did not tell): dW = dZ^T X."
        return (f"linear_backward: {', '.join(wrong)} differ from autograd's for {case.describe()}: "
                f"{worst_entry(got[wrong[0]], truth[wrong[0]])} in {wrong[0]}.\n  Hint: {hint or BACKWARD_HINT}")
    return None


def check_linear_backward(answer: Any) -> Verdict:
    names = ("gelu_derivative", "linear_backward")
    refused = missing_functions(answer, names)
    if refused:
        return refused
    return functions_verdict([
        ("gelu_derivative", _check_gelu(answer["gelu_derivative"]),
         f"matches autograd's derivative of F.gelu at {GELU_POINTS.size} points in [-6, 6]."),
        ("linear_backward", _check_backward(answer["linear_backward"]),
         (f"matches autograd's dX, dW and db of F.gelu(F.linear(X, W, b)) for {len(CASE_SHAPES)} shapes, "
          "one token, one feature and one output among them.")),
    ])


# ================================================================== 2 · FLOPs of a layer

def _layer_size() -> tuple[int, int, int]:
    v = LAYER.values
    return int(v["M"]), int(v["N"]), int(v["K"])


def flops_truths(spec: GpuSpec) -> dict[str, float]:
    m, n, k = _layer_size()
    forward, _ = FORWARD.work(LAYER)
    backward, _ = BACKWARD.work(LAYER)
    return {"forward_flops": forward, "backward_flops": backward, "backward_over_forward": backward / forward,
            "flops_per_token_per_weight": (forward + backward) / (m * n * k),   # M tokens, N K weights
            "forward_us_fp32": forward / (spec.fp32_tflops * 1e12) * 1e6,
            "forward_us_bf16": forward / ((spec.bf16_tensor_tflops or spec.fp16_tensor_tflops) * 1e12) * 1e6}


def _diag_flops(key: str, got: float) -> str | None:
    truth = flops_truths(default_spec())[key]
    if key == "backward_flops" and close(got, truth / 2, RTOL_NUMBERS):
        return ("Two products: dX = dZ W and dW = dZ^T X, each as large as the forward one (and a "
                "multiply-add is 2 FLOPs).")
    if key == "backward_flops" and close(got, truth / 4, RTOL_NUMBERS):
        return "Two products, 2 FLOPs per multiply-add."
    if close(got, truth / 2, RTOL_NUMBERS):
        return "That counts multiply-adds; a multiply-add is 2 FLOPs."
    return None


SPARSE_OR_HALF = ("Half the time: either a multiply-add was counted as 1 FLOP (it is 2), or the peak is the "
                  "sparse figure, twice the dense one, which only 2:4-sparse matrices reach; use the dense peak.")


def _diag_time(key: str, got: float) -> str | None:
    truth = flops_truths(default_spec())[key]
    if key == "forward_us_bf16" and close(got, truth * 0.5, RTOL_NUMBERS):
        return SPARSE_OR_HALF
    for factor, text in ((1e3, "Check the unit: microseconds."), (1e-3, "Check the unit: microseconds."),
                         (1e-6, "Check the unit: microseconds, not seconds."), (1e6, "Check the unit: microseconds."),
                         (0.5, "Count 2 FLOPs per multiply-add.")):
        if close(got, truth * factor, RTOL_NUMBERS):
            return text
    return None


def _flops_questions(spec: GpuSpec) -> tuple[NumericQuestion, ...]:
    m, n, k = _layer_size()
    truth = flops_truths(spec)
    layer = f"M = {m:,} tokens, N = {n:,}, K = {k:,}"
    return (
        NumericQuestion("forward_flops", f"FLOPs of Z = X W^T + b at {layer}", truth["forward_flops"],
                        rtol=RTOL_NUMBERS, diagnose=partial(_diag_flops, "forward_flops"),
                        hint="Each of the M N outputs is a sum of K products: one multiply-add per product, "
                             "2 FLOPs each. The bias is negligible."),
        NumericQuestion("backward_flops", "FLOPs of dX and dW", truth["backward_flops"], rtol=RTOL_NUMBERS,
                        diagnose=partial(_diag_flops, "backward_flops"),
                        hint="Count the multiply-adds of dX = dZ W and of dW = dZ^T X separately."),
        NumericQuestion("backward_over_forward", "backward FLOPs over forward FLOPs",
                        truth["backward_over_forward"], rtol=RTOL_NUMBERS,
                        hint="Your two previous answers, divided."),
        NumericQuestion("flops_per_token_per_weight", "training FLOPs (forward + backward) per token per weight",
                        truth["flops_per_token_per_weight"], rtol=RTOL_NUMBERS,
                        hint="Forward and backward FLOPs divided by the M tokens and the N K weights: the "
                             "rule of thumb for the cost of training a model."),
        NumericQuestion("forward_us_fp32", f"the forward product at the FP32 peak ({fmt(spec.fp32_tflops)} TFLOP/s), "
                                           "in microseconds", truth["forward_us_fp32"], rtol=RTOL_NUMBERS,
                        diagnose=partial(_diag_time, "forward_us_fp32"), hint="FLOPs over FLOP/s."),
        NumericQuestion("forward_us_bf16", "the same at the bf16 tensor-core peak "
                                           f"({fmt(spec.bf16_tensor_tflops or spec.fp16_tensor_tflops)} TFLOP/s), "
                                           "in microseconds", truth["forward_us_bf16"], rtol=RTOL_NUMBERS,
                        diagnose=partial(_diag_time, "forward_us_bf16"), hint="FLOPs over FLOP/s."),
    )


def check_layer_flops(answer: Any) -> Verdict:
    if not isinstance(answer, Mapping):
        return ask_for_numbers("layer_flops", _flops_questions(default_spec()))
    gpu = core.reference_gpu()
    return check_numbers(answer, _flops_questions(gpu.spec),
                         heading=f"Times checked against the spec sheet of {gpu.describe()}.")


# ================================================================== 3 · arithmetic intensity of tiles

def smem_bandwidth(spec: GpuSpec) -> float:
    """Bytes per second that shared memory delivers, all SMs together."""
    return SMEM_BYTES_PER_CLOCK * spec.sms * spec.boost_clock_mhz * 1e6


def intensity_truths(spec: GpuSpec) -> dict[str, float]:
    t, bk, r = BLOCK_TILE, BLOCK_K, REGISTER_TILE
    dram = spec.memory_bandwidth_gbs * 1e9
    bf16 = (spec.bf16_tensor_tflops or spec.fp16_tensor_tflops) * 1e12
    ridge_fp32 = spec.fp32_tflops * 1e12 / dram
    ridge_bf16 = bf16 / dram
    return {
        "intensity_block_fp32": 2 * t * t * bk / (4 * bk * (t + t)),
        "ridge_fp32": ridge_fp32,
        "tile_fp32": 4 * ridge_fp32,            # intensity T / 4 at a T x T fp32 tile
        "ridge_bf16": ridge_bf16,
        "tile_bf16": 2 * ridge_bf16,            # intensity T / 2 with 2-byte elements
        "intensity_thread_fp32": 2 * r * r / (4 * (r + r)),
        "ridge_smem": spec.fp32_tflops * 1e12 / smem_bandwidth(spec),
    }


def _diag_intensity(key: str, got: float, spec: GpuSpec) -> str | None:
    truth = intensity_truths(spec)
    expected = truth[key]
    if key == "ridge_bf16" and close(got, 2 * expected, RTOL_NUMBERS):
        return ("Twice the dense figure: that is the sparse tensor-core peak, which only 2:4-sparse matrices "
                "reach; the ridge of a dense GEMM uses the dense peak.")
    if close(got, expected / 2, RTOL_NUMBERS):
        return "A multiply-add is 2 FLOPs."
    if close(got * expected, 1.0, RTOL_NUMBERS):
        return "Upside down: FLOPs per byte, not bytes per FLOP."
    if key == "tile_bf16" and close(got, 2 * expected, RTOL_NUMBERS):
        return "A bf16 element is 2 bytes, not 4: the same tile moves half the bytes."
    if key == "tile_bf16" and close(got, truth["tile_fp32"], RTOL_NUMBERS):
        return "That is the fp32 tile; the bf16 ridge is far higher (tensor-core peak over the same bandwidth)."
    for factor in (1e3, 1e-3):
        if close(got, expected * factor, RTOL_NUMBERS):
            return "Mind the units: TFLOP/s is 10^12 FLOP/s, GB/s is 10^9 bytes/s."
    return None


def _intensity_questions(spec: GpuSpec) -> tuple[NumericQuestion, ...]:
    t, bk, r = BLOCK_TILE, BLOCK_K, REGISTER_TILE
    truth = intensity_truths(spec)
    q = partial(NumericQuestion, rtol=RTOL_NUMBERS)
    return (
        q("intensity_block_fp32", f"FLOP per byte of global memory of a {t} x {t} x {bk} fp32 tile step",
          truth["intensity_block_fp32"], diagnose=partial(_diag_intensity, "intensity_block_fp32", spec=spec),
          hint=f"One step loads a {t} x {bk} tile of A and a {bk} x {t} tile of B (4 bytes each) and does "
               f"{t} x {t} x {bk} multiply-adds."),
        q("ridge_fp32", "FP32 ridge point, FLOP/byte", truth["ridge_fp32"],
          diagnose=partial(_diag_intensity, "ridge_fp32", spec=spec),
          hint="Peak FP32 FLOP/s over memory bandwidth in bytes/s."),
        q("tile_fp32", "side T of the square fp32 tile whose intensity equals that ridge",
          truth["tile_fp32"], diagnose=partial(_diag_intensity, "tile_fp32", spec=spec),
          hint="Redo the first answer for a T x T tile: the depth BK cancels. Set it equal to the ridge."),
        q("ridge_bf16", "bf16 tensor-core ridge point, FLOP/byte", truth["ridge_bf16"],
          diagnose=partial(_diag_intensity, "ridge_bf16", spec=spec),
          hint="Peak dense bf16 tensor-core FLOP/s over memory bandwidth."),
        q("tile_bf16", "side T of the square bf16 tile whose intensity equals the bf16 ridge",
          truth["tile_bf16"], diagnose=partial(_diag_intensity, "tile_bf16", spec=spec),
          hint="As for fp32, with 2 bytes per element."),
        q("intensity_thread_fp32", f"FLOP per byte of shared memory of a thread's {r} x {r} register tile",
          truth["intensity_thread_fp32"], diagnose=partial(_diag_intensity, "intensity_thread_fp32", spec=spec),
          hint=f"Per step of k the thread reads {r} values of A and {r} of B from shared memory (4 bytes each) "
               f"and does {r} x {r} multiply-adds."),
        q("ridge_smem", f"FP32 peak over shared-memory bandwidth ({SMEM_BYTES_PER_CLOCK} bytes per clock per SM), "
                        "FLOP/byte", truth["ridge_smem"], diagnose=partial(_diag_intensity, "ridge_smem", spec=spec),
          hint=f"Shared-memory bandwidth = {SMEM_BYTES_PER_CLOCK} bytes x SMs x boost clock."),
    )


def check_tile_intensity(answer: Any) -> Verdict:
    if not isinstance(answer, Mapping):
        return ask_for_numbers("tile_intensity", _intensity_questions(default_spec()))
    gpu = core.reference_gpu()
    return check_numbers(answer, _intensity_questions(gpu.spec),
                         heading=f"Checked against the spec sheet of {gpu.describe()}.")


# ================================================================== 4 · register tiles

def register_truths() -> dict[str, float]:
    r = REGISTER_TILE
    return {"loads_1x1": 2, "fmas_1x1": 1, "loads_8x8": 2 * r, "fmas_8x8": r * r,
            "lds128_8x8": 2 * r / 4, "accumulators_8x8": r * r}


def _diag_register(key: str, got: float) -> str | None:
    truth = register_truths()[key]
    if key == "loads_8x8" and got == REGISTER_TILE * REGISTER_TILE:
        return ("That is one load per multiply-add (or the values counted in bytes). Each value of A is used "
                "with all of the thread's values of B: load each once per step of k, and count values.")
    if key.startswith("loads") and close(got, truth * 4, RTOL_NUMBERS):
        return "Count values (floats), not bytes."
    if key.startswith("fmas") and close(got, truth * 2, RTOL_NUMBERS):
        return "Count multiply-adds (one FMA instruction each), not FLOPs."
    if key == "lds128_8x8" and got == 2 * REGISTER_TILE:
        return "A float4 load (LDS.128) brings 4 floats at once."
    return None


def _register_questions() -> tuple[NumericQuestion, ...]:
    truth = register_truths()
    r = REGISTER_TILE
    return tuple(NumericQuestion(key, label, truth[key], diagnose=partial(_diag_register, key), hint=hint)
                 for key, label, hint in (
        ("loads_1x1", "values loaded from shared memory per step of k, one output per thread",
         "The thread needs one value of A and one of B for its one multiply-add."),
        ("fmas_1x1", "multiply-adds per step of k, one output per thread", "One output, one product per k."),
        ("loads_8x8", f"values loaded per step of k, a {r} x {r} register tile",
         f"The {r} x {r} products of step k use {r} values of A (a column of the tile) and {r} of B (a row)."),
        ("fmas_8x8", f"multiply-adds per step of k, a {r} x {r} register tile", "One per accumulator."),
        ("lds128_8x8", f"shared-memory load instructions per step of k with float4 loads, {r} x {r}",
         "The values of A are contiguous when A is stored transposed, As[k][m], and so are those of B."),
        ("accumulators_8x8", f"registers holding accumulators, {r} x {r}", "One fp32 register per output."),
    ))


def check_register_tile(answer: Any) -> Verdict:
    questions = _register_questions()
    if not isinstance(answer, Mapping):
        return ask_for_numbers("register_tile", questions)
    return check_numbers(answer, questions)


# ================================================================== 5 · shared memory and occupancy

def occupancy_truths(spec: GpuSpec) -> dict[str, float]:
    smem_sm = spec.smem_per_sm_kb * 1024
    fp32 = STAGES_FP32 * (BLOCK_TILE * BLOCK_K + BLOCK_K * BLOCK_TILE) * 4
    bf16 = STAGES_BF16 * (BF16_TILE * BF16_K + BF16_K * BF16_TILE) * 2
    by_smem = smem_sm // (fp32 + RESERVED_SMEM_PER_BLOCK)
    by_registers = spec.regs_per_sm // (REGISTERS_PER_THREAD * THREADS)
    by_threads = spec.max_warps_per_sm * 32 // THREADS
    return {"smem_bytes_fp32": fp32, "blocks_by_smem_fp32": by_smem, "blocks_by_registers": by_registers,
            "warps_per_sm": min(by_smem, by_registers, by_threads) * THREADS // 32,
            "smem_bytes_bf16": bf16, "blocks_by_smem_bf16": smem_sm // (bf16 + RESERVED_SMEM_PER_BLOCK)}


def _diag_occupancy(key: str, got: float, spec: GpuSpec) -> str | None:
    truth = occupancy_truths(spec)[key]
    if key.startswith("smem_bytes") and close(got, truth / 2, RTOL_NUMBERS):
        return "Two tiles, A and B, in every stage; and every stage counts."
    if key == "smem_bytes_bf16" and close(got, 2 * truth, RTOL_NUMBERS):
        return "A bf16 element is 2 bytes."
    if key.startswith("blocks_by_smem") and got == truth + 1:
        return f"Each resident block also costs the {RESERVED_SMEM_PER_BLOCK} bytes the system reserves."
    if key == "blocks_by_registers" and got == spec.regs_per_sm // REGISTERS_PER_THREAD:
        return f"That counts threads; a block has {THREADS} of them."
    if key == "warps_per_sm" and got == min(occupancy_truths(spec)["blocks_by_smem_fp32"],
                                            spec.max_warps_per_sm * 32 // THREADS) * THREADS // 32:
        return "Shared memory is not the tightest limit here: what do the registers allow?"
    return None


def _occupancy_questions(spec: GpuSpec) -> tuple[NumericQuestion, ...]:
    truth = occupancy_truths(spec)
    return tuple(NumericQuestion(key, label, truth[key], diagnose=partial(_diag_occupancy, key, spec=spec),
                                 hint=hint) for key, label, hint in (
        ("smem_bytes_fp32", (f"bytes of shared memory of the fp32 kernel: {STAGES_FP32} stages of a "
                             f"{BLOCK_TILE} x {BLOCK_K} tile of A and a {BLOCK_K} x {BLOCK_TILE} tile of B"),
         "stages x (elements of A's tile + elements of B's tile) x 4 bytes."),
        ("blocks_by_smem_fp32", "blocks per SM that shared memory allows",
         (f"The SM's {spec.smem_per_sm_kb} KiB divided by what one block takes, its tiles plus the "
          f"{RESERVED_SMEM_PER_BLOCK} bytes reserved per block; round down.")),
        ("blocks_by_registers", (f"blocks per SM that registers allow at {REGISTERS_PER_THREAD} registers per "
                                 f"thread, {THREADS} threads per block"),
         f"The SM has {spec.regs_per_sm:,} registers."),
        ("warps_per_sm", "resident warps per SM (the tightest of the limits, threads included)",
         (f"The fewest blocks any limit allows, times {THREADS // 32} warps per block (the SM holds at most "
          f"{spec.max_warps_per_sm} warps).")),
        ("smem_bytes_bf16", (f"bytes of shared memory of a bf16 kernel: {STAGES_BF16} stages of "
                             f"{BF16_TILE} x {BF16_K} tiles of A and of B"),
         "stages x (elements of both tiles) x 2 bytes."),
        ("blocks_by_smem_bf16", "blocks per SM that shared memory allows for it",
         "As before, with the bf16 kernel's shared memory."),
    ))


def check_occupancy(answer: Any) -> Verdict:
    if not isinstance(answer, Mapping):
        return ask_for_numbers("occupancy", _occupancy_questions(default_spec()))
    gpu = core.reference_gpu()
    return check_numbers(answer, _occupancy_questions(gpu.spec),
                         heading=f"Checked against the spec sheet of {gpu.describe()}.")


# ================================================================== 6 · one tensor-core instruction

MMA_SHAPE = (16, 8, 16)             # mma.sync.aligned.m16n8k16
WGMMA_SHAPE = (64, 256, 16)         # wgmma.mma_async.m64n256k16
WARP_TILE = 64


def mma_truths() -> dict[str, float]:
    mma = 2 * math.prod(MMA_SHAPE)
    wgmma = 2 * math.prod(WGMMA_SHAPE)
    m, n, _ = MMA_SHAPE
    return {"flops_mma_sync": mma, "flops_wgmma": wgmma, "mma_sync_per_wgmma": wgmma / mma,
            "mma_per_warp_tile": (WARP_TILE // m) * (WARP_TILE // n)}


def _diag_mma(key: str, got: float) -> str | None:
    truth = mma_truths()[key]
    if key.startswith("flops") and close(got, truth / 2, RTOL_NUMBERS):
        return "That counts multiply-adds; each is 2 FLOPs."
    if key == "mma_per_warp_tile" and got == (WARP_TILE // 16) ** 2:
        return "An m16n8k16 tile is 8 wide in n, not 16."
    return None


def _mma_questions() -> tuple[NumericQuestion, ...]:
    m, n, k = MMA_SHAPE
    wm, wn, wk = WGMMA_SHAPE
    truth = mma_truths()
    return tuple(NumericQuestion(key, label, truth[key], diagnose=partial(_diag_mma, key), hint=hint)
                 for key, label, hint in (
        ("flops_mma_sync", f"FLOPs of one mma.sync.m{m}n{n}k{k}",
         f"It computes a {m} x {n} tile as sums of {k} products."),
        ("flops_wgmma", f"FLOPs of one wgmma.m{wm}n{wn}k{wk}", f"A {wm} x {wn} tile, sums of {wk} products."),
        ("mma_sync_per_wgmma", "mma.sync instructions that do the work of one wgmma", "The ratio of the two."),
        ("mma_per_warp_tile", (f"mma.sync a warp issues per 16-deep step of k for a {WARP_TILE} x {WARP_TILE} "
                               "warp tile"), f"The warp tile is a grid of {m} x {n} accumulator tiles."),
    ))


def check_mma_flops(answer: Any) -> Verdict:
    questions = _mma_questions()
    if not isinstance(answer, Mapping):
        return ask_for_numbers("mma_flops", questions)
    return check_numbers(answer, questions)


# ================================================================== the prompts of exercise 02

PROMPTS = (
    Prompt("linear_backward", "The backward pass of nn.Linear + GELU", 3.0, check_linear_backward),
    Prompt("layer_flops", "What a linear layer costs, forward and backward", 1.0, check_layer_flops),
    Prompt("tile_intensity", "Arithmetic intensity of tiles, and the tiles the ridge asks for", 2.0,
           check_tile_intensity),
    Prompt("register_tile", "Loads against FMAs in a register tile", 1.0, check_register_tile),
    Prompt("occupancy", "Shared memory per block and the occupancy it allows", 2.0, check_occupancy),
    Prompt("mma_flops", "The work of one tensor-core instruction", 1.0, check_mma_flops),
)
