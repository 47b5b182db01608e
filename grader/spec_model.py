"""An exercise as dataclasses: its tasks, each task's arguments, the cases it is checked and
timed on, its build and points; an Exercise also imports its reference and derivation modules."""
from __future__ import annotations

import importlib.util
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from grader.spec_values import DTYPES, Expr, Shape, SpecError, Value


@dataclass(frozen=True)
class Arg:
    """One parameter of the entry point.

    A tensor has a ``shape``; a list of tensors (``list = "KEY"``) takes its shapes from the case's
    KEY and is passed as a device array of device pointers; ``sizes_of = "KEY"`` is a device array
    with the element count of each tensor of that list; a scalar with ``length_of = "KEY"`` is the
    number of tensors in it.
    """

    name: str
    role: str                      # "in" | "out" | "inout" | "scalar"
    dtype: str
    shape: tuple[Expr, ...] = ()
    list: str | None = None
    sizes_of: str | None = None
    length_of: str | None = None
    fill: str = "normal"
    rtol: float | None = None      # per-output tolerance, overriding the task's
    atol: float | None = None
    range: tuple[Expr, Expr] | None = None   # integers drawn in [low, high), expressions over the scalars
    derive: str | None = None      # an input computed by this function of reference.py from the others

    def bounds(self, values: dict[str, Any]) -> tuple[int, int] | None:
        """[low, high) of an integer argument with a range, at these scalar values."""
        if self.range is None:
            return None
        return int(self.range[0](values)), int(self.range[1](values))

    @property
    def c_type(self) -> str:
        base = DTYPES[self.dtype].c_type
        if self.role == "scalar":
            return base
        const = "const " if self.role == "in" else ""
        if self.list is not None:
            return f"{const}{base}* const*"
        return f"{const}{base}*"

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype].itemsize

    @property
    def is_float(self) -> bool:
        return DTYPES[self.dtype].kind == "float"

    @property
    def is_tensor(self) -> bool:
        return self.role != "scalar"

    @property
    def derived(self) -> bool:
        """Its value follows from the case's lists: the grader sets it, never a case."""
        return self.sizes_of is not None or self.length_of is not None

    def shapes(self, case: "Case") -> list[Shape]:
        """The shape of each tensor this argument holds at ``case`` (one, unless it is a list)."""
        if self.list is not None:
            return list(case.lists[self.list])
        if self.sizes_of is not None:
            return [(len(case.lists[self.sizes_of]),)]
        return [self.dims(case.values)]

    def dims(self, values: dict[str, Any]) -> Shape:
        return tuple(int(e(values)) for e in self.shape)

    def numel(self, case: "Case") -> int:
        return sum(math.prod(s) for s in self.shapes(case))

    def nbytes(self, case: "Case") -> int:
        return self.numel(case) * self.itemsize


@dataclass(frozen=True)
class Case:
    """One set of scalar values (and lists of tensor shapes) a task is checked or timed on."""

    values: dict[str, Value]
    input_scale: float = 1.0
    label: str = ""
    lists: dict[str, tuple[Shape, ...]] = field(default_factory=dict)
    fills: dict[str, str] = field(default_factory=dict)     # argument -> fill, overriding the spec's

    def describe(self) -> str:
        if self.label:
            return self.label
        parts = [f"{k}={_show(v)}" for k, v in self.values.items()]
        for key, shapes in self.lists.items():
            total = sum(math.prod(s) for s in shapes)
            parts.append(f"{key}: {len(shapes)} tensor{'s' if len(shapes) != 1 else ''} of {total:,} values")
        text = ", ".join(parts)
        if self.input_scale != 1.0:
            text += f", inputs x{self.input_scale:g}"
        for name, kind in self.fills.items():
            text += f", {name} {kind}"
        return text

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = dict(self.values)
        for key, shapes in self.lists.items():
            d[key] = [list(s) for s in shapes]
        if self.input_scale != 1.0:
            d["input_scale"] = self.input_scale
        if self.label:
            d["label"] = self.label
        if self.fills:
            d["fill"] = dict(self.fills)
        return d

    def env(self) -> dict[str, Any]:
        """What the shape and roofline formulas see: the scalars and the lists of shapes."""
        return {**self.values, **{k: list(v) for k, v in self.lists.items()}}


def _show(v: Value) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


@dataclass(frozen=True)
class Points:
    correct: float
    speed: float

    @property
    def total(self) -> float:
        return self.correct + self.speed


