"""On the GPU: a class of twelve submissions of exercise 01 autograded through the Dask path gets
exactly the grades of one sequential, stock `nbgrader autograde` on the same GPU.

The mix: hidden solutions, untouched stubs, a subtly wrong kernel (the last element never
written), the naive baselines (correct but slow) and a .cu that does not compile. The two runs
grade copies of one course; the gradebook and grades.csv must be identical, and the wall times
are printed.

    pytest -m gpu -s tests/test_gpu_class_grading.py
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
pytest.importorskip("nbgrader", reason="nbgrader is not installed: pip install -e '.[course]'")
pytest.importorskip("distributed", reason="Dask distributed is not installed: pip install -e '.[course]'")

from course_helpers import ASSIGNMENT, course_cli, course_env, hand_in_a_class
from test_class_grading import gradebook_state

KINDS = ("solution", "solution", "solution", "solution", "stub", "stub", "wrong", "wrong", "slow", "slow",
         "syntax", "syntax")


def _env(cache: Path) -> dict[str, str]:
    env = course_env(cache)
    del env["CUDA_VISIBLE_DEVICES"]          # this time the GPU grades
    return env


def test_a_class_through_dask_gets_the_grades_of_a_sequential_run(tmp_path):
    cache = tmp_path / "cache"
    env = _env(cache)
    pristine = tmp_path / "pristine" / "course"
    hand_in_a_class(pristine, env, KINDS, tmp_path)

    sequential, dask = tmp_path / "sequential", tmp_path / "dask"
    shutil.copytree(pristine, sequential, symlinks=True)
    shutil.copytree(pristine, dask, symlinks=True)
    began = time.perf_counter()
    seq = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", ASSIGNMENT], cwd=sequential, env=env,
                         capture_output=True, text=True, timeout=900, check=False)
    seq_s = time.perf_counter() - began
    assert seq.returncode == 0, seq.stdout[-3000:] + seq.stderr[-3000:]
    began = time.perf_counter()
    run = subprocess.run(course_cli("autograde", str(dask), ASSIGNMENT, "--workers", "1"), cwd=dask, env=env,
                         capture_output=True, text=True, timeout=900, check=False)
    dask_s = time.perf_counter() - began
    said = run.stdout + run.stderr
    assert run.returncode == 0, said[-4000:]
    assert "Traceback" not in said, said[-4000:]

    ours, theirs = gradebook_state(dask), gradebook_state(sequential)
    print(f"\n{'student':<14} {'sequential':>10} {'Dask':>6}")
    for student in sorted(theirs[1]):
        print(f"{student:<14} {theirs[1][student][1]:10.1f} {ours[1].get(student, (0, float('nan')))[1]:6.1f}")
    print(f"class of {len(KINDS)}: sequential nbgrader {seq_s:.0f} s, through Dask (1 worker, this GPU) {dask_s:.0f} s")
    assert ours == theirs
    for name in ("sequential", "dask"):
        subprocess.run([sys.executable, "-m", "nbgrader", "export"], cwd=tmp_path / name, env=env, check=True,
                       capture_output=True)
    assert (dask / "grades.csv").read_bytes() == (sequential / "grades.csv").read_bytes()
    scores = {s: v[1] for s, v in theirs[1].items()}
    for student, score in scores.items():
        kind = student.split("_", 1)[1]
        best = max(scores.values())
        if kind == "solution":
            assert score == best, f"a hidden solution lost points: {student} {score} < {best}"
        else:
            assert score < best, f"{student} scored like the solutions ({score})"
