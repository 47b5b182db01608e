"""On the GPU: `grade exercise NN --sanitize` finds what the normal grading cannot see.

Under compute-sanitizer the grader's buffers are exactly their payload (no guard regions,
PyTorch's caching allocator off), so memcheck reports a write of one element past an output,
with the kernel and the line; racecheck reports a missing barrier in shared memory. The
hidden solutions are clean under both: exercise 01's in every run, every exercise's with
--release (a solution that changed is checked so before it ships).

    pytest -m gpu tests/test_gpu_sanitize.py [--release]

With S2S_KEEP_SANITIZER_LOG=DIR the raw logs are kept (the CPU tests parse such logs,
recorded on an H200, from tests/fixtures/sanitizer/).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from grader.pipeline import Options, grade
from grader.result import TaskResult
from grader.spec import discover, solutions_dir

pytestmark = pytest.mark.gpu

SUBMISSIONS = Path(__file__).resolve().parent / "submissions" / "sanitize"


def _line_of(source: Path, marker: str) -> int:
    return next(i for i, line in enumerate(source.read_text().splitlines(), 1) if marker in line)


def _sanitized(exercise: str, folder: Path, task: str, monkeypatch: pytest.MonkeyPatch, record: str) -> TaskResult:
    keep = os.environ.get("S2S_KEEP_SANITIZER_LOG")
    if keep:
        monkeypatch.setenv("S2S_KEEP_SANITIZER_LOG", str(Path(keep) / record))
    result = grade(exercise, Options(submission=folder, tasks=(task,), sanitize=True))
    assert not result.notice, result.notice
    t = result.task(task)
    print(f"\n[{record}] {t.status}: {t.summary}")
    return t


def test_memcheck_reports_one_element_written_past_an_output(monkeypatch: pytest.MonkeyPatch) -> None:
    folder = SUBMISSIONS / "write_past_c"
    t = _sanitized("01", folder, "vector_add", monkeypatch, "write_past_c")
    line = _line_of(folder / "vector_add.cu", "the write past the end")
    assert t.status == "failed" and t.points.total == 0
    first = t.sanitizer[0]
    assert first["tool"] == "memcheck"
    assert first["location"] == f"vector_add.cu:{line}"
    assert re.search(r"Invalid __global__ write of size 4 bytes", first["message"]), first["message"]
    assert re.search(r"\badd\b", first["message"]), f"the kernel's name is missing: {first['message']}"
    assert f"vector_add.cu:{line}" in t.summary and "memcheck" in t.summary


def test_racecheck_reports_a_missing_barrier_in_shared_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    folder = SUBMISSIONS / "shared_race"
    t = _sanitized("01", folder, "reduce_sum", monkeypatch, "shared_race")
    source = folder / "reduce_sum.cu"
    lines = {f"reduce_sum.cu:{_line_of(source, 'the write')}", f"reduce_sum.cu:{_line_of(source, 'the racing read')}"}
    races = [f for f in t.sanitizer if f["tool"] == "racecheck"]
    assert t.status == "failed" and t.points.total == 0
    assert races, f"racecheck found nothing: {t.sanitizer}"
    assert {f["location"] for f in races} <= lines, [f["location"] for f in races]
    assert all("block_sums" in f["message"] for f in races), races[0]["message"]


@pytest.mark.parametrize("exercise", [pytest.param(ex, marks=() if ex.id == "01" else pytest.mark.release)
                                      for ex in discover()], ids=lambda ex: ex.id)
def test_solutions_are_clean_under_memcheck_and_racecheck(exercise) -> None:
    result = grade(exercise.id, Options(submission=solutions_dir() / exercise.slug, sanitize=True))
    assert not result.notice, result.notice
    for t in result.tasks:
        print(f"\n[{exercise.id} {t.name}] {t.status}: {t.summary}")
        assert t.status == "passed", f"{t.name}: {t.summary}"
        assert not t.sanitizer, t.sanitizer
