"""Answer keys, the values: tolerance buckets, their salted digests (Leaf), the sealed passing
message, and the comparison of a result with the leaves of its key."""
from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

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


# ================================================================== the passing message

def _keystream(key: bytes, length: int) -> bytes:
    blocks = (length + 31) // 32
    return b"".join(hashlib.sha256(key + i.to_bytes(8, "little")).digest() for i in range(blocks))[:length]


def seal(text: str, secrets: Sequence[bytes], salt: bytes) -> bytes:
    data = text.encode()
    key = hashlib.sha256(salt + b"reveal" + b"".join(secrets)).digest()
    return bytes(a ^ b for a, b in zip(data, _keystream(key, len(data))))


def unseal(sealed: bytes, secrets: Sequence[bytes], salt: bytes) -> str:
    key = hashlib.sha256(salt + b"reveal" + b"".join(secrets)).digest()
    return bytes(a ^ b for a, b in zip(sealed, _keystream(key, len(sealed)))).decode(errors="replace")


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
