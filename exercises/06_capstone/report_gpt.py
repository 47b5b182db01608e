"""The GPT's report: its three bars, its tables, its loss curves, from what train_gpt.py measured.

`grade model gpt` calls these in its own process; the thresholds are capstone.toml's
``[models.gpt.bars]``. A bar that could not be measured (no GPU, a missing kernel) has ``passed``
None. The rates (training and decoding tokens per second) are shown, never held to a bar: they
depend on the GPU and on what else runs on it.
"""
from __future__ import annotations

from typing import Any

from grader.model import Bar, Plot, Series, Table


def _rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


def bars(values: dict[str, Any], capstone: dict[str, Any]) -> list[Bar]:
    want = capstone["bars"]
    learner, twin = values.get("learner") or {}, values.get("twin") or {}
    out = []
    val = Bar("validation loss beside the PyTorch twin's", f"within {100 * want['val_rtol']:g}%", "-", None,
              id="val_loss")
    if learner.get("val_loss") is not None and twin.get("val_loss") is not None:
        gap = learner["val_loss"] / twin["val_loss"] - 1
        val.got, val.passed = f"{100 * gap:+.2f}%", abs(gap) <= want["val_rtol"]
    out.append(val)
    steps = want["loss_steps"]
    first = Bar(f"loss of the first {steps} steps", f"within {want['loss_rtol']:g} (relative)", "-", None,
                id="first_steps")
    mine, theirs = learner.get("losses") or [], twin.get("losses") or []
    if len(mine) >= steps and len(theirs) >= steps:
        worst = max(_rel(a, b) for a, b in zip(mine[:steps], theirs[:steps]))
        first.got, first.passed = f"{worst:.1e}", worst <= want["loss_rtol"]
    out.append(first)
    fp8 = Bar("FP8 serving: validation loss beside fp32", f"within {100 * want['fp8_rtol']:g}%", "-", None,
              id="fp8")
    if (learner.get("fp8") or {}).get("val_loss") is not None and learner.get("val_loss") is not None:
        gap = learner["fp8"]["val_loss"] / learner["val_loss"] - 1
        fp8.got, fp8.passed = f"{100 * gap:+.2f}%", abs(gap) <= want["fp8_rtol"]
    out.append(fp8)
    return out


def _rate(v: float | None) -> str:
    return "-" if not v else f"{v:,.0f}"


def _bpb(part: dict[str, Any]) -> str:
    return "-" if part.get("val_bpb") is None else f"{part['val_bpb']:.4f}"


def model_rows(values: dict[str, Any]) -> list[list[str]]:
    """(model, validation bits per byte, tokens per second, beside, note)."""
    learner, twin = values.get("learner") or {}, values.get("twin") or {}
    rows = []
    twin_rate = twin.get("tokens_per_s")
    if learner.get("val_loss") is not None:
        speed = f"{learner['tokens_per_s'] / twin_rate:.2f}x the twin" if twin_rate else ""
        rows.append(["your kernels, training (fp32)", _bpb(learner), _rate(learner.get("tokens_per_s")), speed,
                     "every heavy operation on your kernels"])
    if twin:
        rows.append(["PyTorch twin, training (fp32)", _bpb(twin), _rate(twin_rate), "", twin.get("about", "")])
    fp8, bf16 = learner.get("fp8") or {}, learner.get("bf16") or {}
    if fp8:
        speed = f"{fp8['tokens_per_s'] / bf16['tokens_per_s']:.2f}x PyTorch bf16" if bf16.get("tokens_per_s") else ""
        rows.append(["your kernels, FP8 decoding", _bpb(fp8), _rate(fp8.get("tokens_per_s")), speed,
                     "weights in e4m3 (quantize_fp8), gemv_fp8, layernorm_forward; decoding "
                     f"{(values.get('config') or {}).get('decode_batch', '')} sequences at once"])
    if bf16:
        rows.append(["PyTorch, bf16 decoding", _bpb(bf16), _rate(bf16.get("tokens_per_s")), "",
                     "your trained weights in bf16, F.linear, eager"])
    return rows


def first_rows(values: dict[str, Any], steps: int) -> list[list[str]]:
    mine, theirs = (values.get("learner") or {}).get("losses") or [], (values.get("twin") or {}).get("losses") or []
    if not mine or not theirs:
        return []
    return [[str(i + 1), f"{a:.6f}", f"{b:.6f}", f"{_rel(a, b):.1e}"]
            for i, (a, b) in enumerate(zip(mine[:steps], theirs[:steps]))]


def op_rows(values: dict[str, Any]) -> list[list[str]]:
    """(operation, calls, time, share of a step, GFLOP, MB, FLOPs per byte) per training step."""
    learner = values.get("learner") or {}
    ops, step = learner.get("ops") or [], learner.get("step_seconds")
    if not ops or not step:
        return []
    rows = [[o["name"], f"{o['calls']:g}", f"{1e3 * o['seconds']:.2f} ms", f"{100 * o['seconds'] / step:.1f}%",
             f"{o['flops'] / 1e9:.1f}", f"{o['bytes'] / 1e6:.0f}",
             f"{o['flops'] / o['bytes']:.1f}" if o["bytes"] else "-"] for o in ops]
    rest = step - sum(o["seconds"] for o in ops)
    rows.append(["glue, launches and Python (the rest)", "", f"{1e3 * rest:.2f} ms", f"{100 * rest / step:.1f}%",
                 "", "", ""])
    return rows


def tables(values: dict[str, Any], capstone: dict[str, Any]) -> list[Table]:
    steps = capstone["bars"]["loss_steps"]
    return [Table("Validation loss (bits per byte) and speed (tokens per second)",
                  ["model", "val bits/byte", "tokens/s", "speed", ""], model_rows(values)),
            Table(f"The first {steps} steps: your loss beside the twin's",
                  ["step", "your kernels", "PyTorch twin", "relative difference"], first_rows(values, steps)),
            Table("Where a training step's time went (CUDA events around each call, a few steps)",
                  ["operation", "calls", "time per step", "share of the step", "GFLOP", "MB moved", "FLOP/byte"],
                  op_rows(values))]


def plots(values: dict[str, Any], capstone: dict[str, Any]) -> list[Plot]:
    """The loss of every step, yours over the twin's, with a running mean over 20 steps."""
    series = []
    for label, part, color in (("PyTorch twin", values.get("twin") or {}, "#888888"),
                               ("your kernels", values.get("learner") or {}, "#d62728")):
        losses = [x / 0.6931471805599453 for x in part.get("losses") or []]    # bits per byte
        if not losses:
            continue
        mean = [sum(losses[max(0, i - 19):i + 1]) / len(losses[max(0, i - 19):i + 1]) for i in range(len(losses))]
        series.append(Series("", losses, color=color, width=0.8, alpha=0.25))
        series.append(Series(f"{label} (mean of 20 steps)", mean, color=color, width=2))
    if not series:
        return []
    return [Plot("loss_curve.png", "Training loss: your kernels and the PyTorch twin", "training step",
                 "training loss (bits per byte)", series, log_y=True)]


def lines(values: dict[str, Any], capstone: dict[str, Any]) -> list[str]:
    learner, twin = values.get("learner") or {}, values.get("twin") or {}
    text, by = (learner.get("sample"), learner.get("sample_by")) if learner.get("sample") else (
        twin.get("sample"), "the PyTorch twin in bf16, temperature 0.8")
    return [f"A sample from {by}, after \"def \":\n{text}"] if text else []
