"""Exercise specifications: `exercise.toml` files turned into dataclasses.

An exercise is data. Everything the grader needs to know about a task (its entry
symbol, arguments, reference, tolerances, cases, benchmark sizes, roofline
formulas, build flags, points) is read from the exercise folder; nothing here is
specific to any exercise. The README's "Adding an exercise" walks through every
field; the validation messages below name the file, the task and the field.
"""
from __future__ import annotations

import ast
import importlib.util
import inspect
import math
import operator
import os
import re
import struct
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Union

ROLES = ("in", "out", "inout", "scalar")


@dataclass(frozen=True)
class DType:
    name: str
    c_type: str
    itemsize: int
    kind: str            # "float" | "int"


DTYPES: dict[str, DType] = {d.name: d for d in (
    DType("float32", "float", 4, "float"),
    DType("float64", "double", 8, "float"),
    DType("float16", "__half", 2, "float"),
    DType("bfloat16", "__nv_bfloat16", 2, "float"),
    DType("float8_e4m3fn", "__nv_fp8_e4m3", 1, "float"),
    DType("float8_e5m2", "__nv_fp8_e5m2", 1, "float"),
    DType("int8", "int8_t", 1, "int"),
    DType("uint8", "uint8_t", 1, "int"),
    DType("int32", "int", 4, "int"),
    DType("int64", "int64_t", 8, "int"),
)}
SCALAR_DTYPES = ("int32", "int64", "float32")
COMPUTE_UNITS = ("fp32", "bf16_tensor", "fp16_tensor", "int8_tensor", "fp8_tensor")
# How an input (or the starting value of an inout buffer) is drawn. "normal" is randn times the
# case's input_scale for floats and uniform integers in [-128, 127] for integer dtypes, or in the
# argument's `range` where it has one (indices: class labels in [0, cols)). "ends" is for integers
# with a range: each element is the lowest or the highest value of the range, at random.
FILLS = ("normal", "uniform", "positive", "zeros", "ones", "outliers", "ends")
RESERVED_CASE_KEYS = ("input_scale", "label", "fill")
_INT_RANGE = {"int32": (-2**31, 2**31 - 1), "int64": (-2**63, 2**63 - 1)}
FLOAT32_MAX = 3.4028234663852886e38

Value = Union[int, float]
Shape = tuple[int, ...]


class SpecError(Exception):
    """An exercise.toml that the grader cannot use. The message names file and field."""


# --------------------------------------------------------------------------- expressions

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_CMPOPS: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt,
    ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
}


def _numel_of_list(shapes: Any) -> int:
    if not isinstance(shapes, (list, tuple)):
        raise TypeError("numel() takes a list of tensors")
    return sum(math.prod(s) for s in shapes)


def _len_of_list(shapes: Any) -> int:
    if not isinstance(shapes, (list, tuple)):
        raise TypeError("len() takes a list of tensors")
    return len(shapes)


_FUNCS: dict[str, Callable[..., Any]] = {"min": min, "max": max, "ceil_div": lambda a, b: -(-a // b),
                                         "numel": _numel_of_list, "len": _len_of_list}


@dataclass(frozen=True)
class Expr:
    """A small arithmetic expression over the task's scalars, e.g. ``"12 * n"``.

    Python syntax, restricted to numbers, scalar names, + - * / // % **, comparisons,
    ``a if cond else b``, min/max/ceil_div, and for a list of tensors ``numel(params)``
    (its elements in all) and ``len(params)`` (how many tensors).
    """

    text: str

    def names(self) -> set[str]:
        return {n.id for n in ast.walk(ast.parse(self.text, mode="eval")) if isinstance(n, ast.Name)} - set(_FUNCS)

    def __call__(self, env: dict[str, Any]) -> Any:
        try:
            return _eval(ast.parse(self.text, mode="eval").body, env, self.text)
        except (TypeError, ZeroDivisionError, OverflowError) as exc:
            raise SpecError(f"expression {self.text!r}: {exc}") from None


def _eval(node: ast.AST, env: dict[str, Any], text: str) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise SpecError(f"expression {text!r} uses {node.id!r}, which is not a scalar of this task")
        return env[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_eval(node.left, env, text), _eval(node.right, env, text))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, env, text)
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMPOPS:
        return _CMPOPS[type(node.ops[0])](_eval(node.left, env, text), _eval(node.comparators[0], env, text))
    if isinstance(node, ast.IfExp):
        return _eval(node.body if _eval(node.test, env, text) else node.orelse, env, text)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS and not node.keywords:
        return _FUNCS[node.func.id](*(_eval(a, env, text) for a in node.args))
    raise SpecError(f"expression {text!r}: {ast.unparse(node)!r} is not allowed here")


