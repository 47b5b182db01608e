"""What a reference may return beside a plain value: a value with an allowance per element.

A quantizer's output is an integer (or an fp8 code): it must be exact, except where the value
before rounding lies at a rounding tie, where a kernel that computed it in float32 may round the
other way. A reference says so by returning ``Within(value, allowed)`` for that output: the
learner's element i may differ from ``value[i]`` by ``allowed[i]`` on top of the task's rtol and
atol (0 for integer outputs). For a list output, each tensor of the list may be a ``Within``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Within:
    value: Any        # the reference's value (a float64 tensor)
    allowed: Any      # the difference allowed at each element, same shape (a float64 tensor)


def split(result: Any) -> tuple[Any, Any]:
    """(value, allowed or None) of one reference result."""
    if isinstance(result, Within):
        return result.value, result.allowed
    return result, None
