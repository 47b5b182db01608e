"""Checkers of exercise 01 (Foundations): matrix calculus, hardware 101, roofline.

Each checker compares the learner's answer with the truth and, when they differ, looks for the
mistake that explains the difference (a transposed result, a missing ReLU mask, a unit off by a
thousand) so its message can name it. The truth comes from torch autograd for the calculus and
from the spec sheet of the reference GPU for the hardware numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from grader import spec as specmod
from grader.derivations import core
from grader.derivations.core import (Called, NumericQuestion, Prompt, TableRow, Verdict,
                                     as_float_array, ask_for_numbers, call_learner,
                                     check_numbers, check_table, close, functions_verdict,
                                     missing_functions, size_label, worst_entry)
from hardware.specs import GpuSpec, default_spec

# This exercise's exercise.toml: the benchmark sizes and the FLOP and byte formulas come from there.
EXERCISE = specmod.load(Path(__file__).resolve().parent)

# The learner derives by hand what we compute in float64; both should agree to rounding.
RTOL_CALCULUS, ATOL_CALCULUS = 1e-6, 1e-9
# Derived hardware and roofline numbers: room for rounding a clock or a bandwidth by hand.
RTOL_NUMBERS = 0.02

MASK_HINT = ("The ReLU derivative is 1 where Wx + b > 0 and 0 elsewhere: a unit that is off "
             "passes no gradient back.")
CHAIN_HINT = "Write y = relu(z) with z = Wx + b and apply the chain rule one step at a time."


# ================================================================== matrix calculus

@dataclass(frozen=True)
class ReluCase:
    """One input of y = relu(Wx + b) and an upstream gradient g = dL/dy."""

    W: np.ndarray
    x: np.ndarray
    b: np.ndarray
    g: np.ndarray

    @property
    def z(self) -> np.ndarray:
        return self.W @ self.x + self.b

    def describe(self) -> str:
        m, n = self.W.shape
        return f"W of shape ({m}, {n}), x of shape ({n},), b of shape ({m},)"


# Tall, wide, square, single row, single column: a transposed answer cannot hide in all of them.
CASE_SHAPES = ((3, 5), (5, 3), (4, 4), (1, 6), (6, 1), (9, 13))


def relu_cases(seed: int = 2024) -> list[ReluCase]:
    """Random cases whose pre-activations are both positive and negative and never near zero.

    At z = 0 the ReLU has no derivative and any answer there would be a convention, so every
    z is kept at least 0.2 away from it; b is solved for to put z where we want it.
    """
    rng = np.random.default_rng(seed)
    cases = []
    for m, n in CASE_SHAPES:
        W = rng.standard_normal((m, n))
        x = rng.standard_normal(n)
        signs = rng.choice([-1.0, 1.0], size=m)
        if m >= 2:
            signs[:2] = (1.0, -1.0)
            rng.shuffle(signs)
        z = signs * rng.uniform(0.2, 2.0, size=m)
        cases.append(ReluCase(W=W, x=x, b=z - W @ x, g=rng.standard_normal(m)))
    return cases


def torch_truth(case: ReluCase) -> dict[str, np.ndarray]:
    """Jacobians and vector-Jacobian products of y = relu(Wx + b) from torch autograd, float64."""
    W, x, b, g = (torch.tensor(a, dtype=torch.float64) for a in (case.W, case.x, case.b, case.g))
    jac_x = torch.autograd.functional.jacobian(lambda x_: torch.relu(W @ x_ + b), x)
    jac_b = torch.autograd.functional.jacobian(lambda b_: torch.relu(W @ x + b_), b)
    W_, x_, b_ = (t.clone().requires_grad_(True) for t in (W, x, b))
    torch.relu(W_ @ x_ + b_).backward(g)
    return {"jacobian_y_wrt_x": jac_x.numpy(), "jacobian_y_wrt_b": jac_b.numpy(),
            "grad_W": W_.grad.numpy(), "grad_x": x_.grad.numpy(), "grad_b": b_.grad.numpy()}


@dataclass(frozen=True)
class Slip:
    """A known mistake: the derivative vector it uses in place of the ReLU's, and what to say."""

    name: str
    derivative: Callable[[ReluCase], np.ndarray]
    hint: str


