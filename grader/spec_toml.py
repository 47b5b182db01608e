"""Reading an exercise.toml: every field is checked as it is turned into a dataclass, and a
message names the file, the task and the field of anything the grader cannot use."""
from __future__ import annotations

import ast
import inspect
import math
import re
import tomllib
from pathlib import Path
from typing import Any, Callable

from grader.spec_model import Arg, Build, Case, Exercise, Points, Task
from grader.spec_values import (COMPUTE_UNITS, DTYPES, FILLS, FLOAT32_MAX, INT_RANGE, RESERVED_CASE_KEYS, ROLES,
                                SCALAR_DTYPES, Expr, Shape, SpecError, Value, float32)


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
    low, high = INT_RANGE[arg.dtype]
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
