"""The digits model's report: its four bars, its tables, its loss curve, held against what
train_kernels.py measured (``values``).

`grade model` calls these in its own process, never in the one that ran the learner's kernels; the
thresholds are capstone.toml's ``[models.mlp.bars]``. A bar that could not be measured (no GPU, a
missing kernel) has ``passed`` None.
"""
from __future__ import annotations

from typing import Any

from grader.model import Bar, Plot, Series, Table


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def bars(values: dict[str, Any], capstone: dict[str, Any]) -> list[Bar]:
    want = capstone["bars"]
    learner, twin = values.get("learner") or {}, values.get("twin") or {}
    acc, twin_acc = learner.get("test_accuracy"), twin.get("test_accuracy")
    int8 = learner.get("int8_accuracy")
    out = [Bar("test accuracy on your kernels", f">= {_pct(want['test_accuracy'])}", _pct(acc),
               None if acc is None else acc >= want["test_accuracy"], id="test_accuracy")]
    twin_bar = Bar("beside the PyTorch twin", f"within {want['twin_points']:g} point", "-", None, id="twin")
    if acc is not None and twin_acc is not None:
        gap = 100 * (acc - twin_acc)
        twin_bar.got, twin_bar.passed = f"{gap:+.1f} points", abs(gap) <= want["twin_points"] + 1e-9
    out.append(twin_bar)
    steps = want["loss_steps"]
    loss_bar = Bar(f"loss of the first {steps} steps", f"within {want['loss_rtol']:g} (relative)", "-", None,
                   id="first_steps")
    mine, theirs = learner.get("losses") or [], twin.get("losses") or []
    if len(mine) >= steps and len(theirs) >= steps:
        worst = max(abs(a - b) / abs(b) for a, b in zip(mine[:steps], theirs[:steps]))
        loss_bar.got, loss_bar.passed = f"{worst:.1e}", worst <= want["loss_rtol"]
    out.append(loss_bar)
    int8_bar = Bar("INT8 (W8A8) serving", f"at most {want['int8_points']:g} point below fp32", "-", None,
                   id="int8")
    if int8 is not None and acc is not None:
        drop = 100 * (acc - int8)
        int8_bar.got, int8_bar.passed = f"{-drop:+.1f} points", drop <= want["int8_points"] + 1e-9
    out.append(int8_bar)
    return out


def _per_epoch(part: dict[str, Any]) -> str:
    seconds = part.get("epoch_seconds") or []
    if not seconds:
        return "-"
    return f"{1e3 * sum(seconds[1:] or seconds) / len(seconds[1:] or seconds):.0f} ms"


def accuracy_rows(values: dict[str, Any]) -> list[list[str]]:
    """(model, test accuracy, time per epoch, note): the table the capstone is about."""
    twin, learner = values.get("twin") or {}, values.get("learner") or {}
    rows = []
    if learner.get("test_accuracy") is not None:
        rows.append(["your kernels (fp32)", _pct(learner["test_accuracy"]), _per_epoch(learner),
                     "trained and evaluated on your kernels"])
    if twin:
        rows.append(["PyTorch twin (fp32)", _pct(twin.get("test_accuracy")), _per_epoch(twin), twin.get("about", "")])
    if learner.get("int8_accuracy") is not None:
        rows.append(["your kernels, INT8 W8A8", _pct(learner["int8_accuracy"]), "",
                     f"{' + '.join(learner.get('int8_kernels', []))}; PyTorch's W8A8 of your weights: "
                     f"{_pct(learner.get('int8_model_accuracy'))}"])
    onnx = learner.get("onnx") or {}
    if onnx.get("checked"):
        rows.append(["ONNX export, ONNX Runtime (CPU)", _pct(onnx.get("accuracy")), "",
                     f"opset {onnx.get('opset')}; predictions agree on {_pct(onnx.get('agree'))}, "
                     f"logits within {onnx.get('max_abs_diff', 0):.1e}"])
    for engine in (values.get("tensorrt") or {}).get("engines", []):
        rows.append([f"TensorRT {engine['precision']} engine", _pct(engine.get("accuracy")), "",
                     engine.get("error") or f"{engine.get('latency_us', 0):.0f} µs for the whole test set"])
    return rows


def op_rows(values: dict[str, Any]) -> list[list[str]]:
    """(operation, calls per step, time per step, share of a step), over the whole training."""
    learner = values.get("learner") or {}
    seconds, calls = learner.get("op_seconds") or {}, learner.get("op_calls") or {}
    steps = len(learner.get("losses") or [])
    if not seconds or not steps:
        return []
    wall = sum(learner.get("epoch_seconds") or []) or 1.0
    rows = [[name, f"{calls.get(name, 0) / steps:g}", f"{1e6 * s / steps:.1f} µs", f"{100 * s / wall:.1f}%"]
            for name, s in sorted(seconds.items(), key=lambda kv: -kv[1])]
    rest = wall - sum(seconds.values())
    rows.append(["launches, Python and data loading (the rest)", "", f"{1e6 * rest / steps:.1f} µs",
                 f"{100 * rest / wall:.1f}%"])
    return rows


def tables(values: dict[str, Any], capstone: dict[str, Any]) -> list[Table]:
    return [Table(f"Accuracy on {values.get('test_set') or 'the test set'}",
                  ["model", "test accuracy", "time per epoch", ""], accuracy_rows(values)),
            Table("Where a training step's time went (CUDA events around each call)",
                  ["operation", "calls per step", "time per step", "share of the step"], op_rows(values))]


def plots(values: dict[str, Any], capstone: dict[str, Any]) -> list[Plot]:
    """The loss of every step, yours beside the twin's, with each epoch's mean drawn over it."""
    if not values.get("twin"):
        return []
    series = []
    curves = [("PyTorch twin", values["twin"], "#888888")]
    if (values.get("learner") or {}).get("losses"):
        curves.append(("your kernels", values["learner"], "#d62728"))
    for label, part, color in curves:
        losses = part.get("losses") or []
        epochs = len(part.get("epoch_seconds") or []) or 1
        per = max(1, len(losses) // epochs)
        means = [sum(losses[i:i + per]) / len(losses[i:i + per]) for i in range(0, len(losses), per)]
        series.append(Series("", losses, color=color, width=0.8, alpha=0.25))
        series.append(Series(f"{label} (epoch mean)", means, x=[per * (i + 1) for i in range(len(means))],
                             color=color, width=2))
    return [Plot("loss_curve.png", "Training loss: your kernels and the PyTorch twin", "training step (batch of 64)",
                 "cross-entropy loss", series, log_y=True)]


def lines(values: dict[str, Any], capstone: dict[str, Any]) -> list[str]:
    out = []
    onnx = (values.get("learner") or {}).get("onnx") or {}
    if onnx.get("checked"):
        out.append(f"exported model: {onnx['path']}")
    elif onnx.get("note"):
        out.append(f"ONNX export {onnx['note']}")
    trt = values.get("tensorrt") or {}
    if trt.get("note"):
        out.append(f"TensorRT: {trt['note']}")
    return out