SLIPS = (
    Slip("no mask", lambda c: np.ones_like(c.z),
         "Your answer is what you would get without the ReLU. " + MASK_HINT),
    Slip("mask without b", lambda c: (c.W @ c.x > 0).astype(float),
         "Your mask tests Wx > 0. The ReLU sees the pre-activation Wx + b, so b decides which "
         "units are on too: did you forget b?"),
    Slip("inverted mask", lambda c: (c.z < 0).astype(float),
         "Your mask is inverted: it keeps the units that are off. " + MASK_HINT),
    Slip("output as derivative", lambda c: np.maximum(c.z, 0.0),
         "You multiplied by relu(Wx + b), the ReLU's output. Its derivative is a step, "
         "1 or 0, not the output itself."),
)


# How each quantity follows from the derivative d of the ReLU at z (d = 1 where z > 0, else 0).
# Plugging a wrong d in tells us which slip a wrong answer made.
def _formulas() -> dict[str, Callable[[ReluCase, np.ndarray], np.ndarray]]:
    return {
        "jacobian_y_wrt_x": lambda c, d: d[:, None] * c.W,
        "jacobian_y_wrt_b": lambda c, d: np.diag(d),
        "grad_W": lambda c, d: np.outer(c.g * d, c.x),
        "grad_x": lambda c, d: c.W.T @ (c.g * d),
        "grad_b": lambda c, d: c.g * d,
    }


SHAPE_WORDS = {
    "jacobian_y_wrt_x": "one row per output y_i and one column per input x_j: (m, n)",
    "jacobian_y_wrt_b": "one row per output y_i and one column per bias b_j: (m, m)",
    "grad_W": "the shape of W: (m, n)",
    "grad_x": "the shape of x: (n,)",
    "grad_b": "the shape of b: (m,)",
}


def _call(name: str, fn: Any, case: ReluCase, with_g: bool) -> Called:
    """fn on copies of the case's arrays, so that writing into them cannot change the truth; a
    crash is most often a product of mismatched shapes, so its hint names m and n."""
    args = (case.W.copy(), case.x.copy(), case.b.copy()) + ((case.g.copy(),) if with_g else ())
    m, n = case.W.shape
    return call_learner(
        name, fn, args, case.describe(),
        crash_hint=lambda err: f"check each product's shapes: here m = {m} and n = {n}.")


def _allclose(got: np.ndarray, expected: np.ndarray) -> bool:
    return got.shape == expected.shape and np.allclose(got, expected, rtol=RTOL_CALCULUS,
                                                       atol=ATOL_CALCULUS)


def _slip_hint(name: str, case: ReluCase, got: np.ndarray) -> str | None:
    """The hint of the known slip that produces exactly got, if one does."""
    formula = _formulas()[name]
    return next((slip.hint for slip in SLIPS
                 if _allclose(got, formula(case, slip.derivative(case)))), None)


def _diagnose_values(name: str, case: ReluCase, got: np.ndarray, expected: np.ndarray) -> str:
    """The message for a result of the right shape but wrong values."""
    hint = None
    if got.ndim == 2 and got.shape[0] == got.shape[1] and _allclose(got.T, expected):
        hint = "Did you return the transpose? Your result's transpose is right."
    if hint is None:
        hint = _slip_hint(name, case, got)
    if hint is None and name == "grad_x" and case.W.shape[0] == case.W.shape[1]:
        mask = (case.z > 0).astype(float)
        if _allclose(got, case.W @ (case.g * mask)):
            hint = ("You multiplied by W where W transposed belongs: the gradient flows back "
                    "from y's space (m) to x's space (n).")
    if hint is None:
        hint = f"{MASK_HINT} {CHAIN_HINT}"
    return (f"{name}: wrong values for {case.describe()}.\n"
            f"  {worst_entry(got, expected)}\n"
            f"  Hint: {hint}")