@dataclass(frozen=True)
class Build:
    """How a task's sources are compiled beyond the grader's defaults."""

    flags: tuple[str, ...] = ()
    arch: dict[str, str] = field(default_factory=dict)    # GPU's arch -> target, e.g. sm_90 -> sm_90a

    def target(self, detected: str) -> str:
        return self.arch.get(detected, detected)


@dataclass(frozen=True)
class Task:
    name: str
    source: str
    symbol: str
    baseline: str
    reference: str
    args: tuple[Arg, ...]
    cases: tuple[Case, ...]
    benchmarks: tuple[Case, ...]
    flops: Expr
    bytes: Expr
    compute: str
    rtol: float
    atol: float
    min_speedup: float
    points: Points
    condition: str = "none"        # "abs": tolerance scaled by the reference of |inputs|
    vendor: str | None = None      # reference.py function timed as information (PyTorch)
    timeout_s: float = 60.0
    calls: tuple[dict[str, Value], ...] = ({},)   # consecutive calls on the same state, per case
    build: Build = Build()

    @property
    def inputs(self) -> tuple[Arg, ...]:
        """Read-only device arguments."""
        return tuple(a for a in self.args if a.role == "in")

    @property
    def outputs(self) -> tuple[Arg, ...]:
        """Write-only device arguments."""
        return tuple(a for a in self.args if a.role == "out")

    @property
    def results(self) -> tuple[Arg, ...]:
        """What the call writes and the grader compares, in signature order: out and inout."""
        return tuple(a for a in self.args if a.role in ("out", "inout"))

    @property
    def tensors(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.is_tensor)

    @property
    def scalars(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.role == "scalar")

    @property
    def reference_args(self) -> tuple[Arg, ...]:
        """What the reference function takes, in signature order: every argument but the outputs."""
        return tuple(a for a in self.args if a.role != "out")

    def prototype(self) -> str:
        """The C declaration the learner's entry point must have."""
        params = ", ".join(f"{a.c_type} {a.name}" for a in self.args)
        return f'extern "C" void {self.symbol}({params});'

    def scalar_values(self, case: Case, call: int | None = None) -> dict[str, Value]:
        """Every scalar's value at ``case`` (derived ones included), with call ``call``'s overrides."""
        values: dict[str, Value] = dict(case.values)
        if call is not None:
            values.update(self.calls[call])
        for a in self.scalars:
            if a.length_of is not None:
                values[a.name] = len(case.lists[a.length_of])
        return {a.name: values[a.name] for a in self.scalars}

    def work(self, case: Case) -> tuple[float, float]:
        """(FLOPs, minimal bytes) for one call at ``case``'s sizes."""
        env = case.env()
        return float(self.flops(env)), float(self.bytes(env))


@dataclass(frozen=True)
class Exercise:
    id: str
    slug: str
    title: str
    folder: Path
    notebook: str
    reference_file: str
    tasks: tuple[Task, ...]
    derivations_file: str = ""
    models: tuple[str, ...] = ()        # the capstone's models (capstone.toml); an exercise has none

    def task(self, name: str) -> Task:
        for t in self.tasks:
            if t.name == name:
                return t
        raise SpecError(f"exercise {self.id} has no task {name!r}; its tasks are: "
                        + ", ".join(t.name for t in self.tasks))

    def load_reference(self) -> ModuleType:
        """Import the exercise's reference.py (float64 PyTorch)."""
        return _import(self.folder / self.reference_file, f"_s2s_reference_{_identifier(self.slug)}", cache=False)

    def reference_function(self, task: Task) -> Callable[..., Any]:
        return getattr(self.load_reference(), task.reference)

    def load_derivations(self) -> ModuleType | None:
        """The exercise's derivation checkers (``derivations`` in exercise.toml), imported once
        per process; None when the exercise has no derivation prompts."""
        if not self.derivations_file:
            return None
        return _import(self.folder / self.derivations_file, f"_s2s_derivations_{_identifier(self.slug)}", cache=True)


def _identifier(text: str) -> str:
    return re.sub(r"\W", "_", text)


def _import(path: Path, name: str, cache: bool) -> ModuleType:
    """A module from a file of an exercise folder. Registered in sys.modules while it runs, as
    dataclasses and pickling expect; with ``cache``, imported once per process and file."""
    if cache and name in sys.modules and getattr(sys.modules[name], "__file__", None) == str(path):
        return sys.modules[name]
    if not path.is_file():
        raise SpecError(f"{path} does not exist (named in {path.parent / 'exercise.toml'})")
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise SpecError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    if not cache:
        sys.modules.pop(name, None)
    return module