def float32(value: float) -> float:
    """The nearest float32, as a Python float: what a kernel's ``float`` parameter holds."""
    return struct.unpack("f", struct.pack("f", value))[0]


# --------------------------------------------------------------------------- dataclasses

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


# --------------------------------------------------------------------------- loading

def repo_root() -> Path:
    """The folder holding exercises/ and solutions/.

    ``S2S_ROOT`` overrides; otherwise the checkout this package lives in.
    """
    env = os.environ.get("S2S_ROOT")
    root = Path(env) if env else Path(__file__).resolve().parent.parent
    return root


def exercises_dir() -> Path:
    return repo_root() / "exercises"


def solutions_dir() -> Path:
    return repo_root() / "solutions"


def discover() -> list[Exercise]:
    """Every exercise folder (``exercises/NN_name/exercise.toml``), in order."""
    folders = sorted(p.parent for p in exercises_dir().glob("*/exercise.toml"))
    return [load(f) for f in folders]


def find(ident: str) -> Exercise:
    """An exercise by id ("01", "1"), by folder name ("01_foundations") or by path."""
    candidates = sorted(p.parent for p in exercises_dir().glob("*/exercise.toml"))
    path = Path(ident)
    if (path / "exercise.toml").is_file():
        return load(path)
    for folder in candidates:
        number = folder.name.split("_", 1)[0]
        if ident in (folder.name, number) or (ident.isdigit() and number.isdigit() and int(ident) == int(number)):
            return load(folder)
    known = ", ".join(f.name for f in candidates) or "none"
    raise SpecError(f"there is no exercise {ident!r}. Exercises here: {known}")


def load(folder: Path) -> Exercise:
    folder = Path(folder).resolve()
    path = folder / "exercise.toml"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(f"{path} does not exist") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: {exc}") from None
    where = str(path)
    tasks = tuple(_task(t, f"{where} [task {i + 1}]") for i, t in enumerate(_list(data, "tasks", where)))
    if not tasks:
        raise SpecError(f"{where}: an exercise needs at least one [[tasks]] entry")
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        raise SpecError(f"{where}: task names must be unique, got {names}")
    derivations = str(data.get("derivations", ""))
    if derivations and not (folder / derivations).is_file():
        raise SpecError(f"{where}: derivations = {derivations!r}, but {folder / derivations} does not exist")
    return Exercise(
        id=str(_req(data, "id", where)),
        slug=folder.name,
        title=str(_req(data, "title", where)),
        folder=folder,
        notebook=str(data.get("notebook", "")),
        reference_file=str(data.get("reference", "reference.py")),
        tasks=tasks,
        derivations_file=derivations,
    )


def _req(data: dict[str, Any], key: str, where: str) -> Any:
    if key not in data:
        raise SpecError(f"{where}: missing required field {key!r}")
    return data[key]


def _list(data: dict[str, Any], key: str, where: str) -> list[Any]:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise SpecError(f"{where}: {key!r} must be a list")
    return value


def _number(data: dict[str, Any], key: str, default: float, where: str) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"{where}: {key!r} must be a number, got {value!r}")
    return float(value)


