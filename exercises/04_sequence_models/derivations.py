"""Checkers of exercise 04 (Sequence models): softmax calculus and numerics, the online softmax,
what fusing attention saves, and the backward passes of a training step (attention's, LayerNorm's,
the cross-entropy loss's).

Each checker compares the learner's answer with the truth and, when they differ, replays the
mistakes people make (a Jacobian without its diagonal term, an exponent that overflows, a running
sum that is not rescaled when the maximum grows, a score matrix counted once) to name the one that
explains the difference. The truth comes from torch autograd and float64 NumPy for the calculus
and from the exercise's own FLOP and byte definitions for the costs.
"""

from __future__ import annotations

import math
import tracemalloc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from grader import spec as specmod
from grader.derivations.core import (Called, NumericQuestion, Prompt, TableRow, Verdict,
                                     as_float_array, ask_for_numbers, call_learner,
                                     check_numbers, check_table, close, fmt, functions_verdict,
                                     missing_functions, worst_entry)

# This exercise's exercise.toml: the benchmark sizes and the FLOP and byte formulas come from there.
EXERCISE = specmod.load(Path(__file__).resolve().parent)

# Hand derivations agree with float64 autograd to rounding.
RTOL_CALCULUS, ATOL_CALCULUS = 1e-9, 1e-12
# A correct float32 softmax is off by a few 1e-7 relative, up to a few 1e-6 when logits spread
# over tens of units (rounding z - max costs half an ulp of the difference). Half precision is
# off by 1e-3. Outputs below float32's smallest normal number (~1.2e-38) cannot be relative-exact.
RTOL_FLOAT32, ATOL_FLOAT32 = 1e-5, 1e-35
# The running max is a max: exact. The running sum may be added in another order.
RTOL_ONLINE, ATOL_ONLINE = 1e-9, 1e-12
# Derived costs: room for rounding by hand, and for seq^2 / 2 versus seq (seq + 1) / 2.
RTOL_COSTS = 0.02


# ================================================================== calling the learner

OVERFLOW_HINT = ("exp() of a large positive number overflows; measured from the right maximum, "
                 "every exponent is <= 0.")


def _overflow_hint(err: Exception) -> str | None:
    return OVERFLOW_HINT if isinstance(err, OverflowError) else None


def _call(name: str, fn: Any, args: tuple, where: str) -> Called:
    """Every function of this exercise exponentiates, so an OverflowError gets its own hint."""
    return call_learner(name, fn, args, where, crash_hint=_overflow_hint)


# ================================================================== 1 · the softmax Jacobian

def softmax64(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - np.max(z))
    return e / e.sum()


@dataclass(frozen=True)
class JacobianCase:
    """A logit vector z and an upstream gradient g = dL/dy for y = softmax(z)."""

    z: np.ndarray
    g: np.ndarray

    def describe(self) -> str:
        return f"z of shape ({self.z.size},)"


JACOBIAN_SIZES = (1, 2, 3, 5, 8, 13)


def jacobian_cases(seed: int = 404) -> list[JacobianCase]:
    """Random logits of several lengths, and one where a single logit dominates: y near one-hot."""
    rng = np.random.default_rng(seed)
    cases = [JacobianCase(rng.normal(0.0, 2.0, n), rng.standard_normal(n)) for n in JACOBIAN_SIZES]
    cases.append(JacobianCase(np.array([9.0, 0.5, -1.0, 0.0]), rng.standard_normal(4)))
    return cases


def jacobian_truth(case: JacobianCase) -> dict[str, np.ndarray]:
    """J[i, j] = dy_i / dz_j and J^T g, from torch autograd in float64."""
    z = torch.tensor(case.z, dtype=torch.float64)
    g = torch.tensor(case.g, dtype=torch.float64)
    f = lambda t: torch.softmax(t, dim=0)  # noqa: E731
    jac = torch.autograd.functional.jacobian(f, z)
    _, vjp = torch.autograd.functional.vjp(f, z, g)
    return {"softmax_jacobian": jac.numpy(), "softmax_vjp": vjp.numpy()}


@dataclass(frozen=True)
class Slip:
    """A known mistake: what it computes from y = softmax(z), e = exp(z) and g, and what to say."""

    compute: Callable[..., np.ndarray]
    hint: str


DIAGONAL_HINT = ("y_i depends on z_i twice: through its own numerator exp(z_i) and through the "
                 "denominator. The numerator gives a term only when i == j (a Kronecker delta).")
DENOMINATOR_HINT = ("Every y_i depends on every z_j through the denominator sum_k exp(z_k): "
                    "raising one logit lowers all the other probabilities.")

JACOBIAN_SLIPS = (
    Slip(lambda y, e: -np.outer(y, y),
         "The diagonal term is missing. " + DIAGONAL_HINT),
    Slip(lambda y, e: np.diag(y),
         "Only the numerator's part is there. " + DENOMINATOR_HINT),
    Slip(lambda y, e: np.diag(y * (1 - y)),
         "The diagonal is right, but the off-diagonal entries are not zero. " + DENOMINATOR_HINT),
    Slip(lambda y, e: np.outer(y, y) - np.diag(y),
         "Every sign is flipped: dy_i/dz_i must be positive (raising a logit raises its own "
         "probability)."),
    Slip(lambda y, e: np.diag(e) - np.outer(e, e),
         "You used exp(z) where y = softmax(z) belongs: differentiate the quotient, then write the "
         "result in terms of y."),
)

VJP_SLIPS = (
    Slip(lambda y, e, g: y * g,
         "The denominator's term is missing: J^T g = y * g - y * (something). " + DENOMINATOR_HINT),
    Slip(lambda y, e, g: y * (g - g.sum()),
         "The inner product must be weighted by the probabilities: sum_j g_j y_j, not sum_j g_j."),
    Slip(lambda y, e, g: g - g @ y,
         "Close: every entry of J^T g still carries a factor y_i (both terms of J do)."),
    Slip(lambda y, e, g: -y * (g @ y),
         "The diagonal term is missing. " + DIAGONAL_HINT),
    Slip(lambda y, e, g: y * (g - g @ e),
         "You used exp(z) where y = softmax(z) belongs in the inner product."),
)

JACOBIAN_SHAPES = {
    "softmax_jacobian": "one row per output y_i and one column per logit z_j: (n, n)",
    "softmax_vjp": "the shape of z: (n,)",
}

# A vector-Jacobian product at this size needs a few vectors of 16 KiB; the Jacobian alone 32 MiB.
VJP_MEMORY_N = 2048
VJP_MEMORY_LIMIT_BYTES = 1 << 20


def _slip_hint(slips: Sequence[Slip], args: tuple, got: np.ndarray) -> str | None:
    for slip in slips:
        candidate = slip.compute(*args)
        if candidate.shape == got.shape and np.allclose(got, candidate, rtol=RTOL_CALCULUS,
                                                        atol=ATOL_CALCULUS):
            return slip.hint
    return None


def _check_calculus_function(name: str, fn: Any, cases: list[JacobianCase],
                             truths: list[dict[str, np.ndarray]]) -> str | None:
    with_g = name == "softmax_vjp"
    for case, truth in zip(cases, truths):
        expected = truth[name]
        args = (case.z.copy(), case.g.copy()) if with_g else (case.z.copy(),)
        where = case.describe() + (" and g of the same shape" if with_g else "")
        called = _call(name, fn, args, where)
        if called.problem:
            return called.problem
        got, problem = as_float_array(name, called.value)
        if problem:
            return problem
        if got.shape != expected.shape:
            return (f"{name}: for {case.describe()} the result must have {JACOBIAN_SHAPES[name]} "
                    f"= {expected.shape}; yours has shape {got.shape}.")
        if not np.all(np.isfinite(got)):
            return f"{name} returned NaN or infinity for {case.describe()}."
        if not np.allclose(got, expected, rtol=RTOL_CALCULUS, atol=ATOL_CALCULUS):
            y, e = softmax64(case.z), np.exp(case.z)
            hint = (_slip_hint(VJP_SLIPS, (y, e, case.g), got) if with_g
                    else _slip_hint(JACOBIAN_SLIPS, (y, e), got))
            hint = hint or ("Differentiate y_i = exp(z_i) / sum_k exp(z_k) with the quotient rule, "
                            "separately for i == j and i != j, then write both cases with y.")
            return (f"{name}: wrong values for {case.describe()}.\n  {worst_entry(got, expected)}\n"
                    f"  Hint: {hint}")
    return None


