"""The vocabulary of an exercise.toml: dtypes, argument roles, fills and compute units, the small
arithmetic expressions that shapes and roofline formulas are written in, and SpecError, the
message for a spec the grader cannot use."""
from __future__ import annotations

import ast
import math
import operator
import struct
from dataclasses import dataclass
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
INT_RANGE = {"int32": (-2**31, 2**31 - 1), "int64": (-2**63, 2**63 - 1)}
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