def _task(data: dict[str, Any], where: str) -> Task:
    if not isinstance(data, dict):
        raise SpecError(f"{where}: a task must be a table")
    name = str(_req(data, "name", where))
    where = f"{where.rsplit(' [', 1)[0]} [task {name}]"
    args = tuple(_arg(a, where) for a in _list(data, "args", where))
    if not args:
        raise SpecError(f"{where}: 'args' is empty")
    arg_names = [a.name for a in args]
    if len(set(arg_names)) != len(arg_names):
        raise SpecError(f"{where}: argument names must be unique, got {arg_names}")
    scalars = {a.name: a for a in args if a.role == "scalar"}
    list_keys = {k for a in args for k in (a.list, a.sizes_of, a.length_of) if k is not None}
    clash = list_keys & set(arg_names)
    if clash:
        raise SpecError(f"{where}: {sorted(clash)} names both a list of tensors and an argument")
    listed = {a.list for a in args if a.list}
    for a in args:
        for key in (a.sizes_of, a.length_of):
            if key is not None and key not in listed:
                raise SpecError(f"{where}: argument {a.name!r} refers to the list {key!r}, but no argument "
                                f"has list = {key!r}")
        for e in a.shape:
            unknown = e.names() - set(scalars)
            if unknown:
                raise SpecError(f"{where}: shape of {a.name!r} uses {sorted(unknown)}, not scalars of this task")
            if any(scalars[n].dtype == "float32" for n in e.names()):
                raise SpecError(f"{where}: shape of {a.name!r} uses a float32 scalar; shapes need integers")
        for e in a.range or ():
            unknown = e.names() - set(scalars)
            if unknown:
                raise SpecError(f"{where}: range of {a.name!r} uses {sorted(unknown)}, not scalars of this task")
    if not any(a.role in ("out", "inout") for a in args):
        raise SpecError(f"{where}: a task needs at least one 'out' or 'inout' argument")

    calls = tuple(_call(c, scalars, where, i) for i, c in enumerate(_list(data, "calls", where))) or ({},)
    overridden = set.intersection(*(set(c) for c in calls))
    cases = tuple(_case(c, args, where, "cases", optional=overridden) for c in _list(data, "cases", where))
    if not cases:
        raise SpecError(f"{where}: 'cases' is empty")
    raw_bench = _req(data, "benchmark", where)
    bench_list = raw_bench if isinstance(raw_bench, list) else [raw_bench]
    if not bench_list:
        raise SpecError(f"{where}: 'benchmark' is empty")
    benchmarks = tuple(_case(c, args, where, "benchmark") for c in bench_list)

    flops, nbytes = Expr(str(_req(data, "flops", where))), Expr(str(_req(data, "bytes", where)))
    for e in (flops, nbytes):
        unknown = e.names() - set(scalars) - list_keys
        if unknown:
            raise SpecError(f"{where}: formula {e.text!r} uses {sorted(unknown)}, not scalars of this task")
    compute = str(data.get("compute", "fp32"))
    if compute not in COMPUTE_UNITS:
        raise SpecError(f"{where}: compute must be one of {COMPUTE_UNITS}, got {compute!r}")
    condition = str(data.get("condition", "none"))
    if condition not in ("none", "abs"):
        raise SpecError(f"{where}: condition must be 'none' or 'abs', got {condition!r}")
    pts = data.get("points", {})
    if not isinstance(pts, dict):
        raise SpecError(f"{where}: 'points' must be a table like {{ correct = 2, speed = 1 }}")
    points = Points(_number(pts, "correct", 1, where), _number(pts, "speed", 1, where))
    _req(data, "min_speedup", where)
    min_speedup = _number(data, "min_speedup", 0.0, where)
    if not min_speedup > 0:
        raise SpecError(f"{where}: min_speedup must be positive")
    task = Task(
        name=name,
        source=str(_req(data, "source", where)),
        symbol=str(data.get("symbol", name)),
        baseline=str(_req(data, "baseline", where)),
        reference=str(data.get("reference", name)),
        args=args,
        cases=cases,
        benchmarks=benchmarks,
        flops=flops,
        bytes=nbytes,
        compute=compute,
        rtol=_number(data, "rtol", 1e-5, where),
        atol=_number(data, "atol", 0.0, where),
        min_speedup=min_speedup,
        points=points,
        condition=condition,
        vendor=data.get("vendor"),
        timeout_s=_number(data, "timeout_s", 60.0, where),
        calls=calls,
        build=_build(data.get("build", {}), where),
    )
    for case in task.benchmarks:        # the formulas must evaluate where they are used
        try:
            task.work(case)
        except SpecError as exc:
            raise SpecError(f"{where}: benchmark {case.describe()}: {exc}") from None
    return task