def _vjp_peak_bytes(fn: Callable, seed: int = 7) -> int:
    """The most memory fn holds at once beyond its inputs, as NumPy reports it to tracemalloc."""
    rng = np.random.default_rng(seed)
    z, g = rng.standard_normal(VJP_MEMORY_N), rng.standard_normal(VJP_MEMORY_N)
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before, _ = tracemalloc.get_traced_memory()
        fn(z, g)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        if not was_tracing:
            tracemalloc.stop()
    return max(0, peak - before)


def check_softmax_jacobian(answer: Any) -> Verdict:
    names = ("softmax_jacobian", "softmax_vjp")
    refused = missing_functions(answer, names)
    if refused:
        return refused
    cases = jacobian_cases()
    truths = [jacobian_truth(c) for c in cases]
    results = []
    for name in names:
        problem = _check_calculus_function(name, answer[name], cases, truths)
        if problem is None and name == "softmax_vjp":
            peak = _vjp_peak_bytes(answer[name])
            if peak > VJP_MEMORY_LIMIT_BYTES:
                problem = (f"softmax_vjp: the values are right, but at n = {VJP_MEMORY_N:,} it "
                           f"held {peak / 2**20:.1f} MiB at once, as if it built the n x n "
                           f"Jacobian ({VJP_MEMORY_N**2 * 8 / 2**20:.0f} MiB of float64). Work "
                           "with vectors only: a few arrays of n numbers (well under "
                           f"{VJP_MEMORY_LIMIT_BYTES / 2**20:.0f} MiB).\n"
                           "  Hint: multiply out J^T g with J written in terms of y; the matrix "
                           "disappears into one inner product.")
        results.append((name, problem, f"matches torch autograd on all {len(cases)} random cases"
                        + (", without forming J." if name == "softmax_vjp" else ".")))
    return functions_verdict(results)


# ================================================================== 2a · float limits

FLOAT32_MAX = float(np.finfo(np.float32).max)
FLOAT64_MAX = float(np.finfo(np.float64).max)
FLOAT16_MAX = float(np.finfo(np.float16).max)
EXP_LIMIT_FLOAT32 = math.log(FLOAT32_MAX)
EXP_LIMIT_FLOAT64 = math.log(FLOAT64_MAX)
ROW_LENGTH = EXERCISE.task("softmax").benchmarks[0].values["cols"]


def _near(got: float, value: float, tol: float = 0.01) -> bool:
    return abs(got - value) <= tol * max(1.0, abs(value))


def _diag_exp_limit(bits: int) -> Callable[[float], str | None]:
    own = {32: (EXP_LIMIT_FLOAT32, FLOAT32_MAX), 64: (EXP_LIMIT_FLOAT64, FLOAT64_MAX)}
    other = 64 if bits == 32 else 32

    def diagnose(got: float) -> str | None:
        limit, largest = own[bits]
        if _near(got, own[other][0], 1e-3):
            return f"That is the limit of float{other}; this one is for float{bits}."
        if _near(got, math.log(FLOAT16_MAX), 1e-3):
            return f"That is the limit of float16; this one is for float{bits}."
        if _near(got, largest, 1e-3):
            return ("That is the largest float itself; the question asks for the x whose exp(x) "
                    "reaches it.")
        if _near(got, math.log2(largest), 0.01) or _near(got, math.log2(largest) - 1, 0.01):
            return ("That is an exponent of 2, and exp is a power of e: convert with a natural "
                    "logarithm.")
        if abs(got - limit) < 1:
            return "Close: it must be within 0.01; compute it instead of reading it off a table."
        return None
    return diagnose


def _diag_shift(got: float) -> str | None:
    return ("In exact arithmetic the shift cancels completely: exp(z_i + c) = exp(c) exp(z_i), "
            "and the same factor exp(c) multiplies the denominator. Only rounding can tell the "
            "two apart.")


def _diag_denominator_min(got: float) -> str | None:
    if got == 0:
        return ("Not 0: that is the point of the shift. Which term of the sum is the same for "
                "every row?")
    if got < 1:
        return "Look for one term of the sum whose value you know exactly for every row."
    return None


def _diag_denominator_max(got: float) -> str | None:
    if got == ROW_LENGTH - 1:
        return "Off by one: count every term of the row, the maximum's own term included."
    if got == 1:
        return "That is the smallest it can be; when is it largest?"
    if got > ROW_LENGTH:
        return "After the shift no exponent is positive: how large can one term be?"
    return None


SOFTMAX_NUMBERS = (
    NumericQuestion("exp_overflow_float32", "the largest x with a finite float32 exp(x)",
                    EXP_LIMIT_FLOAT32, atol=0.01, diagnose=_diag_exp_limit(32),
                    hint="exp(x) is finite while it does not exceed the largest finite float32; "
                         "np.finfo(np.float32) knows that value."),
    NumericQuestion("exp_overflow_float64", "the largest x with a finite float64 exp(x)",
                    EXP_LIMIT_FLOAT64, atol=0.01, diagnose=_diag_exp_limit(64),
                    hint="exp(x) is finite while it does not exceed the largest finite float64."),
    NumericQuestion("shift_difference",
                    "max_i |softmax(z + c)_i - softmax(z)_i| in exact arithmetic", 0.0,
                    diagnose=_diag_shift, hint="Write softmax(z + c)_i out and simplify."),
    NumericQuestion("denominator_min", "the smallest possible sum_j exp(z_j - max(z))", 1.0,
                    atol=1e-9, diagnose=_diag_denominator_min,
                    hint="One term of the sum is known exactly whatever the row holds; the "
                         "others are >= 0."),
    NumericQuestion("denominator_max",
                    f"the largest possible sum_j exp(z_j - max(z)) over {ROW_LENGTH:,} entries",
                    float(ROW_LENGTH), atol=1e-9, diagnose=_diag_denominator_max,
                    hint="After the shift every exponent is <= 0: bound each term, then the sum."),
)


def check_softmax_numbers(answer: Any) -> Verdict:
    if not isinstance(answer, Mapping):
        return ask_for_numbers("softmax_numbers", SOFTMAX_NUMBERS)
    return check_numbers(answer, SOFTMAX_NUMBERS)


# ================================================================== 2b · a stable softmax

@dataclass(frozen=True)
class SoftmaxCase:
    """A float32 logit vector and what makes it interesting."""

    label: str
    z: np.ndarray
    large: bool

    def describe(self) -> str:
        return self.label


def stable_softmax_cases(seed: int = 2048) -> list[SoftmaxCase]:
    rng = np.random.default_rng(seed)

    def f32(values) -> np.ndarray:
        return np.asarray(values, dtype=np.float32)

    normal = [SoftmaxCase("a single standard normal logit" if n == 1 else
                          f"{n:,} standard normal logits", f32(rng.standard_normal(n)), False)
              for n in (1, 2, 7, 100, 4097)]
    normal.append(SoftmaxCase("300 logits of standard deviation 5", f32(rng.normal(0, 5, 300)),
                              False))
    large = [
        SoftmaxCase("a single logit of 10,000", f32([1e4]), True),
        SoftmaxCase("64 logits around 100", f32(100 + rng.standard_normal(64)), True),
        SoftmaxCase("1,000 logits spread over [-10,000, 10,000]", f32(rng.uniform(-1e4, 1e4, 1000)),
                    True),
        SoftmaxCase("8 logits all equal to 10,000", f32(np.full(8, 1e4)), True),
        SoftmaxCase("5 logits all equal to -10,000", f32(np.full(5, -1e4)), True),
        SoftmaxCase("one logit of 10,000 among 99 zeros", f32([1e4] + [0.0] * 99), True),
        SoftmaxCase("50 logits between -10,000 and -9,000", f32(rng.uniform(-1e4, -9e3, 50)), True),
    ]
    return normal + large


def _why_not_finite(z: np.ndarray) -> str:
    if np.max(z) > EXP_LIMIT_FLOAT32:
        return (f"exp({fmt(float(np.max(z)))}) is infinite in float32, and inf / inf is NaN. "
                "Shifting the logits so that the largest exponent is 0 keeps every exp(.) in "
                "(0, 1]; section 2a showed that the shift changes nothing else.")
    return ("every exp(z_i) of these logits rounds to 0 in float32, and 0 / 0 is NaN. Shifting "
            "the logits so that the largest exponent is 0 makes at least one term exactly 1; "
            "section 2a showed that the shift changes nothing else.")


