"""The capstone's files: the folder of ``exercises/`` that holds a ``capstone.toml``, its models,
their report modules and their bars' points, and the capstone as a unit of the course.

``capstone.toml`` names one or more models (``[models.NAME]``): what each is in words, the kernels
it needs, the script that trains it, the module that judges what the script measured
(``bars(values, capstone)``, ...), its thresholds (``bars``) and the points each bar is worth in
the course (``points``, by the id of the bar the module returns). Its top level may name a notebook
and a ``derivations`` module, as an exercise.toml does: then the course builds the capstone as an
assignment like the exercises, with a graded cell per bar.
"""
from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

from grader.spec import Exercise, SpecError, exercises_dir


class ModelError(Exception):
    """A usage error: the submission folder does not exist, the capstone or the model is unknown."""


def capstone_folder() -> Path:
    """The folder of exercises/ that holds a capstone.toml."""
    found = sorted(p.parent for p in exercises_dir().glob("*/capstone.toml"))
    if not found:
        raise ModelError(f"no folder of {exercises_dir()} holds a capstone.toml: the capstone is not part of "
                         "this checkout")
    if len(found) > 1:
        raise ModelError(f"several folders hold a capstone.toml ({', '.join(f.name for f in found)}); "
                         "`grade model` trains one")
    return found[0]


def is_capstone(ident: str) -> bool:
    """Whether ``ident`` (a number such as 06, a folder name) names the capstone's folder."""
    try:
        folder = capstone_folder()
    except ModelError:
        return False
    number = folder.name.split("_", 1)[0]
    return ident.strip("/") in (folder.name, number, str(folder)) or (
        ident.isdigit() and number.isdigit() and int(ident) == int(number))


def capstone_toml() -> dict[str, Any]:
    path = capstone_folder() / "capstone.toml"
    try:
        with path.open("rb") as f:
            capstone = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ModelError(f"{path}: {exc}") from None
    if not capstone.get("models"):
        raise ModelError(f"{path} names no model: it needs a [models.NAME] table")
    return capstone


def model_names() -> list[str]:
    """The models of the capstone, the default one first."""
    capstone = capstone_toml()
    default = capstone.get("default")
    return sorted(capstone["models"], key=lambda n: (n != default, n))


def load_capstone(name: str | None = None) -> dict[str, Any]:
    """One model of capstone.toml (the default one unless named), with its ``name``."""
    capstone = capstone_toml()
    path = capstone_folder() / "capstone.toml"
    name = name or capstone.get("default") or next(iter(capstone["models"]))
    if name not in capstone["models"]:
        raise ModelError(f"the capstone has no model {name!r}; its models: {', '.join(model_names())}")
    model = dict(capstone["models"][name], name=name)
    missing = [key for key in ("model", "train", "report", "kernels") if key not in model]
    if missing:
        raise ModelError(f"{path}: [models.{name}] is missing {', '.join(missing)}")
    model.setdefault("options", [])
    model.setdefault("bars", {})
    model.setdefault("points", {})
    return model


def report_module(capstone: dict[str, Any]) -> ModuleType:
    """The model's module (its ``report`` in capstone.toml): ``bars(values, capstone)``,
    ``tables(values, capstone)``, ``plots(values, capstone)`` and ``lines(values, capstone)``."""
    path = capstone_folder() / capstone["report"]
    spec = importlib.util.spec_from_file_location(f"capstone_report_{capstone['name']}", path)
    if spec is None or spec.loader is None:
        raise ModelError(f"{path} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def judge(run: Any, capstone: dict[str, Any]) -> list[Any]:
    """The model's bars, measured or not, from what its script reported (a TrainResult or its
    values): run in the grading process, never in the one that ran the learner's kernels."""
    values = run if isinstance(run, dict) else run.values
    return report_module(capstone).bars(values, capstone)


def bar_points(capstone: dict[str, Any]) -> dict[str, float]:
    """The points of each bar of the model (``[models.NAME.points]``), by bar id, in the order its
    report module returns the bars; a ModelError where the two do not name the same bars."""
    ids = [b.id for b in judge({}, capstone)]
    points = {str(k): float(v) for k, v in capstone.get("points", {}).items()}
    where = f"{capstone_folder() / 'capstone.toml'} [models.{capstone['name']}.points]"
    if not points:
        return {}
    if "" in ids or len(set(ids)) != len(ids):
        raise ModelError(f"{capstone['report']}: every bar needs its own id to be given points in {where}")
    if set(points) != set(ids):
        raise ModelError(f"{where} names the bars {', '.join(sorted(points))}; {capstone['report']} returns "
                         f"{', '.join(ids)}: give every bar its points, and no other")
    if any(p < 0 for p in points.values()):
        raise ModelError(f"{where}: points cannot be negative")
    return {i: points[i] for i in ids}


def capstone_exercise() -> Exercise | None:
    """The capstone as a unit of the course (an Exercise with no task of its own: its kernels are the
    exercises'), or None where this checkout has no capstone."""
    try:
        folder = capstone_folder()
        data = capstone_toml()
    except ModelError:
        return None
    derivations = str(data.get("derivations", ""))
    if derivations and not (folder / derivations).is_file():
        raise SpecError(f"{folder / 'capstone.toml'}: derivations = {derivations!r}, but {folder / derivations} "
                         "does not exist")
    return Exercise(id=folder.name.split("_", 1)[0], slug=folder.name, title=str(data.get("title", folder.name)),
                    folder=folder, notebook=str(data.get("notebook", "")), reference_file="", tasks=(),
                    derivations_file=derivations, models=tuple(model_names()))
