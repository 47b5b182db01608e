"""Exercise specifications: `exercise.toml` files turned into dataclasses.

An exercise is data. Everything the grader needs to know about a task (its entry
symbol, arguments, reference, tolerances, cases, benchmark sizes, roofline
formulas, build flags, points) is read from the exercise folder; nothing here is
specific to any exercise. The README's "Adding an exercise" walks through every
field; the validation messages name the file, the task and the field.

The vocabulary (dtypes, expressions) is in spec_values, the dataclasses in spec_model, and
the reading and checking of exercise.toml in spec_toml; this module finds exercises and is the
import path for all of it.
"""
from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.spec_model import Arg, Build, Case, Exercise, Points, Task
from grader.spec_toml import load, reference_parameters
from grader.spec_values import (COMPUTE_UNITS, DTYPES, FILLS, FLOAT32_MAX, RESERVED_CASE_KEYS, ROLES, SCALAR_DTYPES,
                                DType, Expr, Shape, SpecError, Value, float32)

__all__ = ["Arg", "Build", "COMPUTE_UNITS", "Case", "DTYPES", "DType", "Exercise", "Expr", "FILLS", "FLOAT32_MAX",
           "LEARNER_COPY_FILE", "LearnerCopy", "Points", "RESERVED_CASE_KEYS", "ROLES", "SCALAR_DTYPES", "Shape",
           "SpecError", "Task", "Value", "discover", "find_unit", "exercises_dir", "find", "float32", "learner_copy", "load",
           "reference_parameters", "repo_root", "solutions_dir", "units"]


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


# A learner's copy of the course (`grade course learner-copy`) says so in this file at its root.
LEARNER_COPY_FILE = "learner-copy.toml"


@dataclass(frozen=True)
class LearnerCopy:
    """What a learner's copy of the course records about itself."""

    root: Path
    gpu: Any            # hardware.specs.GpuSpec: the GPU its answers' digests were made for


def learner_copy(root: Path | None = None) -> LearnerCopy | None:
    """The learner's copy at ``root`` (default: this checkout), or None for the full repository."""
    root = repo_root() if root is None else Path(root)
    marker = root / LEARNER_COPY_FILE
    if not marker.is_file():
        return None
    from hardware.specs import load_specs

    try:
        key = tomllib.loads(marker.read_text(encoding="utf-8")).get("gpu")
    except tomllib.TOMLDecodeError as err:
        raise SpecError(f"{marker} is not valid TOML: {err}") from None
    gpu = next((s for s in load_specs() if s.key == key), None)
    if gpu is None:
        raise SpecError(f"{marker} names the GPU {key!r}, which hardware/specs.toml does not list")
    return LearnerCopy(root=root, gpu=gpu)


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


def units() -> list[Exercise]:
    """What the course is made of, in folder order: every exercise, and the capstone (an Exercise
    whose ``models`` are capstone.toml's and that has no task of its own) where there is one."""
    from grader.capstone import capstone_exercise

    capstone = capstone_exercise()
    return sorted(discover() + ([capstone] if capstone else []), key=lambda e: e.folder.name)


def find_unit(ident: str) -> Exercise:
    """An exercise as :func:`find` finds it, or the capstone by its number or folder name."""
    try:
        return find(ident)
    except SpecError:
        from grader.capstone import capstone_exercise, is_capstone

        if is_capstone(ident):
            capstone = capstone_exercise()
            if capstone is not None:
                return capstone
        raise