def _check_stable_softmax(fn: Any) -> str | None:
    name = "stable_softmax"
    for case in stable_softmax_cases():
        called = _call(name, fn, (case.z.copy(),), f"{case.describe()}, a float32 array")
        if called.problem:
            return called.problem
        raw = called.value
        if isinstance(raw, torch.Tensor):
            raw = raw.detach().cpu().numpy()
        try:
            got = np.asarray(raw)
        except (TypeError, ValueError) as err:
            return f"{name} returned {type(raw).__name__}, which is not an array ({err})."
        expected = softmax64(case.z.astype(np.float64))
        if got.shape != expected.shape:
            return (f"{name}: for {case.describe()} the result must have the shape of z, "
                    f"{expected.shape}; yours has shape {got.shape}.")
        if got.dtype != np.float32:
            return (f"{name} returned {got.dtype} for {case.describe()}; compute in float32 "
                    "(the precision of the kernel you are about to write) and return float32. "
                    "np.exp of a float32 array stays float32, and so does arithmetic with plain "
                    "Python numbers; an np.float64 value, math.exp or an array built from a "
                    "Python list brings in float64.")
        got64 = got.astype(np.float64)
        if not np.all(np.isfinite(got64)):
            hint = (_why_not_finite(case.z) if case.large else
                    "these logits are small enough for any formula: look for a division by zero.")
            return f"{name} returned NaN or infinity for {case.describe()}.\n  Hint: {hint}"
        if not np.allclose(got64, expected, rtol=RTOL_FLOAT32, atol=ATOL_FLOAT32):
            total = float(got64.sum())
            if np.allclose(got64, expected, rtol=3e-3, atol=1e-6):
                hint = ("Right up to about 1e-3: that is half precision. Compute in float32 "
                        f"(within {RTOL_FLOAT32:g} relative of float64 is what float32 gives).")
            elif not abs(total - 1) < 1e-3:
                hint = f"Probabilities sum to 1; yours sum to {total:.6g}."
            else:
                hint = "y_i = exp(z_i - m) / sum_j exp(z_j - m) with m = max(z)."
            return (f"{name}: wrong values for {case.describe()}.\n"
                    f"  {worst_entry(got64, expected)}\n  Hint: {hint}")
    return None


def check_stable_softmax(answer: Any) -> Verdict:
    refused = missing_functions(answer, ("stable_softmax",))
    if refused:
        return refused
    cases = stable_softmax_cases()
    good = (f"finite and within {RTOL_FLOAT32:g} of float64 on all {len(cases)} cases, "
            f"{sum(c.large for c in cases)} of them with logits far beyond exp's range.")
    return functions_verdict([("stable_softmax", _check_stable_softmax(answer["stable_softmax"]),
                               good)])


# ================================================================== 3 · the online softmax

@dataclass(frozen=True)
class Stream:
    """Scores arriving one at a time (or a block at a time), optionally with a value row each."""

    label: str
    xs: np.ndarray
    blocks: tuple[int, ...]           # how the block functions see it: the sizes, in order
    values: np.ndarray | None = None  # (len(xs), d) for the attention variant

    def describe(self) -> str:
        return self.label

    def split(self) -> list[slice]:
        starts = np.cumsum((0,) + self.blocks[:-1])
        return [slice(int(s), int(s) + b) for s, b in zip(starts, self.blocks)]


def _random_blocks(rng: np.random.Generator, n: int, largest: int) -> tuple[int, ...]:
    sizes = []
    while sum(sizes) < n:
        sizes.append(int(min(rng.integers(1, largest + 1), n - sum(sizes))))
    return tuple(sizes)


def online_streams(seed: int = 1024) -> list[Stream]:
    """Short and long streams, small and huge scores, maxima that come first, last and anywhere."""
    rng = np.random.default_rng(seed)
    raw = [
        ("a stream of one score", np.array([2.5])),
        ("2 scores, the larger one last", np.array([-1.0, 3.0])),
        ("10 random scores", rng.normal(0, 3, 10)),
        ("257 random scores", rng.standard_normal(257)),
        ("500 scores in increasing order (the maximum keeps arriving late)",
         np.sort(rng.uniform(-50, 50, 500))),
        ("100 scores in decreasing order (the maximum first)",
         np.sort(rng.normal(0, 4, 100))[::-1]),
        ("300 scores between -3,000 and 3,000", rng.uniform(-3e3, 3e3, 300)),
        ("200 scores between -5,000 and -4,000", rng.uniform(-5e3, -4e3, 200)),
        ("64 scores rising to 2,000 (the maximum last)", np.linspace(-40, 2e3, 64)),
    ]
    streams = []
    for i, (label, xs) in enumerate(raw):
        blocks = (len(xs),) if i == 3 else _random_blocks(rng, len(xs), 37)
        streams.append(Stream(label, xs, blocks))
    return streams


def attention_streams(seed: int = 4096) -> list[Stream]:
    rng = np.random.default_rng(seed)
    raw = [
        ("a row with one key, d = 4", np.array([0.3]), 4),
        ("a row of 5 keys, d = 8", rng.standard_normal(5), 8),
        ("a row of 64 keys, d = 16", rng.normal(0, 3, 64), 16),
        ("a row of 300 keys with scores up to +-500, d = 8", rng.uniform(-500, 500, 300), 8),
        ("a row of 200 keys whose scores increase (the maximum arrives last), d = 4",
         np.sort(rng.uniform(-100, 900, 200)), 4),
        ("a row of 129 keys whose largest score comes first, d = 8",
         np.concatenate(([50.0], rng.normal(0, 5, 128))), 8),
    ]
    streams = []
    for i, (label, s, d) in enumerate(raw):
        blocks = (len(s),) if i == 2 else _random_blocks(rng, len(s), 40)
        streams.append(Stream(label, s, blocks, rng.standard_normal((len(s), d))))
    return streams


def two_pass(xs: np.ndarray) -> tuple[float, float]:
    """What the streaming recurrence must agree with: the max first, then the shifted sum."""
    m = float(np.max(xs))
    return m, float(np.sum(np.exp(xs - m)))


# Each slip model replays a recurrence with one mistake, block by block (blocks of one value for
# online_update). Errors of IEEE arithmetic are expected: inf and NaN are part of what they show.

def _online_model(blocks: list[np.ndarray], slip: str) -> tuple[float, float]:
    m, l = -math.inf, 0.0
    with np.errstate(all="ignore"):
        for xs in blocks:
            m_new = max(m, float(np.max(xs)))
            if slip == "no rescale":
                l = l + float(np.sum(np.exp(xs - m_new)))
            elif slip == "inverted rescale":
                l = l * math.exp(min(m_new - m, 700.0)) + float(np.sum(np.exp(xs - m_new)))
            elif slip == "block's own max":
                l = l * math.exp(m - m_new) + float(np.sum(np.exp(xs - np.max(xs))))
            elif slip == "no max":
                l = l + float(np.sum(np.exp(xs)))
            m = m_new
    return m, l


ONLINE_SLIPS = {
    "no rescale": ("l is not rescaled when m grows. The terms already in l were measured from "
                   "the old maximum, exp(x - m_old); once the maximum is m_new, each of them must "
                   "become exp(x - m_new), and one factor does that for the whole sum."),
    "inverted rescale": ("The rescaling factor is upside down: going from exp(x - m_old) to "
                         "exp(x - m_new) with m_new >= m_old multiplies by a factor <= 1."),
    "block's own max": ("The block's terms are measured from the block's own maximum; l holds "
                        "terms measured from the running maximum, so measure the new ones from "
                        "m_new too."),
    "no max": ("l holds sum exp(x) without the shift, which overflows; keep l = sum exp(x - m) "
               "with m the running maximum."),
}


def _read_online_state(name: str, raw: Any) -> tuple[tuple[float, float] | None, str | None]:
    try:
        m, l = raw
        return (float(m), float(l)), None
    except (TypeError, ValueError) as err:
        return None, (f"{name} must return the new state as a pair (m, l); it returned "
                      f"{type(raw).__name__} ({err}).")


def _diagnose_online(stream: Stream, blocks: list[np.ndarray], got: tuple[float, float]) -> str:
    m_true, _ = two_pass(stream.xs)
    m, l = got
    if m != m_true and not close(m, m_true, 1e-12):
        return (f"m is {fmt(m)}, but the largest score of the stream is {fmt(m_true)}: m must be "
                "the running maximum of everything seen so far.")
    if not math.isfinite(l):
        return ("l became infinite or NaN: some exp() got a large positive argument. Every term "
                "should be exp(x - m) with m >= x, so it lies in (0, 1].")
    for slip, hint in ONLINE_SLIPS.items():
        sm, sl = _online_model(blocks, slip)
        if math.isfinite(sl) and close(l, sl, RTOL_ONLINE) and sm == m:
            return hint
    return ("The new l has two parts: the old sum, re-measured from the new maximum, and the new "
            "scores' terms, measured from the new maximum too. Try your function by hand on the "
            "stream 0, 1: it must end at (m, l) = (1, 1 + exp(-1)).")