def _build(data: Any, where: str) -> Build:
    if not isinstance(data, dict):
        raise SpecError(f"{where}: 'build' must be a table like {{ flags = [...], arch = {{ sm_90 = \"sm_90a\" }} }}")
    unknown = set(data) - {"flags", "arch"}
    if unknown:
        raise SpecError(f"{where}: build has unknown keys {sorted(unknown)}; it takes 'flags' and 'arch'")
    flags = data.get("flags", [])
    if not isinstance(flags, list) or not all(isinstance(f, str) and f.startswith("-") for f in flags):
        raise SpecError(f"{where}: build.flags must be a list of nvcc options, each starting with '-', got {flags!r}")
    arch = data.get("arch", {})
    pattern = re.compile(r"sm_\d+[a-z]?")
    if not isinstance(arch, dict) or not all(isinstance(v, str) and pattern.fullmatch(k) and pattern.fullmatch(v)
                                             for k, v in arch.items()):
        raise SpecError(f"{where}: build.arch maps a GPU's architecture to the target to build for, "
                        f"like {{ sm_90 = \"sm_90a\" }}; got {arch!r}")
    return Build(tuple(flags), dict(arch))


def _arg(data: dict[str, Any], where: str) -> Arg:
    if not isinstance(data, dict):
        raise SpecError(f"{where}: an argument must be a table like {{ name = \"x\", role = \"in\", ... }}")
    name = str(_req(data, "name", where))
    role = str(_req(data, "role", where))
    dtype = str(_req(data, "dtype", where))
    known = {"name", "role", "dtype", "shape", "list", "sizes_of", "length_of", "fill", "rtol", "atol", "range",
             "derive"}
    unknown = set(data) - known
    if unknown:
        raise SpecError(f"{where}: argument {name!r} has unknown keys {sorted(unknown)}")
    if role not in ROLES:
        raise SpecError(f"{where}: argument {name!r} has role {role!r}; roles are {ROLES}")
    if dtype not in DTYPES:
        raise SpecError(f"{where}: argument {name!r} has dtype {dtype!r}; dtypes are {tuple(DTYPES)}")
    fill = str(data.get("fill", "normal"))
    if fill not in FILLS:
        raise SpecError(f"{where}: argument {name!r} has fill {fill!r}; fills are {FILLS}")
    tol = {k: _number(data, k, 0.0, where) if k in data else None for k in ("rtol", "atol")}
    if role == "scalar":
        if dtype not in SCALAR_DTYPES:
            raise SpecError(f"{where}: scalar {name!r} must be one of {SCALAR_DTYPES}")
        if any(k in data for k in ("shape", "list", "sizes_of", "fill", "rtol", "atol")):
            raise SpecError(f"{where}: scalar {name!r} takes no shape, list, sizes_of, fill or tolerance")
        length_of = data.get("length_of")
        if length_of is not None and dtype not in ("int32", "int64"):
            raise SpecError(f"{where}: scalar {name!r} has length_of, so it must be int32 or int64")
        return Arg(name, role, dtype, length_of=str(length_of) if length_of is not None else None)
    if "length_of" in data:
        raise SpecError(f"{where}: argument {name!r}: length_of is for scalars; a device array of the "
                        "element counts takes sizes_of")
    kinds = [k for k in ("shape", "list", "sizes_of") if k in data]
    if len(kinds) != 1:
        raise SpecError(f"{where}: argument {name!r} needs exactly one of 'shape' (a tensor), 'list' (a list "
                        f"of tensors) or 'sizes_of' (the element counts of a list), got {kinds or 'none'}")
    if role == "in" and (tol["rtol"] is not None or tol["atol"] is not None):
        raise SpecError(f"{where}: argument {name!r} is an input; tolerances belong to outputs")
    bounds = _range(data, name, role, dtype, fill, where)
    derive = data.get("derive")
    if derive is not None:
        if role != "in" or not isinstance(derive, str) or not derive.isidentifier() or "shape" not in data or \
                any(k in data for k in ("fill", "range")):
            raise SpecError(f"{where}: argument {name!r}: derive names the function of the reference module that "
                            "computes this input from the others (a forward pass's saved output); it is for a "
                            "tensor with role 'in' and a shape, without fill or range")
    if "sizes_of" in data:
        if role != "in" or dtype not in ("int32", "int64"):
            raise SpecError(f"{where}: argument {name!r} (sizes_of) must be role 'in' with dtype int32 or int64")
        return Arg(name, role, dtype, sizes_of=str(data["sizes_of"]))
    if "list" in data:
        return Arg(name, role, dtype, list=str(data["list"]), fill=fill, range=bounds, **tol)
    shape = data["shape"]
    if not isinstance(shape, list) or not shape:
        raise SpecError(f"{where}: shape of {name!r} must be a non-empty list like [\"n\"] or [\"rows\", \"cols\"]")
    exprs = tuple(Expr(str(s)) for s in shape)
    for e in exprs:
        try:
            ast.parse(e.text, mode="eval")
        except SyntaxError:
            raise SpecError(f"{where}: shape of {name!r}: {e.text!r} is not an expression") from None
    return Arg(name, role, dtype, exprs, fill=fill, range=bounds, derive=derive, **tol)