def _check_one_function(name: str, fn: Any, cases: list[ReluCase],
                        truths: list[dict[str, np.ndarray]], with_g: bool) -> str | None:
    """None when fn is right on every case, else the message about the first case it fails."""
    for case, truth in zip(cases, truths):
        expected = truth[name]
        called = _call(name, fn, case, with_g)
        if called.problem:
            return called.problem
        got, problem = as_float_array(name, called.value)
        if problem:
            return problem
        if got.shape != expected.shape:
            message = (f"{name}: for {case.describe()} the result must have "
                       f"{SHAPE_WORDS[name]} = {expected.shape}; yours has shape {got.shape}.")
            if got.ndim == 2 and got.shape == expected.T.shape:
                message += "\n  Hint: did you return the transpose? " + (
                    "Your result's transpose is right." if _allclose(got.T, expected)
                    else "Transposed back, it is still wrong. "
                    + (_slip_hint(name, case, got.T) or MASK_HINT))
            return message
        if not np.all(np.isfinite(got)):
            return f"{name} returned NaN or infinity for {case.describe()}."
        if not _allclose(got, expected):
            return _diagnose_values(name, case, got, expected)
    return None


def _check_functions(answer: Any, names: tuple[str, ...], with_g: bool) -> Verdict:
    refused = missing_functions(answer, names)
    if refused:
        return refused
    cases = relu_cases()
    truths = [torch_truth(c) for c in cases]
    return functions_verdict([
        (name, _check_one_function(name, answer[name], cases, truths, with_g),
         f"matches torch autograd on all {len(cases)} random cases.")
        for name in names])


def check_relu_jacobians(answer: Any) -> Verdict:
    return _check_functions(answer, ("jacobian_y_wrt_x", "jacobian_y_wrt_b"), with_g=False)


def check_relu_gradients(answer: Any) -> Verdict:
    return _check_functions(answer, ("grad_W", "grad_x", "grad_b"), with_g=True)


# ================================================================== numbers

def _ratio_is(got: float, expected: float, factor: float) -> bool:
    return expected != 0 and close(got, expected * factor, RTOL_NUMBERS)


def _unit_slip(got: float, expected: float) -> str | None:
    """Name a unit mistake when got is expected scaled by a telltale factor."""
    thousand = "check the prefixes (k, M, G, T are powers of 1000)."
    million = "check the prefixes (MHz is 10^6 Hz, GB 10^9 B)."
    for factor, text in (
        (1e3, f"Yours is 1000 times too large: {thousand}"),
        (1e-3, f"Yours is 1000 times too small: {thousand}"),
        (1e6, f"Yours is a million times too large: {million}"),
        (1e-6, f"Yours is a million times too small: {million}"),
        (2**30 / 1e9, "Spec sheets mean 10^9 bytes by GB, not 2^30."),
        (1e9 / 2**30, "Spec sheets mean 10^9 bytes by GB, not 2^30."),
    ):
        if _ratio_is(got, expected, factor):
            return text
    return None


def _bytes_per_clock(spec: GpuSpec) -> float:
    return spec.memory_bandwidth_gbs * 1e9 / (spec.boost_clock_mhz * 1e6)


def _ridge(spec: GpuSpec) -> float:
    return spec.fp32_tflops * 1e12 / (spec.memory_bandwidth_gbs * 1e9)


def _cc(spec: GpuSpec) -> str:
    """Compute capability from the arch: "sm_90" -> "9.0", "sm_120" -> "12.0"."""
    digits = spec.arch.removeprefix("sm_").rstrip("a")
    return f"{digits[:-1]}.{digits[-1]}"


def _diag_warps(got: float, spec: GpuSpec) -> str | None:
    expected = spec.max_warps_per_sm
    if got == expected * 32:
        return "That is the number of threads; a warp is 32 of them."
    if abs(got - expected) == 1:
        return "Off by one: count the warps, not the largest warp index."
    if got == 32:
        return "32 is the number of threads in a warp, not of warps in an SM."
    return None


def _diag_threads_per_block(got: float, spec: GpuSpec) -> str | None:
    if got == spec.max_warps_per_sm * 32:
        return "That is the most threads resident on one SM; one block may hold fewer."
    return None