def _check_online_function(name: str, fn: Any, streams: list[Stream], block: bool) -> str | None:
    for stream in streams:
        pieces = [stream.xs[s].copy() for s in stream.split()] if block else \
            [stream.xs[i:i + 1] for i in range(stream.xs.size)]
        state: Any = (-math.inf, 0.0)
        for piece in pieces:
            arg = piece.copy() if block else float(piece[0])
            what = (f"a block of {piece.size} scores" if block else f"the score {fmt(arg)}")
            called = _call(name, fn, (state, arg),
                           f"state = {state!r} and {what}, in {stream.label}")
            if called.problem:
                return called.problem
            state = called.value
        got, problem = _read_online_state(name, state)
        if problem:
            return problem
        expected = two_pass(stream.xs)
        if got[0] == expected[0] and close(got[1], expected[1], RTOL_ONLINE):
            continue
        fed = (f"fed in {len(pieces)} blocks of {min(map(len, pieces))} to {max(map(len, pieces))} "
               "scores" if block else "fed one score at a time")
        return (f"{name}: wrong final state for {stream.describe()}, {fed}.\n"
                f"  expected (m, l) = ({expected[0]:.10g}, {expected[1]:.10g}), "
                f"got ({got[0]:.10g}, {got[1]:.10g})\n"
                f"  Hint: {_diagnose_online(stream, [p.reshape(-1) for p in pieces], got)}")
    return None


def _flash_model(stream: Stream, rescale_l: bool = True,
                 rescale_acc: bool = True) -> tuple[float, float, np.ndarray]:
    """The state (m, l, acc) after the whole row, with or without the rescaling of l and acc."""
    d = stream.values.shape[1]
    m, l, acc = -math.inf, 0.0, np.zeros(d)
    with np.errstate(all="ignore"):
        for part in stream.split():
            s, v = stream.xs[part], stream.values[part]
            m_new = max(m, float(np.max(s)))
            alpha = math.exp(m - m_new)
            p = np.exp(s - m_new)
            l = (alpha * l if rescale_l else l) + float(p.sum())
            acc = (alpha * acc if rescale_acc else acc) + p @ v
            m = m_new
    return m, l, acc


FLASH_SLIPS = (
    (False, True, "l is not rescaled when m grows (acc is). Both hold sums weighted by "
                  "exp(s - m): they need the same factor."),
    (True, False, "acc is not rescaled when m grows. acc = sum_j exp(s_j - m) v_j holds the same "
                  "weights as l, so when m changes it needs the same factor exp(m_old - m_new)."),
    (False, False, "Neither l nor acc is rescaled when m grows: both hold weights exp(s - m_old) "
                   "that must become exp(s - m_new)."),
)
FLASH_HINT = ("l and acc are sums with the same weights exp(s_j - m): whatever happens to one "
                "when m grows or a block arrives happens to the other. Try a row of two keys fed "
                "one at a time, and compare acc / l with softmax(s) @ v.")


def _read_flash_state(raw: Any,
                      d: int) -> tuple[tuple[float, float, np.ndarray] | None, str | None]:
    try:
        m, l, acc = raw
        acc = np.asarray(acc, dtype=np.float64)
        state = float(m), float(l), acc
    except (TypeError, ValueError) as err:
        return None, ("flash_update must return the new state as a triple (m, l, acc); it "
                      f"returned {type(raw).__name__} ({err}).")
    if acc.shape != (d,):
        return None, (f"flash_update: acc must be a vector of the row's d = {d} numbers; yours "
                      f"has shape {acc.shape}.")
    return state, None


def _diagnose_flash_update(stream: Stream, got: tuple[float, float, np.ndarray]) -> str:
    m_true, l_true, acc_true = _flash_model(stream)
    m, l, acc = got
    if m != m_true and not close(m, m_true, 1e-12):
        return (f"m is {fmt(m)}, but the largest score of the row is {fmt(m_true)}: m must be the "
                "running maximum of everything seen so far.")
    if not (math.isfinite(l) and np.all(np.isfinite(acc))):
        return ("NaN or infinity: some exp() got a large positive argument. Measure every weight "
                "from the running maximum, so that it lies in (0, 1].")
    for rescale_l, rescale_acc, hint in FLASH_SLIPS:
        _, sl, sacc = _flash_model(stream, rescale_l, rescale_acc)
        if close(l, sl, RTOL_ONLINE) and np.allclose(acc, sacc, rtol=RTOL_ONLINE, atol=ATOL_ONLINE):
            return hint
    if close(l, l_true, RTOL_ONLINE) and np.allclose(acc * l, acc_true, rtol=1e-6):
        return ("acc should stay unnormalised (a weighted sum, not an average): dividing by l is "
                "flash_finalize's job.")
    return FLASH_HINT


def _check_flash_update(fn: Any, streams: list[Stream]) -> str | None:
    name = "flash_update"
    for stream in streams:
        d = stream.values.shape[1]
        state: Any = (-math.inf, 0.0, np.zeros(d))
        for part in stream.split():
            s, v = stream.xs[part].copy(), stream.values[part].copy()
            where = f"a block of {s.size} scores and v of shape {v.shape}, in {stream.label}"
            called = _call(name, fn, (state, s, v), where)
            if called.problem:
                return called.problem
            state = called.value
        got, problem = _read_flash_state(state, d)
        if problem:
            return problem
        m_true, l_true, acc_true = _flash_model(stream)
        m, l, acc = got
        if m == m_true and close(l, l_true, RTOL_ONLINE) and np.allclose(
                acc, acc_true, rtol=RTOL_ONLINE, atol=ATOL_ONLINE):
            continue
        return (f"{name}: wrong final state for {stream.label}, fed in {len(stream.blocks)} "
                "blocks.\n"
                f"  expected m = {m_true:.10g}, l = {l_true:.10g}; got m = {m:.10g}, l = {l:.10g}"
                + ("" if acc.shape != acc_true.shape or np.allclose(acc, acc_true, rtol=RTOL_ONLINE,
                                                                   atol=ATOL_ONLINE)
                   else f"\n  acc: {worst_entry(acc, acc_true)}")
                + f"\n  Hint: {_diagnose_flash_update(stream, got)}")
    return None


def _check_flash_finalize(fn: Any, streams: list[Stream]) -> str | None:
    name = "flash_finalize"
    for stream in streams:
        m, l, acc = _flash_model(stream)
        called = _call(name, fn, ((m, l, acc.copy()),),
                       f"the state (m, l, acc) at the end of {stream.label}")
        if called.problem:
            return called.problem
        got, problem = as_float_array(name, called.value)
        if problem:
            return problem
        expected = softmax64(stream.xs) @ stream.values
        if got.shape != expected.shape:
            return (f"{name}: for {stream.label} the output row must have shape (d,) = "
                    f"{expected.shape}; yours has shape {got.shape}.")
        if np.all(np.isfinite(got)) and np.allclose(got, expected, rtol=RTOL_ONLINE,
                                                    atol=ATOL_ONLINE):
            continue
        if np.allclose(got, acc, rtol=RTOL_ONLINE, atol=ATOL_ONLINE):
            hint = "That is acc itself: the weights still need normalising."
        else:
            hint = "o is the weighted average of the value rows: acc holds the weighted sum."
        return (f"{name}: wrong output row for {stream.label}, compared with softmax(s) @ v.\n"
                f"  {worst_entry(got, expected)}\n  Hint: {hint}")
    return None


def check_online_softmax(answer: Any) -> Verdict:
    names = ("online_update", "online_update_block", "flash_update", "flash_finalize")
    refused = missing_functions(answer, names)
    if refused:
        return refused
    streams, rows = online_streams(), attention_streams()
    return functions_verdict([
        ("online_update", _check_online_function("online_update", answer["online_update"],
                                                 streams, block=False),
         f"agrees with the two-pass (max, sum) on all {len(streams)} streams."),
        ("online_update_block", _check_online_function("online_update_block",
                                                       answer["online_update_block"], streams,
                                                       block=True),
         f"agrees with the two-pass (max, sum) on all {len(streams)} streams, fed in blocks."),
        ("flash_update", _check_flash_update(answer["flash_update"], rows),
         f"the state (m, l, acc) is right after all {len(rows)} rows, fed in blocks."),
        ("flash_finalize", _check_flash_finalize(answer["flash_finalize"], rows),
         f"equals softmax(s) @ v on all {len(rows)} rows."),
    ])


