"""Exercise specifications: `exercise.toml` files turned into dataclasses.

An exercise is data. Everything the grader needs to know about a task (its entry
symbol, arguments, reference, tolerances, cases, benchmark size, roofline
formulas, points) is read from the exercise folder; nothing here is specific to
any exercise.
"""
from __future__ import annotations

import ast
import importlib.util
import inspect
import math
import operator
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

ROLES = ("in", "out", "scalar")

# dtype name -> (C type, bytes per element)
DTYPES: dict[str, tuple[str, int]] = {
    "float32": ("float", 4),
    "float64": ("double", 8),
    "float16": ("__half", 2),
    "bfloat16": ("__nv_bfloat16", 2),
    "int8": ("int8_t", 1),
    "uint8": ("uint8_t", 1),
    "int32": ("int", 4),
    "int64": ("long long", 8),
}
SCALAR_DTYPES = ("int32", "int64", "float32")
COMPUTE_UNITS = ("fp32", "bf16_tensor", "fp16_tensor", "int8_tensor", "fp8_tensor")
RESERVED_CASE_KEYS = ("input_scale", "label")


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
_FUNCS: dict[str, Callable[..., Any]] = {"min": min, "max": max, "ceil_div": lambda a, b: -(-a // b)}


@dataclass(frozen=True)
class Expr:
    """A small arithmetic expression over the task's scalars, e.g. ``"12 * n"``.

    Python syntax, restricted to numbers, scalar names, + - * / // % **,
    comparisons, ``a if cond else b``, and min/max/ceil_div.
    """

    text: str

    def names(self) -> set[str]:
        return {n.id for n in ast.walk(ast.parse(self.text, mode="eval")) if isinstance(n, ast.Name)} - set(_FUNCS)

    def __call__(self, env: dict[str, Any]) -> Any:
        return _eval(ast.parse(self.text, mode="eval").body, env, self.text)


def _eval(node: ast.AST, env: dict[str, Any], text: str) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
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


# --------------------------------------------------------------------------- dataclasses

@dataclass(frozen=True)
class Arg:
    name: str
    role: str          # "in" | "out" | "scalar"
    dtype: str
    shape: tuple[Expr, ...] = ()

    @property
    def c_type(self) -> str:
        base = DTYPES[self.dtype][0]
        if self.role == "in":
            return f"const {base}*"
        if self.role == "out":
            return f"{base}*"
        return base

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype][1]

    def dims(self, sizes: dict[str, int]) -> tuple[int, ...]:
        return tuple(int(e(sizes)) for e in self.shape)

    def numel(self, sizes: dict[str, int]) -> int:
        return math.prod(self.dims(sizes))


@dataclass(frozen=True)
class Case:
    """One set of scalar values the task is checked on."""

    sizes: dict[str, int]
    input_scale: float = 1.0
    label: str = ""

    def describe(self) -> str:
        text = ", ".join(f"{k}={v}" for k, v in self.sizes.items())
        if self.input_scale != 1.0:
            text += f", inputs x{self.input_scale:g}"
        return self.label or text

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = dict(self.sizes)
        if self.input_scale != 1.0:
            d["input_scale"] = self.input_scale
        if self.label:
            d["label"] = self.label
        return d


@dataclass(frozen=True)
class Points:
    correct: float
    speed: float

    @property
    def total(self) -> float:
        return self.correct + self.speed


@dataclass(frozen=True)
class Task:
    name: str
    source: str
    symbol: str
    baseline: str
    reference: str
    args: tuple[Arg, ...]
    cases: tuple[Case, ...]
    benchmark: Case
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

    @property
    def inputs(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.role == "in")

    @property
    def outputs(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.role == "out")

    @property
    def scalars(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.role == "scalar")

    def prototype(self) -> str:
        """The C declaration the learner's entry point must have."""
        params = ", ".join(f"{a.c_type} {a.name}" for a in self.args)
        return f'extern "C" void {self.symbol}({params});'

    def work(self, case: Case) -> tuple[float, float]:
        """(FLOPs, minimal bytes) for one call at ``case``'s sizes."""
        return float(self.flops(case.sizes)), float(self.bytes(case.sizes))


@dataclass(frozen=True)
class Exercise:
    id: str
    slug: str
    title: str
    folder: Path
    notebook: str
    reference_file: str
    tasks: tuple[Task, ...]

    def task(self, name: str) -> Task:
        for t in self.tasks:
            if t.name == name:
                return t
        raise SpecError(f"exercise {self.id} has no task {name!r}; its tasks are: "
                        + ", ".join(t.name for t in self.tasks))

    def load_reference(self) -> ModuleType:
        """Import the exercise's reference.py (float64 PyTorch)."""
        path = self.folder / self.reference_file
        name = f"_s2s_reference_{self.slug}"
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise SpecError(f"{path}: cannot be imported")
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        return module

    def reference_function(self, task: Task) -> Callable[..., Any]:
        return getattr(self.load_reference(), task.reference)


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
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise SpecError(f"{path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: {exc}") from None
    where = str(path)
    tasks = tuple(_task(t, f"{where} [task {i + 1}]") for i, t in enumerate(_list(data, "tasks", where)))
    if not tasks:
        raise SpecError(f"{where}: an exercise needs at least one [[tasks]] entry")
    names = [t.name for t in tasks]
    if len(set(names)) != len(names):
        raise SpecError(f"{where}: task names must be unique, got {names}")
    return Exercise(
        id=str(_req(data, "id", where)),
        slug=folder.name,
        title=str(_req(data, "title", where)),
        folder=folder,
        notebook=str(data.get("notebook", "")),
        reference_file=str(data.get("reference", "reference.py")),
        tasks=tasks,
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


def _task(data: dict[str, Any], where: str) -> Task:
    name = str(_req(data, "name", where))
    where = f"{where.rsplit(' [', 1)[0]} [task {name}]"
    args = tuple(_arg(a, where) for a in _list(data, "args", where))
    if not args:
        raise SpecError(f"{where}: 'args' is empty")
    scalars = {a.name for a in args if a.role == "scalar"}
    for a in args:
        for e in a.shape:
            unknown = e.names() - scalars
            if unknown:
                raise SpecError(f"{where}: shape of {a.name!r} uses {sorted(unknown)}, not scalars of this task")
    if not any(a.role == "out" for a in args):
        raise SpecError(f"{where}: a task needs at least one 'out' argument")
    cases = tuple(_case(c, scalars, where) for c in _list(data, "cases", where))
    if not cases:
        raise SpecError(f"{where}: 'cases' is empty")
    flops, nbytes = Expr(str(_req(data, "flops", where))), Expr(str(_req(data, "bytes", where)))
    for e in (flops, nbytes):
        unknown = e.names() - scalars
        if unknown:
            raise SpecError(f"{where}: formula {e.text!r} uses {sorted(unknown)}, not scalars of this task")
    compute = str(data.get("compute", "fp32"))
    if compute not in COMPUTE_UNITS:
        raise SpecError(f"{where}: compute must be one of {COMPUTE_UNITS}, got {compute!r}")
    condition = str(data.get("condition", "none"))
    if condition not in ("none", "abs"):
        raise SpecError(f"{where}: condition must be 'none' or 'abs', got {condition!r}")
    pts = data.get("points", {})
    points = Points(float(pts.get("correct", 1)), float(pts.get("speed", 1)))
    min_speedup = float(_req(data, "min_speedup", where))
    if min_speedup <= 0:
        raise SpecError(f"{where}: min_speedup must be positive")
    return Task(
        name=name,
        source=str(_req(data, "source", where)),
        symbol=str(data.get("symbol", name)),
        baseline=str(_req(data, "baseline", where)),
        reference=str(data.get("reference", name)),
        args=args,
        cases=cases,
        benchmark=_case(_req(data, "benchmark", where), scalars, where),
        flops=flops,
        bytes=nbytes,
        compute=compute,
        rtol=float(data.get("rtol", 1e-5)),
        atol=float(data.get("atol", 0.0)),
        min_speedup=min_speedup,
        points=points,
        condition=condition,
        vendor=data.get("vendor"),
        timeout_s=float(data.get("timeout_s", 60.0)),
    )


def _arg(data: dict[str, Any], where: str) -> Arg:
    name = str(_req(data, "name", where))
    role = str(_req(data, "role", where))
    dtype = str(_req(data, "dtype", where))
    if role not in ROLES:
        raise SpecError(f"{where}: argument {name!r} has role {role!r}; roles are {ROLES}")
    if dtype not in DTYPES:
        raise SpecError(f"{where}: argument {name!r} has dtype {dtype!r}; dtypes are {tuple(DTYPES)}")
    if role == "scalar":
        if dtype not in SCALAR_DTYPES:
            raise SpecError(f"{where}: scalar {name!r} must be one of {SCALAR_DTYPES}")
        return Arg(name, role, dtype)
    shape = tuple(Expr(str(s)) for s in _req(data, "shape", where))
    return Arg(name, role, dtype, shape)


def _case(data: dict[str, Any], scalars: set[str], where: str) -> Case:
    if not isinstance(data, dict):
        raise SpecError(f"{where}: a case must be a table of scalar values, got {data!r}")
    sizes = {k: v for k, v in data.items() if k not in RESERVED_CASE_KEYS}
    missing, extra = scalars - set(sizes), set(sizes) - scalars
    if missing or extra:
        raise SpecError(f"{where}: case {data} must set exactly the scalars {sorted(scalars)}"
                        + (f"; missing {sorted(missing)}" if missing else "")
                        + (f"; unknown {sorted(extra)}" if extra else ""))
    return Case(sizes={k: int(v) for k, v in sizes.items()},
                input_scale=float(data.get("input_scale", 1.0)), label=str(data.get("label", "")))


def reference_parameters(fn: Callable[..., Any]) -> list[str]:
    """Parameter names of a reference function, for the spec/reference agreement check."""
    return list(inspect.signature(fn).parameters)
