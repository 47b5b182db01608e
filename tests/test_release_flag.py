"""`--release` adds the GPU suite's release checks; without it they are deselected, and counted."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from grader.spec import discover

ROOT = Path(__file__).resolve().parent.parent


def _collected(*args: str) -> tuple[list[str], str]:
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "tests/test_gpu_sanitize.py", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return [line for line in done.stdout.splitlines() if "::" in line], done.stdout


def test_without_release_only_exercise_01s_solutions_are_sanitized():
    ids, out = _collected()
    sanitized = [i for i in ids if "test_solutions_are_clean" in i]
    assert sanitized == ["tests/test_gpu_sanitize.py::test_solutions_are_clean_under_memcheck_and_racecheck[01]"]
    others = len(list(discover())) - 1
    assert f"{others} deselected" in out, out[-500:]


def test_with_release_every_exercises_solutions_are_sanitized():
    ids, out = _collected("--release")
    sanitized = {i.rsplit("[", 1)[1].rstrip("]") for i in ids if "test_solutions_are_clean" in i}
    assert sanitized == {ex.id for ex in discover()}
    assert "deselected" not in out