# ================================================================== 4 · what fusing saves

SCORE_BYTES = 4   # the naive version keeps fp32 scores, as the baselines do
NAIVE_PASSES = 4  # written by q k^T, read and rewritten by the softmax, read by P v


@dataclass(frozen=True)
class Shape:
    """An attention problem at a benchmark size of exercise.toml."""

    key: str
    task: str
    bh: int
    seq: int
    dim: int
    causal: int
    element_bytes: int

    def describe(self) -> str:
        dtype = "fp32" if self.element_bytes == 4 else "bf16"
        return (f"{dtype}, bh = {self.bh}, seq = {self.seq:,}, dim = {self.dim}, "
                f"causal = {self.causal}")

    @property
    def pairs(self) -> int:
        """Query-key pairs whose score is needed: all of them, or the lower triangle."""
        return self.seq * (self.seq + 1) // 2 if self.causal else self.seq * self.seq

    @property
    def flops(self) -> float:
        return float(2 * 2 * self.bh * self.pairs * self.dim)

    @property
    def bytes_fused(self) -> float:
        return float(4 * self.bh * self.seq * self.dim * self.element_bytes)

    @property
    def score_bytes(self) -> float:
        return float(self.bh * self.seq * self.seq * SCORE_BYTES)

    @property
    def bytes_naive(self) -> float:
        return self.bytes_fused + NAIVE_PASSES * self.score_bytes

    def truth(self) -> dict[str, float]:
        return {"flops": self.flops, "bytes_naive": self.bytes_naive,
                "bytes_fused": self.bytes_fused,
                "traffic_ratio": self.bytes_naive / self.bytes_fused,
                "intensity_naive": self.flops / self.bytes_naive,
                "intensity_fused": self.flops / self.bytes_fused}


def _shape(key: str, task_name: str, causal: int) -> Shape:
    """A task's first benchmark size, with the causal setting asked for."""
    task = EXERCISE.task(task_name)
    values = task.benchmarks[0].values
    q = next(a for a in task.args if a.name == "q")
    return Shape(key, task_name, values["bh"], values["seq"], values["dim"], causal, q.itemsize)


SHAPES = (
    _shape("fp32", "attention", 0),
    _shape("bf16", "attention_bf16", 0),
    _shape("bf16_causal", "attention_bf16", 1),
)
COST_FIELDS = ("flops", "bytes_naive", "bytes_fused", "traffic_ratio", "intensity_naive",
               "intensity_fused")


def _is(got: float, value: float) -> bool:
    return close(got, value, RTOL_COSTS)


def _diag_flops(shape: Shape, got: float) -> str:
    if shape.causal and _is(got, 2 * shape.flops):
        return ("That is the full square: with the causal mask only the pairs with key <= query "
                "need a score and a weight, about half of them.")
    if not shape.causal and _is(got, shape.flops / 2):
        return ("Half the truth: count 2 FLOPs per multiply-add, both products (q k^T and P v), "
                "and every pair (no mask here).")
    if _is(got, shape.flops / 2):
        return "Half the truth: count 2 FLOPs per multiply-add, and both products (q k^T and P v)."
    return ("Each product takes dim multiply-adds per query-key pair it computes, "
            "2 FLOPs each; there are two products.")


def _diag_bytes_fused(shape: Shape, got: float) -> str:
    if _is(got, shape.bytes_fused / shape.element_bytes):
        return "That counts elements; count bytes."
    if _is(got, shape.bytes_fused * 4 / shape.element_bytes) and shape.element_bytes != 4:
        return "q, k, v and o are bf16 here: 2 bytes per element."
    if _is(got, shape.bytes_fused * 3 / 4):
        return "That leaves one tensor out: q, k and v are read once and o is written once."
    if _is(got, shape.bytes_naive) or got > shape.bytes_fused * 2:
        return ("A fused kernel never writes the scores to memory: they live in registers and "
                "shared memory.")
    return "q, k and v are read once and o written once, each bh x seq x dim."


def _diag_bytes_naive(shape: Shape, got: float) -> str:
    """Every known slip that lands on got: some coincide (two passes of fp32 scores are four
    passes of bf16 ones), so the message names each of them."""
    scores, io = shape.score_bytes, shape.bytes_fused
    found = []
    for passes, text in (
        (1, "That counts the score matrix once; it crosses the memory bus on every pass."),
        (2, "That counts the score matrix written once and read once; the softmax between the "
            "products reads it and writes it back too."),
        (3, "One pass short: written by q k^T, read and rewritten by the softmax, read by P v."),
        (6, "That is the baselines' traffic, whose softmax reads each row three times; count "
            "a softmax that reads its input once, as yours does."),
    ):
        if _is(got, io + passes * scores) or _is(got, passes * scores):
            found.append(text)
    if shape.element_bytes != 4 and _is(got, io + NAIVE_PASSES * scores * shape.element_bytes / 4):
        found.append("The naive version keeps its scores in fp32 (4 bytes), even when q, k and v "
                     "are bf16.")
    if shape.causal and _is(got, io + NAIVE_PASSES * scores / 2):
        found.append("A naive kernel stores the whole seq x seq square, masked entries included "
                     "(they hold -inf); the mask saves FLOPs, not traffic.")
    if not found and _is(got, NAIVE_PASSES * scores):
        found.append("Add the q, k, v and o traffic (the same as the fused version's).")
    if not found:
        return ("The q, k, v and o traffic of the fused version, plus 4 passes over a "
                "bh x seq x seq matrix of fp32 scores.")
    return "\n    Or: ".join(found)


def _diag_derived(field: str, shape: Shape, got: float, mine: Mapping[str, float | None]) -> str:
    numerator, denominator = {"traffic_ratio": ("bytes_naive", "bytes_fused"),
                              "intensity_naive": ("flops", "bytes_naive"),
                              "intensity_fused": ("flops", "bytes_fused")}[field]
    truth = shape.truth()[field]
    if close(got * truth, 1.0, RTOL_COSTS):
        return f"Upside down: {field} = {numerator} / {denominator}."
    top, bottom = mine.get(numerator), mine.get(denominator)
    if top is not None and bottom and close(got, top / bottom, 1e-6):
        return "It follows from your other numbers; fix those first."
    return f"{field} = {numerator} / {denominator}."


def check_attention_costs(answer: Any) -> Verdict:
    if not isinstance(answer, Mapping):
        return Verdict(False, "Pass the dict `attention_costs` from the answer cell: one entry per "
                              "shape (" + ", ".join(s.key for s in SHAPES) + "), each with "
                              + ", ".join(COST_FIELDS) + ".")

    def hint(shape: Shape, field: str, got: float, mine: Mapping[str, float | None]) -> str:
        return {"flops": lambda: _diag_flops(shape, got),
                "bytes_naive": lambda: _diag_bytes_naive(shape, got),
                "bytes_fused": lambda: _diag_bytes_fused(shape, got)}.get(
            field, lambda: _diag_derived(field, shape, got, mine))()

    rows = [TableRow(shape.key, shape.describe(), shape.truth, partial(hint, shape)) for shape in SHAPES]
    passed, lines = check_table(answer, rows, COST_FIELDS, accepts=_is,
                                wrong=f"is not right (within {RTOL_COSTS:.0%}).",
                                right="FLOPs, bytes, ratio and intensities.")
    return Verdict(passed, "\n".join(lines))


# ------------------------------------------------------------------ 4b · when the exponentials are the limit
# Hopper's rates per SM and per clock, dense: 16 results a clock from the special-function unit
# (MUFU: ex2, lg2, rsqrt, sin, cos; CUDA C++ Programming Guide, arithmetic-instruction throughput
# for compute capability 9.0), against 4096 bf16 FLOPs (2048 multiply-adds) a clock from the
# tensor cores through wgmma (H100 whitepaper: twice A100's 1024 multiply-adds per SM and clock;
# 132 SMs x 4096 x 1.83 GHz = 989 TFLOP/s, the datasheet's dense figure).
MUFU_PER_CLOCK = 16
TENSOR_FLOPS_PER_CLOCK = 4096
EXP_DIM, EXP_DIM_SMALL = 128, 64