def _diag_registers(got: float, spec: GpuSpec) -> str | None:
    expected = spec.regs_per_sm
    if got == expected * 4:
        return "That is bytes; count 32-bit registers."
    if got in (expected / 1024, expected / 1000):
        return "Write the full count: '64K registers' means 64 x 1024."
    if got == 255:
        return "255 is the most registers one thread may use; the SM has far more."
    return None


def _diag_smem(got: float, spec: GpuSpec) -> str | None:
    expected = spec.smem_per_sm_kb
    if got == expected * 1024:
        return "That is bytes; the answer is in KiB."
    if got == expected - 1:
        return ("That is the most one block may use; the SM has 1 KiB more, which the system "
                "keeps for itself.")
    if spec.arch == "sm_90" and got == 256:
        return "256 KiB is the SM's whole L1 + shared memory; how much of it can be shared?"
    return None


def _diag_bytes_per_clock(got: float, spec: GpuSpec) -> str | None:
    expected = _bytes_per_clock(spec)
    if _ratio_is(got, expected, 1 / spec.sms):
        return "That is per SM; this one is for the whole chip."
    if close(got * expected, 1.0, RTOL_NUMBERS):
        return "Upside down: bytes per clock is bandwidth divided by clock rate."
    return _unit_slip(got, expected)


def _diag_bytes_per_clock_per_sm(got: float, spec: GpuSpec) -> str | None:
    expected = _bytes_per_clock(spec) / spec.sms
    if _ratio_is(got, expected, spec.sms):
        return f"That is the whole chip's figure; share it among the {spec.sms} SMs."
    return _unit_slip(got, expected)


def _diag_ridge(got: float, spec: GpuSpec) -> str | None:
    expected = _ridge(spec)
    if close(got * expected, 1.0, RTOL_NUMBERS):
        return "Upside down: that is bytes per FLOP. The ridge is peak FLOP/s over bytes/s."
    if _ratio_is(got, expected, 2) or _ratio_is(got, expected, 0.5):
        return ("The spec sheet's FP32 figure already counts a fused multiply-add as two FLOPs; "
                "use it as given.")
    return _unit_slip(got, expected)


def hardware_101_questions(spec: GpuSpec) -> tuple[NumericQuestion, ...]:
    """The questions of hardware_101 about the GPU whose spec sheet is spec."""
    cc = _cc(spec)
    return (
        NumericQuestion("threads_per_warp", "threads per warp", 32,
                        hint="A warp is the group of threads an SM issues one instruction for; "
                             "its size has been the same on every NVIDIA GPU."),
        NumericQuestion("max_warps_per_sm", "max resident warps per SM", spec.max_warps_per_sm,
                        diagnose=partial(_diag_warps, spec=spec),
                        hint="Look up 'maximum number of resident warps per SM' for compute "
                             f"capability {cc}."),
        NumericQuestion("max_threads_per_block", "max threads per block",
                        spec.max_threads_per_block,
                        diagnose=partial(_diag_threads_per_block, spec=spec),
                        hint="Look up 'maximum number of threads per block' for compute "
                             f"capability {cc}."),
        NumericQuestion("registers_per_sm", "32-bit registers per SM", spec.regs_per_sm,
                        diagnose=partial(_diag_registers, spec=spec),
                        hint="Look up 'number of 32-bit registers per SM' for compute "
                             f"capability {cc}."),
        NumericQuestion("smem_per_sm_kib", "shared memory per SM in KiB", spec.smem_per_sm_kb,
                        diagnose=partial(_diag_smem, spec=spec),
                        hint="Look up 'maximum amount of shared memory per SM' for compute "
                             f"capability {cc}."),
        NumericQuestion("dram_bytes_per_clock", "DRAM bytes per SM clock, whole chip",
                        _bytes_per_clock(spec), rtol=RTOL_NUMBERS,
                        diagnose=partial(_diag_bytes_per_clock, spec=spec),
                        hint="Bandwidth in bytes/s divided by the boost clock in cycles/s."),
        NumericQuestion("dram_bytes_per_clock_per_sm", "DRAM bytes per SM clock, per SM",
                        _bytes_per_clock(spec) / spec.sms, rtol=RTOL_NUMBERS,
                        diagnose=partial(_diag_bytes_per_clock_per_sm, spec=spec),
                        hint="The whole chip's bytes per clock, shared among its SMs."),
        NumericQuestion("ridge_flops_per_byte", "FP32 ridge point in FLOP/byte", _ridge(spec),
                        rtol=RTOL_NUMBERS, diagnose=partial(_diag_ridge, spec=spec),
                        hint="Peak FP32 FLOP/s divided by memory bandwidth in bytes/s."),
    )


