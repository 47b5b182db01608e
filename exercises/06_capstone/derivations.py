"""Checkers of the capstone's prompts: what one training step of the GPT costs, operator by
operator, and which operators the memory bus limits.

The truth is counted from the GPT's own configuration (gpt.py's Config, the full size that `grade
model gpt` trains on a GPU) with the per-call FLOP and byte counts of costs.py, which are the
exercises' own (each kernel's exercise.toml) and the ones the report's table adds up; the roofline
uses the spec sheet of the reference GPU. So the learner's numbers can be held against the measured
table line by line.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

from grader.derivations import core
from grader.derivations.core import Prompt, TableRow, Verdict, check_table, close, fmt
from hardware.specs import GpuSpec

HERE = Path(__file__).resolve().parent
# FLOPs and bytes follow from the shapes: room for leaving out a bias or the rows' statistics, not
# for leaving out a layer (the head alone is 0.9% of the linear layers' FLOPs).
RTOL_COSTS = 0.005
# Roofline figures: room for rounding a peak or a bandwidth by hand.
RTOL_ROOFLINE = 0.02

OPERATORS = ("linear_forward", "linear_backward", "layernorm_forward", "layernorm_backward", "attention",
             "attention_backward", "cross_entropy", "adamw_multi")
COST_FIELDS = ("calls", "flops", "bytes")
ROOFLINE_FIELDS = ("intensity", "time_us", "memory_bound")


def _sibling(name: str) -> ModuleType:
    """A module of this folder (gpt.py, costs.py), imported once by its path."""
    key = f"_s2s_capstone_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, HERE / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


def step_calls() -> dict[str, list[tuple[int, ...]]]:
    """Every kernel call of one training step of the full GPT, by operator, with its sizes (as the
    kernel receives them; the optimizer's are the parameter count)."""
    c = _sibling("gpt").Config()
    M, C, V = c.batch * c.context, c.width, c.vocab
    block = [(M, 3 * C, C, 0), (M, C, C, 0), (M, 4 * C, C, 1), (M, C, 4 * C, 0)]    # QKV, proj, fc1 + GELU, fc2
    linears = block * c.layers + [(M, V, C, 0)]                                      # and the head
    norms = [(M, C)] * (2 * c.layers + 1)                                            # two per block, the final one
    heads = [(c.batch * c.heads, c.context, c.head_dim, 1)] * c.layers
    return {"linear_forward": linears, "linear_backward": linears, "layernorm_forward": norms,
            "layernorm_backward": norms, "attention": heads, "attention_backward": heads,
            "cross_entropy": [(M, V)], "adamw_multi": [(c.parameters(),)] * 2}          # one launch per group


def step_costs() -> dict[str, dict[str, float]]:
    """calls, FLOPs and bytes of each operator in one training step."""
    costs = _sibling("costs")
    out = {}
    for name, calls in step_calls().items():
        if name in costs.PER_CALL:
            each = [costs.PER_CALL[name](*sizes) for sizes in calls]
            flops, nbytes = sum(f for f, _ in each), sum(b for _, b in each)
        else:
            flops, nbytes = costs.optimizer_step(calls[0][0])
        out[name] = {"calls": len(calls), "flops": flops, "bytes": nbytes}
    return out


def roofline_time_us(flops: float, nbytes: float, spec: GpuSpec) -> float:
    return max(flops / (spec.fp32_tflops * 1e12), nbytes / (spec.memory_bandwidth_gbs * 1e9)) * 1e6


def step_roofline(spec: GpuSpec) -> dict[str, dict[str, float]]:
    """Each operator's intensity, roofline floor (fp32 peak) and whether it sits below the ridge."""
    out = {}
    for name, c in step_costs().items():
        intensity = c["flops"] / c["bytes"]
        out[name] = {"intensity": intensity, "time_us": roofline_time_us(c["flops"], c["bytes"], spec),
                     "memory_bound": 1 if intensity < spec.ridge_fp32 else 0}
    return out


# ------------------------------------------------------------------ what one step costs

CALL_HINTS = {
    "linear_forward": "Four linear layers in each block (QKV, the projection, the MLP's two) and the head.",
    "layernorm_forward": "Two LayerNorms in each block (before attention, before the MLP) and the final one.",
    "attention": "One attention call per block: all batch x heads sequences at once (bh = batch x heads).",
    "cross_entropy": "One call for all batch x context positions at once.",
    "adamw_multi": "One launch per parameter group: the matrices and embeddings (with weight decay), the rest.",
}
CALL_HINTS["linear_backward"] = "Each forward call has its backward call. " + CALL_HINTS["linear_forward"]
CALL_HINTS["layernorm_backward"] = "Each forward call has its backward call. " + CALL_HINTS["layernorm_forward"]
CALL_HINTS["attention_backward"] = "Each forward call has its backward call. " + CALL_HINTS["attention"]


def _cost_hint(name: str, field: str, got: float, mine: Mapping[str, float | None]) -> str:
    truth = step_costs()[name]
    layers = _sibling("gpt").Config().layers
    if field == "calls":
        return CALL_HINTS[name]
    expected = truth[field]
    if field == "bytes" and close(got, expected / 4, RTOL_COSTS):
        return "That counts elements; count bytes (a float32 is 4 bytes)."
    if name != "adamw_multi" and truth["calls"] > 1 and close(got * truth["calls"], expected, RTOL_COSTS):
        return f"That is one call; a step makes {truth['calls']} of them."
    if truth["calls"] >= layers and close(got * layers, expected, 2 * RTOL_COSTS):
        return f"That looks like one block; the GPT has {layers} of them."
    if name == "adamw_multi":
        return ("The whole model's parameters once a step (gpt.py's Config.parameters() counts them), at "
                "exercise 03's adamw_multi counts per element.")
    return (f"Add up the calls of one step with the sizes each receives, counting {field} as the kernel's "
            "exercise.toml does (the table above gives each formula).")


def check_step_costs(answer: Any) -> Verdict:
    if not isinstance(answer, Mapping):
        return Verdict(False, "Pass the dict `step_costs` from the answer cell: one entry per operator, each "
                              "with " + ", ".join(COST_FIELDS) + ".")
    truth = step_costs()
    rows = [TableRow(name, "one training step", partial(truth.__getitem__, name), partial(_cost_hint, name))
            for name in OPERATORS]
    passed, lines = check_table(answer, rows, COST_FIELDS, accepts=lambda got, want: close(got, want, RTOL_COSTS),
                                wrong="is not right.", right="calls, FLOPs and bytes.")
    total = sum(t["flops"] for t in truth.values())
    if passed:
        lines.append(f"In all, {fmt(total / 1e9)} GFLOP a step, "
                     f"{100 * (truth['linear_forward']['flops'] + truth['linear_backward']['flops']) / total:.0f}% "
                     "of it in the linear layers.")
    return Verdict(passed, "\n".join(lines))


# ------------------------------------------------------------------ what bounds each operator

def _roofline_hint(name: str, spec: GpuSpec, field: str, got: float, mine: Mapping[str, float | None]) -> str:
    costs, truth = step_costs()[name], step_roofline(spec)[name]
    if field == "intensity":
        if close(got * truth["intensity"], 1.0, RTOL_ROOFLINE):
            return "Upside down: intensity is FLOPs per byte."
        return "Intensity = the operator's FLOPs in a step / its bytes in a step."
    if field == "memory_bound":
        if got not in (0, 1):
            return "Answer 1 (memory-bound) or 0 (compute-bound)."
        return (f"Compare the intensity with the fp32 ridge point of the {spec.name}: "
                "below it the bytes take longer than the FLOPs.")
    for factor, text in ((1e-3, "That looks like milliseconds; the answer is in microseconds."),
                         (1e-6, "That looks like seconds; the answer is in microseconds."),
                         (1e3, "That looks like nanoseconds; the answer is in microseconds.")):
        if close(got, truth["time_us"] * factor, RTOL_ROOFLINE):
            return text
    other = min(costs["flops"] / (spec.fp32_tflops * 1e12), costs["bytes"] / (spec.memory_bandwidth_gbs * 1e9)) * 1e6
    if other != truth["time_us"] and close(got, other, RTOL_ROOFLINE):
        return "That is the shorter of the two times; the floor is the longer one (they overlap)."
    return (f"time = max(FLOPs / peak FP32 FLOP/s, bytes / memory bandwidth) of the whole step's calls, in "
            f"microseconds, with the spec sheet of the {spec.name}.")


def check_step_roofline(answer: Any) -> Verdict:
    if not isinstance(answer, Mapping):
        return Verdict(False, "Pass the dict `step_roofline` from the answer cell: one entry per operator, each "
                              "with " + ", ".join(ROOFLINE_FIELDS) + ".")
    gpu = core.reference_gpu()
    spec = gpu.spec
    truth = step_roofline(spec)
    rows = [TableRow(name, "one training step", partial(truth.__getitem__, name),
                     partial(_roofline_hint, name, spec)) for name in OPERATORS]
    passed, lines = check_table(answer, rows, ROOFLINE_FIELDS,
                                accepts=lambda got, want: close(got, want, RTOL_ROOFLINE),
                                wrong="is not right.", right="intensity, floor and bound.")
    return Verdict(passed, "\n".join([f"Checked against the spec sheet of {gpu.describe()} "
                                      f"(fp32 ridge point {spec.ridge_fp32:.1f} FLOP/byte).", *lines]))


PROMPTS = (
    Prompt("step_costs", "What one training step of the GPT costs", 3.0, check_step_costs),
    Prompt("step_roofline", "Which operators the memory bus limits", 2.0, check_step_roofline),
)
