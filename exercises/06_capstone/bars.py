"""The capstone's four bars, held against what train_kernels.py reported.

`grade model` calls ``bars`` in its own process, never in the one that ran the learner's kernels;
the thresholds are capstone.toml's ``[bars]``. A bar that could not be measured (no GPU, a missing
kernel) has ``passed`` None.
"""
from __future__ import annotations

from typing import Any

from grader.model import Bar


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def bars(run: dict[str, Any], capstone: dict[str, Any]) -> list[Bar]:
    want = capstone["bars"]
    learner, twin = run.get("learner") or {}, run.get("twin") or {}
    acc, twin_acc = learner.get("test_accuracy"), twin.get("test_accuracy")
    int8 = learner.get("int8_accuracy")
    out = [Bar("test accuracy on your kernels", f">= {_pct(want['test_accuracy'])}", _pct(acc),
               None if acc is None else acc >= want["test_accuracy"])]
    twin_bar = Bar("beside the PyTorch twin", f"within {want['twin_points']:g} point", "-", None)
    if acc is not None and twin_acc is not None:
        gap = 100 * (acc - twin_acc)
        twin_bar.got, twin_bar.passed = f"{gap:+.1f} points", abs(gap) <= want["twin_points"] + 1e-9
    out.append(twin_bar)
    steps = want["loss_steps"]
    loss_bar = Bar(f"loss of the first {steps} steps", f"within {want['loss_rtol']:g} (relative)", "-", None)
    mine, theirs = learner.get("losses") or [], twin.get("losses") or []
    if len(mine) >= steps and len(theirs) >= steps:
        worst = max(abs(a - b) / abs(b) for a, b in zip(mine[:steps], theirs[:steps]))
        loss_bar.got, loss_bar.passed = f"{worst:.1e}", worst <= want["loss_rtol"]
    out.append(loss_bar)
    int8_bar = Bar("INT8 (W8A8) serving", f"at most {want['int8_points']:g} point below fp32", "-", None)
    if int8 is not None and acc is not None:
        drop = 100 * (acc - int8)
        int8_bar.got, int8_bar.passed = f"{-drop:+.1f} points", drop <= want["int8_points"] + 1e-9
    out.append(int8_bar)
    return out
