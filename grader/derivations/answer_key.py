"""Answer keys: how a learner's copy of the course checks derivation answers without holding them.

A learner's copy (``grade course learner-copy``) replaces each exercise's checkers with an answer
key, ``answer_key.npz``, written by watching the instructor's checkers judge the hidden answers:

* a **number** the learner derives is kept as a salted digest of the bucket it falls in. The
  buckets are as wide as the prompt's tolerance and centred on the truth: a relative tolerance
  buckets the logarithm, an absolute one the value itself, and the key stores only where the truth
  sits inside its bucket (its *phase*), which says nothing of which bucket it is;
* a **function** the learner writes is called with the inputs the instructor's checker gave the
  hidden answer, in the same order (a result the checker passed back in, such as a running state,
  is the learner's own previous result), and each result is kept as a digest of its elements'
  buckets, with one phase per element;
* the message a passing answer earns (which may explain the answer) is encrypted with a key that
  only the right buckets give.

So a check tells right from wrong at once, and the key holds no expected value in readable form.
It is still an oracle: a determined learner can try values until one matches. Graded points come
from the instructor's own checkers at autograde, never from a key.

Nothing here knows an exercise: the observer below sees what every checker built on
:mod:`grader.derivations.core` does (``call_learner``, ``missing_functions``, ``check_numbers``,
``check_table``), so a new prompt written that way gets its key without extra work. A checker that
compares part of an answer some other way is refused by name when the key is written.
"""
from __future__ import annotations

import base64
import hashlib
import io
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from grader.derivations.core import NO, OK, NumericQuestion, Prompt, Verdict, fmt, read_number

FORMAT = 1
PHASE_STEPS = 1 << 16           # a phase is kept as a 16-bit fraction of its bucket
DIGEST_HEX = 24                 # 96 bits of each digest are kept
SAFETY = 1 - 1e-9               # buckets a hair narrower than the tolerance they stand for

# How closely a function's results must match when its prompt says nothing (rtol, atol), by the
# dtype of the hidden answer's result. Looser than float rounding, far tighter than any mistake:
# the instructor's checkers ask for 1e-6 to 1e-12 in float64 and 1e-5 in float32.
FUNCTION_TOLERANCE = {"float64": (1e-7, 1e-12), "float32": (1e-5, 1e-35), "float16": (1e-2, 1e-6),
                      "bfloat16": (1e-2, 1e-6)}


class NoKey(Exception):
    """A prompt cannot get an answer key as its checker is written; the message says why."""


# ================================================================== buckets and digests