def check_hardware_101(answer: Any) -> Verdict:
    if not isinstance(answer, Mapping):
        # The keys are the same for every GPU: no need to ask the driver which one this is.
        return ask_for_numbers("hardware_101", hardware_101_questions(default_spec()))
    gpu = core.reference_gpu()
    return check_numbers(answer, hardware_101_questions(gpu.spec),
                         heading=f"Checked against the spec sheet of {gpu.describe()}.")


# ================================================================== roofline

@dataclass(frozen=True)
class Task:
    """A task of exercise 01 at its benchmark size: FLOPs, minimum bytes, how it goes wrong."""

    name: str
    size: str
    flops: float
    bytes: float
    reads_only: float  # bytes if the write were forgotten
    flops_hint: str
    bytes_hint: str
    millions: str      # the slip of reading 2^20 as a million, in words


HINTS = {
    "vector_add": ("How many floating-point additions does one element of c cost? Loads and stores are "
                   "not FLOPs.",
                   "Count every array the kernel must touch once: a and b are read, c is written, 4 bytes "
                   "per float32."),
    "reduce_sum": ("Summing n numbers takes about one addition per number.",
                   "x is read once, 4 bytes per float32; the single output float is negligible."),
    "transpose": ("A transpose moves data and does no floating-point arithmetic; index computations are "
                  "integer work and do not count.",
                  "Every element of in is read once and every element of out written once, 4 bytes each."),
}


def _task(name: str) -> Task:
    """A task's numbers at its (first) benchmark size, from the spec's own formulas."""
    task = EXERCISE.task(name)
    case = task.benchmarks[0]
    flops, nbytes = task.work(case)
    reads_only = float(sum(a.nbytes(case) for a in task.inputs))
    largest = max(v for v in case.values.values())
    millions = (f"2^{largest.bit_length() - 1} is {largest:,}, not {largest >> 20:,} million."
                if largest >= 1 << 20 and largest & (largest - 1) == 0 else
                "A mebi (2^20 = 1,048,576) is not a million.")
    return Task(name, size_label(case), flops, nbytes, reads_only, *HINTS[name], millions)


TASKS = tuple(_task(name) for name in HINTS)

ROOFLINE_FIELDS = ("flops", "bytes", "intensity", "time_us")


def roofline_time_us(flops: float, nbytes: float, spec: GpuSpec) -> float:
    """The roofline's lower bound on run time: compute and memory overlap, the slower one wins."""
    compute_s = flops / (spec.fp32_tflops * 1e12)
    memory_s = nbytes / (spec.memory_bandwidth_gbs * 1e9)
    return max(compute_s, memory_s) * 1e6


def _diag_flops(task: Task, got: float) -> str:
    if task.flops and _ratio_is(got, task.flops, 1e6 / 2**20):
        return task.millions
    return task.flops_hint


def _diag_bytes(task: Task, got: float) -> str:
    if task.reads_only != task.bytes and close(got, task.reads_only, RTOL_NUMBERS):
        return ("You counted the reads only: the write of the output crosses the memory bus "
                "too. " + task.bytes_hint)
    if _ratio_is(got, task.bytes, 1 / 4):
        return "That counts elements; count bytes (a float32 is 4 bytes)."
    if _ratio_is(got, task.bytes, 1e6 / 2**20):
        return task.millions
    if task.name == "vector_add" and _ratio_is(got, task.bytes, 4 / 3):
        return ("The minimum does not read c before writing it: a store that fills whole cache "
                "lines needs no read. " + task.bytes_hint)
    return task.bytes_hint