def _exp_truth() -> dict[str, float]:
    flops_per_exp = 4 * EXP_DIM  # per score: 2 d FLOPs in S = q k^T, 2 d in O += P v
    ratio = (1 / MUFU_PER_CLOCK) / (flops_per_exp / TENSOR_FLOPS_PER_CLOCK)
    ratio_small = (1 / MUFU_PER_CLOCK) / (4 * EXP_DIM_SMALL / TENSOR_FLOPS_PER_CLOCK)
    return {"flops_per_exp": float(flops_per_exp), "exp_over_matmul": ratio,
            "exp_share_serial": ratio / (1 + ratio), "peak_share_serial": 1 / (1 + ratio),
            "exp_over_matmul_dim64": ratio_small}


EXP_TRUTH = _exp_truth()


def _diag_exp(key: str, factors: dict[float, str]) -> Callable[[float], str | None]:
    def diagnose(got: float) -> str | None:
        for factor, text in factors.items():
            if close(got, EXP_TRUTH[key] * factor, RTOL_COSTS):
                return text
        return None
    return diagnose


A100_RATE = ("That is A100's tensor-core rate per SM (1024 multiply-adds a clock); Hopper's wgmma "
             "does 2048, 4096 FLOPs.")
EXP_QUESTIONS = (
    NumericQuestion("flops_per_exp", f"tensor-core FLOPs per exponential at head dim {EXP_DIM}",
                    EXP_TRUTH["flops_per_exp"], rtol=RTOL_COSTS,
                    hint="Each score s_ij costs one exp; it took a dot product of length d in S = q k^T "
                         "and its weight is used in d multiply-adds of O += P v. 2 FLOPs a multiply-add.",
                    diagnose=_diag_exp("flops_per_exp", {
                        0.5: "Both products count: S = q k^T and O += P v, each d multiply-adds per score.",
                        0.25: "Count 2 FLOPs per multiply-add, in both products."})),
    NumericQuestion("exp_over_matmul", "time of the exponentials / time of the products, one SM, head dim 128",
                    EXP_TRUTH["exp_over_matmul"], rtol=RTOL_COSTS,
                    hint=f"Per score: 1 / {MUFU_PER_CLOCK} clock of MUFU against flops_per_exp / "
                         f"{TENSOR_FLOPS_PER_CLOCK} clock of tensor core.",
                    diagnose=_diag_exp("exp_over_matmul", {2.0: A100_RATE, 4.0: A100_RATE + " And count "
                                                           "both products."})),
    NumericQuestion("exp_share_serial", "share of the time the exponentials take if nothing overlaps them",
                    EXP_TRUTH["exp_share_serial"], rtol=RTOL_COSTS,
                    hint="One after the other, a tile takes products + exponentials: the share is "
                         "r / (1 + r) with r = exp_over_matmul.",
                    diagnose=_diag_exp("exp_share_serial", {
                        1.5: "That is exponentials / products; the share is of their sum."})),
    NumericQuestion("peak_share_serial", "the best share of the tensor-core peak without overlap",
                    EXP_TRUTH["peak_share_serial"], rtol=RTOL_COSTS,
                    hint="The tensor cores work only during the products: 1 / (1 + r)."),
    NumericQuestion("exp_over_matmul_dim64", "exponentials / products at head dim 64",
                    EXP_TRUTH["exp_over_matmul_dim64"], rtol=RTOL_COSTS,
                    hint="Half the FLOPs per score, the same exponentials.",
                    diagnose=_diag_exp("exp_over_matmul_dim64", {0.25: "Halving d halves the products' "
                                                                 "time, so the ratio doubles.",
                                                                 2.0: A100_RATE})),
)


def check_exp_bottleneck(answer: Any) -> Verdict:
    if not isinstance(answer, Mapping):
        return ask_for_numbers("exp_bottleneck", EXP_QUESTIONS)
    return check_numbers(answer, EXP_QUESTIONS)


# ================================================================== 5 · a training step: attention's backward

ATTENTION_BACKWARD = EXERCISE.task("attention_backward")
RTOL_DS = 1e-9


def _row_softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@dataclass(frozen=True)
class AttentionCase:
    """A small attention problem: q, k, v, dO of one head, and what the forward pass gives."""

    label: str
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    dO: np.ndarray

    @property
    def p(self) -> np.ndarray:
        return _row_softmax(self.q @ self.k.T / math.sqrt(self.q.shape[1]))

    @property
    def o(self) -> np.ndarray:
        return self.p @ self.v

    @property
    def dp(self) -> np.ndarray:
        return self.dO @ self.v.T


def attention_cases(seed: int = 4040) -> list[AttentionCase]:
    rng = np.random.default_rng(seed)
    shapes = [("one query and one key", 1, 1, 4), ("3 queries, 5 keys", 3, 5, 8),
              ("16 queries, 16 keys", 16, 16, 8), ("7 queries, 40 keys", 7, 40, 16)]
    cases = [AttentionCase(label, *(rng.standard_normal((n, d)) for n in (nq, nk, nk, nq)))
             for label, nq, nk, d in shapes]
    q, k, v, g = (rng.standard_normal((6, 8)) for _ in range(4))
    cases.append(AttentionCase("6 queries, 6 keys, scores of size 30 (peaked rows)", 4 * q, 4 * k, v, g))
    return cases


def ds_truth(case: AttentionCase) -> np.ndarray:
    """dL/dS for P = softmax(S) row by row and dL/dP = dP, from torch autograd in float64."""
    s = torch.tensor(case.q @ case.k.T / math.sqrt(case.q.shape[1]), requires_grad=True)
    torch.softmax(s, dim=1).backward(torch.tensor(case.dp))
    return s.grad.numpy()


DS_SLIPS = (
    (lambda p, dp: p * dp, "The second term is missing: each row of P sums to 1, so raising one score "
                           "lowers every other weight of its row; dS = P * (dP - something per row)."),
    (lambda p, dp: dp - (dp * p).sum(axis=1, keepdims=True), "Every term of the softmax's Jacobian carries a "
                                                             "factor P[i, j]: multiply by P."),
    (lambda p, dp: p * (dp - dp.sum(axis=1, keepdims=True)), "The row's inner product must be weighted by the "
                                                             "probabilities: sum_j dP[i, j] P[i, j]."),
    (lambda p, dp: p * (dp - (dp * p).sum(axis=0, keepdims=True)), "Each row (query) is its own softmax: sum "
                                                                    "along the row, over the keys, not down a column."),
    (lambda p, dp: p * ((dp * p).sum(axis=1, keepdims=True) - dp), "Every sign is flipped."),
)
DELTA_HINT = ("delta[i] = sum_j dP[i, j] P[i, j] with dP = dO v^T and o = P v: write the sum over j, then "
              "swap the order of the two sums.")


def _check_ds(fn: Any, cases: list[AttentionCase]) -> str | None:
    name = "ds_from_dp"
    for case in cases:
        p, dp = case.p, case.dp
        called = _call(name, fn, (p.copy(), dp.copy()), f"P and dP of shape {p.shape}, for {case.label}")
        if called.problem:
            return called.problem
        got, problem = as_float_array(name, called.value)
        if problem:
            return problem
        expected = ds_truth(case)
        if got.shape != expected.shape:
            return f"{name}: for {case.label} dS has the shape of P, {expected.shape}; yours has {got.shape}."
        if not np.allclose(got, expected, rtol=RTOL_DS, atol=ATOL_CALCULUS):
            hint = next((text for slip, text in DS_SLIPS
                         if np.allclose(got, slip(p, dp), rtol=RTOL_DS, atol=ATOL_CALCULUS)),
                        "Row i of dS is the softmax's vector-Jacobian product (section 1) of row i of dP.")
            return f"{name}: wrong values for {case.label}.\n  {worst_entry(got, expected)}\n  Hint: {hint}"
    return None


def _check_delta(fn: Any, cases: list[AttentionCase]) -> str | None:
    name = "delta_from_output"
    for case in cases:
        o = case.o
        called = _call(name, fn, (case.dO.copy(), o.copy()), f"dO and o of shape {o.shape}, for {case.label}")
        if called.problem:
            return called.problem
        got, problem = as_float_array(name, called.value)
        if problem:
            return problem
        expected = (case.dp * case.p).sum(axis=1)
        if got.shape != expected.shape:
            hint = ("one number per query row" if got.ndim != 1 else "a sum along each row, over dim")
            return (f"{name}: for {case.label} delta has one entry per query, shape {expected.shape}; yours "
                    f"has shape {got.shape}: {hint}.")
        if not np.allclose(got, expected, rtol=RTOL_DS, atol=ATOL_CALCULUS):
            return (f"{name}: for {case.label} it is not rowsum(dP * P).\n  {worst_entry(got, expected)}\n"
                    f"  Hint: {DELTA_HINT}")
    return None