@dataclass(frozen=True)
class Grid:
    """How values are bucketed. ``exact``: no tolerance. ``log``: a relative tolerance, buckets
    of ``width`` in log |x| (the sign kept apart). ``lin``: an absolute tolerance, buckets of
    ``width`` in x. ``asinh``: both, buckets of ``width`` in asinh(x / scale), which is log-like
    above ``scale`` and linear below it."""

    kind: str
    width: float = 0.0
    scale: float = 1.0

    def coordinate(self, x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            if self.kind == "log":
                return np.log(np.abs(x))
            if self.kind == "asinh":
                return np.arcsinh(x / self.scale)
            return x

    def to_json(self) -> dict:
        return {"kind": self.kind, "width": self.width, "scale": self.scale}

    @classmethod
    def from_json(cls, raw: Mapping) -> Grid:
        return cls(raw["kind"], float(raw["width"]), float(raw["scale"]))


def grid_for_number(truth: float, rtol: float, atol: float) -> Grid:
    """The bucket of a derived number: what NumericQuestion.accepts lets through, centred on truth."""
    if rtol and truth != 0:
        return Grid("log", 2 * math.log1p(rtol) * SAFETY)
    if atol:
        return Grid("lin", 2 * atol * SAFETY)
    return Grid("exact")


def grid_for_function(dtype: np.dtype, tolerance: tuple[float, float] | None) -> Grid:
    """The buckets of a function's result: (rtol, atol) as np.allclose reads them."""
    if dtype.kind in "biu" or dtype == np.bool_:
        return Grid("exact")
    rtol, atol = tolerance or FUNCTION_TOLERANCE.get(dtype.name, FUNCTION_TOLERANCE["float64"])
    if not rtol:
        return Grid("lin", 2 * atol * SAFETY) if atol else Grid("exact")
    return Grid("asinh", 2 * rtol * SAFETY, max(atol, 1e-300) / rtol)


def _special(values: np.ndarray) -> np.ndarray:
    """0 for a finite value, 1 for NaN, 2 for +inf, 3 for -inf: a result may hold them (a masked
    score, the running maximum of nothing), and must hold them where the truth does."""
    return np.select([np.isnan(values), values == np.inf, values == -np.inf], [1, 2, 3], 0).astype(np.int8)


def _phases(grid: Grid, truth: np.ndarray) -> np.ndarray:
    """Where each true value sits inside its bucket, as a 16-bit fraction (0 where it is not finite)."""
    finite = _special(truth) == 0
    with np.errstate(all="ignore"):
        position = np.where(finite, grid.coordinate(np.where(finite, truth, 1.0)) / grid.width, 0.0)
    fraction = position - np.floor(position)
    return (np.rint(fraction * PHASE_STEPS).astype(np.int64) % PHASE_STEPS).astype(np.uint16)


def _bucket_bytes(grid: Grid, values: np.ndarray, phase: np.ndarray | None) -> bytes | None:
    """The bytes a digest is taken of: which values are not finite, and the buckets of the others
    (None when a value falls in no bucket: the log of 0 where the truth is not 0, say)."""
    values = np.asarray(values, dtype=np.float64)
    special = _special(values)
    finite = special == 0
    kept = np.where(finite, values, 1.0)
    if grid.kind == "exact":
        return special.tobytes() + np.ascontiguousarray(np.where(finite, kept + 0.0, 0.0)).tobytes()
    coordinate = grid.coordinate(kept)                           # + 0.0 above: -0.0 is 0.0
    if not np.all(np.isfinite(coordinate)):
        return None
    index = np.floor(coordinate / grid.width - phase.astype(np.float64) / PHASE_STEPS + 0.5)
    if np.any(np.abs(index) > 2.0 ** 62):
        return None
    data = special.tobytes() + np.where(finite, index, 0).astype(np.int64).tobytes()
    if grid.kind == "log":
        data = np.sign(kept).astype(np.int8).tobytes() + data
    return data


def _hash(salt: bytes, purpose: bytes, tag: str, data: bytes) -> bytes:
    return hashlib.sha256(salt + purpose + b"\0" + tag.encode() + b"\0" + data).digest()


@dataclass(frozen=True)
class Leaf:
    """One value of an answer (a number, or an array a function returns), as the key holds it.
    ``tag`` names it (prompt, function or key, call): the same buckets give other digests elsewhere."""

    tag: str
    shape: tuple[int, ...]
    dtype: str
    grid: Grid
    phase: np.ndarray | None
    digest: str
    finite: bool = True             # the truth holds no NaN or infinity

    @classmethod
    def of(cls, truth: Any, grid: Grid, salt: bytes, tag: str) -> Leaf:
        array = as_array(truth)
        if array is None or array.dtype.kind not in "biuf":
            raise NoKey(f"{tag}: the hidden answer gave {type(truth).__name__}, not numbers")
        values = array.astype(np.float64)
        phase = None if grid.kind == "exact" else _phases(grid, values)
        data = _bucket_bytes(grid, values, phase)
        if data is None:
            raise NoKey(f"{tag}: a value of the hidden answer falls in no bucket of its tolerance")
        return cls(tag, tuple(array.shape), array.dtype.name, grid, phase,
                   _hash(salt, b"check", tag, data).hex()[:DIGEST_HEX], bool(np.all(np.isfinite(values))))

    def secret(self, values: np.ndarray, salt: bytes) -> bytes | None:
        """None unless ``values`` fall in the right buckets; then what only the right buckets give."""
        data = _bucket_bytes(self.grid, values, self.phase)
        if data is None or _hash(salt, b"check", self.tag, data).hex()[:DIGEST_HEX] != self.digest:
            return None
        return _hash(salt, b"secret", self.tag, data)


def as_array(value: Any) -> np.ndarray | None:
    """A value as a NumPy array: arrays, numbers, NumPy scalars, PyTorch tensors; None otherwise."""
    if isinstance(value, (bool, np.bool_)):
        return np.asarray(value)
    if hasattr(value, "detach") and hasattr(value, "cpu"):          # a torch.Tensor
        value = value.detach().cpu().numpy()
    try:
        return np.asarray(value)
    except (TypeError, ValueError):
        return None


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


# ================================================================== keeping inputs

class Packer:
    """Turns the inputs a checker gave a function into JSON plus arrays, each array kept once."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self._seen: dict[tuple, str] = {}

    def array(self, array: np.ndarray) -> str:
        array = np.ascontiguousarray(array)
        ident = (array.dtype.str, array.shape, hashlib.sha256(array.tobytes()).hexdigest())
        if ident not in self._seen:
            name = f"a{len(self.arrays)}"
            self.arrays[name] = array.copy()
            self._seen[ident] = name
        return self._seen[ident]

    def pack(self, value: Any) -> Any:
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, np.ndarray):
            if value.dtype.kind not in "biufc":
                raise NoKey(f"an input array of dtype {value.dtype} cannot be kept")
            return {"array": self.array(value)}
        if isinstance(value, np.generic):
            return {"scalar": value.dtype.name, "value": self.pack(value.item())}
        if isinstance(value, int):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else {"float": repr(value)}
        if isinstance(value, tuple):
            return {"tuple": [self.pack(v) for v in value]}
        if isinstance(value, list):
            return [self.pack(v) for v in value]
        if isinstance(value, dict):
            return {"dict": [[self.pack(k), self.pack(v)] for k, v in value.items()]}
        if hasattr(value, "detach") and hasattr(value, "cpu"):
            return {"tensor": self.array(value.detach().cpu().numpy())}
        raise NoKey(f"an input of type {type(value).__name__} cannot be kept")


def unpack(node: Any, arrays: Mapping[str, np.ndarray]) -> Any:
    """The value :meth:`Packer.pack` kept, as a fresh copy (a learner's function may write into it)."""
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if isinstance(node, list):
        return [unpack(v, arrays) for v in node]
    if "array" in node:
        return arrays[node["array"]].copy()
    if "scalar" in node:
        return np.dtype(node["scalar"]).type(unpack(node["value"], arrays))
    if "float" in node:
        return float(node["float"])
    if "tuple" in node:
        return tuple(unpack(v, arrays) for v in node["tuple"])
    if "dict" in node:
        return {unpack(k, arrays): unpack(v, arrays) for k, v in node["dict"]}
    if "tensor" in node:
        import torch
        return torch.from_numpy(arrays[node["tensor"]].copy())
    raise ValueError(f"unknown input in an answer key: {node!r}")


# ================================================================== the key of one prompt

@dataclass
class Call:
    """One call a checker made of a function of the answer: its inputs and its result's key."""

    function: str
    args: list                      # packed; {"previous": True} marks the function's own last result
    kwargs: dict
    where: str | None               # what the checker said the inputs are (None when chained)
    output: Any                     # the result's structure, its leaves as Leaf


@dataclass
class Question:
    key: str
    label: str
    hint: str
    rule: str
    leaf: Leaf


@dataclass
class NumbersPart:
    path: tuple[str, ...]           # where in the answer the dict of numbers is: () for the answer itself
    heading: str | None
    questions: list[Question]


@dataclass
class TablePart:
    path: tuple[str, ...]
    fields: tuple[str, ...]
    wrong: str
    right: str
    rows: list[tuple[str, str, dict[str, Leaf]]]          # (key, label, the leaf of every field)


@dataclass
class PromptKey:
    id: str
    title: str
    max_points: float
    functions: list[str] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    parts: list[NumbersPart | TablePart] = field(default_factory=list)
    order: list[str] = field(default_factory=list)      # "functions" and "part N", as first seen
    reveal: bytes = b""             # the passing message, encrypted with what the right answer gives


# ------------------------------------------------------------------ the passing message

def _keystream(key: bytes, length: int) -> bytes:
    blocks = (length + 31) // 32
    return b"".join(hashlib.sha256(key + i.to_bytes(8, "little")).digest() for i in range(blocks))[:length]


def _seal(text: str, secrets: Sequence[bytes], salt: bytes) -> bytes:
    data = text.encode()
    key = hashlib.sha256(salt + b"reveal" + b"".join(secrets)).digest()
    return bytes(a ^ b for a, b in zip(data, _keystream(key, len(data))))


def _open(sealed: bytes, secrets: Sequence[bytes], salt: bytes) -> str:
    key = hashlib.sha256(salt + b"reveal" + b"".join(secrets)).digest()
    return bytes(a ^ b for a, b in zip(sealed, _keystream(key, len(sealed)))).decode(errors="replace")


# ================================================================== writing keys: the observer

def _output_key(value: Any, grid_of: Callable[[np.dtype], Grid], salt: bytes, tag: str) -> Any:
    if isinstance(value, (tuple, list)):
        return {"seq": [_output_key(v, grid_of, salt, f"{tag}.{i}") for i, v in enumerate(value)],
                "type": type(value).__name__}
    array = as_array(value)
    if array is None:
        raise NoKey(f"{tag}: the hidden answer returned {type(value).__name__}, which a key cannot hold")
    return Leaf.of(array, grid_of(array.dtype), salt, tag)


def probe_tolerance(accepts: Callable[[float, float], bool], truth: float, where: str) -> tuple[float, float]:
    """(rtol, atol) of an ``accepts(got, truth)`` rule, found by trying values around the truth:
    a relative tolerance is the same fraction at every truth, an absolute one the same distance."""
    if not accepts(truth, truth):
        raise NoKey(f"{where}: its rule does not accept the hidden answer's own value {truth!r}")

    def widest(ok: Callable[[float], bool]) -> float:
        if not ok(1e-12):
            return 0.0
        low, high = 1e-12, 1.0
        if ok(high):
            raise NoKey(f"{where}: its rule accepts values twice the truth; a key needs a tolerance")
        for _ in range(60):
            middle = math.sqrt(low * high)
            low, high = (middle, high) if ok(middle) else (low, middle)
        return low

    if truth == 0:
        return 0.0, widest(lambda d: accepts(d, 0.0) and accepts(-d, 0.0))
    relative = [widest(lambda r, t=t: accepts(t * (1 + r), t) and accepts(t * (1 - r), t))
                for t in (truth, truth * 7.3)]
    if relative[0] == 0.0 and relative[1] == 0.0:
        return 0.0, 0.0
    if math.isclose(relative[0], relative[1], rel_tol=1e-3):
        return relative[0], 0.0
    absolute = [r * abs(t) for r, t in zip(relative, (truth, truth * 7.3))]
    if math.isclose(absolute[0], absolute[1], rel_tol=1e-3):
        return 0.0, absolute[0]
    raise NoKey(f"{where}: its rule is neither a relative nor an absolute tolerance")


def _remembered(hook: Callable) -> Callable:
    """A hook whose refusal survives the checker: run_prompt turns any exception into a verdict, so
    the recorder keeps the first one and raises it again when the prompt ends."""
    def hooked(self: Recorder, *args: Any) -> Any:
        try:
            return hook(self, *args)
        except NoKey as err:
            self._failure = self._failure or err
            raise
    return hooked


class Recorder:
    """Watches checkers judge hidden answers (see core.observed_by) and writes each prompt's key."""

    def __init__(self, salt: bytes) -> None:
        self.salt = salt
        self.packer = Packer()
        self.keys: dict[str, PromptKey] = {}
        self.answers: dict[str, Any] = {}       # what each prompt was checked with, and the message it got
        self.messages: dict[str, str] = {}
        self._key: PromptKey | None = None
        self._answer: Any = None
        self._prompt: Prompt | None = None
        self._where: tuple[str, str] | None = None
        self._last: dict[str, Any] = {}
        self._failure: NoKey | None = None
        self._call_secrets: list[bytes] = []        # sealed in this order: every call's, then every part's
        self._part_secrets: list[bytes] = []

    # -- the checker's events

    def begin(self, exercise: str, prompt: Prompt, answer: Any) -> Any:
        if not isinstance(answer, Mapping):
            raise NoKey(f"prompt {prompt.id}: its answer is a {type(answer).__name__}; a learner's copy "
                            "checks dicts of functions and numbers")
        self._prompt = prompt
        self.answers[prompt.id] = answer
        self._key = PromptKey(prompt.id, prompt.title, prompt.max_points)
        self._last, self._call_secrets, self._part_secrets, self._failure = {}, [], [], None
        self._answer = {name: self._wrap(name, value) if callable(value) else value for name, value in answer.items()}
        return self._answer

    def end(self, verdict: Verdict) -> None:
        key, answer = self._key, self._answer
        if self._failure is not None:
            raise self._failure
        if not verdict.passed:
            raise NoKey(f"prompt {key.id}: the hidden answer does not pass its own checker:\n{verdict.message}")
        covered = {c.function for c in key.calls}
        for part in key.parts:
            if part.path:
                covered.add(part.path[0])
            else:
                covered.update(q.key for q in part.questions) if isinstance(part, NumbersPart) \
                    else covered.update(r[0] for r in part.rows)
        missed = [name for name in answer if name not in covered]
        if missed:
            raise NoKey(f"prompt {key.id}: its checker judges {', '.join(map(repr, missed))} without "
                            "grader.derivations.core (call_learner, check_numbers, check_table), so a learner's "
                            "copy could not check it")
        if not key.functions:
            key.functions = list(dict.fromkeys(c.function for c in key.calls))
        key.reveal = _seal(verdict.message, self._call_secrets + self._part_secrets, self.salt)
        self.keys[key.id] = key
        self.messages[key.id] = verdict.message
        self._key = None

    def calling(self, name: str, where: str) -> None:
        self._where = (name, where)

    @_remembered
    def functions(self, answer: Any, names: tuple[str, ...]) -> None:
        if self._key is not None and not self._key.functions:
            self._key.functions = list(names)
            self._seen("functions")

    @_remembered
    def numbers(self, answer: Any, questions: tuple[NumericQuestion, ...], heading: str | None) -> None:
        if self._key is None:
            return
        path = self._path(answer)
        part = NumbersPart(path, heading, [])
        for q in questions:
            tag = self._tag(f"{'.'.join(path)}/{q.key}")
            leaf = Leaf.of(float(q.truth), grid_for_number(float(q.truth), q.rtol, q.atol), self.salt, tag)
            part.questions.append(Question(q.key, q.label, q.hint, q.rule(), leaf))
            self._part_secrets.append(self._secret_of(leaf, float(q.truth), tag))
        self._key.parts.append(part)
        self._seen(f"part {len(self._key.parts) - 1}")

    @_remembered
    def table(self, answer: Any, rows: tuple, fields: tuple[str, ...], accepts: Callable, wrong: str,
              right: str) -> None:
        if self._key is None:
            return
        path = self._path(answer)
        part = TablePart(path, fields, wrong, right, [])
        for row in rows:
            truth = row.truth()
            cells = {}
            for name in fields:
                value = float(truth[name])
                rtol, atol = probe_tolerance(accepts, value, f"prompt {self._key.id}, {row.key}.{name}")
                tag = self._tag(f"{'.'.join(path)}/{row.key}/{name}")
                cells[name] = Leaf.of(value, grid_for_number(value, rtol, atol), self.salt, tag)
                self._part_secrets.append(self._secret_of(cells[name], value, tag))
            part.rows.append((row.key, row.label, cells))
        self._key.parts.append(part)
        self._seen(f"part {len(self._key.parts) - 1}")

    # -- helpers

    def _seen(self, section: str) -> None:
        if section not in self._key.order:
            self._key.order.append(section)

    def _tag(self, what: str) -> str:
        return f"{self._key.id}/{what}"

    def _secret_of(self, leaf: Leaf, truth: Any, tag: str) -> bytes:
        secret = leaf.secret(as_array(truth).astype(np.float64), self.salt)
        assert secret is not None, tag
        return secret

    def _path(self, answer: Any) -> tuple[str, ...]:
        if answer is self._answer:
            return ()
        for name, value in self._answer.items():
            if value is answer:
                return (name,)
        raise NoKey(f"prompt {self._key.id}: its checker compares numbers of a dict that is not the answer "
                        "(nor a dict inside it); a learner's copy could not find them")

    def _wrap(self, name: str, fn: Callable) -> Callable:
        @_remembered_call(self)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            key = self._key
            where = self._where[1] if self._where and self._where[0] == name else None
            self._where = None
            last = self._last.get(name)
            chained = [last is not None and not isinstance(last, (int, float)) and a is last for a in args]
            packed = [{"previous": True} if c else self.packer.pack(a) for a, c in zip(args, chained)]
            packed_kwargs = {k: self.packer.pack(v) for k, v in kwargs.items()}
            value = fn(*args, **kwargs)
            if key is None or value is None:
                return value
            index = len(key.calls)
            tolerance = self._prompt.function_tolerance

            def grid_of(dtype: np.dtype) -> Grid:
                return grid_for_function(dtype, tolerance)

            output = _output_key(value, grid_of, self.salt, self._tag(f"{name}/{index}"))
            key.calls.append(Call(name, packed, packed_kwargs, None if any(chained) else where, output))
            self._call_secrets += _output_secrets(output, value, self.salt)
            self._last[name] = value
            self._seen("functions")
            return value
        return recorded


def _remembered_call(recorder: Recorder) -> Callable:
    def decorate(fn: Callable) -> Callable:
        def called(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except NoKey as err:
                recorder._failure = recorder._failure or err
                raise
        return called
    return decorate


def _output_secrets(output: Any, value: Any, salt: bytes) -> list[bytes]:
    """The secrets of every leaf of a result the key was made from (the truth matches itself)."""
    found: list[bytes] = []
    problems = compare_output(output, value, salt, "", found)
    assert problems is None, problems
    return found


# ================================================================== reading a learner's result

def compare_output(output: Any, value: Any, salt: bytes, what: str, secrets: list[bytes]) -> str | None:
    """None when ``value`` matches the key ``output`` (appending each leaf's secret), else why not."""
    if isinstance(output, dict):
        items = output["seq"]
        if not isinstance(value, (tuple, list)) or len(value) != len(items):
            got = f"a {type(value).__name__} of {len(value)}" if isinstance(value, (tuple, list)) \
                else f"{type(value).__name__}"
            return f"it must return a {output['type']} of {len(items)} values; it returned {got}"
        for i, (item, got) in enumerate(zip(items, value)):
            problem = compare_output(item, got, salt, f"{what}{'' if not what else ' '}[{i}]", secrets)
            if problem:
                return problem
        return None
    leaf: Leaf = output
    array = as_array(value)
    where = f"its result{' ' + what if what else ''}"
    if array is None or array.dtype.kind not in "biuf":
        return f"{where} is {type(value).__name__}, not numbers"
    if array.shape != leaf.shape:
        return f"{where} has shape {array.shape}; it must have shape {leaf.shape}"
    narrow = np.dtype(leaf.dtype)
    if narrow.kind == "f" and narrow.itemsize < 8 and array.dtype != narrow:
        return f"{where} is {array.dtype}; compute and return {narrow}"
    values = array.astype(np.float64)
    if leaf.finite and not np.all(np.isfinite(values)):
        return f"{where} holds NaN or infinity"
    secret = leaf.secret(values, salt)
    if secret is None:
        return f"{where} has wrong values"
    secrets.append(secret)
    return None


# ================================================================== the key file

def _leaf_json(leaf: Leaf, packer: Packer) -> dict:
    phase = None
    if leaf.phase is not None:
        phase = int(leaf.phase) if leaf.phase.ndim == 0 else {"array": packer.array(leaf.phase)}
    return {"tag": leaf.tag, "shape": list(leaf.shape), "dtype": leaf.dtype, "grid": leaf.grid.to_json(),
            "phase": phase, "digest": leaf.digest, "finite": leaf.finite}


def _leaf_of(raw: Mapping, arrays: Mapping[str, np.ndarray]) -> Leaf:
    phase = raw["phase"]
    if isinstance(phase, int):
        phase = np.asarray(phase, dtype=np.uint16)
    elif phase is not None:
        phase = arrays[phase["array"]]
    return Leaf(raw["tag"], tuple(raw["shape"]), raw["dtype"], Grid.from_json(raw["grid"]), phase, raw["digest"],
                raw["finite"])


def _output_json(output: Any, packer: Packer) -> Any:
    if isinstance(output, dict):
        return {"seq": [_output_json(o, packer) for o in output["seq"]], "type": output["type"]}
    return _leaf_json(output, packer)


def _output_of(raw: Mapping, arrays: Mapping[str, np.ndarray]) -> Any:
    if "seq" in raw:
        return {"seq": [_output_of(o, arrays) for o in raw["seq"]], "type": raw["type"]}
    return _leaf_of(raw, arrays)


@dataclass
class AnswerKey:
    """Every prompt's key of one exercise, and what they were made with."""

    exercise: str
    gpu: str                        # the key in hardware/specs.toml of the GPU the figures are for
    salt: bytes
    prompts: list[PromptKey]
    arrays: Mapping[str, np.ndarray] = field(default_factory=dict)


def save(key: AnswerKey, path: Path, packer: Packer) -> None:
    """Write the key as one compressed NumPy archive: a JSON manifest and the arrays it names."""
    prompts = []
    for p in key.prompts:
        parts = []
        for part in p.parts:
            if isinstance(part, NumbersPart):
                parts.append({"kind": "numbers", "path": list(part.path), "heading": part.heading,
                              "questions": [{"key": q.key, "label": q.label, "hint": q.hint, "rule": q.rule,
                                             "leaf": _leaf_json(q.leaf, packer)} for q in part.questions]})
            else:
                parts.append({"kind": "table", "path": list(part.path), "fields": list(part.fields),
                              "wrong": part.wrong, "right": part.right,
                              "rows": [{"key": k, "label": label,
                                        "cells": {f: _leaf_json(leaf, packer) for f, leaf in cells.items()}}
                                       for k, label, cells in part.rows]})
        prompts.append({"id": p.id, "title": p.title, "max_points": p.max_points, "functions": p.functions,
                        "order": p.order, "reveal": base64.b64encode(p.reveal).decode(),
                        "calls": [{"function": c.function, "args": c.args, "kwargs": c.kwargs, "where": c.where,
                                   "output": _output_json(c.output, packer)} for c in p.calls],
                        "parts": parts})
    manifest = {"format": FORMAT, "exercise": key.exercise, "gpu": key.gpu, "salt": key.salt.hex(),
                "prompts": prompts}
    text = json.dumps(manifest, separators=(",", ":"), allow_nan=False)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, manifest=np.frombuffer(text.encode(), dtype=np.uint8), **packer.arrays)
    Path(path).write_bytes(buffer.getvalue())


def load(path: Path) -> AnswerKey:
    with np.load(path, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    manifest = json.loads(arrays.pop("manifest").tobytes().decode())
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{path} is an answer key of format {manifest.get('format')}; this grader reads "
                         f"format {FORMAT}: make the learner's copy again with this grader")
    prompts = []
    for raw in manifest["prompts"]:
        parts: list[NumbersPart | TablePart] = []
        for part in raw["parts"]:
            if part["kind"] == "numbers":
                parts.append(NumbersPart(tuple(part["path"]), part["heading"], [
                    Question(q["key"], q["label"], q["hint"], q["rule"], _leaf_of(q["leaf"], arrays))
                    for q in part["questions"]]))
            else:
                parts.append(TablePart(tuple(part["path"]), tuple(part["fields"]), part["wrong"], part["right"], [
                    (r["key"], r["label"], {f: _leaf_of(leaf, arrays) for f, leaf in r["cells"].items()})
                    for r in part["rows"]]))
        calls = [Call(c["function"], c["args"], c["kwargs"], c["where"], _output_of(c["output"], arrays))
                 for c in raw["calls"]]
        prompts.append(PromptKey(raw["id"], raw["title"], float(raw["max_points"]), list(raw["functions"]),
                                 calls, parts, list(raw["order"]), base64.b64decode(raw["reveal"])))
    return AnswerKey(manifest["exercise"], manifest["gpu"], bytes.fromhex(manifest["salt"]), prompts, arrays)


# ================================================================== checking with a key

def _describe_inputs(args: Sequence[Any]) -> str:
    """What a call's inputs were, when the checker did not say: shapes of arrays, scalar values."""
    def one(value: Any) -> str:
        if isinstance(value, np.ndarray):
            return f"an array of shape {value.shape}"
        if isinstance(value, (tuple, list)):
            return f"a {type(value).__name__} of {len(value)}"
        return repr(value)
    return "inputs " + ", ".join(one(a) for a in args) if args else "no inputs"


def _check_function(name: str, fn: Any, calls: Sequence[tuple[int, Call]], key: AnswerKey,
                    secrets: list[bytes]) -> str | None:
    """None when ``fn`` gives the right result for every call the instructor's checker made, else why not."""
    from grader.derivations.core import call_learner

    previous: Any = None
    start = 0
    for number, (_, call) in enumerate(calls, 1):
        chained = any(isinstance(a, dict) and a.get("previous") for a in call.args)
        args = tuple(previous if isinstance(a, dict) and a.get("previous") else unpack(a, key.arrays)
                     for a in call.args)
        kwargs = {k: unpack(v, key.arrays) for k, v in call.kwargs.items()}
        if not chained:
            start = number
        if chained:
            begun = calls[start - 1][1]
            where = (f"the {_ordinal(number - start + 1)} call of a sequence that passes your previous result "
                     f"back in, starting from {begun.where or _describe_inputs(args)}")
        else:
            where = call.where or _describe_inputs(args)
        called = call_learner(name, (lambda *a: fn(*a, **kwargs)) if kwargs else fn, args, where) \
            if callable(fn) else call_learner(name, fn, args, where)
        if called.problem:
            return called.problem
        problem = compare_output(call.output, called.value, key.salt, "", secrets)
        if problem:
            return f"{name}: for {where}, {problem}."
        previous = called.value
    return None


def _at(answer: Mapping, path: Sequence[str]) -> Any:
    for name in path:
        answer = answer.get(name) if isinstance(answer, Mapping) else None
    return answer


def _check_numbers(answer: Any, part: NumbersPart, key: AnswerKey, secrets: list[bytes]) -> tuple[bool, list[str]]:
    """As core.check_numbers, with digests for the truth: no diagnosis, the hint of each question."""
    lines = [] if part.heading is None else [part.heading]
    passed = True
    numbers = _at(answer, part.path)
    for q in part.questions:
        if not isinstance(numbers, Mapping) or q.key not in numbers:
            passed = False
            lines.append(f"{NO} {q.key}: missing from your dict.")
            continue
        got, problem = read_number(numbers[q.key])
        secret = None if problem else q.leaf.secret(np.asarray(got, dtype=np.float64), key.salt)
        if secret is not None:
            secrets.append(secret)
            lines.append(f"{OK} {q.key}: {q.label}")
            continue
        passed = False
        if problem:
            lines.append(f"{NO} {q.key} ({q.label}): {problem}.")
        else:
            lines.append(f"{NO} {q.key} ({q.label}): {fmt(got)} is not right; it {q.rule}.\n  Hint: {q.hint}")
    return passed, lines


def _check_table(answer: Any, part: TablePart, key: AnswerKey, secrets: list[bytes]) -> tuple[bool, list[str]]:
    """As core.check_table, with digests for the truth."""
    table = _at(answer, part.path)
    lines, passed = [], True
    for row_key, label, cells in part.rows:
        entry = table.get(row_key) if isinstance(table, Mapping) else None
        if not isinstance(entry, Mapping):
            passed = False
            what = "missing" if entry is None else f"{entry!r} is not a dict"
            lines.append(f"{NO} {row_key}: {what}; give a dict with " + ", ".join(part.fields) + ".")
            continue
        problems = []
        for name in part.fields:
            if name not in entry:
                problems.append(f"{name}: missing from the dict.")
                continue
            got, problem = read_number(entry[name])
            secret = None if problem else cells[name].secret(np.asarray(got, dtype=np.float64), key.salt)
            if problem:
                problems.append(f"{name}: {problem}.")
            elif secret is None:
                problems.append(f"{name}: {fmt(got)} {part.wrong}")
            else:
                secrets.append(secret)
        if problems:
            passed = False
            lines.append(f"{NO} {row_key} ({label}):\n  " + "\n  ".join(problems))
        else:
            lines.append(f"{OK} {row_key} ({label}): {part.right}")
    return passed, lines


def checker(prompt: PromptKey, key: AnswerKey) -> Callable[[Any], Verdict]:
    """The learner's copy's checker of one prompt: the key replayed against the learner's answer."""
    from grader.derivations.core import missing_functions

    by_function: dict[str, list[tuple[int, Call]]] = {}
    for index, call in enumerate(prompt.calls):
        by_function.setdefault(call.function, []).append((index, call))
    keys = [q.key for part in prompt.parts if isinstance(part, NumbersPart) and not part.path for q in part.questions]
    keys += [r[0] for part in prompt.parts if isinstance(part, TablePart) and not part.path for r in part.rows]
    keys += [part.path[0] for part in prompt.parts if part.path]

    def check(answer: Any) -> Verdict:
        if prompt.functions:
            refused = missing_functions(answer, prompt.functions)
            if refused:
                return refused
        elif not isinstance(answer, Mapping):
            return Verdict(False, f"Pass the dict `{prompt.id}` from the answer cell, with the keys "
                                  f"{', '.join(dict.fromkeys(keys))}.")
        secrets: list[bytes] = []
        # Secrets must come in the order the key was sealed in: every call, then every part.
        call_secrets: dict[int, list[bytes]] = {}
        part_secrets: dict[int, list[bytes]] = {}
        lines: list[str] = []
        passed = True
        for section in prompt.order:
            if section == "functions":
                for name in prompt.functions:
                    found: list[bytes] = []
                    calls = by_function.get(name, [])
                    problem = _check_function(name, answer[name], calls, key, found)
                    if problem:
                        passed = False
                        lines.append(f"{NO} {problem}")
                    else:
                        lines.append(f"{OK} {name}: right for all {len(calls)} inputs it was given.")
                        _spread(found, calls, call_secrets)
            else:
                index = int(section.split()[1])
                part = prompt.parts[index]
                found = []
                ok, part_lines = (_check_numbers if isinstance(part, NumbersPart) else _check_table)(
                    answer, part, key, found)
                passed &= ok
                lines += part_lines
                part_secrets[index] = found
        if not passed:
            return Verdict(False, "\n".join(lines))
        for index in range(len(prompt.calls)):
            secrets += call_secrets.get(index, [])
        for index in range(len(prompt.parts)):
            secrets += part_secrets.get(index, [])
        return Verdict(True, _open(prompt.reveal, secrets, key.salt))

    return check


def _spread(found: list[bytes], calls: Sequence[tuple[int, Call]], into: dict[int, list[bytes]]) -> None:
    """Hand the secrets of a function's calls back to each call, by how many leaves each result has."""
    position = 0
    for index, call in calls:
        count = _leaf_count(call.output)
        into[index] = found[position:position + count]
        position += count


def _leaf_count(output: Any) -> int:
    return sum(_leaf_count(o) for o in output["seq"]) if isinstance(output, dict) else 1


def load_prompts(path: Path) -> tuple[Prompt, ...]:
    """The PROMPTS of an exercise in a learner's copy: one self-checking Prompt per key."""
    key = load(Path(path))
    return tuple(Prompt(p.id, p.title, p.max_points, checker(p, key), self_check=True) for p in key.prompts)
