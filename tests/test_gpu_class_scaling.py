"""On a host with several GPUs: a class of 24 exercise-01 submissions autograded through the Dask
path with one worker per GPU gets exactly the grades of the same class on one GPU, fails no
correct solution, times every submission within 10% of the speedup it gets when graded alone,
and takes close to 1/n of the one-GPU wall time (at least 0.8 n times faster).

    pytest -m gpu -s tests/test_gpu_class_scaling.py       (needs two GPUs or more)
"""
from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
pytest.importorskip("nbgrader", reason="nbgrader is not installed: pip install -e '.[course]'")
pytest.importorskip("distributed", reason="Dask distributed is not installed: pip install -e '.[course]'")

from course_helpers import ASSIGNMENT, course_cli, course_env, hand_in_a_class  # noqa: E402
from test_class_grading import gradebook_state  # noqa: E402

from grader.class_grading import visible_gpus  # noqa: E402
from grader.pipeline import Options, grade  # noqa: E402

KINDS = ("solution",) * 8 + ("stub",) * 4 + ("wrong",) * 4 + ("slow",) * 4 + ("syntax",) * 4
GPUS = visible_gpus()
if len(GPUS) < 2:
    pytest.skip(f"needs a host with at least two GPUs; this one has {len(GPUS)}", allow_module_level=True)


def _env(cache: Path, gpus: list[str]) -> dict[str, str]:
    env = course_env(cache)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    return env


def _speedups(cache: Path) -> dict[tuple[str, str], float]:
    """(student, task) -> speedup, from the result each grading left in its build cache."""
    out = {}
    for path in (cache / "results").glob("01-*.json"):
        result = json.loads(path.read_text())
        student = Path(result["submission"]).parent.name
        for t in result["tasks"]:
            if t.get("timing"):
                out[student, t["name"]] = t["timing"]["speedup"]
    return out


def _autograde(course: Path, env: dict[str, str], workers: int) -> float:
    began = time.perf_counter()
    run = subprocess.run(course_cli("autograde", str(course), ASSIGNMENT, "--workers", str(workers)), cwd=course,
                         env=env, capture_output=True, text=True, timeout=1800, check=False)
    seconds = time.perf_counter() - began
    said = run.stdout + run.stderr
    assert run.returncode == 0, said[-4000:]
    assert "Traceback" not in said, said[-4000:]
    return seconds


def test_a_class_on_every_gpu_grades_as_on_one_and_scales(tmp_path):
    pristine = tmp_path / "pristine" / "course"
    hand_in_a_class(pristine, _env(tmp_path / "cache0", GPUS[:1]), KINDS, tmp_path)
    one, many = tmp_path / "one", tmp_path / "many"
    shutil.copytree(pristine, one, symlinks=True)
    shutil.copytree(pristine, many, symlinks=True)
    one_s = _autograde(one, _env(tmp_path / "cache1", GPUS[:1]), 1)
    many_s = _autograde(many, _env(tmp_path / "cacheN", GPUS), len(GPUS))

    ours, theirs = gradebook_state(many), gradebook_state(one)
    scores = {s: v[1] for s, v in theirs[1].items()}
    best = max(scores.values())
    failed = [s for s, score in scores.items() if s.split("_", 1)[1] == "solution" and score < best]

    # The solutions and the naive baselines, each graded alone on the first GPU, as the reference.
    alone: dict[tuple[str, str], float] = {}
    for folder in sorted((many / "autograded").glob(f"*/{ASSIGNMENT}")):
        if folder.parent.name.split("_", 1)[1] in ("solution", "slow"):
            result = grade("01", Options(submission=folder, profile=False))
            alone.update({(folder.parent.name, t.name): t.timing.speedup for t in result.tasks if t.timing})
    in_class = _speedups(tmp_path / "cacheN")
    drift = {key: in_class[key] / value - 1 for key, value in alone.items() if key in in_class}

    print(f"\n{'GPUs':>4} {'wall time':>10} {'speedup over one GPU':>21} {'grades identical':>17}")
    print(f"{1:>4} {one_s:9.0f}s {'':>21} {'':>17}")
    print(f"{len(GPUS):>4} {many_s:9.0f}s {one_s / many_s:20.2f}x {'yes' if ours == theirs else 'NO':>17}")
    worst = max(drift.items(), key=lambda kv: abs(kv[1])) if drift else None
    if worst:
        print(f"largest speedup difference from the same submission graded alone: {worst[1]:+.1%} ({worst[0]})")
    assert ours == theirs
    assert not failed, f"correct solutions lost points: {failed}"
    assert len(drift) == len(alone), "some gradings left no timing"
    assert all(abs(d) <= 0.10 for d in drift.values()), drift
    assert one_s / many_s >= 0.8 * len(GPUS), f"{one_s / many_s:.2f}x on {len(GPUS)} GPUs"