def check_attention_softmax_backward(answer: Any) -> Verdict:
    names = ("ds_from_dp", "delta_from_output")
    refused = missing_functions(answer, names)
    if refused:
        return refused
    cases = attention_cases()
    return functions_verdict([
        ("ds_from_dp", _check_ds(answer["ds_from_dp"], cases),
         f"matches torch autograd through the row softmax on all {len(cases)} cases."),
        ("delta_from_output", _check_delta(answer["delta_from_output"], cases),
         f"equals rowsum(dP * P) on all {len(cases)} cases, without P."),
    ])


# ------------------------------------------------------------------ what the backward pass costs

BACKWARD_SHAPE = next(b for b in ATTENTION_BACKWARD.benchmarks if not b.values["causal"])
LONG_SEQ = EXERCISE.task("attention_bf16").benchmarks[0].values["seq"]   # 4,096
HEAD_DIM = BACKWARD_SHAPE.values["dim"]


def _backward_cost_truth() -> dict[str, float]:
    bh, seq, dim = (BACKWARD_SHAPE.values[k] for k in ("bh", "seq", "dim"))
    forward = EXERCISE.task("attention").flops({"bh": bh, "seq": seq, "dim": dim, "causal": 0})
    backward = ATTENTION_BACKWARD.work(BACKWARD_SHAPE)[0]
    p_bytes = 4 * LONG_SEQ * LONG_SEQ
    recompute = 2 * LONG_SEQ * LONG_SEQ * HEAD_DIM
    return {"forward_flops": float(forward), "backward_flops": float(backward),
            "backward_over_forward": backward / forward, "p_bytes_per_head": float(p_bytes),
            "recompute_flops_per_head": float(recompute), "recompute_flops_per_byte": recompute / (2 * p_bytes)}


BACKWARD_COSTS = _backward_cost_truth()


def _diag_times(key: str, factors: dict[float, str]) -> Callable[[float], str | None]:
    def diagnose(got: float) -> str | None:
        for factor, text in factors.items():
            if close(got, BACKWARD_COSTS[key] * factor, RTOL_COSTS):
                return text
        return None
    return diagnose


BACKWARD_QUESTIONS = (
    NumericQuestion("forward_flops", f"the forward pass's FLOPs at {BACKWARD_SHAPE.describe()}",
                    BACKWARD_COSTS["forward_flops"], rtol=RTOL_COSTS,
                    hint="Two products of seq x seq x dim multiply-adds per head, 2 FLOPs each.",
                    diagnose=_diag_times("forward_flops", {0.5: "Count 2 FLOPs per multiply-add."})),
    NumericQuestion("backward_flops", "the backward pass's FLOPs (its five products)",
                    BACKWARD_COSTS["backward_flops"], rtol=RTOL_COSTS,
                    hint="S = q k^T again, dV = P^T dO, dP = dO v^T, dQ = dS k, dK = dS^T q: five products "
                         "of the forward's size.",
                    diagnose=_diag_times("backward_flops", {
                        0.8: "Four products: S = q k^T must be recomputed too, P is not stored.",
                        0.6: "Three products are the gradients; P and dP need two more (S and dP).",
                        0.5: "Count 2 FLOPs per multiply-add."})),
    NumericQuestion("backward_over_forward", "backward FLOPs / forward FLOPs", BACKWARD_COSTS["backward_over_forward"],
                    rtol=RTOL_COSTS, hint="backward_flops / forward_flops."),
    NumericQuestion("p_bytes_per_head", f"bytes of P for one head at seq = {LONG_SEQ:,}, fp32",
                    BACKWARD_COSTS["p_bytes_per_head"], rtol=RTOL_COSTS,
                    hint="seq x seq weights of 4 bytes.",
                    diagnose=_diag_times("p_bytes_per_head", {0.25: "Count bytes, 4 per fp32 weight.",
                                                              0.5: "P is fp32 here: 4 bytes a weight."})),
    NumericQuestion("recompute_flops_per_head", f"FLOPs to recompute S = q k^T for that head, dim = {HEAD_DIM}",
                    BACKWARD_COSTS["recompute_flops_per_head"], rtol=RTOL_COSTS,
                    hint="seq x seq dot products of dim multiply-adds, 2 FLOPs each.",
                    diagnose=_diag_times("recompute_flops_per_head", {0.5: "Count 2 FLOPs per multiply-add."})),
    NumericQuestion("recompute_flops_per_byte", "recompute FLOPs / bytes of writing P and reading it back",
                    BACKWARD_COSTS["recompute_flops_per_byte"], rtol=RTOL_COSTS,
                    hint="Storing P costs a write in the forward pass and a read in the backward pass.",
                    diagnose=_diag_times("recompute_flops_per_byte", {
                        2.0: "P crosses the bus twice: written by the forward pass, read by the backward."})),
)


def check_backward_costs(answer: Any) -> Verdict:
    if not isinstance(answer, Mapping):
        return ask_for_numbers("backward_costs", BACKWARD_QUESTIONS)
    return check_numbers(answer, BACKWARD_QUESTIONS)


# ------------------------------------------------------------------ LayerNorm's backward

LAYERNORM_EPS = 1e-5


def layernorm_cases(seed: int = 768) -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray]]:
    """(label, x, gamma, dy): several shapes, one column, and rows with a large mean."""
    rng = np.random.default_rng(seed)
    cases = []
    for rows, cols in ((1, 1), (4, 1), (1, 5), (3, 7), (8, 16), (5, 64)):
        cases.append((f"x of shape ({rows}, {cols})", rng.standard_normal((rows, cols)),
                      rng.standard_normal(cols), rng.standard_normal((rows, cols))))
    cases.append(("x of shape (4, 32) around 100", 100 + rng.standard_normal((4, 32)), rng.standard_normal(32),
                  rng.standard_normal((4, 32))))
    return cases


def layernorm_truth(x: np.ndarray, gamma: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, ...]:
    """dx, dgamma, dbeta of y = layer_norm(x) * gamma + beta, from torch autograd in float64."""
    xt = torch.tensor(x, requires_grad=True)
    gt = torch.tensor(gamma, requires_grad=True)
    bt = torch.zeros(len(gamma), dtype=torch.float64, requires_grad=True)
    torch.nn.functional.layer_norm(xt, (x.shape[1],), gt, bt, eps=LAYERNORM_EPS).backward(torch.tensor(dy))
    return xt.grad.numpy(), gt.grad.numpy(), bt.grad.numpy()


def _layernorm_parts(x: np.ndarray, gamma: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, ...]:
    mean = x.mean(axis=1, keepdims=True)
    rstd = 1 / np.sqrt(((x - mean) ** 2).mean(axis=1, keepdims=True) + LAYERNORM_EPS)
    return (x - mean) * rstd, rstd, dy * gamma


DX_SLIPS = (
    (lambda xh, r, g, dy: r * (g - xh * (g * xh).mean(1, keepdims=True)),
     "The term from the mean is missing: every x_j moves the mean, and the mean moves every x_hat."),
    (lambda xh, r, g, dy: r * (g - g.mean(1, keepdims=True)),
     "The term from the variance is missing: every x_j moves rstd, and rstd scales every x_hat."),
    (lambda xh, r, g, dy: r * g, "Only the direct term is there: x_hat_i depends on every x_j through the mean "
                                 "and the variance."),
    (lambda xh, r, g, dy: r * (dy - dy.mean(1, keepdims=True) - xh * (dy * xh).mean(1, keepdims=True)),
     "That is the gradient without gamma: the gradient with respect to x_hat is g = dy * gamma."),
)


def _check_layernorm_dx(fn: Any, cases: list) -> str | None:
    name = "layernorm_dx"
    for label, x, gamma, dy in cases:
        called = _call(name, fn, (x.copy(), gamma.copy(), dy.copy()), f"{label}, gamma and dy")
        if called.problem:
            return called.problem
        got, problem = as_float_array(name, called.value)
        if problem:
            return problem
        expected = layernorm_truth(x, gamma, dy)[0]
        if got.shape != expected.shape:
            return f"{name}: for {label} dx has the shape of x, {expected.shape}; yours has {got.shape}."
        if not np.allclose(got, expected, rtol=1e-7, atol=1e-9):
            xh, r, g = _layernorm_parts(x, gamma, dy)
            hint = next((text for slip, text in DX_SLIPS
                         if np.allclose(got, slip(xh, r, g, dy), rtol=1e-7, atol=1e-9)),
                        "dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat)), means along each row; "
                        "check the variance: divided by cols (biased), with eps = 1e-5 inside the root.")
            return f"{name}: wrong values for {label}.\n  {worst_entry(got, expected)}\n  Hint: {hint}"
    return None


