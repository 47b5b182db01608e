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

Nothing here knows an exercise: the observer (key_recorder) sees what every checker built on
:mod:`grader.derivations.core` does (``call_learner``, ``missing_functions``, ``check_numbers``,
``check_table``), so a new prompt written that way gets its key without extra work. A checker that
compares part of an answer some other way is refused by name when the key is written.

The values (buckets, digests, sealing) are in key_digests, the key's structure and file in
key_file, its writing in key_recorder; this module checks answers with a key and is the import
path for all of it.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from grader.derivations.core import NO, OK, Prompt, Verdict, fmt, read_number
from grader.derivations.key_digests import (DIGEST_HEX, FUNCTION_TOLERANCE, PHASE_STEPS, SAFETY, Grid, Leaf, NoKey,
                                            as_array, compare_output, grid_for_function, grid_for_number, unseal)
from grader.derivations.key_file import (FORMAT, AnswerKey, Call, NumbersPart, Packer, PromptKey, Question,
                                         TablePart, load, save, unpack)
from grader.derivations.judging import number_line
from grader.derivations.key_recorder import Recorder, probe_tolerance

__all__ = ["AnswerKey", "Call", "DIGEST_HEX", "FORMAT", "FUNCTION_TOLERANCE", "Grid", "Leaf", "NoKey", "NumbersPart",
           "PHASE_STEPS", "Packer", "PromptKey", "Question", "Recorder", "SAFETY", "TablePart", "as_array", "checker",
           "compare_output", "grid_for_function", "grid_for_number", "load", "load_prompts", "probe_tolerance",
           "save", "unpack"]


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


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
        def accepts(got: float, q: Question = q) -> bool:
            secret = q.leaf.secret(np.asarray(got, dtype=np.float64), key.salt)
            if secret is not None:
                secrets.append(secret)
            return secret is not None

        ok, line = number_line(q.key, q.label, numbers, accepts, q.rule, lambda _got, q=q: q.hint)
        passed &= ok
        lines.append(line)
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
        return Verdict(True, unseal(prompt.reveal, secrets, key.salt))

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
