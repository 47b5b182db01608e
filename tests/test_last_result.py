"""`grade list`: each task's own last result, whatever graded it last (a whole exercise, `--task`,
or `grade model`'s correctness checks), shown in full when the output goes to a pipe."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader import spec, state
from grader.result import GradeResult, Points, TaskResult, Timing

ROOT = Path(__file__).resolve().parents[1]


def graded(started: str, *tasks: tuple[str, str, float], timed: bool = True) -> GradeResult:
    """A grading of exercise 01's own folder: (task, status, points) for each task graded; timed, or
    a correctness check only."""
    exercise = spec.find("01")
    return GradeResult(exercise="01", title=exercise.title, submission=str(exercise.folder), device=None,
                       started=started,
                       tasks=[TaskResult(name, f"{name}.cu", status, "",
                                         points=Points(min(pts, 2), pts - min(pts, 2), 2, 1),
                                         timing=Timing([], speedup=50.0, min_speedup=10.0) if timed else None)
                              for name, status, pts in tasks])


def grade_list(cache: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env.update(S2S_CACHE=str(cache), NO_COLOR="1", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "grader.cli", "list"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return done.stdout


def row(text: str, task: str) -> str:
    return next(line for line in text.splitlines() if f" {task} " in line)


def test_a_grading_of_one_task_keeps_the_others_last_results(tmp_path, monkeypatch):
    monkeypatch.setenv("S2S_CACHE", str(tmp_path))
    state.save(graded("2026-12-01T10:00:00+00:00", ("vector_add", "passed", 3), ("reduce_sum", "passed", 3),
                      ("transpose", "failed", 0)))
    state.save(graded("2026-12-02T11:30:00+00:00", ("transpose", "passed", 3)))       # --task transpose
    shown = grade_list(tmp_path)
    assert "passed (3/3), 2026-12-01T10:00" in row(shown, "vector_add")
    assert "passed (3/3), 2026-12-01T10:00" in row(shown, "reduce_sum")
    assert "passed (3/3), 2026-12-02T11:30" in row(shown, "transpose")


def test_a_correctness_check_shows_as_such(tmp_path, monkeypatch):
    """`grade model` checks its kernels for correctness only: the list says so, and keeps the rest."""
    monkeypatch.setenv("S2S_CACHE", str(tmp_path))
    state.save(graded("2026-12-01T10:00:00+00:00", ("vector_add", "failed", 0), ("reduce_sum", "passed", 3)))
    state.save(graded("2026-12-03T09:00:00+00:00", ("vector_add", "passed", 2), timed=False))
    shown = grade_list(tmp_path)
    assert "correct, not timed (2/3), 2026-12-03T09:00" in row(shown, "vector_add")
    assert "passed (3/3), 2026-12-01T10:00" in row(shown, "reduce_sum")
    assert "not graded yet" in row(shown, "transpose")


def test_piped_list_cuts_nothing(tmp_path):
    shown = grade_list(tmp_path)
    for exercise in spec.discover():
        assert f"{exercise.id} {exercise.title}" in shown, exercise.title
        for task in exercise.tasks:
            assert f" {task.name} " in shown and f"{task.min_speedup:g}x the baseline" in shown
    assert "…" not in shown


def test_a_folder_whose_name_is_not_utf8_is_remembered(tmp_path, monkeypatch):
    if sys.getfilesystemencoding().lower() not in ("utf-8", "utf8"):
        pytest.skip("this file system's names are not decoded as UTF-8 here")
    monkeypatch.setenv("S2S_CACHE", str(tmp_path / "cache"))
    folder = Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9"))      # Latin-1: not UTF-8
    folder.mkdir()
    result = graded("2026-12-01T10:00:00+00:00", ("vector_add", "passed", 3))
    result.submission = str(folder)
    state.save(result)
    record = state.load("01", str(folder))
    assert record is not None and record["tasks"][0]["status"] == "passed"