def _check_layernorm_params(fn: Any, cases: list) -> str | None:
    name = "layernorm_dgamma_dbeta"
    for label, x, gamma, dy in cases:
        called = _call(name, fn, (x.copy(), dy.copy()), f"{label} and dy")
        if called.problem:
            return called.problem
        try:
            dgamma, dbeta = (np.asarray(a, dtype=np.float64) for a in called.value)
        except (TypeError, ValueError) as err:
            return f"{name} must return the pair (dgamma, dbeta); it returned {type(called.value).__name__} ({err})."
        _, want_gamma, want_beta = layernorm_truth(x, gamma, dy)
        for what, got, expected in (("dgamma", dgamma, want_gamma), ("dbeta", dbeta, want_beta)):
            if got.shape != expected.shape:
                return (f"{name}: for {label} {what} has one entry per column, shape {expected.shape}; yours has "
                        f"shape {got.shape}: sum over the rows (axis 0).")
            if not np.allclose(got, expected, rtol=1e-7, atol=1e-9):
                xh = _layernorm_parts(x, gamma, dy)[0]
                term = dy * xh if what == "dgamma" else dy
                if what == "dgamma" and np.allclose(got, (dy * x).sum(axis=0)):
                    hint = "That sums dy * x: gamma multiplies x_hat, the normalised x."
                elif len(x) > 1 and np.allclose(got, term.mean(axis=0)):
                    hint = "A sum, not a mean: every row adds its own contribution to the parameter's gradient."
                else:
                    hint = "dgamma = sum over rows of dy * x_hat; dbeta = sum over rows of dy."
                return f"{name}: wrong {what} for {label}.\n  {worst_entry(got, expected)}\n  Hint: {hint}"
    return None


def check_layernorm_backward(answer: Any) -> Verdict:
    names = ("layernorm_dx", "layernorm_dgamma_dbeta")
    refused = missing_functions(answer, names)
    if refused:
        return refused
    cases = layernorm_cases()
    return functions_verdict([
        ("layernorm_dx", _check_layernorm_dx(answer["layernorm_dx"], cases),
         f"matches torch autograd through F.layer_norm on all {len(cases)} cases."),
        ("layernorm_dgamma_dbeta", _check_layernorm_params(answer["layernorm_dgamma_dbeta"], cases),
         f"matches torch autograd on all {len(cases)} cases."),
    ])


# ------------------------------------------------------------------ the loss: cross-entropy

def logsumexp_cases(seed: int = 50257) -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    f32 = partial(np.asarray, dtype=np.float32)
    return [("one logit", f32([2.5])), ("10 logits of size 1", f32(rng.standard_normal(10))),
            ("1,000 logits of size 3", f32(3 * rng.standard_normal(1000))),
            ("3 logits equal to 100", f32([100.0, 100.0, 100.0])),
            ("64 logits around 100", f32(100 + rng.standard_normal(64))),
            ("50,257 logits of size 1e4", f32(1e4 * rng.standard_normal(50257))),
            ("5 logits around -1e4", f32(-1e4 + rng.standard_normal(5)))]


def _logsumexp64(z: np.ndarray) -> float:
    z = z.astype(np.float64)
    m = float(z.max())
    return m + math.log(float(np.exp(z - m).sum()))


def _check_logsumexp(fn: Any) -> str | None:
    name = "logsumexp32"
    for label, z in logsumexp_cases():
        called = _call(name, fn, (z.copy(),), f"{label}, a float32 array")
        if called.problem:
            return called.problem
        got = np.asarray(called.value)
        if got.size != 1:
            return f"{name}: for {label} the result is one number; yours has shape {got.shape}."
        if got.dtype != np.float32:
            return (f"{name} returned {got.dtype} for {label}; compute in float32, as the kernel will (np.exp of "
                    "a float32 array stays float32; math.log and np.float64 bring in float64).")
        value, expected = float(got.reshape(())), _logsumexp64(z)
        if not math.isfinite(value):
            return (f"{name} returned {value} for {label}.\n  Hint: exp({fmt(float(z.max()))}) is beyond float32's "
                    f"largest number {FLOAT32_MAX:.3g} = exp({EXP_LIMIT_FLOAT32:.2f}) and becomes inf (or every "
                    "term rounds to 0 and log(0) = -inf). log sum exp(z) = m + log sum exp(z - m) for any m: take "
                    "m = max(z).")
        if abs(value - expected) > 2e-6 * max(1.0, abs(expected)):
            return (f"{name}: for {label} expected {expected:.9g}, got {value:.9g}.\n  Hint: "
                    "log sum exp(z) = m + log sum exp(z - m) with m = max(z): the shift comes back as + m.")
    return None


def cross_entropy_cases(seed: int = 32000) -> list[tuple[str, np.ndarray, int]]:
    rng = np.random.default_rng(seed)
    return [("one class", np.array([0.7]), 0), ("5 logits, target 0", rng.standard_normal(5), 0),
            ("5 logits, target 4 (the last)", rng.standard_normal(5), 4),
            ("100 logits of size 3, target 17", 3 * rng.standard_normal(100), 17),
            ("4 logits of size 1e4, target 2", 1e4 * rng.standard_normal(4), 2)]


def _check_ce_grad(fn: Any) -> str | None:
    name = "cross_entropy_grad"
    for label, z, target in cross_entropy_cases():
        called = _call(name, fn, (z.copy(), target), f"{label}")
        if called.problem:
            return called.problem
        got, problem = as_float_array(name, called.value)
        if problem:
            return problem
        zt = torch.tensor(z, requires_grad=True)
        torch.nn.functional.cross_entropy(zt[None], torch.tensor([target])).backward()
        expected = zt.grad.numpy()
        if got.shape != expected.shape:
            return f"{name}: for {label} the gradient has the shape of z, {expected.shape}; yours has {got.shape}."
        if not (np.all(np.isfinite(got)) and np.allclose(got, expected, rtol=1e-9, atol=1e-12)):
            onehot = np.eye(len(z))[target]
            y = softmax64(z)
            if np.allclose(got, onehot - y, atol=1e-12):
                hint = "The sign is flipped: raising the target's logit lowers the loss."
            elif np.allclose(got, y, atol=1e-12):
                hint = "-log y_target has a second term: its derivative at the target's own logit."
            elif not np.all(np.isfinite(got)):
                hint = "NaN or infinity: compute softmax with the maximum subtracted (section 2)."
            else:
                hint = "loss = logsumexp(z) - z_target: the derivative of the first term is softmax(z)."
            return f"{name}: wrong values for {label}.\n  {worst_entry(got, expected)}\n  Hint: {hint}"
    return None


def check_cross_entropy(answer: Any) -> Verdict:
    names = ("logsumexp32", "cross_entropy_grad")
    refused = missing_functions(answer, names)
    if refused:
        return refused
    return functions_verdict([
        ("logsumexp32", _check_logsumexp(answer["logsumexp32"]),
         f"finite and float32-exact on all {len(logsumexp_cases())} cases, logits of 100 and 1e4 included."),
        ("cross_entropy_grad", _check_ce_grad(answer["cross_entropy_grad"]),
         f"matches torch autograd through F.cross_entropy on all {len(cross_entropy_cases())} cases."),
    ])


# ================================================================== the prompts of exercise 04

PROMPTS = (
    Prompt("softmax_jacobian", "The softmax Jacobian and its vector-Jacobian product", 2.0,
           check_softmax_jacobian),
    Prompt("softmax_numbers", "Where float32 exp overflows, and why the shift is free", 1.0,
           check_softmax_numbers),
    Prompt("stable_softmax", "A softmax that survives float32", 1.0, check_stable_softmax),
    Prompt("online_softmax", "The online softmax and the flash-attention update", 3.0,
           check_online_softmax),
    Prompt("attention_costs", "FLOPs and memory traffic of naive and fused attention", 3.0,
           check_attention_costs),
    Prompt("exp_bottleneck", "When the exponentials, not the products, set the pace", 1.0,
           check_exp_bottleneck),
    Prompt("attention_softmax_backward", "Through the softmax backwards: dS, and delta without P", 2.0,
           check_attention_softmax_backward),
    Prompt("backward_costs", "What attention's backward pass costs, and why it recomputes P", 2.0,
           check_backward_costs),
    Prompt("layernorm_backward", "LayerNorm's backward pass", 2.0, check_layernorm_backward),
    Prompt("cross_entropy", "The loss: a stable logsumexp and its gradient", 2.0, check_cross_entropy),
)