def _range(data: dict[str, Any], name: str, role: str, dtype: str, fill: str,
           where: str) -> tuple[Expr, Expr] | None:
    """An integer argument's `range = [low, high]`: values drawn in [low, high), each bound a number or an
    expression over the scalars."""
    if "range" not in data:
        if fill == "ends":
            raise SpecError(f"{where}: argument {name!r} has fill 'ends', which needs a range = [low, high]")
        return None
    value = data["range"]
    if DTYPES[dtype].kind != "int" or role not in ("in", "inout"):
        raise SpecError(f"{where}: argument {name!r}: range is for integer inputs (and inout state)")
    if not isinstance(value, list) or len(value) != 2 or not all(
            isinstance(v, (int, str)) and not isinstance(v, bool) for v in value):
        raise SpecError(f"{where}: argument {name!r}: range must be [low, high], two integers or expressions "
                        f"(values are drawn in [low, high)), got {value!r}")
    exprs = (Expr(str(value[0])), Expr(str(value[1])))
    for e in exprs:
        try:
            ast.parse(e.text, mode="eval")
        except SyntaxError:
            raise SpecError(f"{where}: range of {name!r}: {e.text!r} is not an expression") from None
    return exprs


def _scalar_value(arg: Arg, value: Any, where: str) -> Value:
    """A scalar's value from toml, checked against its C type."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"{where}: {arg.name} = {value!r}, but {arg.name} is a {arg.dtype} scalar: give a number")
    if arg.dtype == "float32":
        if not math.isfinite(value) or abs(value) > FLOAT32_MAX:
            raise SpecError(f"{where}: {arg.name} = {value!r} is not a finite float32")
        return float32(float(value))
    if isinstance(value, float):
        if not value.is_integer():
            raise SpecError(f"{where}: {arg.name} = {value!r}, but {arg.name} is an integer ({arg.dtype})")
        value = int(value)
    low, high = _INT_RANGE[arg.dtype]
    if not low <= value <= high:
        raise SpecError(f"{where}: {arg.name} = {value} does not fit in {arg.dtype}")
    return int(value)


def _call(data: Any, scalars: dict[str, Arg], where: str, index: int) -> dict[str, Value]:
    if not isinstance(data, dict):
        raise SpecError(f"{where}: calls[{index}] must be a table of scalar values, like {{ step = 2 }}")
    out = {}
    for key, value in data.items():
        if key not in scalars or scalars[key].derived:
            raise SpecError(f"{where}: calls[{index}] sets {key!r}, which is not a scalar a case sets; "
                            f"the scalars are {sorted(n for n, a in scalars.items() if not a.derived)}")
        out[key] = _scalar_value(scalars[key], value, f"{where} calls[{index}]")
    return out


def _shapes(value: Any, key: str, where: str) -> tuple[Shape, ...]:
    """A list of tensor shapes: each item a shape ([768, 2304]) or a group that repeats,
    { shapes = [[768], [768, 2304]], repeat = 12 }."""
    if not isinstance(value, list):
        raise SpecError(f"{where}: {key} must be a list of tensor shapes like [[768, 2304], [768]]")
    out: list[Shape] = []
    for item in value:
        if isinstance(item, dict):
            if set(item) - {"shapes", "repeat"} or "shapes" not in item:
                raise SpecError(f"{where}: a group in {key} is {{ shapes = [[...], ...], repeat = N }}, got {item!r}")
            repeat = item.get("repeat", 1)
            if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
                raise SpecError(f"{where}: repeat in {key} must be a positive integer, got {repeat!r}")
            out.extend(_shapes(item["shapes"], key, where) * repeat)
            continue
        if not isinstance(item, list) or not item or not all(
                isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in item):
            raise SpecError(f"{where}: {key} holds {item!r}; a tensor shape is a list of positive integers")
        out.append(tuple(item))
    if not out:
        raise SpecError(f"{where}: {key} is an empty list of tensors")
    return tuple(out)


def _case(data: Any, args: tuple[Arg, ...], where: str, field_name: str, optional: set[str] = frozenset()) -> Case:
    if not isinstance(data, dict):
        raise SpecError(f"{where}: {field_name}: a case must be a table of scalar values, got {data!r}")
    scalars = {a.name: a for a in args if a.role == "scalar" and not a.derived}
    list_keys = {a.list for a in args if a.list}
    keys = {k for k in data if k not in RESERVED_CASE_KEYS}
    required = set(scalars) - set(optional)
    missing = (required | list_keys) - keys
    extra = keys - set(scalars) - list_keys
    if missing or extra:
        raise SpecError(f"{where}: {field_name}: case {data} must set exactly the scalars "
                        f"{sorted(set(scalars) | list_keys)}"
                        + (f"; missing {sorted(missing)}" if missing else "")
                        + (f"; unknown {sorted(extra)}" if extra else ""))
    at = f"{where} {field_name}"
    values = {k: _scalar_value(scalars[k], data[k], at) for k in scalars if k in data}
    lists = {k: _shapes(data[k], k, at) for k in sorted(list_keys)}
    fills = data.get("fill", {})
    tensors = {a.name: a for a in args if a.role in ("in", "inout") and not a.sizes_of and not a.derive}
    if not isinstance(fills, dict) or not all(k in tensors and v in FILLS for k, v in fills.items()):
        raise SpecError(f"{at}: fill must map input or inout arguments ({sorted(tensors)}) to one of {FILLS}, "
                        f"got {fills!r}")
    for k, v in fills.items():
        if v == "ends" and tensors[k].range is None:
            raise SpecError(f"{at}: fill 'ends' for {k!r} needs a range = [low, high] on that argument")
    scale = data.get("input_scale", 1.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise SpecError(f"{at}: input_scale must be a number, got {scale!r}")
    case = Case(values=values, input_scale=float(scale), label=str(data.get("label", "")), lists=lists,
                fills=dict(fills))
    for a in args:
        if a.shape and not set().union(*(e.names() for e in a.shape)) - set(values):
            try:
                dims = a.dims(values)
            except SpecError as exc:
                raise SpecError(f"{at}: shape of {a.name!r}: {exc}") from None
            if any(d < 0 for d in dims):
                raise SpecError(f"{at}: case {case.describe()} gives {a.name!r} the shape {dims}")
        if a.range is not None and not set().union(*(e.names() for e in a.range)) - set(values):
            low, high = a.bounds(values)
            if high <= low:
                raise SpecError(f"{at}: case {case.describe()} gives {a.name!r} the empty range [{low}, {high})")
    return case


def reference_parameters(fn: Callable[..., Any]) -> list[str]:
    """Parameter names of a reference function, for the spec/reference agreement check."""
    return list(inspect.signature(fn).parameters)