def _diag_intensity(task: Task, got: float, mine: Mapping[str, float | None]) -> str:
    expected = task.flops / task.bytes
    if expected == 0:
        return "No FLOPs means an intensity of exactly 0."
    if close(got * expected, 1.0, RTOL_NUMBERS):
        return "Upside down: intensity is FLOPs per byte, not bytes per FLOP."
    flops, nbytes = mine.get("flops"), mine.get("bytes")
    if flops is not None and nbytes and close(got, flops / nbytes, 1e-6):
        return "It follows from your FLOPs and bytes; fix those first."
    return "Intensity = FLOPs / bytes moved."


def _diag_time(task: Task, got: float, mine: Mapping[str, float | None], spec: GpuSpec) -> str:
    expected = roofline_time_us(task.flops, task.bytes, spec)
    for factor, text in (
        (1e-3, "That looks like milliseconds; the answer is in microseconds (1 ms = 1000 us)."),
        (1e-6, "That looks like seconds; the answer is in microseconds (1 s = 10^6 us)."),
        (1e3, "That looks like nanoseconds; the answer is in microseconds (1 us = 1000 ns)."),
        (2**30 / 1e9, "Spec sheets mean 10^9 bytes/s by GB/s, not 2^30."),
        (1e9 / 2**30, "Spec sheets mean 10^9 bytes/s by GB/s, not 2^30."),
    ):
        if _ratio_is(got, expected, factor):
            return text
    compute_us = task.flops / (spec.fp32_tflops * 1e12) * 1e6
    if compute_us != expected and close(got, compute_us, RTOL_NUMBERS):
        return ("That is the compute time alone. Compute and memory traffic overlap, so the "
                "roofline time is the larger of the two.")
    flops, nbytes = mine.get("flops"), mine.get("bytes")
    if flops is not None and nbytes is not None and close(
            got, roofline_time_us(flops, nbytes, spec), 1e-3):
        return "It follows from your FLOPs and bytes; fix those first."
    return ("time = max(FLOPs / peak FP32 FLOP/s, bytes / memory bandwidth), in microseconds, "
            f"with the spec sheet of {spec.name}.")


def _task_truth(task: Task, spec: GpuSpec) -> dict[str, float]:
    return {"flops": task.flops, "bytes": task.bytes, "intensity": task.flops / task.bytes,
            "time_us": roofline_time_us(task.flops, task.bytes, spec)}


def check_roofline_01(answer: Any) -> Verdict:
    if not isinstance(answer, Mapping):
        return Verdict(False, "Pass the dict `roofline_01` from the answer cell: one entry per "
                              "task, each with " + ", ".join(ROOFLINE_FIELDS) + ".")
    gpu = core.reference_gpu()
    spec = gpu.spec

    def hint(task: Task, field: str, got: float, mine: Mapping[str, float | None]) -> str:
        return {
            "flops": lambda: _diag_flops(task, got),
            "bytes": lambda: _diag_bytes(task, got),
            "intensity": lambda: _diag_intensity(task, got, mine),
            "time_us": lambda: _diag_time(task, got, mine, spec),
        }[field]()

    rows = [TableRow(task.name, task.size, partial(_task_truth, task, spec), partial(hint, task))
            for task in TASKS]
    passed, lines = check_table(answer, rows, ROOFLINE_FIELDS,
                                accepts=lambda got, truth: close(got, truth, RTOL_NUMBERS),
                                wrong="is not right.", right="FLOPs, bytes, intensity and time.")
    return Verdict(passed, "\n".join([f"Times checked against the spec sheet of {gpu.describe()}.", *lines]))


# ================================================================== the prompts of exercise 01

PROMPTS = (
    Prompt("relu_jacobians", "Jacobians of y = relu(Wx + b)", 2.0, check_relu_jacobians),
    Prompt("relu_gradients", "Gradients through y = relu(Wx + b)", 3.0, check_relu_gradients),
    Prompt("hardware_101", "GPU hardware 101", 2.0, check_hardware_101),
    Prompt("roofline_01", "Arithmetic intensity and roofline time", 3.0, check_roofline_01),
)
