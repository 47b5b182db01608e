"""Answer keys, the file: the key of each prompt (calls, parts), the inputs it keeps, and its
save and load as one compressed NumPy archive."""
from __future__ import annotations

import base64
import hashlib
import io
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from grader.derivations.key_digests import Grid, Leaf, NoKey

FORMAT = 1


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
