"""Comparing what a call wrote with the float64 reference of the same call."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Callable

from grader import spec as specmod
from grader.protocol import Mismatch
from grader.tolerance import split
from grader.worker.memory import Buffer, CaseMemory


@dataclass
class _Written:
    """One tensor the call wrote, what it should hold, and how close it must come."""

    name: str              # "y", or "p[3]" for a list's tensor
    arg: specmod.Arg
    buffer: Buffer
    expected: Any
    magnitude: Any
    before: Any            # the inout tensor's value before the call (None for outputs)
    rtol: float
    atol: float
    allowed: Any = None    # a per-element allowance the reference gave (grader.tolerance.Within)

    def tolerance(self, shape: Any) -> Any:
        tol = self.atol + self.rtol * self.magnitude.reshape(shape)
        return tol if self.allowed is None else tol + self.allowed.reshape(shape)


class Checker:
    """The reference of one call, computed from the copy of what the call read, and the comparison."""

    def __init__(self, task: specmod.Task, reference: Callable[..., Any], memory: CaseMemory,
                 scalars: dict[str, Any]):
        import torch
        with torch.no_grad():
            expected = _as_tuple(reference(*_reference_args(task, memory, scalars, absolute=False)))
            if len(expected) != len(task.results):
                raise RuntimeError(f"reference {task.reference} returned {len(expected)} values; the spec has "
                                   f"{len(task.results)} out and inout arguments")
            if task.condition == "abs":
                magnitude = [_abs(_values(m)) for m in _as_tuple(
                    reference(*_reference_args(task, memory, scalars, absolute=True)))]
            else:
                magnitude = [_abs(_values(e)) for e in expected]
        self.written: list[_Written] = []
        for arg, exp, mag in zip(task.results, expected, magnitude):
            memory_arg = memory.args[arg.name]
            exps, mags = (list(exp), list(mag)) if arg.list is not None else ([exp], [mag])
            if len(exps) != len(memory_arg.buffers):
                raise RuntimeError(f"reference {task.reference} returned {len(exps)} tensors for the list "
                                   f"'{arg.name}', which holds {len(memory_arg.buffers)}")
            befores = memory.before.get(arg.name, [None] * len(exps))
            default_rtol, default_atol = (task.rtol, task.atol) if arg.is_float else (0.0, 0.0)
            for i, (buf, e, m, b) in enumerate(zip(memory_arg.buffers, exps, mags, befores)):
                value, allowed = split(e)
                self.written.append(_Written(
                    f"{arg.name}[{i}]" if arg.list is not None else arg.name, arg, buf, value, m, b,
                    default_rtol if arg.rtol is None else arg.rtol,
                    default_atol if arg.atol is None else arg.atol, allowed))

    def compare(self, *, detail: bool = True) -> Mismatch | None:
        """The first tensor that is off, with its worst element; None when every one is right."""
        import torch
        bad_flags = []
        for w in self.written:
            got = w.buffer.tensor().to(torch.float64)
            exp = w.expected.reshape(got.shape)
            tol = w.tolerance(got.shape)
            bad_flags.append((~((got - exp).abs() <= tol)).any())      # NaN compares false: counted as bad
        if not bad_flags:
            return None
        flags = torch.stack(bad_flags).nonzero()
        if not len(flags):
            return None
        w = self.written[int(flags[0].item())]
        got = w.buffer.tensor().to(torch.float64)
        if not detail:
            return Mismatch(w.name, [], 0.0, 0.0, 1, got.numel(), "wrong value", 0.0)
        return _describe(w, got)


def _describe(w: _Written, got: Any) -> Mismatch:
    import torch
    exp = w.expected.reshape(got.shape)
    tol = w.tolerance(got.shape)
    err = (got - exp).abs()
    bad = ~(err <= tol)
    if w.arg.role == "out":
        suspicious, reason = w.buffer.unwritten() & bad, "not written"
    else:
        suspicious, reason = (w.before.to(torch.float64) == got) & bad, "not updated"
    nonfinite = ~torch.isfinite(got)
    if bool(suspicious.any().item()):
        where = suspicious
    elif bool(nonfinite.any().item()):
        reason, where = "not finite", nonfinite
    else:
        reason, where = "wrong value", None
    if where is not None:
        flat = int(where.reshape(-1).nonzero()[0].item())
    else:
        excess = torch.where(bad, err - tol, torch.full_like(err, -1.0))
        flat = int(excess.reshape(-1).argmax().item())
    return Mismatch(w.name, _unravel(flat, tuple(got.shape)), float(exp.reshape(-1)[flat].item()),
                    float(got.reshape(-1)[flat].item()), int(bad.sum().item()), got.numel(), reason,
                    float(tol.reshape(-1)[flat].item()))


def _reference_args(task: specmod.Task, memory: CaseMemory, scalars: dict[str, Any], absolute: bool) -> list[Any]:
    """Every argument but the outputs, in signature order: tensors as float64 copies of their value
    before the call (lists as lists), element counts as int64, scalars as numbers."""
    import torch
    out: list[Any] = []
    for a in task.reference_args:
        if a.role == "scalar":
            out.append(scalars[a.name])
            continue
        tensors = memory.before[a.name]
        if a.sizes_of is not None:
            out.append(tensors[0].to(torch.int64))
            continue
        converted = [t.to(torch.float64) for t in tensors]
        if absolute:
            converted = [t.abs() for t in converted]
        out.append(converted if a.list is not None else converted[0])
    return out


def _values(result: Any) -> Any:
    """A reference result without its allowances (grader.tolerance.Within), lists included."""
    if isinstance(result, (list, tuple)):
        return [split(r)[0] for r in result]
    return split(result)[0]


def _abs(value: Any) -> Any:
    return [v.abs() for v in value] if isinstance(value, (list, tuple)) else value.abs()


def _as_tuple(value: Any) -> tuple:
    return tuple(value) if isinstance(value, tuple) else (value,)


def _unravel(flat: int, shape: tuple[int, ...]) -> list[int]:
    index = []
    for dim in reversed(shape):
        index.append(flat % dim)
        flat //= dim
    return list(reversed(index))


def case_seed(seed: int, task: str, label: str) -> int:
    digest = hashlib.sha256(f"{seed}:{task}:{label}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)
