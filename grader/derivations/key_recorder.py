"""Answer keys, the writing: the Recorder that watches the instructor's checkers judge the hidden
answers and writes each prompt's key."""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from grader.derivations.core import NumericQuestion, Prompt, Verdict
from grader.derivations.key_digests import (Grid, Leaf, NoKey, as_array, compare_output, grid_for_function,
                                            grid_for_number, seal)
from grader.derivations.key_file import Call, NumbersPart, Packer, PromptKey, Question, TablePart

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
        key.reveal = seal(verdict.message, self._call_secrets + self._part_secrets, self.salt)
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
